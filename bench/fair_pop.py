"""The fair pop alone: Redis commands and server time per ``lua/fair_pop.lua`` call.

For each number of active tenants, a FairQueue is filled round-robin (every tenant keeps jobs waiting), then
``--pops`` pops are made in-process with ``FairQueue.pop_fair()`` (no worker, no job run), in chunks of 100.
Reported from ``INFO commandstats``: commands per pop (the script's own commands, as Redis counts them, and
its ``FCALL``, or ``EVALSHA`` on a Redis without functions; CPU noise cannot move this), and that call's time
per call of the lowest and the median chunk (noise only adds time, so the lowest chunk is the nearest to the
script's own cost).

Always runs on a private redis-server.

    .venv/bin/python bench/fair_pop.py [--tenants 10,1000,10000] [--pops 3000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any, cast

from redis import Redis
from rq import Queue

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.jobs import noop
from bench.redisstats import pop_stat
from fair_router import FairQueue, Settings
from fair_router.demo.redis_server import RedisServer

CHUNK = 100


def measure(conn: Redis, tenants: int, pops: int) -> tuple[float, float, float]:
    """(commands per pop, lowest chunk's us per pop, median chunk's us per pop) at ``tenants`` active tenants."""
    conn.flushdb()
    queue = FairQueue("bench", connection=conn, settings=Settings(prefix="bench"))
    total, batch = max(pops + tenants, 2 * tenants), []
    for i in range(total):
        batch.append(Queue.prepare_data(noop, (i,), meta={"fair_tenant": f"t{i % tenants}"}, result_ttl=60))
        if len(batch) == 1000 or i == total - 1:
            queue.enqueue_many(batch)
            batch = []
    calls, times = 0, []
    for _ in range(pops // CHUNK):
        conn.config_resetstat()
        for _ in range(CHUNK):
            assert queue.pop_fair().job_id is not None
        stats = cast(dict[str, dict[str, Any]], conn.info("commandstats"))
        calls += sum(int(value["calls"]) for name, value in stats.items()
                     if not name.startswith(("cmdstat_config", "cmdstat_info")))
        pop = pop_stat(stats)
        times.append(float(pop["usec"]) / int(pop["calls"]))
    return calls / (pops // CHUNK * CHUNK), min(times), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", default="10,1000,10000", help="comma-separated active tenant counts")
    parser.add_argument("--pops", type=int, default=3000, help="pops measured per tenant count")
    args = parser.parse_args()
    with RedisServer() as server:
        for tenants in (int(x) for x in args.tenants.split(",")):
            commands, low, median = measure(server.client(), tenants, args.pops)
            print(f"{tenants:>7} tenants: {commands:5.2f} commands/pop, fair pop {low:6.1f} us/call lowest chunk, "
                  f"{median:6.1f} median")


if __name__ == "__main__":
    main()
