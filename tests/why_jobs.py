"""Jobs of tests/test_why.py: a job that explains itself while it runs (so the answer is read while rq holds it
started, with no thread beside the worker)."""

from __future__ import annotations

import json
import time
from collections.abc import Generator

from rq import get_current_job

from fair_router import Settings, explain, interruptible

ANSWER = "test:why:running"


def explain_myself() -> None:
    job = get_current_job()
    assert job is not None
    answer = explain(job.id, connection=job.connection, settings=Settings(prefix="why_test"))
    job.connection.set(ANSWER, json.dumps(answer.as_dict()))


def boom() -> None:
    raise RuntimeError("boom: the last line")


def noop() -> None:
    """Does nothing."""


def linger() -> None:
    """Runs until stopped (``send_stop_job_command``)."""
    time.sleep(60)


@interruptible(slice="1h")
def explain_my_turn(cursor: int | None = None) -> Generator[int, None, str]:
    """An interruptible job that explains itself after its first checkpoint, in its first turn."""
    yield 1
    explain_myself()
    return "done"
