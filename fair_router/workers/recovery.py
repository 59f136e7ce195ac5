"""Bounded crash recovery: a started job whose worker stopped heartbeating is handed back within
``recovery.abandon_after`` plus a few seconds, by rq's own cleanup on a staging set (docs/recovery.md)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis import Redis
from redis.exceptions import WatchError
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from fair_router.core.keys import Keys
from fair_router.core.text import as_text as _text
from fair_router.fairqueue.queue import FairQueue
from fair_router.iteration.turns import CURSOR, RESUMES, is_interruptible
from fair_router.rq_internals.registry import StagedRegistry, execution_key, has_execution, job_id_of, started_key
from fair_router.rq_internals.turns import requeue
from fair_router.rq_internals.worker import ExceptionHandler
from fair_router.store.outage import BACKOFF_CAP, OutageWatch
from fair_router.store.scripts import AbandonScript, Clock

logger = logging.getLogger("fair_router")

CHECK_EVERY_MAX = 2.0
"""Longest interval between two checks of a queue (seconds), whatever ``abandon_after``: the bound is
``abandon_after`` plus a few of these."""

class Recovery:
    """One weighted worker's share of crash recovery: checks when due, on the queues whose turn it takes."""

    def __init__(self, connection: Redis, keys: Keys, abandon_after: float, clock: Clock | None = None,
                 outages: OutageWatch | None = None, max_resumes: int = 5) -> None:
        self.connection = connection
        self.max_resumes = max_resumes
        """An abandoned interruptible job is queued again from its saved cursor at most this many times."""
        self.keys = keys
        self.abandon_after = abandon_after
        self.every = min(abandon_after / 4, CHECK_EVERY_MAX)
        """Seconds between two checks of this worker, and how long its turn on a queue lasts."""
        self.beat_every = max(1, int(abandon_after // 3))
        """Seconds between two heartbeats of a running job (whole seconds: rq's monitoring alarm)."""
        self.clock = clock
        self.outages = outages
        """Where this process's Redis retries note an unreachable Redis (None: not watched)."""
        self.settle = self.beat_every + self.every + BACKOFF_CAP
        """Seconds after Redis is back before a check decides anything: a heartbeat interval, a check interval and
        the longest retry backoff (docs/recovery.md)."""
        self.last_turns: list[str] = []
        """Names of the queues whose turn this worker took at its last check (other once-per-queue duties follow)."""
        self._next = 0.0  # due at once: a worker that starts checks first
        self._abandon = AbandonScript(connection)

    @property
    def wait_cap(self) -> int:
        """Longest blocking fetch, in whole seconds as rq passes them, so that an idle worker wakes to check."""
        return max(1, math.ceil(self.every))

    def due(self) -> bool:
        """Time for this worker's next check (a clock read, no Redis)."""
        return time.monotonic() >= self._next

    def run(self, queues: Sequence[Queue], *, exception_handlers: Sequence[ExceptionHandler] = (),
            on_abandoned: Callable[[Job], None] | None = None, death_penalty_class: Any = None) -> list[str]:
        """Check the queues whose turn this worker takes; returns the ids of the jobs handed back (``on_abandoned``
        first sees each). Never raises: a failed check is logged and the next one picks up where it stopped."""
        self._next = time.monotonic() + self.every
        self.last_turns = []
        try:
            turns, up_for = self._take_turns(queues)
            self.last_turns = [queue.name for queue in turns]
            if not turns:
                return []
            # Right after an outage or a restart, running jobs' heartbeats have not resumed yet: decide nothing
            # new (entries staged by an earlier check are still handed back).
            decide = not self._settling() and up_for >= self.settle
            if decide:
                for queue in turns:
                    if isinstance(queue, FairQueue):
                        queue.recover(older_than=self.abandon_after)
            handed: list[str] = []
            for queue, staged in self._stage_abandoned(turns, decide):
                if staged:
                    handed += self._hand_back(queue, exception_handlers, on_abandoned, death_penalty_class)
            return handed
        except Exception:
            logger.warning("crash recovery check failed; the next one runs in %.1f s", self.every, exc_info=True)
            return []

    def _settling(self) -> bool:
        """This process met Redis unreachable less than ``settle`` seconds ago (its retries noted it)."""
        since = self.outages.seconds_since() if self.outages is not None else None
        if since is not None and since < self.settle:
            logger.info("crash recovery: Redis was unreachable %.1f s ago; no check before heartbeats resume", since)
            return True
        return False

    def _take_turns(self, queues: Sequence[Queue]) -> tuple[list[Queue], float]:
        """The queues no other worker checked within the last interval (a SET NX PX each), and how long the server has
        been up by "now" (from server TIME, so an injected clock moves it too)."""
        with self.connection.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.set(self.keys.recovery_turn(queue.key), 1, nx=True, px=max(1, round(self.every * 1000)))
            pipe.time()
            pipe.info("server")
            *taken, (seconds, micros), info = pipe.execute()
        server_now = int(seconds) + int(micros) / 1e6
        now = self.clock() if self.clock is not None else server_now
        up_for = now - (server_now - float(info["uptime_in_seconds"]))
        return [queue for queue, ok in zip(queues, taken, strict=True) if ok], up_for

    def _stage_abandoned(self, queues: Sequence[Queue], decide: bool = True) -> list[tuple[Queue, int]]:
        """Move each queue's abandoned entries to its staging set (unless not ``decide``: only count those
        staged before); (queue, entries now staged) per queue."""
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.time()
            for queue in queues:
                started = started_key(queue)
                pipe.zrange(started, 0, -1, withscores=True)
                pipe.zcard(self.keys.abandoned(started))
            replies = pipe.execute()
        seconds, micros = replies[0]
        now = self.clock() if self.clock is not None else int(seconds) + int(micros) / 1e6
        running = [[(_text(member), float(score)) for member, score in replies[1 + 2 * i]]
                   for i in range(len(queues))]
        left = [int(replies[2 + 2 * i]) for i in range(len(queues))]

        # The execution hash named by the registry member holds the last heartbeat.
        members = [member for entries in running for member, _ in entries]
        with self.connection.pipeline(transaction=False) as pipe:
            for member in members:
                pipe.hget(execution_key(member, self.connection), "last_heartbeat")
            beats = dict(zip(members, pipe.execute() if members else [], strict=True))

        staged = []
        for queue, entries, already in zip(queues, running, left, strict=True):
            abandoned = [(member, score) for member, score in entries
                         if decide and self._abandoned(now, member, score, beats[member])]
            if abandoned:
                started = started_key(queue)
                moved = self._abandon(started, self.keys.abandoned(started), self.keys.abandoned_total(started),
                                      abandoned).run()
                already += len(moved)
            staged.append((queue, already))
        return staged

    def _abandoned(self, now: float, member: str, score: float, last_beat: bytes | None) -> bool:
        """No heartbeat for ``abandon_after``, or its execution expired, or rq's own deadline passed."""
        if score <= now:
            return True
        if not has_execution(member):
            return False  # an entry without an execution: rq's deadline only
        return last_beat is None or now - float(last_beat) >= self.abandon_after

    def _hand_back(self, queue: Queue, exception_handlers: Sequence[ExceptionHandler],
                   on_abandoned: Callable[[Job], None] | None, death_penalty_class: Any) -> list[str]:
        """rq's own cleanup over the queue's staging set, after interruptible jobs with resumes left were
        queued again from their saved cursor; returns the ids of the jobs handed back."""
        handed: list[str] = []
        staged = self.keys.abandoned(started_key(queue))

        def first(job: Job, *exc_info: Any) -> None:
            """Runs before the worker's handlers; returns None, so rq goes on to them."""
            handed.append(job.id)
            self._free(queue, job, on_abandoned)

        for member, job in self._resumable(queue, staged):
            if self._resume(queue, staged, member, job):
                handed.append(job.id)
                self._free(queue, job, on_abandoned)
        registry = StagedRegistry(queue, staged, death_penalty_class)
        registry.cleanup(exception_handlers=[first, *exception_handlers])
        for job_id in handed:
            logger.warning("crash recovery: job %s of %s had no heartbeat for %g s; handed back",
                           job_id, queue.name, self.abandon_after)
        return handed

    @staticmethod
    def _free(queue: Queue, job: Job, on_abandoned: Callable[[Job], None] | None) -> None:
        """Settle a runtime-charged job's charge (its tenant pays its worker's time from the pop until now)
        and free its tenant slot (``on_abandoned``); logged, never raised."""
        try:
            if isinstance(queue, FairQueue) and queue.charge == "runtime":
                queue.settle(job.id, None)
            if on_abandoned is not None:
                on_abandoned(job)
        except Exception:
            logger.warning("crash recovery: settling or on_abandoned(%s) failed", job.id, exc_info=True)

    # -- interruptible jobs (fair_router.iteration): resumed from their saved cursor -------------------------

    def _resumable(self, queue: Queue, staged: str) -> list[tuple[str, Job]]:
        """The staged jobs that are interruptible, still STARTED, with resumes left (``max_resumes``)."""
        found = []
        for raw in self.connection.zrange(staged, 0, -1):
            member = _text(raw)
            try:
                job = queue.job_class.fetch(job_id_of(member), connection=self.connection, serializer=queue.serializer)
            except NoSuchJobError:
                continue
            if job.get_status(refresh=False) != JobStatus.STARTED or not is_interruptible(job):
                continue
            if int(job.meta.get(RESUMES) or 0) < self.max_resumes:
                found.append((member, job))
        return found

    def _resume(self, queue: Queue, staged: str, member: str, job: Job) -> bool:
        """Queue ``job`` again from its saved cursor and take its entry off the staging set, in one MULTI
        watched on the set (a check that handled it meanwhile wins: False)."""
        job.meta[RESUMES] = int(job.meta.get(RESUMES) or 0) + 1
        with self.connection.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(staged)  # type: ignore[no-untyped-call]
                    if pipe.zscore(staged, member) is None:
                        return False
                    pipe.multi()
                    pipe.zrem(staged, member)
                    requeue(queue, job, pipe)
                    pipe.execute()
                    break
                except WatchError:
                    continue
        logger.warning("crash recovery: interruptible job %s of %s had no heartbeat for %g s; queued again from "
                       "its cursor %r (resume %d of %d)", job.id, queue.name, self.abandon_after,
                       job.meta.get(CURSOR), job.meta[RESUMES], self.max_resumes)
        return True
