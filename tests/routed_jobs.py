"""Importable job functions for router tests (rq resolves jobs by dotted path)."""

from __future__ import annotations

from redis import Redis
from rq import get_current_job
from rq.job import Job


def echo(account: str, item: int = 0) -> int:
    return item


def fail_twice(account: str, item: int = 0) -> int:
    """Fails on its first two runs (counted in Redis), then succeeds."""
    job = get_current_job()
    assert job is not None
    runs = job.connection.incr(f"test:runs:{job.id}")
    if runs <= 2:
        raise RuntimeError(f"planned failure {runs}")
    return item


def count_run(account: str, item: int = 0) -> int:
    """Counts its runs in Redis under the job id."""
    job = get_current_job()
    assert job is not None
    job.connection.incr(f"test:runs:{job.id}")
    return item


def on_ok(job: Job, connection: Redis, result: object) -> None:
    """rq success callback: counts calls under the job id."""
    connection.incr(f"test:ok:{job.id}")


def on_bad(job: Job, connection: Redis, *exc_info: object) -> None:
    """rq failure callback."""
    connection.incr(f"test:bad:{job.id}")


def on_stop(job: Job, connection: Redis) -> None:
    """rq stopped callback."""
    connection.incr(f"test:stopped:{job.id}")
