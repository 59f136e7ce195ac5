"""Job functions for the benchmarks: importable by dotted path (rq refuses functions from ``__main__``)."""

from __future__ import annotations

from typing import Any


def noop(*args: Any, **kwargs: Any) -> None:
    """Does nothing; the benchmarks measure enqueueing, not running."""
    return None
