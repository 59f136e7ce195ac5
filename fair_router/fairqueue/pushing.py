"""What a FairQueue's pushes need besides the push itself: each job's entry, the queue's fairness mark, the batches
of an ``enqueue_many``, and backlog caps (a new enqueue past its tenant's cap is refused whole)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import ResponseError
from rq import Queue
from rq.job import Job

from fair_router.controls.backlog import BacklogCaps, Capped, TenantBacklogFull, execute, refused_entry, withdraw
from fair_router.controls.fairstate import TENANT_FIELD, record_org, record_waiting
from fair_router.core.keys import FairQueueKeys, encode
from fair_router.core.tenancy import stored_org, stored_tenant
from fair_router.fairqueue.config import FairConfig, tenant_key, tenant_of
from fair_router.fairqueue.marks import FairnessMarks
from fair_router.fairqueue.scripts import FairPushScript, FairRecountScript, PushEntry
from fair_router.rq_internals.queue import RqPush
from fair_router.store.luascript import execute_loaded
from fair_router.store.replicas import ReplicaWait

PUSH_BATCH = 1000
"""Jobs per fair_push.lua call in ``enqueue_many``: one call stays a few ms of Redis time."""


class FairPushes:
    """The pushes of one FairQueue: their entries, the queue's fairness mark (once per object) and the backlog caps of
    the new enqueue under way (:meth:`new_enqueue`; rq's retries, requeues and dependents are never capped)."""

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

    def checked(self, queue: Any, kwargs: dict[str, Any], tenant: object, cost: float | None,
                org: object) -> dict[str, Any]:
        """``kwargs`` of a new enqueue into ``queue`` with its tenant, cost and org in the meta
        (:meth:`FairConfig.with_tenant`), its org checked against its tenant's waiting jobs (:func:`check_org`)."""
        checked = self.config.with_tenant(kwargs, tenant, cost, org)
        check_org(queue, checked.get("meta"))
        return checked

    def capped(self, meta: dict[str, Any] | None) -> Capped | None:
        """The backlog cap here of the tenant of a job with ``meta`` (under its org), when one applies to the enqueue
        under way."""
        tenant = tenant_of(meta, self.config.tenant_max_bytes, warn=False)
        if not self._capping or tenant is None:
            return None
        cap = self.config.max_backlog(tenant, self.config.org_of(meta, tenant))
        return None if cap is None else Capped(tenant, cap)

    def check_room(self, keys: FairQueueKeys, metas: Sequence[dict[str, Any] | None]) -> None:
        """Raise TenantBacklogFull if the new jobs with these metas would pass a cap now (a read)."""
        wanted: dict[str, tuple[Capped, int]] = {}
        for capped in filter(None, (self.capped(meta) for meta in metas)):
            name = tenant_key(capped.tenant)
            wanted[name] = (capped, wanted.get(name, (capped, 0))[1] + 1)
        counts = waiting(self.config.connection, keys, list(wanted))
        over = [name for name, (capped, jobs) in wanted.items() if counts.get(name, 0) + jobs > capped.cap]
        if over:  # before refusing: rq may have removed some of their jobs (lua/lib/recount.lua)
            recounted = zip(over, FairRecountScript(self.config.connection)(keys, over).run(), strict=True)
            counts = {**counts, **dict(recounted)}
        self.caps.precheck(counts, wanted)

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

    def entry(self, push: RqPush) -> tuple[PushEntry, Capped | None]:
        """``push``'s fair_push.lua entry, and its backlog cap (only a new enqueue's: not rq's retries,
        requeues or dependents)."""
        capped = None
        if push.new and push.job is not None:
            capped = self.capped(push.job.meta)
        return self.config.entry(push.job_id, push.job, push.at_front, capped.cap if capped else 0), capped

    def run(self, script: FairPushScript, keys: FairQueueKeys, entry: PushEntry, capped: Capped | None) -> None:
        """Push ``entry`` now; a refusal by its cap is TenantBacklogFull."""
        try:
            script(keys, [entry]).run()
        except ResponseError as error:
            if capped is None or refused_entry(error) is None:
                raise
            raise TenantBacklogFull(capped.tenant, self.name, capped.cap) from None

    def adopt(self, script: FairPushScript, keys: FairQueueKeys, job: Job) -> bool:
        """A tenant's job rq pushed as a plain id (``rq requeue``, the scheduler, a retry, a ``RateLimit`` admission),
        popped: it joins its tenant's FIFO rather than being served first-come. A refused push (its tenant waits
        under another org) leaves it plain. True if it joined."""
        entry = self.config.entry(job.id, job, bool(job.enqueue_at_front), from_inflight=True)
        try:
            return bool(script(keys, [entry]).run())
        except ResponseError:
            return False

    def push_many(self, script: FairPushScript, keys: FairQueueKeys, pushes: list[RqPush], pipeline: Pipeline,
                  loaded: bool) -> None:
        """An ``enqueue_many`` batch's pushes, ``PUSH_BATCH`` per call; a batch with a capped job is pushed by
        one call: all or nothing."""
        pairs = [self.entry(push) for push in pushes]
        entries, caps = [entry for entry, _ in pairs], [capped for _, capped in pairs]
        self.mark(pipeline)
        size = max(1, len(entries)) if any(caps) else PUSH_BATCH
        for start in range(0, len(entries), size):
            call = script(keys, entries[start:start + size])
            call.queue_ours(pipeline) if loaded else call.queue(pipeline)
            self.caps.record(pipeline, caps[start:start + size])


def waiting(connection: Redis, keys: FairQueueKeys, tenants: Sequence[str]) -> dict[str, int]:
    """How many jobs each of ``tenants`` (encoded) has waiting in the fair queue of ``keys`` (none: left out)."""
    if not tenants:
        return {}
    records = connection.hmget(keys.state, [TENANT_FIELD + tenant for tenant in tenants])
    return {tenant: count for tenant, count in zip(tenants, map(record_waiting, records), strict=True) if count > 0}


class TenantInOtherOrg(ValueError):
    """A tenant with jobs waiting in a FairQueue under one organisation (or none) enqueued under another: nothing is
    enqueued. A tenant changes org once none of its jobs waits there (docs/fair-queue.md, Organisations)."""

    def __init__(self, tenant: str, org: str | None, other: str | None, queue: str) -> None:
        self.tenant, self.org, self.other, self.queue = tenant, org, other, queue
        super().__init__(f"tenant {tenant!r} has jobs waiting in fair queue {queue!r} under org {org!r}: it cannot "
                         f"be enqueued under org {other!r} until they are served (None: no org)")


def check_org(queue: Any, meta: dict[str, Any] | None) -> None:
    """Raise TenantInOtherOrg before anything is saved when the new job's org (``meta``, checked already) is not the
    one its tenant's waiting jobs have in ``queue`` (a FairQueue). Only jobs with an org are read for this; the push
    script refuses the other way round (lua/fair_push.lua)."""
    org, tenant = stored_org(meta), stored_tenant(meta)
    if org is None or tenant is None:
        return
    record = queue.connection.hget(queue.fair_keys.state, TENANT_FIELD + encode(tenant))
    has = record_org(record)
    if record is not None and has != encode(org):
        raise TenantInOtherOrg(tenant, None if has is None else unquote(has), org, queue.name)
