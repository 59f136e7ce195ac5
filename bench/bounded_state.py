"""State left behind by tenants that came and went: what stays in Redis without a TTL after N tenants each ran
a few jobs through one FairQueue with the tenant controls on, and used_memory before and after.

    .venv/bin/python bench/bounded_state.py [--tenants 2000] [--jobs 2] [--wave 250] [--charge runtime]

The scenario is bench/churn.py (``run``): waves of tenants drained by a real in-process
WeightedSimpleWorker, concurrency.enabled (the free tier's limit of 1), a tier rate, start records on. Prints,
per key without a TTL, how many of its entries (hash fields, set members, list items) name one of the
scenario's tenants, and used_memory before the first wave and after the drain. Uses $REDIS_URL when set
(flushed!), else a private redis-server.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from redis import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.churn import TENANT, run
from fair_router.demo.redis_server import RedisServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", type=int, default=2000)
    parser.add_argument("--jobs", type=int, default=2, help="jobs per tenant")
    parser.add_argument("--wave", type=int, default=250, help="tenants enqueued at once")
    parser.add_argument("--charge", choices=("jobs", "runtime"), default="runtime")
    parser.add_argument("--rate", default="100/s", help="the free tier's rate")
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL")
    if url:
        result = run(Redis.from_url(url), args.tenants, args.jobs, args.wave, args.charge, args.rate)
    else:
        with RedisServer() as server:
            result = run(server.client(), args.tenants, args.jobs, args.wave, args.charge, args.rate)
    print(f"{result.tenants} tenants x {result.jobs} jobs, charge={args.charge}, free tier limit 1, rate "
          f"{args.rate}: entries naming a tenant in keys without a TTL")
    for key, n in sorted(result.per_key.items(), key=lambda kv: -kv[1]):
        print(f"  {n:7d}  {key}")
    print(f"  {result.entries:7d}  in all ({result.entries / result.tenants:.1%} of the tenants; "
          f"ids {TENANT!r}...)")
    print(f"used_memory: {result.memory_before / 1e6:.2f} MB before, {result.memory_after / 1e6:.2f} MB after")


if __name__ == "__main__":
    main()
