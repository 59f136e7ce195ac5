"""Job functions for the outage test, importable by rq worker subprocesses (tests/ on PYTHONPATH)."""

from __future__ import annotations

import time


def nap(tenant: str, n: int, seconds: float = 0.2) -> str:
    """Work for ``seconds`` (a job that is running when Redis goes away); returns its tenant and number."""
    time.sleep(seconds)
    return f"{tenant}:{n}"
