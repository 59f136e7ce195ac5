"""Job functions for the interruptible-iteration tests, importable by rq worker subprocesses (tests/ on
PYTHONPATH). Each item is logged to Redis (``test:items:<job id>``, "<item> <server time>") before its
checkpoint, so the log says which items ran and how often."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Generator

from rq import get_current_job
from rq.job import Job

from fair_router import interruptible

SMALL_STARTS = "test:small:starts"
"""``<tenant> <server time>`` per small job start."""


def _job() -> Job:
    job = get_current_job()
    assert job is not None, "only meant to run inside an rq worker"
    return job


def _now(job: Job) -> float:
    seconds, micros = job.connection.time()
    return float(seconds) + micros / 1e6


def items_key(job_id: str) -> str:
    return f"test:items:{job_id}"


def _items(n: int, delay: float, cursor: int | None, fail_at: int | None = None,
           term_at: int | None = None) -> Generator[int, None, str]:
    job = _job()
    for i in range(cursor or 0, n):
        time.sleep(delay)
        if fail_at is not None and i == fail_at and not job.connection.getset(f"test:failed:{job.id}", 1):
            raise RuntimeError(f"item {i} failed (first time only)")
        job.connection.rpush(items_key(job.id), f"{i} {_now(job)}")
        if term_at is not None and i == term_at:
            os.kill(os.getpid(), signal.SIGTERM)  # an in-process worker's warm shutdown, mid-job
        yield i + 1
    return f"imported {n}"


@interruptible(slice="0.3s")
def import_items(account_id: str, n: int, delay: float, cursor: int | None = None) -> Generator[int, None, str]:
    """The issue's example: ``n`` items of ``delay`` seconds each, in turns of 0.3 s."""
    return (yield from _items(n, delay, cursor))


def import_items_plain(account_id: str, n: int, delay: float) -> str:
    """The same work without interruptible iteration (one turn, the whole job)."""
    job = _job()
    for i in range(n):
        time.sleep(delay)
        job.connection.rpush(items_key(job.id), f"{i} {_now(job)}")
    return f"imported {n}"


@interruptible(slice="1ms")
def every_item_a_turn(account_id: str, n: int, delay: float, cursor: int | None = None,
                      fail_at: int | None = None, term_at: int | None = None) -> Generator[int, None, str]:
    """Each checkpoint ends a turn (the slice is used up by the first item)."""
    return (yield from _items(n, delay, cursor, fail_at, term_at))


@interruptible(slice="1h")
def one_long_turn(account_id: str, n: int, delay: float, cursor: int | None = None,
                  term_at: int | None = None) -> Generator[int, None, str]:
    """A turn never ends by its slice here: only a warm shutdown (or a crash) interrupts it."""
    return (yield from _items(n, delay, cursor, term_at=term_at))


@interruptible(slice="1h", save_every=5)
def batched_saves(account_id: str, n: int, delay: float, cursor: int | None = None) -> Generator[int, None, str]:
    """Saves its cursor every 5 checkpoints: a crash repeats at most 5 items."""
    return (yield from _items(n, delay, cursor))


def small(tenant: str) -> None:
    """A 10 ms job that notes its start."""
    job = _job()
    job.connection.rpush(SMALL_STARTS, f"{tenant} {_now(job)}")
    time.sleep(0.01)


def note_success(job: Job, connection: object, result: object, *args: object, **kwargs: object) -> None:
    """rq success callback: counts its calls."""
    job.connection.incr(f"test:success:{job.id}")
