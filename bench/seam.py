"""What each speed-up override of the worker's rq seam saves (``fair_router/rq_internals/worker.py``), measured
with and without it, interleaved: a WeightedSimpleWorker drains ``--jobs`` no-op jobs of 50 tenants from one
FairQueue with concurrency limits on (every tenant under its limit, so each start runs the slot check), as
shipped ("seam") and with one speed-up put back to rq's own way:

- ``rq-beats``: rq's ``heartbeat`` and ``set_state`` (three single commands per heartbeat, every state written),
  instead of one pipelined heartbeat with repeats within a second skipped and unchanged states not written;
- ``no-lrem``: rq's ``prepare_job_execution`` without its LREM from the intermediate list (rq sends it for a
  single-queue worker; a fair dequeue never puts a job there): the speed-up the seam no longer has, measured
  here to show what it was worth;
- ``own-trip``: the start check in a round trip of its own before rq's job-start MULTI, instead of riding it.

Rounds rotate which side goes first. Reported per side: median jobs/s, this process's round trips to Redis per
job (a pipeline is one; noise cannot move it), Redis commands per job and this process's CPU us per job, and each
variant's ratio to "seam" (above 1: the speed-up the variant lacks is worth it).

    .venv/bin/python bench/seam.py [--jobs 1000] [--rounds 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.connection import AbstractConnection
from rq.job import Job
from rq.worker import BaseWorker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fair_router import FairQueue, WeightedSimpleWorker
from fair_router.config.settings import ConcurrencyConfig, Settings
from fair_router.demo.redis_server import RedisServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import noop
from redisstats import commands_so_far
from worker import clean_up

TENANTS = 50
SENT = [0]
"""Packed sends by this process: its round trips to Redis (a pipeline is one)."""
_send = AbstractConnection.send_packed_command


def _counted_send(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
    SENT[0] += 1
    _send(self, command, check_health)


AbstractConnection.send_packed_command = _counted_send  # type: ignore[method-assign]


class RqBeats(WeightedSimpleWorker):
    """rq's own heartbeat and set_state; the duties still run at the worker's own beats."""

    def heartbeat(self, timeout: int | None = None, pipeline: Pipeline | None = None) -> None:
        BaseWorker.heartbeat(self, timeout, pipeline)
        if pipeline is None and not self.is_horse:
            self.fatal.put_off_duties(self.duties.beat)

    def set_state(self, state: str, pipeline: Pipeline | None = None) -> Any:
        return BaseWorker.set_state(self, state, pipeline)


class NoLrem(WeightedSimpleWorker):
    """rq's job preparation without the LREM from the intermediate list."""

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        super().prepare_job_execution(job, False)


SIDES: dict[str, type[WeightedSimpleWorker]] = {
    "seam": WeightedSimpleWorker, "rq-beats": RqBeats, "no-lrem": NoLrem, "own-trip": WeightedSimpleWorker}


def drain(conn: Redis, run: str, label: str, side: str, jobs: int) -> tuple[float, float, float, float]:
    """One burst worker drains ``jobs`` no-ops from a fresh FairQueue: (jobs/s, commands/job, client CPU us/job,
    round trips/job)."""
    name = f"{run}.{label}.{side}"
    settings = Settings(prefix=run, fair_queues=[name], concurrency=ConcurrencyConfig(enabled=True))
    FairQueue(name, connection=conn, settings=settings).enqueue_many(
        [FairQueue.prepare_data(noop, job_id=f"{run}-{label}-{side}-{k}", meta={"fair_tenant": f"tenant-{k % TENANTS}"})
         for k in range(jobs)])
    worker = SIDES[side]([name], connection=conn, name=f"{run}-{label}-{side}", settings=settings)
    if side == "own-trip":
        worker.starts.rides = False
    gc.collect()
    commands = commands_so_far(conn)
    start, cpu, sent = time.perf_counter(), time.process_time(), SENT[0]
    worker.work(burst=True, logging_level="WARNING")
    elapsed, cpu, sent = time.perf_counter() - start, time.process_time() - cpu, SENT[0] - sent
    commands = commands_so_far(conn) - commands - 1
    if FairQueue(name, connection=conn, settings=settings).count:
        raise RuntimeError(f"{side} left jobs queued")
    return jobs / elapsed, commands / jobs, cpu / jobs * 1e6, sent / jobs


def measure(conn: Redis, jobs: int, rounds: int) -> dict[str, Any]:
    """Warm every side up, then ``rounds`` rounds of one drain per side, rotating who goes first."""
    run = f"fair_bench_seam_{secrets.token_hex(3)}"
    got: dict[str, list[tuple[float, float, float, float]]] = {side: [] for side in SIDES}
    try:
        for side in SIDES:
            drain(conn, run, "warmup", side, min(jobs, 200))
        sides = list(SIDES)
        for rnd in range(rounds):
            for side in sides[rnd % len(sides):] + sides[: rnd % len(sides)]:
                got[side].append(drain(conn, run, f"r{rnd}", side, jobs))
                clean_up(conn, f"{run}.r{rnd}.{side}")
    finally:
        clean_up(conn, run)
    medians = {side: [statistics.median(r[i] for r in rows) for i in range(4)] for side, rows in got.items()}
    return {"jobs": jobs, "rounds": rounds, "runs": got,
            "median": {side: {"jobs_per_s": m[0], "commands_per_job": m[1], "client_cpu_us_per_job": m[2],
                               "round_trips_per_job": m[3]}
                       for side, m in medians.items()},
            "seam_speedup": {side: medians["seam"][0] / m[0] for side, m in medians.items() if side != "seam"},
            "seam_cpu_saving": {side: 1 - medians["seam"][2] / m[2] for side, m in medians.items() if side != "seam"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path, metavar="PATH")
    args = parser.parse_args(argv)
    with RedisServer() as server:
        report = measure(server.client(), args.jobs, args.rounds)
    print(f"{'side':10} {'jobs/s':>8} {'trips/job':>9} {'cmds/job':>9} {'cpu us/job':>11} {'seam / side':>12}")
    for side, m in report["median"].items():
        ratio = report["seam_speedup"].get(side, 1.0)
        print(f"{side:10} {m['jobs_per_s']:8.0f} {m['round_trips_per_job']:9.2f} {m['commands_per_job']:9.2f} "
              f"{m['client_cpu_us_per_job']:11.0f} {ratio:11.3f}x")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
