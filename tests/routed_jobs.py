"""Importable job functions for router tests (rq resolves jobs by dotted path)."""

from __future__ import annotations

from rq import get_current_job


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
