"""What reconciling a fair queue's counts with rq's list costs a reader (fair_router.fairqueue.reconcile), and
what a backlog cap's refusal costs now that it checks the tenant's jobs against the list first
(lua/lib/recount.lua).

On a private redis-server: a fair queue of 100, then 1,000 waiting jobs over 20 tenants, nothing changed by rq
(the common read: every listed id compared); and a tenant at a cap of 100 refused again and again. Server time
is Redis' own (``INFO commandstats``: the EVALSHA's usec per call); the client's is the median with its round
trip. Times move with the machine's load.

    .venv/bin/python bench/reconcile.py [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rq import Queue

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import fair_jobs
from redisstats import pop_stat

from fair_router import FairQueue, Settings
from fair_router.controls.backlog import TenantBacklogFull
from fair_router.demo.redis_server import RedisServer
from fair_router.fairqueue.scripts import FairReconcileScript


def timed(conn: object, run: Callable[[], object], calls: int) -> tuple[float, float]:
    """(client median µs, server µs per script call) of ``calls`` runs of ``run``."""
    conn.config_resetstat()  # type: ignore[attr-defined]
    took = []
    for _ in range(calls):
        start = time.perf_counter()
        run()
        took.append((time.perf_counter() - start) * 1e6)
    server = pop_stat(conn.info("commandstats"))["usec_per_call"]  # type: ignore[attr-defined]
    return statistics.median(took), float(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    calls = parser.parse_args().calls
    with RedisServer() as server:
        conn = server.client()
        for size in (100, 1000):
            conn.flushall()
            queue = FairQueue("fq", connection=conn, settings=Settings(prefix="bench"))
            queue.enqueue_many([Queue.prepare_data(fair_jobs.log, ("t", i), meta={"fair_tenant": f"t{i % 20}"})
                                for i in range(size)])
            reconcile = queue.fair_script(FairReconcileScript)(queue.fair_keys, 1000)
            reconcile.run()
            client, redis = timed(conn, reconcile.run, calls)
            print(f"reconcile, {size:5} waiting, nothing changed: {redis:7.0f} µs Redis, {client:7.0f} µs client")
        conn.flushall()
        capped = Settings.model_validate({"prefix": "bench", "tiers": {"max_backlog": {"free": 100}}})
        queue = FairQueue("fq", connection=conn, settings=capped)
        queue.enqueue_many([Queue.prepare_data(fair_jobs.log, ("t", i), meta={"fair_tenant": "cap"})
                            for i in range(100)])

        def refused() -> None:
            try:
                queue.enqueue(fair_jobs.log, "t", 0, fair_tenant="cap")
            except TenantBacklogFull:
                return
            raise AssertionError("the cap did not refuse")

        client, _ = timed(conn, refused, calls)
        print(f"enqueue refused at a cap of 100 (100 members checked): {client:7.0f} µs client")


if __name__ == "__main__":
    main()
