"""Waiting counts kept exact under rq's own commands (docs/fair-queue.md, "Counts under rq's own commands"); a list
longer than :data:`RECONCILE_BOUND` is not compared and reported *approximate*."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis import Redis
from rq.job import Job, JobStatus

from fair_router.fairqueue.marks import FairnessMarks
from fair_router.fairqueue.queue import FairQueue
from fair_router.fairqueue.scripts import FairReconcileScript, PushEntry, ReconcileResult

if TYPE_CHECKING:
    from fair_router.config.settings import Settings

logger = logging.getLogger("fair_router")

RECONCILE_BOUND = 1000
"""Entries of a queue's list (and of its members) compared per read at most; beyond it the counts are reported
approximate."""

_WARNED: set[str] = set()
"""Queues whose unreadable jobs were reported (once per process)."""

MAX_BOUND = 100_000
"""The largest bound taken: a read holds the whole list and members hash in the script's memory."""


@dataclass(frozen=True)
class Reconciled:
    """One fair queue's counts after a reconcile."""

    queue: str
    exact: bool  # counts agree with rq's list (False: more than the bound waits; approximate)
    dropped: int  # stale members dropped (ids rq took off the list)
    adopted: int  # ids rq pushed itself, adopted into their tenants' FIFOs
    length: int  # entries on rq's list


class FairQueues:
    """The fair queues among those a long-lived reader (the dashboard) looks at: marked fair in Redis (read at most
    every ``RECHECK_EVERY`` seconds) or listed in ``fair_queues``, each built once."""

    def __init__(self, connection: Redis, settings: Settings) -> None:
        self.connection, self.settings = connection, settings
        self._marks = FairnessMarks(connection, settings.prefix)
        self._built: dict[tuple[str, str], FairQueue] = {}

    def among(self, names: Iterable[str]) -> list[FairQueue]:
        """The fair queues among ``names``, each with the prefix its mark names (at most one round trip)."""
        names = list(dict.fromkeys(names))
        marked = self._marks.read(names)
        found = []
        for name in names:
            if name in marked or self.settings.is_fair(name):
                prefix = marked.get(name, self.settings.prefix)
                queue = self._built.get((name, prefix))
                if queue is None:
                    queue = self._built[(name, prefix)] = FairQueue(name, connection=self.connection,
                                                                    settings=self.settings, prefix=prefix)
                found.append(queue)
        return found


def fair_queues(connection: Redis, settings: Settings, names: Iterable[str]) -> list[FairQueue]:
    """The fair queues among ``names`` (marked fair in Redis, or listed in ``fair_queues``), each with the
    prefix its mark names (one round trip for the marks): :class:`FairQueues` for a one-off read."""
    return FairQueues(connection, settings).among(names)


def reconcile_queues(queues: Sequence[FairQueue], bound: int = RECONCILE_BOUND) -> dict[str, Reconciled]:
    """Reconcile each fair queue's counts with rq's list (see the module docstring): one pipelined round trip
    for all, and, when rq pushed ids itself, one to read their jobs and one to adopt them."""
    if not 1 <= bound <= MAX_BOUND:
        raise ValueError(f"reconcile bound must be between 1 and {MAX_BOUND} entries, got {bound}")
    if not queues:
        return {}
    first = _run(queues, bound, [[] for _ in queues])
    adopt = [_entries(queue, result.plain) if result.exact else [] for queue, result in zip(queues, first, strict=True)]
    second = _run(queues, bound, adopt) if any(adopt) else first
    done: dict[str, Reconciled] = {}
    for queue, one, two in zip(queues, first, second, strict=True):
        dropped = one.dropped + (two.dropped if two is not one else 0)
        done[queue.name] = Reconciled(queue.name, one.exact and two.exact, dropped,
                                      two.adopted if two is not one else 0, two.length)
    return done


def _run(queues: Sequence[FairQueue], bound: int, adopt: Sequence[Sequence[PushEntry]]) -> list[ReconcileResult]:
    """One fair_reconcile.lua call per queue (adopting ``adopt[i]`` in queue i), pipelined."""
    calls = [queue.fair_script(FairReconcileScript)(queue.fair_keys, bound, entries)
             for queue, entries in zip(queues, adopt, strict=True)]
    with queues[0].connection.pipeline(transaction=False) as pipe:
        for call in calls:
            call.queue(pipe)
        replies = pipe.execute()
    return [call.script.parse(reply) for call, reply in zip(calls, replies, strict=True)]


def _entries(queue: FairQueue, ids: Sequence[str]) -> list[PushEntry]:
    """The FIFO entries of the listed ids ``ids`` that rq pushed into ``queue`` itself: each job's tenant, weight
    and costs, read from its hash. Ids whose job is gone, is not queued here or cannot be read stay plain."""
    if not ids:
        return []
    try:
        jobs: Sequence[Job | None] = Job.fetch_many(list(ids), connection=queue.connection,
                                                    serializer=queue.serializer)
    except Exception:  # one unreadable job (another serializer): read them one by one, skipping it
        jobs = [_fetch(queue, job_id) for job_id in ids]
        unread = [job_id for job_id, job in zip(ids, jobs, strict=True) if job is None]
        if unread and queue.name not in _WARNED:  # once per queue and process: a dashboard reads every few seconds
            _WARNED.add(queue.name)
            logger.warning("fair queue %r: %d job(s) rq pushed itself (%s, ...) stay plain entries, not counted for "
                           "their tenants: their hashes cannot be read with this process's serializer (give the "
                           "reader the serializer the producers use)", queue.name, len(unread), unread[0])
    entries = []
    for job in jobs:
        if job is None or job.origin != queue.name or job.get_status(refresh=False) != JobStatus.QUEUED:
            continue
        entries.append(queue._config.entry(job.id, job, False, listed=True))  # tenant, weight, costs, org
    return entries


def _fetch(queue: FairQueue, job_id: str) -> Job | None:
    """The job, None when it is gone or cannot be read (it stays a plain entry, served in list order)."""
    try:
        return Job.fetch(job_id, connection=queue.connection, serializer=queue.serializer)
    except Exception:
        return None
