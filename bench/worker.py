"""Drain throughput of WeightedSimpleWorker against plain rq SimpleWorker, side by side in one run.

Each round enqueues the same backlog once per side (five) (``--jobs`` no-op jobs of 50 tenants spread evenly
over 3 queues, weights 6/3/1 for the weighted sides) and times ``work(burst=True)`` of each worker
until its copy is drained: plain SimpleWorker; WeightedSimpleWorker as shipped (each start recorded,
fair_router.observe); the same with ``observe.record: false`` ("unrecorded"); and WeightedSimpleWorker with
concurrency limits enabled (every tenant under its limit, so each job takes and releases a lease); and
the same with a rate limit on every tenant's tier as well ("rated": high enough never to defer a job, so
each start runs the GCRA check: the cost of the rate check per job start).
Rounds rotate which side goes first, so machine noise and warm caches hit all alike. Reported: median
jobs/s of each side and the ratios (goals: weighted >= 0.95x plain, i.e. re-sampling the queue order
before every fetch costs at most 5%; limited >= 0.95x weighted; weighted >= 0.99x unrecorded, i.e.
recording a job's start costs at most 1%), and Redis commands per job, which CPU noise cannot move. The
start records' own costs are also timed alone: gathering starts and flushing them (client) and the flush
script's run (server), per start.

Runs against a private redis-server, or against ``$REDIS_URL`` when set: then it only touches its own
uniquely named queues, jobs and workers, deletes them at the end, and never flushes.

    .venv/bin/python bench/worker.py [--jobs 2000] [--rounds 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import secrets
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue, SimpleWorker
from rq.registry import FailedJobRegistry

# This checkout's fair_router, not the installed one: a worktree of another commit measures that commit.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fair_router import WeightedSimpleWorker
from fair_router.config.settings import ConcurrencyConfig, ObserveConfig, Settings, TiersConfig
from fair_router.core.keys import Keys
from fair_router.demo.redis_server import RedisServer
from fair_router.observe.recorder import StartRecorder
from fair_router.workers.sampling import weighted_order

# rq stores a job's function by dotted path and refuses functions defined in __main__.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import noop
from redisstats import commands_so_far
from redisstats import server_cpu as redis_cpu

GOAL = 0.95
LIMITS_GOAL = 0.95
RECORD_GOAL = 0.99
WEIGHTS = (6.0, 3.0, 1.0)
TENANTS = 50
SIDES: dict[str, type[SimpleWorker]] = {
    "plain": SimpleWorker, "weighted": WeightedSimpleWorker, "unrecorded": WeightedSimpleWorker,
    "limited": WeightedSimpleWorker, "rated": WeightedSimpleWorker,
}
NEVER_BINDING = TiersConfig(rate={"free": "1000/s"}, burst={"free": 1000})
"""A rate on the tier every bench tenant is on that no drain here can reach: checked, never deferring."""


def drain(conn: Redis, run: str, label: str, side: str, jobs: int) -> tuple[float, float, float, float]:
    """Enqueue ``jobs`` no-ops over 3 fresh queues; one burst worker drains them: (jobs/s, commands/job,
    this process's CPU us/job, Redis' CPU us/job). CPU time moves much less than wall time when other
    processes compete for the cores."""
    names = [f"{run}.{label}.{side}.q{i}" for i in range(len(WEIGHTS))]
    for i, name in enumerate(names):
        share = jobs // len(names) + (1 if i < jobs % len(names) else 0)
        # rq's default result_ttl, as in production; ids carry the run tag so clean_up finds every key.
        Queue(name, connection=conn).enqueue_many(
            [Queue.prepare_data(noop, job_id=f"{run}-{label}-{side}-{i}-{k}",
                                meta={"fair_tenant": f"tenant-{k % TENANTS}"}) for k in range(share)]
        )
    options: dict[str, Any] = {}
    if side != "plain":
        limits = ConcurrencyConfig(enabled=side in ("limited", "rated"))
        tiers = NEVER_BINDING if side == "rated" else TiersConfig()
        observe = ObserveConfig(record=side != "unrecorded")
        options = {"weights": dict(zip(names, WEIGHTS, strict=True)),
                   "settings": Settings(prefix=run, concurrency=limits, tiers=tiers, observe=observe)}
    worker = SIDES[side](names, connection=conn, name=f"{run}-{label}-{side}", **options)
    gc.collect()
    server_cpu = redis_cpu(conn)
    commands = commands_so_far(conn)
    start, client_cpu = time.perf_counter(), time.process_time()
    worker.work(burst=True, logging_level="WARNING")
    elapsed, client_cpu = time.perf_counter() - start, time.process_time() - client_cpu
    commands = commands_so_far(conn) - commands - 1
    server_cpu = redis_cpu(conn) - server_cpu
    left = sum(Queue(name, connection=conn).count for name in names)
    failed = sum(FailedJobRegistry(name, connection=conn).count for name in names)
    if left or failed:
        raise RuntimeError(f"{side} worker left {left} of {jobs} jobs queued, {failed} failed")
    return jobs / elapsed, commands / jobs, client_cpu / jobs * 1e6, server_cpu / jobs * 1e6


def clean_up(conn: Redis, run: str) -> None:
    """Delete every key carrying this run's tag (queues, jobs, registries, workers) and its set entries."""
    keys = list(conn.scan_iter(match=f"*{run}*", count=1000))
    for start in range(0, len(keys), 1000):
        conn.unlink(*keys[start : start + 1000])
    for members_of in ("rq:queues", "rq:workers"):
        ours = [member for member in conn.smembers(members_of) if run.encode() in member]
        if ours:
            conn.srem(members_of, *ours)


