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
