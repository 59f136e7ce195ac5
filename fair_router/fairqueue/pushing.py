"""How jobs join a FairQueue: rq's enqueue methods with ``fair_tenant=`` / ``fair_cost=``, the fair push of
each id rq puts on the list (one ``lua/fair_push.lua`` call, or one per ``PUSH_BATCH`` jobs of an
``enqueue_many``), and backlog caps (:mod:`fair_router.controls.backlog`): a new enqueue that would take
its tenant's waiting jobs past the cap is refused whole. rq's internal enqueue path reaches these through
the push hooks of :class:`~fair_router.rq_internals.queue.RqQueueSeam`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, cast

from redis.client import Pipeline
from redis.exceptions import ResponseError
from rq.job import Job

from fair_router.config.settings import validated
from fair_router.controls.backlog import Capped, TenantBacklogFull, execute, refused_entry, withdraw
from fair_router.core.jobmeta import META_COST, META_TENANT
from fair_router.fairqueue.base import COST, FairQueueBase, tenant_of
from fair_router.rq_internals.queue import RqPush
from fair_router.store.fair_scripts import FairPushScript
from fair_router.store.luascript import execute_loaded
from fair_router.store.outage import naming_redis

PUSH_BATCH = 1000
"""Jobs per fair_push.lua call in ``enqueue_many``: one call stays a few ms of Redis time."""


class FairPushing(FairQueueBase):
    """The enqueue side of a FairQueue: rq's enqueue methods, the fair pushes, backlog caps."""

    def enqueue(self, f: Any, *args: Any, fair_tenant: object = None, fair_cost: float | None = None,
                **kwargs: Any) -> Job:
        """rq's ``enqueue``; ``fair_tenant=`` goes to ``job.meta["fair_tenant"]`` (else the meta's own),
        ``fair_cost=`` (seconds the job is expected to run; charge="runtime") to ``job.meta["fair_cost"]``."""
        return super().enqueue(f, *args, **self._with_tenant(kwargs, fair_tenant, fair_cost))

    @naming_redis
    def enqueue_call(self, *args: Any, fair_tenant: object = None, fair_cost: float | None = None,
                     **kwargs: Any) -> Job:
        """rq's ``enqueue_call`` with ``fair_tenant=`` and ``fair_cost=``. Raises TenantBacklogFull (nothing
        enqueued) when the job would take its tenant's waiting jobs here past its backlog cap."""
        capping, self._capping = self._capping, True
        try:
            return super().enqueue_call(*args, **self._with_tenant(kwargs, fair_tenant, fair_cost))
        finally:
            self._capping = capping

    @naming_redis
    def enqueue_at(self, datetime: Any, f: Any, *args: Any, fair_tenant: object = None, **kwargs: Any) -> Job:
        """rq's ``enqueue_at`` with ``fair_tenant=``. rq's scheduler later pushes the job with a plain
        Queue, so it is served as a plain entry (in list order), not by fair share."""
        return cast(Job, super().enqueue_at(datetime, f, *args, **self._with_tenant(kwargs, fair_tenant)))

    def enqueue_in(self, time_delta: Any, func: Any, *args: Any, fair_tenant: object = None, **kwargs: Any) -> Job:
        """rq's ``enqueue_in`` with ``fair_tenant=`` (see :meth:`enqueue_at`)."""
        return super().enqueue_in(time_delta, func, *args, **self._with_tenant(kwargs, fair_tenant))

    @naming_redis
    def enqueue_many(
        self, job_datas: Iterable[Any], pipeline: Pipeline | None = None, group_id: str | None = None
    ) -> list[Job]:
        """rq's ``enqueue_many``: a new enqueue, so backlog caps apply. Jobs without dependencies are pushed
        by one script call per ``PUSH_BATCH`` jobs at the end of rq's pipeline, still in the MULTI that saves
        them, instead of one call each (packing 13 keys per call is most of a fair push's client cost)."""
        datas = list(job_datas)
        for data in datas:  # every tenant checked before anything is saved
            self.tenant_id((getattr(data, "meta", None) or {}).get(META_TENANT))
        capping, self._capping = self._capping, True
        try:
            return super().enqueue_many(datas, pipeline=pipeline, group_id=group_id)
        finally:
            self._capping = capping

    # -- backlog caps --------------------------------------------------------------------------------

    def capped(self, tenant: object) -> Capped | None:
        """``tenant``'s backlog cap here (its ``max_backlog`` override, else its tier's), when one applies to
        the enqueue under way."""
        if not self._capping or tenant is None:
            return None
        cap = self.tier_book.profile(str(tenant)).max_backlog
        return None if cap is None else Capped(str(tenant), cap)

    def may_refuse(self, meta: dict[str, Any] | None) -> bool:
        """Seam hook: a new job's push can be refused when a backlog cap applies to its tenant."""
        return self.capped(tenant_of(meta)) is not None

    def check_room(self, metas: Sequence[dict[str, Any] | None]) -> None:
        """Seam hook: raise TenantBacklogFull if the new jobs with these metas would pass a cap now."""
        wanted: dict[str, tuple[Capped, int]] = {}
        for capped in filter(None, (self.capped(tenant_of(meta)) for meta in metas)):
            name = self.tenant_key(capped.tenant)
            wanted[name] = (capped, wanted.get(name, (capped, 0))[1] + 1)
        self.caps.precheck(self.connection, self.fair_keys.backlog, wanted)

    def execute_checked(self, pipe: Pipeline, jobs: list[Job]) -> list[Any]:
        """Execute ``pipe`` (our own, holding the enqueue of ``jobs``); if a push hit a backlog cap, delete the
        saved jobs and raise TenantBacklogFull, so nothing of the enqueue stays behind."""
        results = execute_loaded(pipe, execute)
        refused = self.caps.refusal(pipe, results)
        if refused is not None:
            withdraw(self.connection, [(self, job) for job in jobs])
            raise refused
        return results

    # -- the pushes (seam hooks) ---------------------------------------------------------------------

    def _capped_push(self, push: RqPush) -> Capped | None:
        """The cap of a push: only a new enqueue's is capped (not rq's retries, requeues, dependents)."""
        return self.capped(tenant_of(push.job.meta)) if push.new and push.job is not None else None

    def push(self, push: RqPush, pipeline: Pipeline | None) -> None:
        """Seam hook: one fair push (the id onto rq's list and into its tenant's FIFO), queued on
        ``pipeline`` (rq's MULTI that saves the job) when given."""
        capped = self._capped_push(push)
        entry = self._entry(push.job_id, push.job, push.at_front, capped.cap if capped else 0)
        call = self._script(FairPushScript)(self.fair_keys, [entry])
        self.mark_fair(pipeline)
        if pipeline is not None:
            # On a pipeline of ours an EVALSHA (40 bytes, not the script's 12 KB); on a caller's, EVAL.
            call.queue_loaded(pipeline) if self.owns(pipeline) else call.queue(pipeline)
            self.caps.record(pipeline, [capped])
            return
        try:
            call.run()
        except ResponseError as error:
            if capped is None or refused_entry(error) is None:
                raise
            raise TenantBacklogFull(capped.tenant, self.name, capped.cap) from None

    def push_many(self, pushes: list[RqPush], pipeline: Pipeline) -> None:
        """Seam hook: an ``enqueue_many`` batch's pushes, ``PUSH_BATCH`` per call. A batch with a capped job
        is pushed by one call: all or nothing."""
        caps = [self._capped_push(push) for push in pushes]
        entries = [self._entry(push.job_id, push.job, push.at_front, capped.cap if capped else 0)
                   for push, capped in zip(pushes, caps, strict=True)]
        self.mark_fair(pipeline)
        size = max(1, len(entries)) if any(caps) else PUSH_BATCH
        for start in range(0, len(entries), size):
            call = self._script(FairPushScript)(self.fair_keys, entries[start:start + size])
            call.queue_loaded(pipeline) if self.owns(pipeline) else call.queue(pipeline)
            self.caps.record(pipeline, caps[start:start + size])

    def adopt(self, job: Job) -> bool:
        """Seam hook: rq 3.0's ``RateLimit`` admits a job with a script of its own (a plain push onto rq's
        list, from the enqueuer, a worker's slot release, cleanup or cancel), so it reaches the pop as a plain
        entry. A rate-limited job with a tenant joins its tenant's FIFO here instead of being served in list
        order, so fair order holds across admission. One script call; the pop is then made again."""
        if not job.has_rate_limit or tenant_of(job.meta) is None:
            return False
        self._handed_out.pop(job.id, None)
        entry = self._entry(job.id, job, bool(job.enqueue_at_front), from_inflight=True)
        return bool(self._script(FairPushScript)(self.fair_keys, [entry]).run())

    def pushed_unique(self, job: Job, at_front: bool) -> None:
        """Seam hook: rq's ``unique=True`` script pushed the id itself; the job joins its tenant's FIFO in
        this second call (until then it is a plain entry)."""
        self._script(FairPushScript)(self.fair_keys, [self._entry(job.id, job, at_front, listed=True)]).run()

    def _with_tenant(self, kwargs: dict[str, Any], tenant: object, cost: float | None = None) -> dict[str, Any]:
        """rq's keywords with ``fair_tenant=`` (else the meta's own, checked too) and ``fair_cost=`` put in the
        meta; a tenant that is not a str or int id raises before anything is written."""
        meta = {**(kwargs.get("meta") or {})}
        checked = self.tenant_id(tenant if tenant is not None else meta.get(META_TENANT))
        if checked is not None:
            meta[META_TENANT] = checked
        if cost is not None:
            meta[META_COST] = validated(COST, cost, "fair_cost=")
        return {**kwargs, "meta": meta} if meta else kwargs
