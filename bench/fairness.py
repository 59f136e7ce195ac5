"""Flood scenario benchmark: FIFO vs fair-router on real rq workers; prints tables, writes JSON.

    .venv/bin/python bench/fairness.py [--rounds 3] [--greedy-jobs 2000] [--small-tenants 40] ... [--json out.json]

Uses $REDIS_URL when set, else a private redis-server. The scenario itself lives in
fair_router/demo/flood.py (shared with `fair-router demo`).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from redis import Redis

from fair_router.demo.flood import FloodParams
from fair_router.demo.harness import MODES
from fair_router.demo.redis_server import RedisServer
from fair_router.demo.run import print_flood, run_flood_demo


def main() -> None:
    defaults = FloodParams()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--greedy-tenants", type=int, default=defaults.greedy_tenants)
    parser.add_argument("--greedy-jobs", type=int, default=defaults.greedy_jobs)
    parser.add_argument("--small-tenants", type=int, default=defaults.small_tenants)
    parser.add_argument("--small-jobs", type=int, default=defaults.small_jobs)
    parser.add_argument("--spread", type=float, default=None, help="seconds; default: expected drain time")
    parser.add_argument("--job-ms", type=float, default=defaults.job_ms)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--rounds", type=int, default=3,
                        help="repeat calm + flood runs (modes interleaved); waits pooled, makespan ratio median")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, from {', '.join(MODES)}")
    parser.add_argument("--json", type=Path, help="write the full report (summaries and raw waits) here")
    parser.add_argument("--plot", type=Path, help="draw wait distributions to this PNG")
    args = parser.parse_args()
    params = FloodParams(args.greedy_tenants, args.greedy_jobs, args.small_tenants, args.small_jobs,
                         args.spread, args.job_ms, args.workers, args.seed)
    modes = tuple(args.modes.split(","))
    url = os.environ.get("REDIS_URL")
    if url:
        report = run_flood_demo(Redis.from_url(url), url, params, modes, args.rounds)
    else:
        with RedisServer() as server:
            report = run_flood_demo(server.client(), server.url, params, modes, args.rounds)
    print_flood(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.plot:
        from fair_router.demo.plot import plot_waits

        plot_waits(report, args.plot)


if __name__ == "__main__":
    main()
