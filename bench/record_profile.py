"""Start records' client cost, counted rather than timed: the Python function calls a weighted worker makes
to drain the same no-op jobs with ``observe.record`` on and off, under cProfile.

    .venv/bin/python bench/record_profile.py [--jobs 1500] [--rounds 2]

Jobs/s on a shared machine moves by more than the 2 % goal for start records (see bench/worker.py); a function
call count does not. Each round drains once per side (the order swapped every round) with bench/worker.py's
``drain`` on a private redis-server, and prints calls per job and this process's CPU per job per side.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

from redis import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

import worker as bench_worker  # bench/worker.py, beside this file

from fair_router.demo.redis_server import RedisServer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    server = RedisServer().start()
    conn = Redis.from_url(server.url)
    calls: dict[str, list[int]] = {"weighted": [], "unrecorded": []}
    try:
        for round_no in range(args.rounds):
            sides = ("weighted", "unrecorded") if round_no % 2 == 0 else ("unrecorded", "weighted")
            for side in sides:
                profile = cProfile.Profile()
                profile.enable()
                _, _, cpu_us, _ = bench_worker.drain(conn, "profile", f"r{round_no}", side, args.jobs)
                profile.disable()
                total = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
                calls[side].append(total)
                print(f"round {round_no + 1}  {side:<10}  {total / args.jobs:8.1f} calls/job  "
                      f"{cpu_us:8.0f} us CPU/job (under cProfile)")
            bench_worker.clean_up(conn, "profile")
    finally:
        server.stop()
    on, off = sum(calls["weighted"]), sum(calls["unrecorded"])
    print(f"recording on / off, Python function calls: {on / off:.4f}x "
          f"({(on - off) / (args.jobs * args.rounds):+.1f} calls per job)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
