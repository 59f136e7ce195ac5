"""The shop's job functions. Each run appends ``<tenant>:<n>`` to the Redis list ``shop:ran``, so a test reads
the order jobs ran in."""

from rq import get_current_job

from fair_router import fair_job

RAN = "shop:ran"


def log(tenant: str, n: int) -> None:
    """A plain job function."""
    job = get_current_job()
    assert job is not None
    job.connection.rpush(RAN, f"{tenant}:{n}")


@fair_job("fair", fair=True, tenant=lambda tenant, n: tenant)
def process(tenant: str, n: int) -> None:
    """A routed job function, into the fair queue."""
    log(tenant, n)
