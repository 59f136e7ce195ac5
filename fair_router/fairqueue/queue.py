"""FairQueue: an ``rq.Queue`` whose workers take jobs by weighted fair share across tenants.

The design is explained in the docstring of :mod:`fair_router.fairqueue`. This class is rq's Queue (through
the seam, :class:`~fair_router.rq_internals.queue.RqQueueSeam`) with the hooks the seam calls, each delegating
to one collaborator: its configuration (:class:`~fair_router.fairqueue.config.FairConfig`), its fair state
(a :class:`~fair_router.store.fair_store.FairStore`), its pushes and backlog caps
(:class:`~fair_router.fairqueue.pushing.FairPushes`), listings (:mod:`~fair_router.fairqueue.listing`) and
the recovery of popped jobs (:mod:`~fair_router.fairqueue.maintenance`)."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable, Sequence
from typing import Any, cast

from redis import Redis
from redis.client import Pipeline
from rq.job import Job
from rq.utils import as_text

from fair_router.config.settings import Charge, Settings, TiersConfig
from fair_router.controls.tiers import TierBook
from fair_router.core.jobmeta import META_TENANT
from fair_router.core.keys import FairQueueKeys, Keys
from fair_router.fairqueue.config import FairConfig, tenant_key, tenant_of
from fair_router.fairqueue.listing import serving_ids
from fair_router.fairqueue.maintenance import recover_popped
from fair_router.fairqueue.pushing import FairPushes
from fair_router.rq_internals.queue import RqPush, RqQueueSeam
from fair_router.store.cluster import is_cluster, rq_of
from fair_router.fairqueue.scripts import PopResult
from fair_router.store.fair_store import FairStore, RedisFairStore
from fair_router.store.outage import naming_redis
from fair_router.store.scripts import Clock


class FairQueue(RqQueueSeam):
    """An rq Queue with per-tenant FIFOs served by weighted fair share (see :mod:`fair_router.fairqueue`).

    ``FairQueue(name, connection=None, *, prefix=None, tiers=None, settings=None, recover_after=None,
    charge=None, trust_cost=None, tenant_max_bytes=None, clock=None, **rq_options)``.
    """

    recover_after: float = 60.0
    """Seconds a popped job may stay unstarted before maintenance gives it back to the queue."""

    def __init__(self, name: str = "default", connection: Redis | None = None, *args: Any, prefix: str | None = None,
                 tiers: TiersConfig | None = None, settings: Settings | None = None, recover_after: float | None = None,
                 charge: Charge | None = None, trust_cost: bool | None = None, tenant_max_bytes: int | None = None,
                 clock: Clock | None = None, **kwargs: Any) -> None:
        """rq's arguments, plus where the fair state lives (``prefix``), the tiers that give weights
        (``tiers``), what a pop charges its tenant (``charge``: "jobs" or "runtime", see
        :mod:`fair_router.fairqueue`), whether a declared ``fair_cost`` is the charge (``trust_cost``) and the
        longest ``fair_tenant`` id taken (``tenant_max_bytes``, UTF-8 bytes); all default to ``settings``
        (else loaded on first use, as ``--queue-class`` builds queues with rq's arguments only). ``clock``: the
        fair scripts' now (epoch seconds; tests inject one), else Redis server TIME."""
        connection = rq_of(connection) if is_cluster(connection) else connection  # on a cluster: rq's slot owner
        super().__init__(name, connection, *args, **_without_django_rqs(name, kwargs))
        if "{" in name or "}" in name:
            raise ValueError(f"fair queue names cannot hold braces: {name!r}")
        self._config = FairConfig(self.connection, prefix=prefix, tiers=tiers, settings=settings, charge=charge,
                                  trust_cost=trust_cost, tenant_max_bytes=tenant_max_bytes)
        if recover_after is not None:
            self.recover_after = recover_after
        self._clock = clock
        self._store: FairStore | None = None
        self._pushes = FairPushes(name, self._config)
        self.caps = self._pushes.caps  # backlog caps of pushes in flight: FairRouter reads them after its pipelines
        # Popped through this object -> FIFO seq of a fair choice (None: a plain entry); acknowledged with the
        # next pop (an rq worker runs each job to its end before it dequeues again).
        self._handed_out: dict[str, int | None] = {}

    # -- configuration -----------------------------------------------------------------------------------

    def use_settings(self, settings: Settings, prefix: str | None = None) -> None:
        """Take prefix and tiers from ``settings`` (the weighted worker calls this on queues rq built);
        ``prefix``: the queue's fairness mark names another prefix for its fair state."""
        self._config.use_settings(settings, prefix)
        self._store = None

    @property
    def store(self) -> FairStore:
        """This queue's fair state (its keys and scripts), built on first use."""
        if self._store is None:
            store = RedisFairStore(self.connection, self._config.keys.fair_queue(self.key), self._clock)
            store.migrate(self._config.keys.fair_queue_legacy(self.key))  # once per object: an upgrade's jobs
            self._store = store
        return self._store

    @property
    def fair_keys(self) -> FairQueueKeys:
        """This queue's fair keys (all on the cluster slot of rq's list)."""
        return self.store.keys

    @property
    def prefix_keys(self) -> Keys:
        """The key builder of this queue's prefix."""
        return self._config.keys

    @property
    def charge(self) -> Charge:
        """What a pop charges its tenant: "jobs" (1 / weight) or "runtime" (run time / weight)."""
        return self._config.charge

    @property
    def trust_cost(self) -> bool:
        """charge="runtime": settle with a job's declared ``fair_cost`` instead of its measured run time."""
        return self._config.trust_cost

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

    def weight(self, tenant: str | None) -> float:
        """Fair-share weight of ``tenant``: its override, else its tier's ``tiers.weights`` entry (default 1)."""
        return self._config.weight(tenant)

    tenant_key = staticmethod(tenant_key)

    def mark_fair(self, pipeline: Pipeline | None = None) -> None:
        """Record in Redis that this queue is fair (:mod:`fair_router.fairqueue.marks`), once per object."""
        self._pushes.mark(pipeline)

    # -- enqueue: rq's methods with fair_tenant= and fair_cost= ----------------------------------------------

    def enqueue(self, f: Any, *args: Any, fair_tenant: object = None, fair_cost: float | None = None,
                **kwargs: Any) -> Job:
        """rq's ``enqueue``; ``fair_tenant=`` goes to ``job.meta["fair_tenant"]`` (else the meta's own),
        ``fair_cost=`` (seconds the job is expected to run; charge="runtime") to ``job.meta["fair_cost"]``."""
        return super().enqueue(f, *args, **self._config.with_tenant(kwargs, fair_tenant, fair_cost))

    @naming_redis
    def enqueue_call(self, *args: Any, fair_tenant: object = None, fair_cost: float | None = None,
                     **kwargs: Any) -> Job:
        """rq's ``enqueue_call`` with ``fair_tenant=`` and ``fair_cost=``. Raises TenantBacklogFull (nothing
        enqueued) when the job would take its tenant's waiting jobs here past its backlog cap."""
        with self._pushes.new_enqueue():
            return super().enqueue_call(*args, **self._config.with_tenant(kwargs, fair_tenant, fair_cost))

    @naming_redis
    def enqueue_at(self, datetime: Any, f: Any, *args: Any, fair_tenant: object = None, **kwargs: Any) -> Job:
        """rq's ``enqueue_at`` with ``fair_tenant=``. rq's scheduler later pushes the job with a plain
        Queue, so it is served as a plain entry (in list order), not by fair share."""
        return cast(Job, super().enqueue_at(datetime, f, *args, **self._config.with_tenant(kwargs, fair_tenant)))

    def enqueue_in(self, time_delta: Any, func: Any, *args: Any, fair_tenant: object = None, **kwargs: Any) -> Job:
        """rq's ``enqueue_in`` with ``fair_tenant=`` (see :meth:`enqueue_at`)."""
        return super().enqueue_in(time_delta, func, *args, **self._config.with_tenant(kwargs, fair_tenant))

    @naming_redis
    def enqueue_many(self, job_datas: Iterable[Any], pipeline: Pipeline | None = None,
                     group_id: str | None = None) -> list[Job]:
        """rq's ``enqueue_many``: a new enqueue, so backlog caps apply. Jobs without dependencies are pushed
        by one store push per ``PUSH_BATCH`` jobs at the end of rq's pipeline, still in its MULTI."""
        datas = list(job_datas)
        for data in datas:  # every tenant checked before anything is saved
            self.tenant_id((getattr(data, "meta", None) or {}).get(META_TENANT))
        with self._pushes.new_enqueue():
            return super().enqueue_many(datas, pipeline=pipeline, group_id=group_id)

    @naming_redis
    def push_saved(self, job: Job, at_front: bool = False) -> Job:
        """Push ``job``, already saved with this queue as its origin (the router's route call saved it), as a new
        enqueue: one fair push, its backlog cap checked; a refusal deletes the job (TenantBacklogFull)."""
        with self._pushes.new_enqueue(), self.connection.pipeline() as pipe:
            self._pushes.push(self.store, RqPush(job.id, job, at_front, True), pipe, True)
            self.execute_checked(pipe, [job])
        return job

    # -- the seam's push hooks ------------------------------------------------------------------------------

    def may_refuse(self, meta: dict[str, Any] | None) -> bool:
        """Seam hook: a new job's push can be refused when a backlog cap applies to its tenant."""
        return self._pushes.capped(tenant_of(meta, self.tenant_max_bytes, warn=False)) is not None

    def check_room(self, metas: Sequence[dict[str, Any] | None]) -> None:
        """Seam hook: raise TenantBacklogFull if the new jobs with these metas would pass a cap now."""
        self._pushes.check_room(self.store, metas)

    def execute_checked(self, pipe: Pipeline, jobs: list[Job]) -> list[Any]:
        """Seam hook: execute our own enqueue ``pipe``; a push refused by a cap undoes it (TenantBacklogFull)."""
        return self._pushes.execute_checked(self, pipe, jobs)

    def push(self, push: RqPush, pipeline: Pipeline | None) -> None:
        """Seam hook: one fair push, queued on ``pipeline`` (rq's MULTI that saves the job) when given."""
        self._pushes.push(self.store, push, pipeline, self.owns(pipeline))

    def push_many(self, pushes: list[RqPush], pipeline: Pipeline) -> None:
        """Seam hook: an ``enqueue_many`` batch's pushes (all or nothing when one is capped)."""
        self._pushes.push_many(self.store, pushes, pipeline, self.owns(pipeline))

    def pushed_unique(self, job: Job, at_front: bool) -> None:
        """Seam hook: rq's ``unique=True`` script pushed the id itself; the job joins its tenant's FIFO."""
        self.store.push([self._config.entry(job.id, job, at_front, listed=True)])

    def adopt(self, job: Job) -> bool:
        """Seam hook: a job rq 3.0's ``RateLimit`` admitted by a plain push joins its tenant's FIFO (fair order)."""
        if not job.has_rate_limit or tenant_of(job.meta, self.tenant_max_bytes) is None:
            return False
        self._handed_out.pop(job.id, None)
        return bool(self.store.push([self._config.entry(job.id, job, bool(job.enqueue_at_front), from_inflight=True)]))

    # -- pops, parks and holds ----------------------------------------------------------------------------

    def pop_fair(self, given: str = "") -> PopResult:
        """Seam hook: one pop (``given``: an entry BLPOP took off rq's list), acking the jobs handed out before."""
        acks, self._handed_out = list(self._handed_out), {}
        result = self.store.pop(given, acks, self._config.charge == "runtime", self._config.claim_ms)
        if result.job_id is not None:
            self._handed_out[result.job_id] = result.seq
        return result

    def pop_job_id(self) -> str | None:
        """The next job id by fair share (non-blocking)."""
        return self.pop_fair().job_id

    @property
    def wake_key(self) -> str:
        """Seam hook: the list workers block on while only parked tenants' jobs wait."""
        return self.store.keys.wake

    def park(self, job: Job, tenant: str, seconds: float, limit: int | None = None, at_ms: int | None = None) -> None:
        """``job``'s start was refused: put it back (to its FIFO place when this object's latest pop chose it,
        that step refunded; else to the front) and skip the tenant until :meth:`unpark` or for ``seconds`` (or
        until ``at_ms``, a rate's next token, epoch ms). ``limit``: its limit (0 none, None not known)."""
        until_ms = int(((self._clock or time.time)() + seconds) * 1000) if at_ms is None else at_ms
        seq = self._handed_out.pop(job.id, None)
        self.store.park(job.id, tenant_key(tenant), self.weight(tenant), until_ms, seq, limit, exact=at_ms is not None)

    def unpark(self, tenant: str, pipeline: Pipeline | None = None, job_id: str = "", limit: int | None = None) -> Any:
        """One of ``tenant``'s slots was released (by ``job_id``; ``limit``: 0 none, None not known): below its
        limit it may be served here again (one worker is woken)."""
        return self.store.unpark(tenant_key(tenant), job_id, limit, pipeline)

    def hold(self, tenant: str, until_ms: int, pipeline: Pipeline | None = None, paced: bool = False) -> Any:
        """Pops skip ``tenant`` until ``until_ms`` (epoch ms) or an :meth:`unpark`; ``paced``: its own rate
        allows its next start then, and pops park it after each take until the next report."""
        return self.store.hold(tenant_key(tenant), until_ms, paced, pipeline)

    # -- maintenance ------------------------------------------------------------------------------------

    def settle(self, job_id: str, seconds: float | None, pipeline: Pipeline | None = None) -> Any:
        """charge="runtime": the job ran ``seconds`` (None: its worker died; from its pop until now); replaces
        its pop's estimate with the real cost (a no-op with none pending), on ``pipeline`` when given."""
        return self.store.settle(job_id, seconds, self.trust_cost, pipeline)

    def recover(self, older_than: float | None = None) -> list[str]:
        """Seam hook (rq's maintenance): give back jobs popped more than ``older_than`` (default
        ``recover_after``) seconds ago that never started; returns their ids."""
        return recover_popped(self, self.store, self._config, self.recover_after if older_than is None else older_than)

    # -- rq's view: listings and removals -----------------------------------------------------------------

    def get_job_ids(self, offset: int = 0, length: int = -1) -> list[str]:
        """The waiting jobs' ids (exactly rq's list), in the order pops would serve them if nothing more
        were pushed (:mod:`fair_router.fairqueue.listing`)."""
        return serving_ids(self.store, self.charge == "runtime", offset, length)

    def get_job_position(self, job_or_id: Job | str) -> int | None:
        """The job's place in :meth:`get_job_ids` (serving order), None when it is not waiting here."""
        job_id = job_or_id.id if isinstance(job_or_id, Job) else job_or_id
        ids = self.get_job_ids()
        return ids.index(job_id) if job_id in ids else None

    def remove(self, job_or_id: Job | str, pipeline: Pipeline | None = None) -> Any:
        """Take the job out of rq's list and of the fair state, in one script (rq's LREM result)."""
        return self.store.remove(job_or_id.id if isinstance(job_or_id, Job) else job_or_id, pipeline)

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
    """rq's Queue arguments: without the ``commit_mode`` and ``autocommit`` django-rq's ``get_queue`` passes (always
    both) when its ``QUEUE_CLASS`` is FairQueue, which rq's Queue would drop in silence. Saying so, once per
    call site (Python's warning filter), naming the fix."""
    if "commit_mode" not in kwargs and "autocommit" not in kwargs:
        return kwargs
    warnings.warn(
        f"FairQueue {name!r} was built by django-rq (QUEUE_CLASS): django-rq's commit_mode does not apply to it, "
        "so its enqueues inside a transaction happen at once. Leave QUEUE_CLASS unset (weighted workers serve "
        "queues marked fair whatever their class) and enqueue with @fair_job(fair=True) or "
        "django_rq.get_queue(name, queue_class=fair_router.fairqueue.combined.fair_class_of(DjangoRQ)), which "
        "keep it (docs/django.md)", RuntimeWarning, stacklevel=4)
    return {key: value for key, value in kwargs.items() if key not in ("commit_mode", "autocommit")}
