"""Job functions for the benchmarks: importable by dotted path (rq refuses functions from ``__main__``)."""

from __future__ import annotations

import time
from typing import Any


def noop(*args: Any, **kwargs: Any) -> None:
    """Does nothing; the benchmarks measure enqueueing, not running."""
    return None


def sleep_ms(ms: float) -> None:
    """Sleeps ``ms`` milliseconds: a job that holds its tenant's slot for a while (bench/limit_flood.py)."""
    time.sleep(ms / 1000)


def stamp(log_key: str, tenant: str, ms: float) -> None:
    """Sleeps ``ms`` milliseconds between two Redis TIME readings and appends ``[start, end, tenant, worker pid]``
    to ``log_key`` (one clock for every worker process: bench/limits_deliver.py; a forking worker's work horse
    is its child, so the worker is the parent process)."""
    import json
    import os

    from rq import get_current_job

    job = get_current_job()
    if job is None:
        raise RuntimeError("stamp runs inside an rq worker")
    seconds, micros = job.connection.time()
    start = seconds + micros / 1e6
    time.sleep(ms / 1000)
    seconds, micros = job.connection.time()
    job.connection.rpush(log_key, json.dumps([start, seconds + micros / 1e6, tenant, os.getppid()]))
