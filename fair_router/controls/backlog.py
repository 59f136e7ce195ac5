"""Backlog caps: how many jobs one tenant may have waiting in one FairQueue (docs/tenant-controls.md).

``lua/fair_push.lua`` refuses the whole push when a capped tenant would pass its cap, so check and push are one atomic
step; the push runs in rq's MULTI after the job hashes are saved, so our callers read the refusal
(:meth:`BacklogCaps.refusal`), delete the saved jobs (:func:`withdraw`) and raise :class:`TenantBacklogFull`. Caps apply
to new enqueues only."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import ResponseError
from rq import Queue
from rq.group import Group
from rq.job import Job

_REFUSED = re.compile(r"FAIRBACKLOG (\d+) ")
"""fair_push.lua's refusal: the index of the entry that would pass its cap."""


def refused_entry(reply: Any) -> int | None:
    """The entry index of a fair push's cap refusal, if ``reply`` is one."""
    match = _REFUSED.search(str(reply)) if isinstance(reply, ResponseError) else None
    return int(match.group(1)) if match else None


def execute(pipe: Pipeline) -> list[Any]:
    """Execute an enqueue pipeline without raising on a cap refusal (read by :meth:`BacklogCaps.refusal`)."""
    results: list[Any] = pipe.execute(raise_on_error=False)
    for reply in results:
        if isinstance(reply, Exception) and refused_entry(reply) is None:
            raise reply
    return results


class TenantBacklogFull(Exception):
    """An enqueue would take ``tenant``'s waiting jobs in ``queue`` past its ``cap``; nothing was enqueued."""

    def __init__(self, tenant: str, queue: str, cap: int) -> None:
        self.tenant, self.queue, self.cap = tenant, queue, cap
        super().__init__(f"tenant {tenant!r} has reached its backlog cap in queue {queue!r}: at most {cap} "
                         f"waiting jobs; nothing was enqueued")


@dataclass(frozen=True)
class Capped:
    """One capped job of a push: its tenant (as given) and the cap."""

    tenant: str
    cap: int


class BacklogCaps:
    """The pushes of one fair queue that carry caps, per pipeline, until whoever executes it looks at them."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        # Pipeline -> (index of the push in its command stack, the capped job of each pushed entry or None).
        # Weak: a caller's pipeline that nobody settles takes its entry with it.
        self._pushes: WeakKeyDictionary[Pipeline, list[tuple[int, list[Capped | None]]]] = WeakKeyDictionary()

    def record(self, pipe: Pipeline, entries: Sequence[Capped | None]) -> None:
        """The push just queued on ``pipe`` carries these entries (None: not capped)."""
        if any(entries):
            self._pushes.setdefault(pipe, []).append((len(pipe.command_stack) - 1, list(entries)))

    def refusal(self, pipe: Pipeline, results: Sequence[Any]) -> TenantBacklogFull | None:
        """After ``pipe`` ran (by :func:`execute`): the cap a push of this queue hit, else None."""
        for index, entries in self._pushes.pop(pipe, []):
            refused = refused_entry(results[index])
            if refused is not None:
                capped = entries[refused]
                if capped is not None:
                    return TenantBacklogFull(capped.tenant, self.queue, capped.cap)
        return None

    def precheck(self, waiting: Mapping[str, int], wanted: dict[str, tuple[Capped, int]]) -> None:
        """Raise TenantBacklogFull if ``wanted`` (tenant -> (cap, jobs)) on top of ``waiting`` passes a cap."""
        for name, (capped, jobs) in wanted.items():
            if waiting.get(name, 0) + jobs > capped.cap:
                raise TenantBacklogFull(capped.tenant, self.queue, capped.cap)


def withdraw(connection: Redis, jobs: Iterable[tuple[Queue, Job]], group: Group | None = None) -> None:
    """Take back a refused enqueue's jobs: off their queues and their hashes deleted."""
    with connection.pipeline() as pipe:
        for queue, job in jobs:
            queue.remove(job.id, pipeline=pipe)
            pipe.delete(job.key)
            if group is not None:
                pipe.srem(group.key, job.id)
        pipe.execute()
