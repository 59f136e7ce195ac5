"""Fairness that never switches off silently: a queue is fair because Redis says so (its *fairness mark*, holding
the prefix of its fair state), set by a first push, removed only by ``fair-router queue plain`` (docs/fair-queue.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from redis import Redis
from redis.client import Pipeline
from rq import Queue

from fair_router.core.keys import Keys
from fair_router.fairqueue.scripts import FairUnmarkScript

logger = logging.getLogger("fair_router")

RECHECK_EVERY = 10.0
"""Seconds a producer or worker trusts what it read of a queue's mark: a queue marked after a process read
it is served fairly by that process within this long."""


def mark_key(name: str) -> str:
    """The fairness mark of the queue ``name`` (under rq's key prefix)."""
    return Keys.fair_mark(Queue.redis_queue_namespace_prefix + name)


class FairnessMarks:
    """Reads and writes queues' fairness marks on one connection, remembering for :data:`RECHECK_EVERY`
    seconds what it read (per object: no module-level cache)."""

    def __init__(self, connection: Redis, prefix: str) -> None:
        self.connection = connection
        self.prefix = prefix
        self._read: dict[str, tuple[float, str | None]] = {}  # queue name -> (monotonic time read, mark)

    def mark(self, names: Iterable[str], pipeline: Pipeline | None = None) -> None:
        """Mark the queues ``names`` fair with this object's prefix (queued on ``pipeline`` when given)."""
        names = list(names)
        if not names:
            return
        pipe = pipeline if pipeline is not None else self.connection.pipeline(transaction=False)
        for name in names:
            pipe.set(mark_key(name), self.prefix)
            self._read[name] = (time.monotonic(), self.prefix)
        if pipeline is None:
            pipe.execute()

    def read(self, names: Iterable[str]) -> dict[str, str]:
        """The marked queues among ``names``: name -> the prefix of their fair state. One round trip for the
        names not read in the last :data:`RECHECK_EVERY` seconds, none when all were."""
        now = time.monotonic()
        names = list(dict.fromkeys(names))
        stale = [name for name in names if name not in self._read or now - self._read[name][0] > RECHECK_EVERY]
        if stale:
            with self.connection.pipeline(transaction=False) as pipe:
                for name in stale:
                    pipe.get(mark_key(name))
                for name, raw in zip(stale, pipe.execute(), strict=True):
                    self._read[name] = (now, raw.decode() if isinstance(raw, bytes) else raw)
        marked: dict[str, str] = {}
        for name in names:
            prefix = self._read[name][1]
            if prefix is not None:
                marked[name] = prefix
        return marked

    def prefix_of(self, name: str) -> str | None:
        """The prefix of ``name``'s fair state if the queue is marked fair, else None; a prefix other than
        this object's is logged (once per read) as the mismatch it is."""
        read = self._read.get(name)
        if read is not None and time.monotonic() - read[0] <= RECHECK_EVERY:
            prefix = read[1]  # what read() would answer, without its batch bookkeeping (a hot path: every enqueue)
        else:
            prefix = self.read([name]).get(name)
        if prefix is not None and prefix != self.prefix:
            logger.error("queue %r is fair with its state under prefix %r, but this process uses prefix %r: "
                         "serving it with %r's state (set the same prefix everywhere)", name, prefix, self.prefix,
                         prefix)
        return prefix

    def clear(self, name: str) -> int:
        """Remove ``name``'s mark if the queue is empty: 1 removed, 0 none was set, -N when N jobs still wait
        (nothing changed)."""
        rq_list = Queue.redis_queue_namespace_prefix + name
        prefix = self.read([name]).get(name) or self.prefix
        keys = Keys(prefix).fair_queue(rq_list)
        result = FairUnmarkScript(self.connection)(keys.rq_list, keys.members, mark_key(name)).run()
        self._read.pop(name, None)
        return result
