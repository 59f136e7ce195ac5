"""FairQueue: an ``rq.Queue`` whose workers take jobs by weighted fair share across tenants (docs/fair-queue.md);
each hook of rq's seam is one call of a fair script on the queue's keys."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from redis import Redis
from redis.client import Pipeline
from rq.job import Job

from fair_router.config.sections import Charge, TiersConfig
from fair_router.controls.backlog import Capped
from fair_router.controls.fairstate import FairHoldScript, FairUnparkScript
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import FairQueueKeys, Keys
from fair_router.core.text import as_text
from fair_router.fairqueue.config import FairConfig, tenant_key, tenant_of
from fair_router.fairqueue.listing import serving_ids
from fair_router.fairqueue.maintenance import recover_popped
from fair_router.fairqueue.pushing import FairPushes
from fair_router.fairqueue.scripts import (
    FairMigrateScript,
    FairParkScript,
    FairPopScript,
    FairPushScript,
    FairRemoveScript,
    FairSettleScript,
)
from fair_router.rq_internals.queue import PopResult, RqPush, RqQueueSeam
from fair_router.store.cluster import is_cluster, rq_of
from fair_router.store.luascript import LuaScript
from fair_router.store.outage import naming_redis
from fair_router.store.scripts import Clock, now_arg

_S = TypeVar("_S", bound=LuaScript[Any])

if TYPE_CHECKING:
    from fair_router.config.settings import Settings


class FairQueue(RqQueueSeam):
    """An rq Queue with per-tenant FIFOs served by weighted fair share (docs/fair-queue.md)."""

    recover_after: float = 60.0
    """Seconds a popped job may stay unstarted before maintenance gives it back to the queue."""

    def __init__(self, name: str = "default", connection: Redis | None = None, *args: Any, prefix: str | None = None,
                 tiers: TiersConfig | None = None, settings: Settings | None = None, recover_after: float | None = None,
                 charge: Charge | None = None, trust_cost: bool | None = None, tenant_max_bytes: int | None = None,
                 clock: Clock | None = None, **kwargs: Any) -> None:
        """rq's arguments, plus the fair settings (``prefix``, ``tiers``, ``charge``, ``trust_cost``,
        ``tenant_max_bytes``: docs/fair-queue.md), each defaulting to ``settings`` (else loaded on first use: rq's
        ``--queue-class`` passes rq's arguments only); ``clock``: the scripts' now, else Redis server TIME."""
        connection = rq_of(connection) if is_cluster(connection) else connection  # on a cluster: rq's slot owner
        super().__init__(name, connection, *args, **_without_django_rqs(name, kwargs))
        if "{" in name or "}" in name:
            raise ValueError(f"fair queue names cannot hold braces: {name!r}")
        self._config = FairConfig(self.connection, prefix=prefix, tiers=tiers, settings=settings, charge=charge,
                                  trust_cost=trust_cost, tenant_max_bytes=tenant_max_bytes)
        if recover_after is not None:
            self.recover_after = recover_after
        self._clock = clock
        self._keys: FairQueueKeys | None = None
        self._scripts: dict[type[LuaScript[Any]], LuaScript[Any]] = {}
        self._pushes = FairPushes(name, self._config)
        self.caps = self._pushes.caps  # backlog caps of pushes in flight: FairRouter reads them after its pipelines
        # Popped through this object -> FIFO seq of a fair choice (None: a plain entry); acknowledged with the
        # next pop (an rq worker runs each job to its end before it dequeues again).
        self._handed_out: dict[str, int | None] = {}

    def use_settings(self, settings: Settings, prefix: str | None = None) -> None:
        """Take prefix and tiers from ``settings`` (the weighted worker calls this on queues rq built);
        ``prefix``: the queue's fairness mark names another prefix for its fair state."""
        self._config.use_settings(settings, prefix)
        self._keys = None

    @property
    def fair_keys(self) -> FairQueueKeys:
        """This queue's fair keys (on the cluster slot of rq's list). Their first use moves state an earlier
        layout left (``Keys.fair_queue_legacy``), so an upgrade strands no waiting job."""
        if self._keys is None:
            keys = self._config.keys.fair_queue(self.key)
            self.fair_script(FairMigrateScript)(keys, self._config.keys.fair_queue_legacy(self.key)).run()
            self._keys = keys
        return self._keys

    def fair_script(self, kind: type[_S]) -> _S:
        """This queue's wrapper of fair script ``kind``, built (read, assembled, registered) once per queue."""
        script = self._scripts.get(kind)
        if script is None:
            script = self._scripts[kind] = kind(self.connection)
        return cast(_S, script)

    @property
    def prefix_keys(self) -> Keys:
        """The key builder of this queue's prefix."""
        return self._config.keys

    @property
    def charge(self) -> Charge:
        """What a pop charges its tenant: "jobs" (1 / weight) or "runtime" (run time / weight)."""
        return self._config.charge

    @property
    def tenant_max_bytes(self) -> int:
        """The longest tenant id this queue takes (bytes of UTF-8): the ``tenant_max_bytes`` setting."""
        return self._config.tenant_max_bytes

    @property
    def tier_book(self) -> TierBook:
        """Tenant -> tier (cached), for the weight of each push."""
        return self._config.tier_book

    def tenant_id(self, tenant: object) -> str | None:
        """A ``fair_tenant`` as this queue stores it (None: no tenant); TypeError / InvalidTenant otherwise."""
        return self._config.tenant_id(tenant)

    def weight(self, tenant: str | None, meta: dict[str, Any] | None = None) -> float:
        """Fair-share weight of ``tenant`` (of a job with ``meta``: under its org): its override, else its tier's."""
        return self._config.weight(tenant, self._config.org_of(meta, tenant) if meta else None)

    tenant_key = staticmethod(tenant_key)

    # -- enqueue: rq's methods with fair_tenant= and fair_cost= ----------------------------------------------

    def enqueue(self, f: Any, *args: Any, fair_tenant: object = None, fair_cost: float | None = None,
                fair_org: object = None, **kwargs: Any) -> Job:
        """rq's ``enqueue`` with ``fair_tenant=``, ``fair_org=`` and ``fair_cost=`` (:meth:`enqueue_call`)."""
        return super().enqueue(f, *args, **self._config.with_tenant(kwargs, fair_tenant, fair_cost, fair_org))

    @naming_redis
    def enqueue_call(self, *args: Any, fair_tenant: object = None, fair_cost: float | None = None,
                     fair_org: object = None, **kwargs: Any) -> Job:
        """rq's ``enqueue_call``; ``fair_tenant=``, ``fair_org=`` (its org), ``fair_cost=`` (seconds: charge="runtime")
        go to ``job.meta``. Raises TenantBacklogFull past a backlog cap, TenantInOtherOrg (nothing enqueued)."""
        with self._pushes.new_enqueue():
            return super().enqueue_call(*args, **self._pushes.checked(self, kwargs, fair_tenant, fair_cost, fair_org))

    @naming_redis
    def enqueue_at(self, datetime: Any, f: Any, *args: Any, fair_tenant: object = None, **kwargs: Any) -> Job:
        """rq's ``enqueue_at`` (and ``enqueue_in``) with ``fair_tenant=`` and ``fair_org=``. rq's scheduler pushes
        the job with a plain Queue later, so it is served as a plain entry (in list order), not by fair share."""
        checked = self._config.with_tenant(kwargs, fair_tenant, org=kwargs.pop("fair_org", None))
        return cast(Job, super().enqueue_at(datetime, f, *args, **checked))

    @naming_redis
    def enqueue_many(self, job_datas: Iterable[Any], pipeline: Pipeline | None = None,
                     group_id: str | None = None) -> list[Job]:
        """rq's ``enqueue_many``: a new enqueue, so backlog caps apply (pushes: :meth:`push_many`)."""
        datas = list(job_datas)
        for data in datas:  # every tenant and org checked before anything is saved
            self._config.with_tenant({"meta": getattr(data, "meta", None)}, None)
        with self._pushes.new_enqueue():
            return super().enqueue_many(datas, pipeline=pipeline, group_id=group_id)

    def push_marked(self, job: Job, at_front: bool, pipeline: Pipeline) -> Capped | None:
        """Queue on ``pipeline`` (the router's MULTI, after its route.lua call) the push of ``job`` as a new enqueue,
        which adds it only if route.lua chose this queue (it marked the id inflight here); its backlog cap."""
        with self._pushes.new_enqueue():
            entry, capped = self._pushes.entry(RqPush(job.id, job, at_front, True))
        self._pushes.mark(pipeline)
        self.fair_script(FairPushScript)(self.fair_keys, [entry._replace(from_inflight=True)]).queue_ours(pipeline)
        return capped

    # -- the seam's push hooks ------------------------------------------------------------------------------

    def may_refuse(self, meta: dict[str, Any] | None) -> bool:
        """Seam hook: a new job's push can be refused when a backlog cap applies to its tenant."""
        return self._pushes.capped(meta) is not None

    def check_room(self, metas: Sequence[dict[str, Any] | None]) -> None:
        """Seam hook: raise TenantBacklogFull if the new jobs with these metas would pass a cap now."""
        self._pushes.check_room(self.fair_keys, metas)

    def execute_checked(self, pipe: Pipeline, jobs: list[Job]) -> list[Any]:
        """Seam hook: execute our own enqueue ``pipe``; a push refused by a cap undoes it (TenantBacklogFull)."""
        return self._pushes.execute_checked(self, pipe, jobs)

    def push(self, push: RqPush, pipeline: Pipeline | None) -> None:
        """Seam hook: one fair_push.lua call, queued on ``pipeline`` (rq's MULTI that saves the job) when given;
        run now, a refusal by the tenant's backlog cap raises TenantBacklogFull."""
        entry, capped = self._pushes.entry(push)
        self._pushes.mark(pipeline)
        if pipeline is None:
            return self._pushes.run(self.fair_script(FairPushScript), self.fair_keys, entry, capped)
        call = self.fair_script(FairPushScript)(self.fair_keys, [entry])
        call.queue_ours(pipeline) if self.owns(pipeline) else call.queue(pipeline)
        self._pushes.caps.record(pipeline, [capped])

    def push_many(self, pushes: list[RqPush], pipeline: Pipeline) -> None:
        """Seam hook: an ``enqueue_many`` batch's pushes (all or nothing when one is capped)."""
        self._pushes.push_many(self.fair_script(FairPushScript), self.fair_keys, pushes, pipeline, self.owns(pipeline))

    def pushed_unique(self, job: Job, at_front: bool) -> None:
        """Seam hook: rq's ``unique=True`` script pushed the id itself; the job joins its tenant's FIFO."""
        self.fair_script(FairPushScript)(self.fair_keys, [self._config.entry(job.id, job, at_front, listed=True)]).run()

    def adopt(self, job: Job) -> bool:
        """Seam hook: a tenant's job rq pushed as a plain id joins its FIFO when a pop meets it (pushing.py)."""
        if tenant_of(job.meta, self.tenant_max_bytes) is None:
            return False
        self._handed_out.pop(job.id, None)
        return self._pushes.adopt(self.fair_script(FairPushScript), self.fair_keys, job)

    # -- pops, parks, holds and maintenance ----------------------------------------------------------------

    def pop_fair(self, given: str = "") -> PopResult:
        """Seam hook: one pop (``given``: an entry BLPOP took off rq's list), acking the jobs handed out before."""
        acks, self._handed_out = list(self._handed_out), {}
        result = self.fair_script(FairPopScript)(self.fair_keys, given, acks, now_arg(self._clock),
                                                 self._config.charge == "runtime", self._config.claim_ms).run()
        if result.job_id is not None:
            self._handed_out[result.job_id] = result.seq
        return result

    def pop_job_id(self) -> str | None:
        """The next job id by fair share (non-blocking)."""
        return self.pop_fair().job_id

    @property
    def wake_key(self) -> str:
        """Seam hook: the list workers block on while only parked tenants' jobs wait."""
        return self.fair_keys.wake

    def park(self, job: Job, tenant: str, seconds: float, limit: int | None = None, at_ms: int | None = None,
             org_limit: int | None = None, org_full: bool = False) -> None:
        """A refused start: ``job`` back, its tenant (``org_full``: its org too) skipped till ``seconds``/``at_ms``."""
        until_ms = int(((self._clock or time.time)() + seconds) * 1000) if at_ms is None else at_ms
        self.fair_script(FairParkScript)(self.fair_keys, job.id, tenant_key(tenant), self.weight(tenant, job.meta),
                                         until_ms, self._handed_out.pop(job.id, None), limit, at_ms is not None,
                                         self._config.org_arg(job.meta, tenant), org_limit, org_full).run()

    def unpark(self, tenant: str, pipeline: Pipeline | None = None, job_id: str = "", limit: int | None = None,
               org: str | None = None, org_limit: int | None = None, ours: bool = False) -> Any:
        """A slot of ``tenant`` (or org ``org``) was released: below its limit it may be served (fairstate.py)."""
        return self.fair_script(FairUnparkScript)(self.fair_keys, tenant_key(tenant), job_id, limit,
                                                  now_arg(self._clock), org, org_limit).run_or_queue(pipeline, ours)

    def hold(self, tenant: str, until_ms: int, pipeline: Pipeline | None = None, paced: bool = False) -> Any:
        """Pops skip ``tenant`` until ``until_ms`` (epoch ms) or an :meth:`unpark`; ``paced``: its own rate
        allows its next start then, and pops park it after each take until the next report."""
        return self.fair_script(FairHoldScript)(self.fair_keys, tenant_key(tenant), until_ms, paced,
                                                now_arg(self._clock)).run_or_queue(pipeline)

    def settle(self, job_id: str, seconds: float | None, pipeline: Pipeline | None = None) -> Any:
        """charge="runtime": the job ran ``seconds`` (None: its worker died; from its pop until now); replaces
        its pop's estimate with the real cost (a no-op with none pending), on ``pipeline`` when given."""
        return self.fair_script(FairSettleScript)(self.fair_keys, job_id, seconds, self._config.trust_cost,
                                                  now_arg(self._clock)).run_or_queue(pipeline)

    def recover(self, older_than: float | None = None) -> list[str]:
        """Seam hook (rq's maintenance): give back jobs popped ``older_than`` seconds ago and never started."""
        grace = self.recover_after if older_than is None else older_than
        return recover_popped(self, self.fair_keys, self._config, grace, self._clock)

    # -- rq's view: listings and removals -----------------------------------------------------------------

    def get_job_ids(self, offset: int = 0, length: int = -1) -> list[str]:
        """The waiting jobs' ids (exactly rq's list) in the order pops would serve them (fairqueue/listing.py)."""
        return serving_ids(self.connection, self.fair_keys, self.charge == "runtime", offset, length)

    def get_job_position(self, job_or_id: Job | str) -> int | None:
        """The job's place in :meth:`get_job_ids` (serving order), None when it is not waiting here."""
        job_id = job_or_id.id if isinstance(job_or_id, Job) else job_or_id
        ids = self.get_job_ids()
        return ids.index(job_id) if job_id in ids else None

    def remove(self, job_or_id: Job | str, pipeline: Pipeline | None = None) -> Any:
        """Take the job out of rq's list and of the fair state, in one script (rq's LREM result)."""
        job_id = job_or_id.id if isinstance(job_or_id, Job) else job_or_id
        return self.fair_script(FairRemoveScript)(self.fair_keys, job_id).run_or_queue(pipeline)

    def empty(self) -> Any:
        """rq's ``empty`` (deletes every listed job, which is every waiting job), then the fair keys."""
        removed = super().empty()  # type: ignore[no-untyped-call]
        self.connection.delete(*self.fair_keys.all())
        return removed

    def delete(self, delete_jobs: bool = True) -> None:
        """rq's ``delete``; the fair keys go too."""
        super().delete(delete_jobs=delete_jobs)
        self.connection.delete(*self.fair_keys.all())

    def compact(self) -> None:
        """Drop ids whose job is gone, each with :meth:`remove` (rq's version empties and rebuilds the list,
        leaving a moment without entries for the fair state)."""
        for raw in cast(list[bytes], self.connection.lrange(self.key, 0, -1)):
            if not self.job_class.exists(as_text(raw), self.connection):
                self.remove(as_text(raw))


def _without_django_rqs(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """rq's Queue arguments without the ``commit_mode`` and ``autocommit`` django-rq's ``get_queue`` passes to a
    FairQueue ``QUEUE_CLASS`` (rq's Queue would drop them in silence); warned once per call site, naming the fix."""
    if "commit_mode" not in kwargs and "autocommit" not in kwargs:
        return kwargs
    warnings.warn(
        f"FairQueue {name!r} was built by django-rq (QUEUE_CLASS): django-rq's commit_mode does not apply to it, "
        "so its enqueues inside a transaction happen at once. Leave QUEUE_CLASS unset (weighted workers serve "
        "queues marked fair whatever their class) and enqueue with @fair_job(fair=True) or "
        "django_rq.get_queue(name, queue_class=fair_router.fairqueue.combined.fair_class_of(DjangoRQ)), which "
        "keep it (docs/django.md)", RuntimeWarning, stacklevel=4)
    return {key: value for key, value in kwargs.items() if key not in ("commit_mode", "autocommit")}
