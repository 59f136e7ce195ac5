"""Do tenant controls deliver? Two measurements, on real ``rq worker`` processes and a private redis-server.

``rates``: three ``fair_router.WeightedWorker`` processes (rq's forking worker, as deployed) serve one FairQueue
(``--plain``: a plain rq queue, whose refused starts are deferred through rq's scheduler) where a tenant of
tier free with ``tiers.rate: {free: N/s}`` (burst 1) has a backlog beside a busy tenant without a rate (400
jobs of 20 ms). From the limited tenant's first start: its starts in the next 6 s against the ``1 + 6 x N`` its
rate allows, and the longest gap between two of its starts (against ``1 / N``). Goals: >= 90 % of allowed,
longest gap <= 1 / N + one job cycle.

``parked``: ``concurrency.enabled`` (the free tier's limit is 1, the lease 60 s), three idle workers; tenant after
tenant enqueues two instant jobs at once. The second is usually popped while the first runs and parked; the
first job's end must wake it. Reports, per tenant, the time from the first job's end to the second's start, and
how many tenants waited ``--patience`` seconds or more (they wait for the lease to expire: goal 0).

Start times are Redis TIME read inside the jobs (bench.jobs.stamp): one clock for every process.

    .venv/bin/python bench/limits_deliver.py [rates] [parked] [--rates 4,20] [--plain] [--tenants 240]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from redis import Redis
from rq import Queue, Worker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.jobs import stamp
from fair_router import FairQueue, FairRouter, Settings
from fair_router.config.settings import ConcurrencyConfig, TiersConfig
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.demo.redis_server import RedisServer
from fair_router.workers.limiter import ConcurrencyLimiter

PREFIX = "deliver"
QUEUE = "deliver"
ROOT = Path(__file__).resolve().parent.parent
WINDOW = 6.0
BUSY_JOBS, BUSY_MS = 400, 20.0


class Workers:
    """``n`` forking weighted workers (with rq's scheduler) reading ``config``; stopped warm on exit."""

    def __init__(self, url: str, config: dict[str, Any], n: int, tmp: Path) -> None:
        path = tmp / "fair_router.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAIR_ROUTER_")}
        env["FAIR_ROUTER_CONFIG"] = str(path)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedWorker", "--url", url,
                   "--with-scheduler", "--logging_level", "WARNING", QUEUE]
        self.procs = [subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL) for _ in range(n)]

    def wait_registered(self, conn: Redis) -> None:
        deadline = time.monotonic() + 60
        while Worker.count(connection=conn) < len(self.procs):
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not register")
            time.sleep(0.05)
        time.sleep(0.5)  # every worker past its first fetch: idle, blocked

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(60)


def stamps(conn: Redis, key: str) -> list[tuple[float, float, str, int]]:
    """[start, end, tenant, worker pid] of the jobs run (bench.jobs.stamp), by start."""
    return sorted(tuple(json.loads(raw)) for raw in conn.lrange(key, 0, -1))  # type: ignore[misc]


def longest_cycle(log: list[tuple[float, float, str, int]], since: float, until: float) -> float:
    """The longest time from one job's start to the next on one worker, within [since, until]: one job cycle."""
    by_worker: dict[int, list[float]] = {}
    for start, _, _, pid in log:
        if since <= start <= until:
            by_worker.setdefault(pid, []).append(start)
    return max((b - a for starts in by_worker.values() for a, b in itertools.pairwise(starts)), default=0.0)


def run_rate(conn: Redis, url: str, rate: float, plain: bool, workers: int) -> dict[str, Any]:
    """One run of the ``rates`` scenario at ``rate`` per second."""
    conn.flushall()
    tiers = {"rate": {"free": f"{rate:g}/s"}}
    config = {"prefix": PREFIX, "fair_queues": [] if plain else [QUEUE], "tiers": tiers}
    settings = Settings(prefix=PREFIX, tiers=TiersConfig(**tiers))  # type: ignore[arg-type]
    FairRouter(conn, prefix=PREFIX).set_tier("busy", "pro")  # pro has no rate
    backlog = int(rate * (WINDOW + 4)) + 10
    with tempfile.TemporaryDirectory(prefix="fair-router-deliver-") as tmp, \
            Workers(url, config, workers, Path(tmp)) as fleet:
        fleet.wait_registered(conn)
        queue: Queue = Queue(QUEUE, connection=conn) if plain else FairQueue(QUEUE, connection=conn, settings=settings)

        def put(tenant: str, ms: float) -> None:
            queue.enqueue(stamp, "log", tenant, ms, meta={"fair_tenant": tenant}, result_ttl=60)

        for _ in range(backlog):
            put("limited", 0.0)
        for _ in range(BUSY_JOBS):
            put("busy", BUSY_MS)
        deadline = time.monotonic() + 120
        while True:
            limited = [at for at, _, tenant, _ in stamps(conn, "log") if tenant == "limited"]
            if limited and conn.time()[0] > limited[0] + WINDOW + 1.5:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the limited tenant started {len(limited)} jobs in 120 s")
            time.sleep(0.2)
        log = stamps(conn, "log")
    keys = Keys(PREFIX)
    counts = ConcurrencyLimiter(conn, keys, TierBook(conn, keys), ConcurrencyConfig(enabled=True)).counters()
    limited = [at for at, _, tenant, _ in log if tenant == "limited"]
    busy = [at for at, _, tenant, _ in log if tenant == "busy"]
    first = limited[0]
    window = [at for at in limited if at < first + WINDOW]
    gaps = [b - a for a, b in itertools.pairwise(window)]
    cycles = [end - start for start, end, tenant, _ in log if tenant == "busy"]
    return {"rate": rate, "started": len(window), "allowed": int(1 + WINDOW * rate),
            "longest_gap": max(gaps, default=0.0), "interval": 1 / rate,
            "busy_running": sum(1 for at in busy if first <= at < first + WINDOW),
            "busy_job_s": statistics.median(cycles) if cycles else 0.0,
            "timeline": [round(at - first, 3) for at in window[:12]],
            "refused": counts.get("free", {}).get("rate_deferred", 0),
            "cycle": longest_cycle(log, first, first + WINDOW)}


