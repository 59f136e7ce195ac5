"""``@fair_job`` functions defined at module level, as an application defines them (rq imports them by their
dotted path): tests/test_fair_job_function.py."""

from __future__ import annotations

from collections.abc import Generator

from rq import get_current_job

from fair_router import fair_job, interruptible

LOG = "test:decorated"


@fair_job("routed", tenant=lambda tenant, n: tenant)
def process(tenant: str, n: int) -> str:
    """Logs ``tenant:n`` under the running job's connection."""
    job = get_current_job()
    assert job is not None
    job.connection.rpush(LOG, f"{tenant}:{n}")
    return f"{tenant}:{n}"


@fair_job("routed", tenant=lambda tenant, n, cursor=None: tenant)
@interruptible(slice="10s")
def steps(tenant: str, n: int, cursor: int | None = None) -> Generator[int, None, int]:
    """An interruptible job under @fair_job."""
    for i in range(cursor or 0, n):
        yield i + 1
    return n
