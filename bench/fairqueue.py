"""Drain speed of a FairQueue against a plain rq Queue, in the same run, interleaved.

For each number of active tenants (10, 1,000, 10,000 by default) and each round, both sides are filled
with the same backlog (every tenant keeps at least two jobs waiting, so all stay active for the whole
drain), then one in-process rq SimpleWorker (``--weighted``: fair-router's WeightedSimpleWorker, both sides)
drains ``--jobs`` jobs of ``bench.jobs.noop`` in burst mode and the drain is timed. Which side goes first
alternates by round, so machine noise hits both. The ratio is fair jobs/s over plain jobs/s (goal >= 0.95,
and flat as tenants grow: a fair pop is O(log tenants)). Filling is not timed.

Then single enqueues: each round times ``--enqueues`` one-by-one ``enqueue`` calls (tenants in turn) on
a FairQueue and on a plain Queue, sides alternating first; reported as the median fair/plain ratio of
enqueues/s (goal >= 0.95x: rq's enqueue is two round trips, a fair one is one MULTI with the fair push as
an EVALSHA in it). ``--enqueue-only`` runs only this part.

``--seam`` instead measures FairQueue's speed-up overrides of rq (docs/compatibility.md): single enqueues and
``enqueue_many`` batches of 1,000 on a FairQueue against a FairQueue without the override (rq's own
``enqueue_job``: the queue's registration in a round trip of its own; rq's own ``enqueue_many``: one fair push
per job), sides interleaved; reported as with/without ratios of jobs/s.

Always runs on a private redis-server (it empties the database between drains, so it never touches
a server of yours).

    .venv/bin/python bench/fairqueue.py [--jobs 2000] [--rounds 3] [--tenants 10,1000,10000] [--enqueues 1000]
                                        [--enqueue-only] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue, SimpleWorker
from rq.registry import FinishedJobRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.jobs import noop
from bench.redisstats import pop_stat
from fair_router import FairQueue, Settings, WeightedSimpleWorker
from fair_router.demo.redis_server import RedisServer


def fill(queue: Queue, tenants: int, total: int) -> None:
    """``total`` jobs round-robin over ``tenants`` tenants, enqueued in pipelined batches of 1,000."""
    batch = []
    for i in range(total):
        tenant = f"tenant-{i % tenants}"
        batch.append(Queue.prepare_data(noop, (i,), meta={"fair_tenant": tenant}, result_ttl=60))
        if len(batch) == 1000:
            queue.enqueue_many(batch)
            batch = []
    if batch:
        queue.enqueue_many(batch)


COMMANDS: dict[tuple[bool, int], list[tuple[float, float]]] = {}
"""(fair, tenants) -> per drain: (Redis commands per job, fair pop us per call: FCALL, or EVALSHA on a Redis
without functions), from INFO commandstats."""


def timed_burst(conn: Redis, worker: SimpleWorker, jobs: int) -> tuple[float, dict[str, Any], int]:
    """Run ``worker`` in burst mode for ``jobs`` jobs on freshly reset command statistics: (seconds, INFO
    commandstats, the commands counted but CONFIG and INFO, script commands included as Redis counts them)."""
    conn.config_resetstat()
    start = time.perf_counter()
    worker.work(burst=True, max_jobs=jobs, logging_level="WARNING")
    elapsed = time.perf_counter() - start
    stats = conn.info("commandstats")
    calls = sum(value["calls"] for name, value in stats.items()
                if not name.startswith(("cmdstat_config", "cmdstat_info")))
    return elapsed, stats, calls


def drain(conn: Redis, fair: bool, tenants: int, jobs: int, weighted: bool = False) -> float:
    """Fill, then time one burst worker taking ``jobs`` jobs; returns jobs/s. Also notes the drain's Redis
    commands per job (commands run by scripts count, as Redis counts them) and the pop script's time.
    ``weighted``: both sides drained by ``WeightedSimpleWorker`` (as shipped: start records on, limits off)
    instead of rq's SimpleWorker."""
    conn.flushdb()
    settings = Settings(prefix="bench")
    queue = FairQueue("bench", connection=conn, settings=settings) if fair else Queue("bench", connection=conn)
    fill(queue, tenants, max(jobs * 3 // 2, 2 * tenants))
    worker: SimpleWorker = (WeightedSimpleWorker([queue], connection=conn, settings=settings) if weighted
                            else SimpleWorker([queue], connection=conn))
    if fair:
        worker.queue_class = FairQueue  # as `rq worker --queue-class fair_router.FairQueue`
    elapsed, stats, calls = timed_burst(conn, worker, jobs)
    pop = float(pop_stat(stats)["usec_per_call"])
    COMMANDS.setdefault((fair, tenants), []).append((calls / jobs, pop))
    done = FinishedJobRegistry("bench", connection=conn).count
    assert done == jobs, f"drained {done} of {jobs}"
    return jobs / elapsed


def enqueue_rate(conn: Redis, fair: bool, enqueues: int, tenants: int = 100) -> float:
    """Time ``enqueues`` single enqueues on an empty queue; returns enqueues/s."""
    conn.flushdb()
    queue = (FairQueue("bench", connection=conn, settings=Settings(prefix="bench")) if fair
             else Queue("bench", connection=conn))
    queue.enqueue(noop, 0, meta={"fair_tenant": "warm-up"})  # scripts loaded, connection open
    start = time.perf_counter()
    for i in range(enqueues):
        queue.enqueue(noop, i, meta={"fair_tenant": f"tenant-{i % tenants}"})
    elapsed = time.perf_counter() - start
    assert queue.count == enqueues + 1
    return enqueues / elapsed


class WithoutEnqueueJob(FairQueue):
    """FairQueue with rq's own ``enqueue_job`` (the registration in a round trip of its own)."""

    enqueue_job = Queue.enqueue_job  # type: ignore[assignment]


class WithoutEnqueueMany(FairQueue):
    """FairQueue with rq's own ``enqueue_many`` (each job's fair push a call of its own in rq's pipeline)."""

    enqueue_many = Queue.enqueue_many  # type: ignore[assignment]


def seam_rate(conn: Redis, kind: type[FairQueue], batch: bool, total: int) -> float:
    """Jobs/s of ``total`` single enqueues (or ``enqueue_many`` batches of 1,000) on a queue of class ``kind``."""
    conn.flushdb()
    queue = kind("bench", connection=conn, settings=Settings(prefix="bench"))
    queue.enqueue(noop, 0, meta={"fair_tenant": "warm-up"})
    start = time.perf_counter()
    if batch:
        fill(queue, 100, total)
    else:
        for i in range(total):
            queue.enqueue(noop, i, meta={"fair_tenant": f"tenant-{i % 100}"})
    elapsed = time.perf_counter() - start
    assert queue.count == total + 1 and len(conn.hkeys(queue.fair_keys.members)) >= total
    return total / elapsed


def seam(conn: Redis, rounds: int, enqueues: int) -> None:
    """Each speed-up override: with/without jobs/s, interleaved by round."""
    for name, without, batch, total in (("enqueue_job", WithoutEnqueueJob, False, enqueues),
                                        ("enqueue_many", WithoutEnqueueMany, True, 10 * enqueues)):
        def measure(fair: bool, without: type[FairQueue] = without, batch: bool = batch, total: int = total) -> float:
            return seam_rate(conn, FairQueue if fair else without, batch, total)

        ratios = interleaved(measure, rounds)[2]
        print(f"{name}: with / without the override, jobs/s: {statistics.median(ratios):.2f}x (per round "
              + " ".join(f"{x:.2f}" for x in ratios) + f"; {total} jobs per side and round)")


def interleaved(measure: Callable[[bool], float], rounds: int) -> tuple[list[float], list[float], list[float]]:
    """``measure(fair)`` for both sides each round, plain first in even rounds: (plain, fair, fair/plain)."""
    plain_rates, fair_rates, ratios = [], [], []
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        rate = {fair: measure(fair) for fair in order}
        plain_rates.append(rate[False])
        fair_rates.append(rate[True])
        ratios.append(rate[True] / rate[False])
    return plain_rates, fair_rates, ratios


def enqueue_ratios(conn: Redis, enqueues: int, rounds: int) -> list[float]:
    """Per round, fair enqueues/s over plain enqueues/s."""
    return interleaved(partial(enqueue_rate, conn, enqueues=enqueues), rounds)[2]


def run(conn: Redis, tenant_counts: list[int], jobs: int, rounds: int, weighted: bool = False) -> list[dict[str, Any]]:
    rows = []
    for tenants in tenant_counts:
        plain_rates, fair_rates, ratios = interleaved(
            partial(drain, conn, tenants=tenants, jobs=jobs, weighted=weighted), rounds)
        rows.append({
            "tenants": tenants, "jobs": jobs, "rounds": rounds,
            "plain_jobs_per_s": statistics.median(plain_rates), "fair_jobs_per_s": statistics.median(fair_rates),
            "ratio": statistics.median(ratios), "ratios": ratios,
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000, help="jobs drained per timed run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tenants", default="10,1000,10000", help="comma-separated active tenant counts")
    parser.add_argument("--enqueues", type=int, default=1000, help="single enqueues timed per side and round")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--enqueue-only", action="store_true", help="only the single-enqueue comparison")
    parser.add_argument("--seam", action="store_true", help="only the speed-up overrides, with against without")
    parser.add_argument("--weighted", action="store_true",
                        help="drain both sides with WeightedSimpleWorker instead of rq's SimpleWorker")
    args = parser.parse_args()
    logging.getLogger("rq").setLevel(logging.WARNING)
    if args.seam:
        with RedisServer() as server:
            seam(server.client(), args.rounds, args.enqueues)
        return
    counts = [] if args.enqueue_only else [int(x) for x in args.tenants.split(",")]
    with RedisServer() as server:
        rows = run(server.client(), counts, args.jobs, args.rounds, args.weighted)
        enqueue = enqueue_ratios(server.client(), args.enqueues, args.rounds)
    if args.json:
        args.json.write_text(json.dumps({"drain": rows, "enqueue_ratios": enqueue}, indent=1) + "\n")
    print(f"{'tenants':>8} {'plain jobs/s':>13} {'fair jobs/s':>12} {'fair/plain':>11}  per round")
    for row in rows:
        per_round = " ".join(f"{x:.2f}" for x in row["ratios"])
        print(f"{row['tenants']:>8} {row['plain_jobs_per_s']:>13.0f} {row['fair_jobs_per_s']:>12.0f} "
              f"{row['ratio']:>10.2f}x  {per_round}")
    worker = "WeightedSimpleWorker" if args.weighted else "rq's SimpleWorker"
    print(f"({args.jobs} jobs per drain by {worker}, median of {args.rounds} interleaved rounds; goal >= 0.95x)")
    for (fair, tenants), noted in sorted(COMMANDS.items()):
        side = "fair " if fair else "plain"
        print(f"{side} {tenants:>7} tenants: {statistics.median(r[0] for r in noted):5.1f} Redis commands/job"
              + (f", fair pop {statistics.median(r[1] for r in noted):5.1f} us/call" if fair else ""))
    print(f"single enqueue, fair/plain enqueues/s: {statistics.median(enqueue):.2f}x (per round "
          + " ".join(f"{x:.2f}" for x in enqueue) + f"; {args.enqueues} enqueues per side and round)")


if __name__ == "__main__":
    main()