def run_parked(conn: Redis, url: str, tenants: int, gap: float, patience: float, workers: int) -> dict[str, Any]:
    """The ``parked`` scenario: ``tenants`` new tenants, two instant jobs each at once, ``gap`` s apart."""
    conn.flushall()
    config = {"prefix": PREFIX, "fair_queues": [QUEUE], "concurrency": {"enabled": True}}
    with tempfile.TemporaryDirectory(prefix="fair-router-deliver-") as tmp, \
            Workers(url, config, workers, Path(tmp)) as fleet:
        fleet.wait_registered(conn)
        queue = FairQueue(QUEUE, connection=conn, settings=Settings(prefix=PREFIX))
        for i in range(tenants):
            tenant = f"t{i}"
            queue.enqueue_many([Queue.prepare_data(stamp, ("log", tenant, 0.0), meta={"fair_tenant": tenant},
                                                   result_ttl=60) for _ in range(2)])
            time.sleep(gap)
        deadline = time.monotonic() + patience
        while conn.llen("log") < 2 * tenants and time.monotonic() < deadline:
            time.sleep(0.2)
        log = stamps(conn, "log")
    keys = Keys(PREFIX)
    counts = ConcurrencyLimiter(conn, keys, TierBook(conn, keys), ConcurrencyConfig(enabled=True)).counters()
    by_tenant: dict[str, list[tuple[float, float]]] = {}
    for start, end, tenant, _ in log:
        by_tenant.setdefault(tenant, []).append((start, end))
    waits = [runs[1][0] - runs[0][1] for runs in by_tenant.values() if len(runs) == 2]
    stuck = tenants - len(waits) + sum(1 for wait in waits if wait >= patience)
    return {"tenants": tenants, "stuck": stuck, "median_wait": statistics.median(waits) if waits else None,
            "max_wait": max(waits, default=None), "counters": counts.get("free", {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenarios", nargs="*", metavar="rates|parked", help="the scenarios to run (default: both)")
    parser.add_argument("--rates", default="4,20", help="comma-separated rates per second (rates)")
    parser.add_argument("--plain", action="store_true", help="a plain rq queue instead of a FairQueue (rates)")
    parser.add_argument("--tenants", type=int, default=240, help="new tenants (parked)")
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between two tenants' enqueues (parked)")
    parser.add_argument("--patience", type=float, default=10.0,
                        help="a second job not started this long after the first ended counts as stuck (parked)")
    parser.add_argument("--workers", type=int, default=3)
    args = parser.parse_args()
    args.scenarios = args.scenarios or ["rates", "parked"]
    if set(args.scenarios) - {"rates", "parked"}:
        parser.error(f"unknown scenario(s) {sorted(set(args.scenarios) - {'rates', 'parked'})}: rates, parked")
    with RedisServer() as server:
        conn = server.client()
        if "rates" in args.scenarios:
            kind = "plain queue" if args.plain else "FairQueue"
            for rate in (float(r) for r in args.rates.split(",")):
                r = run_rate(conn, server.url, rate, args.plain, args.workers)
                print(f"{kind}, {args.workers} workers, limited tenant at {rate:g}/s beside a busy tenant "
                      f"({BUSY_JOBS} jobs of {BUSY_MS:g} ms, median run {r['busy_job_s'] * 1000:.0f} ms; "
                      f"{r['busy_running']} of its jobs started in the window):")
                print(f"  starts in {WINDOW:g} s: {r['started']} of {r['allowed']} allowed "
                      f"({100 * r['started'] / r['allowed']:.0f} %); longest gap {r['longest_gap']:.3f} s "
                      f"(1/rate {r['interval']:.3f} s, longest job cycle {r['cycle']:.3f} s); starts refused by "
                      f"the rate: {r['refused']}")
                print(f"  first starts (s): {r['timeline']}")
        if "parked" in args.scenarios:
            r = run_parked(conn, server.url, args.tenants, args.gap, args.patience, args.workers)
            print(f"FairQueue, concurrency limit 1 (lease 60 s), {args.workers} idle workers, {r['tenants']} tenants "
                  f"enqueueing 2 instant jobs at once:")
            median = "-" if r["median_wait"] is None else f"{r['median_wait']:.3f}"
            longest = "-" if r["max_wait"] is None else f"{r['max_wait']:.3f}"
            print(f"  stuck (second job not started {args.patience:g} s after the first ended): {r['stuck']} of "
                  f"{r['tenants']}; first end -> second start: median {median} s, max {longest} s")
            c = r["counters"]
            print(f"  counters: acquired {c.get('acquired')}, released {c.get('released')}, refused "
                  f"{c.get('refused')}, parked {c.get('parked')}")


if __name__ == "__main__":
    main()
