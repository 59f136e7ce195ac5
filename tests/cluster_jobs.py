"""Job functions for the Redis Cluster tests (tests/test_cluster.py), importable by worker subprocesses. They
run with ``RQ_KEY_PREFIX={rq}`` and log to a list on rq's slot (``{rq}:...``), through the job's own connection:
the plain client to the owner of rq's slot."""

from __future__ import annotations

import os
from datetime import timedelta

from rq import get_current_job

from fair_router import fair_job

LOG = "{rq}:test:cluster:ran"
"""Every run appends ``<kind> <tenant> <n> <queue>`` here: which jobs ran, in the order they ran."""


def _log(kind: str, tenant: str, n: int) -> None:
    job = get_current_job()
    assert job is not None
    job.connection.rpush(LOG, f"{kind} {tenant} {n} {job.origin}")


@fair_job(queue="cl_routed", tenant=lambda tenant, n: tenant)
def routed(tenant: str, n: int) -> None:
    """A routed job (rules from settings: ``jobs.cluster_jobs.routed``)."""
    _log("routed", tenant, n)


@fair_job(queue="cl_fair", tenant=lambda tenant, n: tenant, fair=True)
def fair(tenant: str, n: int) -> None:
    """A job of the fair queue ``cl_fair``."""
    _log("fair", tenant, n)


def produce(tenants: int, big_jobs: int) -> dict[str, int]:
    """Enqueue routed and fair jobs: tenant t0 floods (``big_jobs`` of each), every other tenant sends one of
    each; some routed ones through ``enqueue_many``. Returns how many of each kind were enqueued."""
    counts = {"routed": 0, "fair": 0}
    for n in range(big_jobs):
        routed.delay("t0", n)
        fair.delay("t0", n)
        counts["routed"] += 1
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
