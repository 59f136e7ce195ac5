"""Job functions for the poison-tenant tests (tests/test_poison.py), importable by the rq worker subprocesses
(tests/ on PYTHONPATH)."""

from __future__ import annotations

import time

from rq import get_current_job


def echo(value: int) -> int:
    """A good job: returns its argument."""
    return value


def poison_self(value: object, seconds: float) -> None:
    """Writes ``value`` as its own ``job.meta["fair_tenant"]`` (code that edits a running job's meta), marks
    ``test:poisoned:<job id>`` and sleeps ``seconds``: a job whose worker a test then kills."""
    job = get_current_job()
    assert job is not None, "only meant to run inside an rq worker"
    job.meta["fair_tenant"] = value
    job.save_meta()
    job.connection.set(f"test:poisoned:{job.id}", 1)
    time.sleep(seconds)
