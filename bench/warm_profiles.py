"""Redis commands per job of a WeightedSimpleWorker whose tier cache is warm, with many active tenants.

bench/fairqueue.py drains one job per tenant at 10,000 tenants, so every lookup of a tenant's profile (tier,
overrides, pause flag) is a cold miss there. Here each tenant has three jobs waiting and one worker drains two
bursts of one job per tenant: the first reads every tenant's profile once, the second shows what a job costs once
they are cached. (A third job each keeps every tenant active through the second burst: a tenant's last job also
ends its place in a fair queue's schedule, which costs the pop a few commands of its own.) Both sides are
drained by the same kind of worker (WeightedSimpleWorker, as shipped: start records on, limits off): a FairQueue
and a plain rq Queue. Commands run by scripts count, as Redis counts them (INFO commandstats).

A cached profile is read again once it is ``MAX_AGE`` (60 s) old, whether or not it changed. On a slow hour a burst
of 10,000 jobs takes longer than that, and the second burst would meet profiles aged out rather than warm ones:
the bench's tier books keep them ``--max-age`` seconds instead (default 600; ``--max-age 60`` measures as
shipped, burst length and all).

Always runs on a private redis-server.

    .venv/bin/python bench/warm_profiles.py [--tenants 10000]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from redis import Redis
from rq import Queue

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fairqueue import fill, timed_burst
from fair_router import FairQueue, Settings, WeightedSimpleWorker
from fair_router.demo.redis_server import RedisServer


def burst(conn: Redis, worker: WeightedSimpleWorker, jobs: int) -> tuple[float, float]:
    """One burst of ``jobs`` jobs: (Redis commands per job, jobs/s)."""
    elapsed, _, calls = timed_burst(conn, worker, jobs)
    return calls / jobs, jobs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=10_000, help="active tenants, three jobs each")
    parser.add_argument("--max-age", type=float, default=600.0,
                        help="seconds a cached profile is kept by the bench's tier books (shipped: 60)")
    args = parser.parse_args()
    logging.getLogger("rq").setLevel(logging.WARNING)
    with RedisServer() as server:
        conn = server.client()
        for fair in (False, True):
            conn.flushdb()
            settings = Settings(prefix="bench")
            queue = FairQueue("bench", connection=conn, settings=settings) if fair else Queue("bench", connection=conn)
            fill(queue, args.tenants, 3 * args.tenants)
            worker = WeightedSimpleWorker([queue], connection=conn, settings=settings)
            worker.gate.limiter.tiers.max_age = args.max_age  # the start checks' profiles
            if fair:
                worker.queue_class = FairQueue
                queue.tier_book.max_age = args.max_age  # the weights of the jobs put back by refused starts
            side = "fair " if fair else "plain"
            for phase in ("cold", "warm"):
                per_job, rate = burst(conn, worker, args.tenants)
                print(f"{side} {args.tenants} tenants, {phase} burst of {args.tenants}: {per_job:5.2f} Redis "
                      f"commands/job, {rate:6.0f} jobs/s")


if __name__ == "__main__":
    main()
