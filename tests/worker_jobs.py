"""Job functions for the worker tests, importable by the rq worker subprocesses (tests/ on PYTHONPATH)."""

from __future__ import annotations


def noop() -> None:
    """Does nothing: the worker tests count which queue each job came from, not what it did."""