def sampling_us_per_fetch(calls: int = 20_000) -> float:
    """CPU time of the per-fetch re-sampling alone (3 queues), in microseconds: what the weighted side adds."""
    items = list(zip(["q0", "q1", "q2"], WEIGHTS, strict=True))
    start = time.perf_counter()
    for _ in range(calls):
        weighted_order(items)
    return (time.perf_counter() - start) / calls * 1e6


def record_costs_us(conn: Redis, run: str, calls: int = 5_000, per_flush: int = 200) -> tuple[float, float, float]:
    """The start records alone, as a worker sends them: gathering ``calls`` starts of 50 tenants, flushed every
    ``per_flush`` starts (about one second's at the rates here) on a pipeline. Returns (client us per start,
    gathering and the flush's share; Redis us per start; Redis us per flush)."""
    recorder = StartRecorder(conn, Keys(run), ObserveConfig())
    before = conn.info("commandstats").get("cmdstat_eval", {"usec": 0, "calls": 0})
    client = 0.0
    for start_at in range(0, calls, per_flush):
        with conn.pipeline() as pipe:
            began = time.perf_counter()
            for k in range(start_at, min(calls, start_at + per_flush)):
                recorder.add(f"tenant-{k % TENANTS}", 0.0123)
            recorder.flush(pipe)
            client += time.perf_counter() - began
            pipe.execute()
    after = conn.info("commandstats")["cmdstat_eval"]
    flushes = after["calls"] - before["calls"]
    server = after["usec"] - before["usec"]
    return client / calls * 1e6, server / calls, server / flushes


