"""Job functions for the Redis Cluster tests (tests/test_cluster.py), importable by worker subprocesses. They
run with ``RQ_KEY_PREFIX={rq}`` and log to a list on rq's slot (``{rq}:...``), through the job's own connection:
the plain client to the owner of rq's slot."""

from __future__ import annotations

import os
import time
from datetime import timedelta

from rq import Retry, get_current_job

from fair_router import fair_job

LOG = "{rq}:test:cluster:ran"
"""Every run appends ``<kind> <tenant> <n> <queue>`` here: which jobs ran, in the order they ran."""


def _log(kind: str, tenant: str, n: int) -> None:
    job = get_current_job()
    assert job is not None
    job.connection.rpush(LOG, f"{kind} {tenant} {n} {job.origin}")
    if os.environ.get("CLUSTER_WAIT_REPLICA"):  # the failover test: the record survives its master's death
        job.connection.execute_command("WAIT", 1, 100)


@fair_job(queue="cl_routed", tenant=lambda tenant, n: tenant)
def routed(tenant: str, n: int) -> None:
    """A routed job (rules from settings: ``jobs.cluster_jobs.routed``)."""
    _log("routed", tenant, n)


@fair_job(queue="cl_fair", tenant=lambda tenant, n: tenant, fair=True)
def fair(tenant: str, n: int) -> None:
    """A job of the fair queue ``cl_fair``."""
    _log("fair", tenant, n)


@fair_job(queue="cl_slow", tenant=lambda tenant, seconds: tenant, retry=Retry(max=1))
def slow(tenant: str, seconds: float) -> None:
    """A job long enough to kill its worker while it runs (the crash recovery test)."""
    time.sleep(seconds)
    _log("slow", tenant, 0)


def produce(tenants: int, big_jobs: int) -> dict[str, int]:
    """Enqueue routed and fair jobs: tenant t0 floods (``big_jobs`` of each; its routed ones in one
    ``enqueue_many``, which records them in its window together), every other tenant sends one of each; some
    routed ones through ``enqueue_many``. Returns how many of each kind were enqueued."""
    counts = {"routed": 0, "fair": 0}
    routed.enqueue_many([(("t0", n), {}) for n in range(big_jobs)])  # past 128: the window is rewritten compact
    counts["routed"] += big_jobs
    for n in range(big_jobs):
        fair.delay("t0", n)
        counts["fair"] += 1
    for t in range(1, tenants):
        fair.delay(f"t{t}", 0)
        counts["fair"] += 1
    half = tenants // 2
    for t in range(1, half):
        routed.delay(f"t{t}", 0)
        counts["routed"] += 1
    routed.enqueue_many([((f"t{t}", 0), {}) for t in range(half, tenants)])  # one route call: one slot
    routed.enqueue_in(timedelta(seconds=1), "t0", big_jobs)  # through rq's scheduler
    fair.enqueue_in(timedelta(seconds=1), "t0", big_jobs)
    counts["routed"] += 1
    counts["fair"] += 1
    counts["routed"] += tenants - half
    return counts


if __name__ == "__main__" and os.environ.get("CLUSTER_PRODUCE"):
    import json

    print(json.dumps(produce(int(os.environ["CLUSTER_TENANTS"]), int(os.environ["CLUSTER_BIG"]))))


def flood(count: int, acked_path: str) -> None:
    """Enqueue ``count`` jobs (fair and routed alternately, 20 tenants) through a failover: an enqueue that
    raises is tried again as a new job; every one that returned is written to ``acked_path`` after the owner
    of rq's slot confirmed it reached its replica (``WAIT 1``, 100 ms: after the failover the promoted master
    has no replica left and WAIT gives up), so the killed master cannot take it along."""
    from fair_router.store.cluster import rq_of

    rq = rq_of(routed.fair_job.router.connection)
    with open(acked_path, "a", encoding="utf-8") as acked:
        n = 0
        while n < count:
            kind, job = ("fair", fair) if n % 2 else ("routed", routed)
            tenant = f"t{n % 20}"
            try:
                job.delay(tenant, n)
                rq.execute_command("WAIT", 1, 100)
            except Exception as exc:  # the failover: the enqueue may or may not have happened; not acknowledged
                print(f"attempt {n} failed: {type(exc).__name__}: {exc}", flush=True)
                time.sleep(0.1)
            else:
                acked.write(f"{kind} {tenant} {n}\n")
                acked.flush()
            n += 1
            time.sleep(0.02)
