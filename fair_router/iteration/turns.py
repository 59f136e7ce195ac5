"""What an interruptible job, the worker running it and crash recovery share: the ``job.meta`` keys, the
:data:`HOST` flags the worker sets, and :data:`TURN_END`, a turn's return value (docs/interruptible.md)."""

from __future__ import annotations

from typing import Any

from rq.job import Job

CURSOR = "fair_cursor"
"""``job.meta`` key: the cursor of the last checkpoint (the value the generator yielded), saved with the job."""
TURNS = "fair_turns"
"""``job.meta`` key: how many turns the job has started (1 during its first)."""
ITEMS = "fair_items"
"""``job.meta`` key: checkpoints passed over all turns (after a crash, counted again from the saved one)."""
RESUMES = "fair_resumes"
"""``job.meta`` key: how many times crash recovery queued the job again from its saved cursor."""

MARKER = "__fair_interruptible__"
"""Attribute of a function decorated with ``interruptible`` (its ``Slicing``); copied by ``functools.wraps``,
so a ``@fair_job`` over it carries it too."""


class TurnEnd:
    """The return value of an interruptible job whose turn ended before its generator did: the worker queues
    the job again instead of handling a success (no FINISHED, callbacks, dependents or result)."""

    def __repr__(self) -> str:
        return "TURN_END"


TURN_END = TurnEnd()


class Host:
    """What the worker that runs jobs in this process tells interruptible jobs: the worker's turns part. Plain
    attributes, no lock: a signal handler sets ``stopping`` while the job's code runs (a lock could deadlock)."""

    def __init__(self) -> None:
        self.active = False
        """A worker that can queue a turn again runs the current job (else a job runs to its end at once:
        a plain rq worker, or a queue with ``is_async=False``)."""
        self.stopping = False
        """Warm shutdown: the running job stops at its next checkpoint."""

    def hosting(self, active: bool, stop: bool = False) -> None:
        """A job starts (``active``; ``stop`` when a warm shutdown is already pending) or has ended."""
        self.active, self.stopping = active, stop

    def stop(self) -> None:
        """Warm shutdown: the running interruptible job stops at its next checkpoint."""
        self.stopping = True

    @staticmethod
    def is_end(value: Any) -> bool:
        """An interruptible job returned at the end of a turn: the worker queues it again."""
        return isinstance(value, TurnEnd)


HOST = Host()
"""This process's host (one worker runs one job at a time per process)."""


def is_interruptible(job: Job) -> bool:
    """Whether ``job``'s function is ``interruptible`` (imported as a worker would; one that cannot be: False)."""
    try:
        func = job.func
    except Exception:
        return False
    return getattr(func, MARKER, None) is not None


def turns_started(job: Job) -> int:
    """How many turns ``job`` has started (0 before its first)."""
    try:
        return int(job.meta.get(TURNS) or 0)
    except (TypeError, ValueError):
        return 0