def measure(conn: Redis, jobs: int, rounds: int, sides: tuple[str, ...] = tuple(SIDES)) -> dict[str, Any]:
    """Warm up every side, then ``rounds`` rounds of one drain per side, rotating who goes first."""
    run = f"fair_bench_worker_{secrets.token_hex(3)}"
    rates: dict[str, list[float]] = {side: [] for side in sides}
    costs: dict[str, list[float]] = {side: [] for side in sides}
    cpu: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
    firsts = []
    try:
        for side in sides:  # warm-up: imports, rq's cached server version, connection pools
            drain(conn, run, "warmup", side, min(jobs, 200))
        for rnd in range(rounds):
            order = list(sides)[rnd % len(sides):] + list(sides)[: rnd % len(sides)]
            firsts.append(order[0])
            for side in order:
                rate, cost, client_cpu, server_cpu = drain(conn, run, f"r{rnd}", side, jobs)
                rates[side].append(rate)
                costs[side].append(cost)
                cpu[side].append((client_cpu, server_cpu))
        client_us, server_us, flush_us = record_costs_us(conn, run)
    finally:
        clean_up(conn, run)
    medians = {side: statistics.median(got) for side, got in rates.items()}
    nan = float("nan")
    ratio = medians["weighted"] / medians["plain"] if {"weighted", "plain"} <= set(sides) else nan
    limits_ratio = medians["limited"] / medians["weighted"] if {"weighted", "limited"} <= set(sides) else nan
    record_ratio = medians["weighted"] / medians["unrecorded"] if {"weighted", "unrecorded"} <= set(sides) else nan
    rate_ratio = medians["rated"] / medians["limited"] if {"rated", "limited"} <= set(sides) else nan
    per_round = ([w / u for w, u in zip(rates["weighted"], rates["unrecorded"], strict=True)]
                 if record_ratio == record_ratio else [])
    return {
        "sides": list(sides),
        "median_cpu_us_per_job": {side: [statistics.median(c for c, _ in got), statistics.median(r for _, r in got)]
                                  for side, got in cpu.items()},
        "cpu_us_per_job": cpu,
        "jobs": jobs,
        "rounds": rounds,
        "weights": list(WEIGHTS),
        "first_each_round": firsts,
        "jobs_per_s": rates,
        "redis_commands_per_job": costs,
        "median_jobs_per_s": medians,
        "median_redis_commands_per_job": {side: statistics.median(got) for side, got in costs.items()},
        "ratio": ratio,
        "sampling_us_per_fetch": sampling_us_per_fetch(),
        "goal": GOAL,
        "limits_ratio": limits_ratio,
        "limits_goal": LIMITS_GOAL,
        "rate_ratio": rate_ratio,
        "record_ratio": record_ratio,
        "record_ratio_per_round": per_round,
        "record_goal": RECORD_GOAL,
        "record_client_us": client_us,
        "record_server_us": server_us,
        "record_flush_server_us": flush_us,
        "ok": not (ratio < GOAL or limits_ratio < LIMITS_GOAL or record_ratio < RECORD_GOAL),
    }


