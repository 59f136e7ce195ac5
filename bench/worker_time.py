"""Worker-time share benchmark: job-count charging against runtime charging on real rq workers.

    .venv/bin/python bench/worker_time.py [--rounds 3] [--long-jobs 100] [--short-jobs 1000] [--workers 2]

Two tenants, backlogged from the start, jobs of 20 ms and 2 ms (10:1), drained by real
WeightedSimpleWorker processes from one FairQueue, once per charging mode per round (modes interleaved,
the order rotated each round): equal weights, then weights 1:3 (long : short). Prints, per mode, the long
tenant's share of worker time while both were backlogged, Jain's index over worker time / fair share, and
the drain throughput relative to job-count charging (median over rounds). Uses $REDIS_URL when set, else a
private redis-server. The scenario lives in fair_router/demo/flood.py (``run_worker_time``).
"""

from __future__ import annotations

import argparse
import os
import statistics

from redis import Redis

from fair_router.demo.flood import MixedParams
from fair_router.demo.redis_server import RedisServer
from fair_router.demo.run import print_worker_time, run_worker_time_demo


def main() -> None:
    defaults = MixedParams()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--long-ms", type=float, default=defaults.long_ms)
    parser.add_argument("--short-ms", type=float, default=defaults.short_ms)
    parser.add_argument("--long-jobs", type=int, default=defaults.long_jobs)
    parser.add_argument("--short-jobs", type=int, default=defaults.short_jobs)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    args = parser.parse_args()
    base = MixedParams(args.long_ms, args.short_ms, args.long_jobs, args.short_jobs, args.workers)
    url = os.environ.get("REDIS_URL")
    for weights in ((1.0, 1.0), (1.0, 3.0)):
        params = MixedParams(**{**base.__dict__, "weights": weights})
        if url:
            report = run_worker_time_demo(Redis.from_url(url), url, params, args.rounds)
        else:
            with RedisServer() as server:
                report = run_worker_time_demo(server.client(), server.url, params, args.rounds)
        print_worker_time(report)
        ratio = [r["runtime"]["throughput"] / r["jobs"]["throughput"] for r in report["rounds"]]
        print(f"  throughput runtime / jobs per round: {', '.join(f'{x:.3f}' for x in ratio)} "
              f"(median {statistics.median(ratio):.3f})")


if __name__ == "__main__":
    main()
