"""How jobs join a FairQueue: the fair push of each id rq puts on the list (one store push, or one per
``PUSH_BATCH`` jobs of an ``enqueue_many``), the queue's fairness mark, and backlog caps
(:mod:`fair_router.controls.backlog`): a new enqueue that would take its tenant's waiting jobs past the cap is
refused whole. :class:`FairPushes` is a collaborator of :class:`~fair_router.fairqueue.queue.FairQueue`, whose
push hooks (called by :class:`~fair_router.rq_internals.queue.RqQueueSeam`) hand it the store to push into."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from redis.client import Pipeline
from redis.exceptions import ResponseError
from rq import Queue
from rq.job import Job

from fair_router.controls.backlog import BacklogCaps, Capped, TenantBacklogFull, execute, refused_entry, withdraw
from fair_router.fairqueue.config import FairConfig, tenant_key, tenant_of
from fair_router.fairqueue.marks import FairnessMarks
from fair_router.rq_internals.queue import RqPush
from fair_router.store.fair_store import FairStore
from fair_router.store.luascript import execute_loaded
from fair_router.store.replicas import ReplicaWait

PUSH_BATCH = 1000
"""Jobs per fair_push.lua call in ``enqueue_many``: one call stays a few ms of Redis time."""


class FairPushes:
    """The pushes of one FairQueue: their entries, the queue's fairness mark (once per object) and the backlog
    caps of the new enqueue under way (:meth:`new_enqueue`; rq's retries, requeues and dependents are never
    capped)."""

    def __init__(self, name: str, config: FairConfig) -> None:
        self.name, self.config = name, config
        self.caps = BacklogCaps(name)  # backlog caps of the pushes in flight (fair_router.controls.backlog)
        self._capping = False  # set while a new enqueue (not a retry, requeue or dependent) is under way
        self._marked = False

    @contextmanager
    def new_enqueue(self) -> Iterator[None]:
        """A new enqueue is under way inside: its pushes are capped."""
        capping, self._capping = self._capping, True
        try:
            yield
        finally:
            self._capping = capping

    def mark(self, pipeline: Pipeline | None = None) -> None:
        """Record that the queue is fair (its fairness mark, :mod:`fair_router.fairqueue.marks`), once per
        object, on ``pipeline`` when given."""
        if not self._marked:
            self._marked = True
            FairnessMarks(self.config.connection, self.config.keys.prefix).mark([self.name], pipeline)

    def capped(self, tenant: str | None) -> Capped | None:
        """``tenant``'s backlog cap here, when one applies to the enqueue under way."""
        if not self._capping or tenant is None:
            return None
        cap = self.config.max_backlog(tenant)
        return None if cap is None else Capped(tenant, cap)

    def check_room(self, store: FairStore, metas: Sequence[dict[str, Any] | None]) -> None:
        """Raise TenantBacklogFull if the new jobs with these metas would pass a cap now (a read)."""
        wanted: dict[str, tuple[Capped, int]] = {}
        max_bytes = self.config.tenant_max_bytes
        for capped in filter(None, (self.capped(tenant_of(meta, max_bytes, warn=False)) for meta in metas)):
            name = tenant_key(capped.tenant)
            wanted[name] = (capped, wanted.get(name, (capped, 0))[1] + 1)
        waiting = store.waiting(list(wanted))
        over = [name for name, (capped, jobs) in wanted.items() if waiting.get(name, 0) + jobs > capped.cap]
        if over:  # before refusing: rq may have removed some of their jobs (lua/lib/recount.lua)
            waiting = {**waiting, **dict.fromkeys(over, 0), **store.recount(over)}
        self.caps.precheck(waiting, wanted)

    def execute_checked(self, queue: Queue, pipe: Pipeline, jobs: list[Job]) -> list[Any]:
        """Execute ``pipe`` (our own, holding the enqueue of ``jobs`` into ``queue``); if a push hit a backlog
        cap, delete the saved jobs and raise TenantBacklogFull, so nothing of the enqueue stays behind."""
        with ReplicaWait.of(self.config.settings).confirming(pipe) as confirmation:  # settings replicas_to_wait
            results = execute_loaded(pipe, execute)
        refused = self.caps.refusal(pipe, results)
        if refused is not None:
            withdraw(queue.connection, [(queue, job) for job in jobs])
            raise refused
        confirmation.check([job.id for job in jobs])
        return results

    def _capped_push(self, push: RqPush) -> Capped | None:
        """The cap of a push: only a new enqueue's is capped (not rq's retries, requeues, dependents)."""
        if not push.new or push.job is None:
            return None
        return self.capped(tenant_of(push.job.meta, self.config.tenant_max_bytes, warn=False))

    def push(self, store: FairStore, push: RqPush, pipeline: Pipeline | None, loaded: bool) -> None:
        """One fair push, queued on ``pipeline`` when given (EVALSHA if ``loaded``: a pipeline of ours)."""
        capped = self._capped_push(push)
        entry = self.config.entry(push.job_id, push.job, push.at_front, capped.cap if capped else 0)
        self.mark(pipeline)
        if pipeline is not None:
            store.push([entry], pipeline, loaded)
            self.caps.record(pipeline, [capped])
            return
        try:
            store.push([entry])
        except ResponseError as error:
            if capped is None or refused_entry(error) is None:
                raise
            raise TenantBacklogFull(capped.tenant, self.name, capped.cap) from None

    def push_many(self, store: FairStore, pushes: list[RqPush], pipeline: Pipeline, loaded: bool) -> None:
        """An ``enqueue_many`` batch's pushes, ``PUSH_BATCH`` per call; a batch with a capped job is pushed by
        one call: all or nothing."""
        caps = [self._capped_push(push) for push in pushes]
        entries = [self.config.entry(push.job_id, push.job, push.at_front, capped.cap if capped else 0)
                   for push, capped in zip(pushes, caps, strict=True)]
        self.mark(pipeline)
        size = max(1, len(entries)) if any(caps) else PUSH_BATCH
        for start in range(0, len(entries), size):
            store.push(entries[start:start + size], pipeline, loaded)
            self.caps.record(pipeline, caps[start:start + size])