def print_report(report: dict[str, Any]) -> None:
    sides = report["sides"]
    pairs = [(a, b) for a, b in (("weighted", "plain"), ("limited", "weighted"), ("rated", "limited"),
                                 ("weighted", "unrecorded")) if a in sides and b in sides]
    rows = [("round", "first", *(f"{side} jobs/s" for side in sides), *(f"{side} cmds/job" for side in sides),
             *(f"{a}/{b}" for a, b in pairs))]
    rates, costs = report["jobs_per_s"], report["redis_commands_per_job"]
    for rnd, first in enumerate(report["first_each_round"]):
        rows.append((str(rnd + 1), first, *(f"{rates[side][rnd]:,.0f}" for side in sides),
                     *(f"{costs[side][rnd]:.1f}" for side in sides),
                     *(f"{rates[a][rnd] / rates[b][rnd]:.3f}x" for a, b in pairs)))
    medians, median_costs = report["median_jobs_per_s"], report["median_redis_commands_per_job"]
    rows.append(("median", "", *(f"{medians[side]:,.0f}" for side in sides),
                 *(f"{median_costs[side]:.1f}" for side in sides),
                 *(f"{medians[a] / medians[b]:.3f}x" for a, b in pairs)))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    line = "-" * (sum(widths) + 2 * (len(widths) - 1))
    for k, row in enumerate(rows):
        if k in (1, len(rows) - 1):
            print(line)
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    cpu = report["median_cpu_us_per_job"]
    print("\nCPU per job, median over rounds (us): " + "; ".join(
        f"{side} {cpu[side][0]:,.0f} client + {cpu[side][1]:,.0f} Redis" for side in sides))
    for a, b, goal, what in (("weighted", "plain", GOAL, "weighted / plain"),
                             ("limited", "weighted", LIMITS_GOAL, "limits on / off"),
                             ("weighted", "unrecorded", RECORD_GOAL, "recording on / off")):
        if a not in sides or b not in sides:
            continue
        per_round = [x / y for x, y in zip(rates[a], rates[b], strict=True)]
        ratio = medians[a] / medians[b]
        verdict = "OK" if ratio >= goal else "BELOW GOAL"
        print(f"{what} median throughput: {ratio:.3f}x (goal >= {goal:.2f}x): {verdict}; per-round ratios "
              f"{min(per_round):.2f}x..{max(per_round):.2f}x (median {statistics.median(per_round):.3f}x)")
    if "rated" in sides and "limited" in sides:
        extra_commands = median_costs["rated"] - median_costs["limited"]
        print(f"rate check on / off (limits on): {medians['rated'] / medians['limited']:.3f}x throughput, "
              f"{extra_commands:+.1f} Redis commands per job (inside the acquire script, which rides in the worker's "
              "existing round trip)")
    if "weighted" in sides and "unrecorded" in sides:
        extra = [cpu["weighted"][i] - cpu["unrecorded"][i] for i in (0, 1)]
        total = sum(cpu["unrecorded"])
        paired = [statistics.median(w[i] - u[i] for w, u in zip(report["cpu_us_per_job"]["weighted"],
                                                                 report["cpu_us_per_job"]["unrecorded"], strict=True))
                  for i in (0, 1)]
        print(f"recording's CPU per job: {extra[0]:+,.1f} us client, {extra[1]:+,.1f} us Redis "
              f"({sum(extra) / total:+.2%} of the {total:,.0f} us an unrecorded job costs both); median of the "
              f"rounds' differences {paired[0]:+,.1f} us client, {paired[1]:+,.1f} us Redis")
    job_us = 1e6 / medians[sides[0]]
    cost = report["record_client_us"] + report["record_server_us"]
    print(f"a start record alone: {report['record_client_us']:.1f} us to gather and send (client) + "
          f"{report['record_server_us']:.1f} us in Redis = {cost:.0f} us per start, against the {job_us:,.0f} us a "
          f"{sides[0]} job takes here (a flush of 200 starts of 50 tenants: "
          f"{report['record_flush_server_us']:,.0f} us of Redis, riding rq's job-start MULTI)")
    print("cmds/job counts every client's commands, those a script calls included: exact on the private server,"
          " approximate on a shared one.")
    if "plain" in sides:
        job_us = 1e6 / medians["plain"]
        print(f"re-sampling the order costs {report['sampling_us_per_fetch']:.1f} us per fetch, "
              f"{report['sampling_us_per_fetch'] / job_us:.2%} of the {job_us:,.0f} us a plain job takes here.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per drain (spread over 3 queues)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; each drains once per side")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help=f"comma-separated subset of {', '.join(SIDES)} (e.g. weighted,unrecorded)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.rounds < 1:
        parser.error("--jobs and --rounds must be at least 1")
    sides = tuple(side.strip() for side in args.sides.split(","))
    if not sides or any(side not in SIDES for side in sides):
        parser.error(f"--sides: choose from {', '.join(SIDES)}")

    url = os.environ.get("REDIS_URL")
    server = None if url else RedisServer().start()
    conn = Redis.from_url(url or server.url)  # type: ignore[union-attr]
    try:
        redis_version = conn.info("server")["redis_version"]
        where = "$REDIS_URL" if url else "private server"
        print(f"fair-router worker bench: redis {redis_version} ({where}), python {platform.python_version()}, "
              f"rq {version('rq')}; {args.rounds} rounds x {args.jobs:,} no-op jobs over {len(WEIGHTS)} queues, "
              "SimpleWorker in-process, burst\n", flush=True)
        report = measure(conn, args.jobs, args.rounds, sides)
    finally:
        conn.close()
        if server is not None:
            server.stop()
    report |= {"redis": redis_version, "python": platform.python_version(), "rq": version("rq")}
    print_report(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
