"""FairQueue: an ``rq.Queue`` whose workers take jobs by weighted fair share across tenants.

``FairQueue("default", connection=r).enqueue(f, *args, fair_tenant="acme")`` keeps each tenant's jobs
in FIFO order, and a pop serves the tenant whose turn it is, so one tenant's 100k-job flood delays a
small tenant's job by about one job per active tenant instead of by 100k jobs.

Scheduler: stride scheduling, not deficit round robin
    Every active tenant (one with a waiting job) has a *pass*; a pop serves the smallest pass and adds
    ``1 / weight``. With a sorted set that is O(log n) in active tenants per pop, whatever the weights
    (DRR needs a quantum loop per round, and with fractional weights and unit-cost jobs it degenerates
    into stride anyway, only burstier: a weight-5 tenant gets 5 jobs in a row where stride interleaves
    them). Equal weights give round robin. Weights come from the tenant's tier (``tiers.weights``,
    default 1), written with each push. The *virtual time* is the pass of the last served tenant. A
    tenant that becomes active starts at ``max(virtual time, the pass it had when it went idle)``:
    idle time earns nothing (it cannot come back with a low pass and monopolise the queue), and a
    tenant that just took its turn cannot skip the wait by draining and refilling.

rq's list stays the truth
    rq's own ``rq:queue:<name>`` list holds exactly one entry per waiting job, the job's own id, at every
    moment: a fair push RPUSHes the id as rq does, and a fair pop takes the served job's own id off the
    list. So ``count`` (LLEN), ``rq info``, rq-dashboard and every plain ``Queue`` rq builds internally
    see the true backlog, and rq's own removals (``Job.cancel``, ``Job.delete``, registry cleanups, which
    LREM the id through a plain Queue) take exactly that job out. Idle workers BLPOP rq's list keys as
    usual (no polling; a push wakes one at once).

    Fair jobs are also *members* with a place in their tenant's FIFO. A pop looks at the list head: an
    id that is not a member was pushed by rq's internals with a plain Queue (the scheduler, registry
    requeues, dependents of another queue class) and is served as it is; a member's turn goes to the
    stride choice, and the head entry takes the chosen id's slot on the list (one LSET at the position
    the member recorded, so no other entry moves and no entry is compared). A member whose id is no
    longer on the list was removed by rq behind our back: the pop drops it when the scheduler reaches it.
    All fair keys carry the hash tag ``{rq:queue:<name>}``, the cluster slot of rq's untagged list key,
    so each script touches one slot.

Fair share of worker time (``charge="runtime"``)
    With ``charge="jobs"`` (the default) every pop costs its tenant ``1 / weight``: tenants get equal
    shares of *jobs*, and a tenant whose jobs run 10x longer gets 10x the worker time. With
    ``charge="runtime"`` a pop costs the job's run time / weight. The pop cannot know it yet, nor read rq's
    job hash (another cluster slot), so the push records the job's function (and a declared
    ``fair_cost=``, if any) in ``costs``, and the pop charges an *estimate*: the declared cost, else the
    tenant's recent mean run time of that function (``runtimes``, an exponential mean), else any
    tenant's, else any job's here. The charge is kept in ``charged`` until the job ends; then the worker
    *settles* it (fair_settle.lua, queued on rq's own after-job pipeline: no round trip of its own), moving
    the tenant's pass by (real cost - estimate) / weight. The real cost is the measured run time; a
    declared cost only when the queue trusts declared costs (``trust_cost``), so a wrong ``fair_cost``
    dodges nothing. A job whose worker died is settled by crash recovery with the time from its pop to its
    recovery; a parked job's charge is refunded (it did not run). Idle tenants bank nothing: the start tag
    is ``max(virtual time, kept pass)`` as for jobs, and an overcharge settled while a tenant is idle at the
    virtual time is dropped.

Listings
    ``get_job_ids`` (and ``jobs``, ``get_jobs``, job positions) replay the pops on one snapshot
    (:mod:`fair_router.fairqueue.serving_order`): the exact waiting set, in the order the jobs would be served if
    nothing more were pushed.

Claim-time concurrency limits
    A pop cannot read lease keys (other slots). When the weighted worker's slot is refused for a job
    of a FairQueue, it calls :meth:`FairQueue.park` (one script): the job goes back onto the list and to
    its place in its tenant's FIFO, and the tenant is *parked*: pops skip it, so other tenants are not
    blocked and no job is snoozed through the scheduler. A fair pop's step of the tenant's pass is taken
    back (the job did not run), so a tenant at its limit loses no turn per refusal. A worker that
    releases one of the tenant's slots unparks it in its fair queues. A park also ends by itself after
    ``lease_ttl``: a slot can free in a queue this worker does not serve, and a lease never outlives that
    bound. While only parked tenants' jobs wait, a worker blocks on the queue's *wake* list instead of
    rq's list (which would hand it the same parked job again at once): pushes of other tenants and
    unparks wake it; the wait is capped at the first park end and at ``STALLED_POLL`` seconds, so an id
    rq's internals push meanwhile is seen within that.

Popped but not started
    The pop records the job in ``inflight`` (pop time). The popping queue object acknowledges its
    previous jobs with its next pop (an rq worker runs each job to its end before it dequeues again),
    so ``inflight`` holds only jobs in the hands of workers. rq's maintenance, which every worker runs at
    start and every ``maintenance_interval``, calls our ``intermediate_queue.cleanup``: a job inflight
    for longer than ``recover_after`` seconds that is still *queued* and not in the StartedJobRegistry
    lost its worker between pop and start, and goes back to the front of its tenant's FIFO. (rq's own
    intermediate list is not used: it lives on another cluster slot and rq fails, not reruns, what it
    finds stuck there.)

Limits of compatibility, by design
    ``enqueue(..., unique=True)`` uses rq's own atomic script, which pushes the id; the job then joins its
    tenant's FIFO in a second call (until then it is a plain entry). Jobs the scheduler moves in
    (``enqueue_at/in``, retries with an interval) arrive plain: they are served in list order.

Known gaps (not by design)
    - A refused job's park uses its old FIFO place. If its tenant went idle and was refilled before
      the park lands, and a ``remove`` left a hole at exactly that place, the job lands among the
      newer jobs instead of at the front.
    - Recovery orders jobs of one tenant by ``enqueued_at``, which puts an ``at_front`` job after
      older ones.
    - Taking a fair choice that is not the list head costs an LINDEX and an LSET, O(list length / entries
      per listpack node): about 20-40 µs of Redis time per pop at 100,000 waiting jobs. rq's own LREM or
      LPUSH on the list shifts recorded positions; the next pops look around them, and one O(n) reindex
      resets them when the drift has grown past 128 entries.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, TypeVar, cast

from pydantic import TypeAdapter, ValidationError
from redis import Redis
from redis.client import Pipeline
from redis.exceptions import ResponseError
from rq import Queue
from rq.exceptions import DequeueTimeout, NoSuchJobError
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, JobStatus
from rq.utils import as_text, backend_class

from fair_router.config.settings import Charge, Settings, TiersConfig, load_settings, validated
from fair_router.config.validation import Prefix, Seconds
from fair_router.controls.backlog import BacklogCaps, Capped, TenantBacklogFull, execute, refused_entry, withdraw
from fair_router.fairqueue.serving_order import FairSnapshot, serving_order
from fair_router.observe.events import count_event
from fair_router.routing.jobmeta import META_COST, META_SYSTEM, META_TENANT
from fair_router.routing.tiers import TierBook
from fair_router.store.keys import FairQueueKeys, Keys, encode
from fair_router.store.luascript import LuaScript
from fair_router.store.scripts import (
    FairParkScript,
    FairPopScript,
    FairPushScript,
    FairRemoveScript,
    FairSettleScript,
    FairUnparkScript,
    PopKind,
    PopResult,
    PushEntry,
)

_S = TypeVar("_S", bound=LuaScript[Any])

NO_TENANT = "#none"
"""Encoded pseudo-tenant of jobs without a tenant. ``encode`` never yields it: '#' only starts the
64-hex-digit digest form."""

PUSH_BATCH = 1000
"""Jobs per fair_push.lua call in ``enqueue_many``: one call stays a few ms of Redis time."""

_CHARGE: TypeAdapter[Charge] = TypeAdapter(Charge)
_COST: TypeAdapter[float] = TypeAdapter(Seconds)
_PREFIX: TypeAdapter[str] = TypeAdapter(Prefix)

FIRST_ESTIMATE = 0.01
"""charge="runtime": seconds a pop charges while nothing has been measured on the queue (fair_pop.lua's)."""

STALLED_POLL = 1.0
"""Seconds a worker blocks on a queue where only parked tenants' jobs wait before it looks again (an id
rq's internals push there wakes nobody)."""


class FairIntermediateQueue(IntermediateQueue):
    """rq's intermediate-queue maintenance hook, extended to recover fair jobs whose worker died."""

    def cleanup(self, worker: Any, queue: Queue) -> None:
        super().cleanup(worker, queue)
        if isinstance(queue, FairQueue):
            queue.recover()


class FairQueue(Queue):
    """An rq Queue with per-tenant FIFOs served by weighted fair share (see the module docstring)."""

    recover_after: float = 60.0
    """Seconds a popped job may stay unstarted before maintenance gives it back to the queue."""

    def __init__(
        self,
        name: str = "default",
        connection: Redis | None = None,
        *args: Any,
        prefix: str | None = None,
        tiers: TiersConfig | None = None,
        settings: Settings | None = None,
        recover_after: float | None = None,
        charge: Charge | None = None,
        trust_cost: bool | None = None,
        **kwargs: Any,
    ) -> None:
        """rq's arguments, plus where the fair state lives (``prefix``), the tiers that give weights
        (``tiers``), what a pop charges its tenant (``charge``: "jobs" or "runtime", see the module
        docstring) and whether a declared ``fair_cost`` is the charge (``trust_cost``); all default to
        ``settings`` (else loaded on first use, as ``--queue-class`` builds queues with rq's arguments
        only)."""
        super().__init__(name, connection, *args, **kwargs)
        if "{" in name or "}" in name:
            raise ValueError(f"fair queue names cannot hold braces: {name!r}")
        self._settings = settings
        self._prefix = validated(_PREFIX, prefix, "FairQueue(prefix=...)") if prefix else (
            settings.prefix if settings else None)
        self._tiers_config = tiers or (settings.tiers if settings else None)
        if recover_after is not None:
            self.recover_after = recover_after
        self._charge: Charge | None = None
        if charge is not None:
            checked: Charge = validated(_CHARGE, charge, "FairQueue(charge=...)")
            self._charge = checked
        self._trust_cost = trust_cost
        self._fair_keys: FairQueueKeys | None = None
        self._tier_book: TierBook | None = None
        self._scripts: dict[type[LuaScript[Any]], LuaScript[Any]] = {}
        self._enqueuing: Job | None = None  # the job rq's _enqueue_job is about to push (see push_job_id)
        self._batches: dict[int, list[PushEntry]] = {}  # id(pipeline) -> enqueue_many's pushes
        # Popped through this object -> FIFO seq of a fair choice (None: a plain entry); acknowledged with
        # the next pop.
        self._handed_out: dict[str, int | None] = {}
        self.caps = BacklogCaps(name)  # backlog caps of the pushes in flight (fair_router.controls.backlog)
        self._capping = False  # set while a new enqueue (not a retry, requeue or dependent) is under way

    # -- configuration, bound lazily ----------------------------------------------------------------

    def use_settings(self, settings: Settings) -> None:
        """Take prefix and tiers from ``settings`` (the weighted worker calls this on queues rq built)."""
        self._settings = settings
        self._prefix, self._tiers_config = settings.prefix, settings.tiers
        self._fair_keys = self._tier_book = None

    @property
    def charge(self) -> Charge:
        """What a pop charges its tenant: "jobs" (1 / weight) or "runtime" (run time / weight)."""
        return self._charge or self._loaded().fair_charge

    @property
    def trust_cost(self) -> bool:
        """charge="runtime": settle with a job's declared ``fair_cost`` instead of its measured run time."""
        return self._loaded().fair_trust_cost if self._trust_cost is None else self._trust_cost

    def _loaded(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings()
        return self._settings

    @property
    def fair_keys(self) -> FairQueueKeys:
        """This queue's fair keys (all on the cluster slot of rq's list)."""
        if self._fair_keys is None:
            prefix = self._prefix or self._loaded().prefix
            self._fair_keys = Keys(prefix).fair_queue(self.key)
        return self._fair_keys

    @property
    def tier_book(self) -> TierBook:
        """Tenant -> tier (cached), for the weight of each push."""
        if self._tier_book is None:
            tiers = self._tiers_config or self._loaded().tiers
            prefix = self._prefix or self._loaded().prefix
            self._tier_book = TierBook(self.connection, Keys(prefix), tiers)
        return self._tier_book

    def _script(self, kind: type[_S]) -> _S:
        """This queue's wrapper of one script, built (script read, assembled, registered) on first use."""
        script = self._scripts.get(kind)
        if script is None:
            script = self._scripts[kind] = kind(self.connection)
        return cast(_S, script)

    def weight(self, tenant: str | None) -> float:
        """Fair-share weight of ``tenant``: its override, else its tier's ``tiers.weights`` entry (default 1)."""
        if tenant is None:
            return 1.0
        return self.tier_book.profile(tenant).weight

    def capped(self, tenant: object) -> Capped | None:
        """``tenant``'s backlog cap here (its ``max_backlog`` override, else its tier's), when one applies to
        the enqueue under way."""
        if not self._capping or tenant is None:
            return None
        cap = self.tier_book.profile(str(tenant)).max_backlog
        return None if cap is None else Capped(str(tenant), cap)

    @staticmethod
    def tenant_key(tenant: str | None) -> str:
        """The tenant as the fair structure names it: encoded (no ':' or braces), or the no-tenant id."""
        return NO_TENANT if tenant is None else encode(tenant)

    def _entry(self, job_id: str, job: Job | None, at_front: bool, cap: int = 0, **flags: bool) -> PushEntry:
        tenant = None if job is None else _tenant_of(job)
        name = None if tenant is None else str(tenant)
        func, declared = "", None
        if job is not None and self.charge == "runtime":  # what the pop needs to estimate the job's run time
            func, declared = job.func_name or "", _declared_cost(job)
        return PushEntry(job_id, self.tenant_key(name), self.weight(name), at_front, cap=cap, **flags, func=func,
                         declared=declared)

    # -- pushing -------------------------------------------------------------------------------------

    def enqueue(self, f: Any, *args: Any, fair_tenant: object = None, fair_cost: float | None = None,
                **kwargs: Any) -> Job:
        """rq's ``enqueue``; ``fair_tenant=`` goes to ``job.meta["fair_tenant"]`` (else the meta's own),
        ``fair_cost=`` (seconds the job is expected to run; charge="runtime") to ``job.meta["fair_cost"]``."""
        return super().enqueue(f, *args, **_with_tenant(kwargs, fair_tenant, fair_cost))

    def enqueue_call(self, *args: Any, fair_tenant: object = None, fair_cost: float | None = None,
                     **kwargs: Any) -> Job:
        """rq's ``enqueue_call`` with ``fair_tenant=`` and ``fair_cost=``. Raises TenantBacklogFull (nothing
        enqueued) when the job would take its tenant's waiting jobs here past its backlog cap."""
        capping, self._capping = self._capping, True
        try:
            return super().enqueue_call(*args, **_with_tenant(kwargs, fair_tenant, fair_cost))
        finally:
            self._capping = capping

    def enqueue_at(self, datetime: Any, f: Any, *args: Any, fair_tenant: object = None, **kwargs: Any) -> Job:
        """rq's ``enqueue_at`` with ``fair_tenant=``. rq's scheduler later pushes the job with a plain
        Queue, so it is served as a plain entry (in list order), not by fair share."""
        return cast(Job, super().enqueue_at(datetime, f, *args, **_with_tenant(kwargs, fair_tenant)))

    def enqueue_in(self, time_delta: Any, func: Any, *args: Any, fair_tenant: object = None, **kwargs: Any) -> Job:
        """rq's ``enqueue_in`` with ``fair_tenant=`` (see :meth:`enqueue_at`)."""
        return super().enqueue_in(time_delta, func, *args, **_with_tenant(kwargs, fair_tenant))

    def _enqueue_job(
        self, job: Job, pipeline: Pipeline | None = None, at_front: bool = False, unique: bool = False
    ) -> Job:
        """Every rq enqueue path of this queue (enqueue, enqueue_many, dependents, the worker's retries)
        passes here with the Job: note it, so that :meth:`push_job_id` needs no round trip to read the
        tenant back. rq's ``unique=True`` path pushes the id with its own script instead: the job then
        joins its tenant's FIFO in a second call."""
        capped = self.capped(_tenant_of(job)) if self.is_async else None
        in_batch = pipeline is not None and id(pipeline) in self._batches  # enqueue_many checked the batch
        if capped is not None and not in_batch and (pipeline is not None or unique):  # not ours to run: check first
            self.caps.precheck(self.connection, self.fair_keys.backlog, {self.tenant_key(capped.tenant): (capped, 1)})
        own = self.connection.pipeline() if capped is not None and pipeline is None and not unique else None
        self._enqueuing = job
        try:
            job = super()._enqueue_job(job, pipeline=own or pipeline, at_front=at_front, unique=unique)
        finally:
            self._enqueuing = None
        if own is not None:
            self.execute_checked(own, [job])
        if unique and self.is_async:
            self._script(FairPushScript)(self.fair_keys, [self._entry(job.id, job, bool(at_front), listed=True)]).run()
        return job

    def push_job_id(self, job_id: str, pipeline: Pipeline | None = None, at_front: bool = False) -> None:
        """Where rq puts an id on the list. Overriding it, rather than ``_enqueue_async_job``, keeps rq's
        own job saving and its MULTI: the fair push joins rq's pipeline, so the job is saved and queued
        atomically as in rq."""
        job = self._enqueuing
        enqueuing = job is not None and job.id == job_id  # a new enqueue (backlog caps apply), not rq's own push
        if not enqueuing:  # pushed without _enqueue_job: read the tenant from the job
            try:
                job = self.job_class.fetch(job_id, connection=self.connection, serializer=self.serializer)
            except NoSuchJobError:
                job = None
        capped = self.capped(_tenant_of(job)) if enqueuing and job is not None else None
        # rq's enqueue_many may pass at_front=None
        entry = self._entry(job_id, job, bool(at_front), capped.cap if capped else 0)
        batch = None if pipeline is None else self._batches.get(id(pipeline))
        if batch is not None:
            batch.append(entry)  # enqueue_many pushes the whole batch at the end of its pipeline
            return
        push = self._script(FairPushScript)(self.fair_keys, [entry])
        if pipeline is not None:
            push.queue(pipeline)
            self.caps.record(pipeline, [capped])
        else:
            try:
                push.run()
            except ResponseError as error:
                if capped is None or refused_entry(error) is None:
                    raise
                raise TenantBacklogFull(capped.tenant, self.name, capped.cap) from None

    def execute_checked(self, pipe: Pipeline, jobs: list[Job]) -> list[Any]:
        """Execute ``pipe`` (our own, holding the enqueue of ``jobs``); if a push hit a backlog cap, delete the
        saved jobs and raise TenantBacklogFull, so nothing of the enqueue stays behind."""
        results = execute(pipe)
        refused = self.caps.refusal(pipe, results)
        if refused is not None:
            withdraw(self.connection, [(self, job) for job in jobs])
            raise refused
        return results

    def enqueue_many(
        self, job_datas: Iterable[Any], pipeline: Pipeline | None = None, group_id: str | None = None
    ) -> list[Job]:
        """rq's ``enqueue_many``. Jobs without dependencies are pushed by one script call per
        ``PUSH_BATCH`` jobs at the end of rq's pipeline, still in the MULTI that saves them, instead of
        one call each (packing 13 keys per call is most of a fair push's client cost)."""
        datas = list(job_datas)
        capping, self._capping = self._capping, True
        try:
            if any(data.depends_on for data in datas):  # rq runs those in several pipeline steps: push one by one
                return super().enqueue_many(datas, pipeline=pipeline, group_id=group_id)
            # Backlog caps: the capped jobs of the batch, and (a caller's pipeline) a check before anything is queued.
            caps = [self.capped(_tenant_of_meta(data.meta)) for data in datas if not data.depends_on]
            if pipeline is not None:
                wanted: dict[str, tuple[Capped, int]] = {}
                for capped in filter(None, caps):
                    name = self.tenant_key(capped.tenant)
                    wanted[name] = (capped, wanted.get(name, (capped, 0))[1] + 1)
                self.caps.precheck(self.connection, self.fair_keys.backlog, wanted)
            pipe = pipeline if pipeline is not None else self.connection.pipeline()
            batch: list[PushEntry] = []
            self._batches[id(pipe)] = batch
            try:
                jobs = super().enqueue_many(datas, pipeline=pipe, group_id=group_id)
            finally:
                # Also when rq raised midway: the jobs it saved into a caller's pipeline get their pushes, as
                # with rq's own push per job. A batch with a capped job is pushed by one call: all or nothing.
                del self._batches[id(pipe)]
                size = max(1, len(batch)) if any(caps) else PUSH_BATCH
                for start in range(0, len(batch), size):
                    self._script(FairPushScript)(self.fair_keys, batch[start:start + size]).queue(pipe)
                    self.caps.record(pipe, caps[start:start + size])
        finally:
            self._capping = capping
        if pipeline is None:
            self.execute_checked(pipe, jobs)
        return jobs

    # -- popping -------------------------------------------------------------------------------------

    def pop_fair(self, given: str = "") -> PopResult:
        """One pop script call. ``given``: an entry already taken off rq's list by BLPOP."""
        acks, self._handed_out = list(self._handed_out), {}
        result = self._script(FairPopScript)(self.fair_keys, given, acks, "", self.charge == "runtime").run()
        if result.job_id is not None:
            self._handed_out[result.job_id] = result.seq
        return result

    def pop_job_id(self) -> str | None:
        """The next job id by fair share (non-blocking)."""
        return self.pop_fair().job_id

    @classmethod
    def dequeue_any(
        cls,
        queues: Iterable[Queue],
        timeout: int | None,
        connection: Redis,
        job_class: type[Job] | None = None,
        serializer: Any = None,
        death_penalty_class: Any = None,
    ) -> tuple[Job, Queue] | None:
        """rq's contract: the first job of the queues in the given order, blocking up to ``timeout``
        seconds (None: return None at once; 0 is refused, as rq does) and raising DequeueTimeout when it
        runs out. Fair queues pop through their script, plain ones with LPOP, so a worker may mix them;
        the wait is one BLPOP over every queue's list (a stalled fair queue's wake list instead, capped
        at the first park end), and a fair queue's popped entry is handed to its script as ``given``."""
        if timeout == 0:
            raise ValueError("RQ does not support indefinite timeouts. Please pick a timeout value > 0")
        queues = list(queues)
        job_cls: type[Job] = backend_class(cls, "job_class", override=job_class)
        deadline = None if timeout is None else time.monotonic() + timeout
        by_key = {queue.key: queue for queue in queues}
        while True:
            wake_ms, stalled = -1, set()
            for queue in queues:
                while True:
                    result = _pop(queue, connection, "")
                    if result.kind in (PopKind.EMPTY, PopKind.STALLED):
                        if result.kind == PopKind.STALLED:
                            stalled.add(queue.key)
                        if result.wake_ms > 0:
                            wake_ms = result.wake_ms if wake_ms < 0 else min(wake_ms, result.wake_ms)
                        break
                    job = _fetch(job_cls, cast(str, result.job_id), queue, connection, serializer)
                    if job is not None:
                        return job, queue
            if deadline is None:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise DequeueTimeout(timeout, list(by_key))
            block = left
            if wake_ms > 0:
                block = min(block, max(0.05, wake_ms / 1000 - time.time()))
            if stalled:
                block = min(block, STALLED_POLL)
            keys = [cast(FairQueue, by_key[key]).fair_keys.wake if key in stalled else key for key in by_key]
            popped = connection.blpop(keys, max(0.01, block))
            if popped is None:
                if block >= left:
                    raise DequeueTimeout(timeout, list(by_key))
                continue
            key, entry = as_text(popped[0]), as_text(popped[1])
            if key not in by_key:
                continue  # a wake-up: look again
            queue = by_key[key]
            result = _pop(queue, connection, entry)
            if result.job_id is not None:
                job = _fetch(job_cls, result.job_id, queue, connection, serializer)
                if job is not None:
                    return job, queue

    # -- limits --------------------------------------------------------------------------------------

    def park(self, job: Job, tenant: str, seconds: float) -> None:
        """``tenant`` is at its concurrency limit: put ``job`` back in its FIFO and skip the tenant until
        :meth:`unpark` or for ``seconds`` at most. When ``job`` came from this object's latest pop by a fair
        choice, it goes back to its own place (jobs refused at once keep their order) and the tenant's pass
        gets that pop's step back: a refusal costs it no turn. Otherwise it goes to the front."""
        until_ms = int((time.time() + seconds) * 1000)
        seq = self._handed_out.pop(job.id, None)
        self._script(FairParkScript)(
            self.fair_keys, job.id, self.tenant_key(tenant), self.weight(tenant), until_ms, seq
        ).run()

    def unpark(self, tenant: str, pipeline: Pipeline | None = None) -> Any:
        """One of ``tenant``'s slots was released: it may be served here again (one worker is woken)."""
        return self._script(FairUnparkScript)(self.fair_keys, self.tenant_key(tenant)).run_or_queue(pipeline)

    # -- runtime charging ----------------------------------------------------------------------------

    def settle(self, job_id: str, seconds: float | None, pipeline: Pipeline | None = None) -> Any:
        """charge="runtime": the job ran ``seconds`` (None: its worker died; charged from its pop until now).
        Replaces its pop's estimated charge with the real cost; a no-op for a job with no charge pending.
        The weighted workers queue this on rq's own after-job pipeline (``pipeline``)."""
        return self._script(FairSettleScript)(self.fair_keys, job_id, seconds, self.trust_cost).run_or_queue(pipeline)

    # -- recovery ------------------------------------------------------------------------------------

    @property
    def intermediate_queue(self) -> IntermediateQueue:
        """rq's maintenance calls ``queue.intermediate_queue.cleanup``: ours also runs :meth:`recover`."""
        return FairIntermediateQueue(self.key, connection=self.connection)

    def recover(self, older_than: float | None = None) -> list[str]:
        """Give back jobs popped more than ``older_than`` (default ``recover_after``) seconds ago that never
        started (their worker died between pop and start). Returns their ids."""
        grace = self.recover_after if older_than is None else older_than
        cutoff = int((time.time() - grace) * 1000)
        keys = self.fair_keys
        popped = cast(list[tuple[bytes, float]],
                      self.connection.zrangebyscore(keys.inflight, "-inf", cutoff, withscores=True))
        if not popped:
            return []
        started = set(self.started_job_registry.get_job_ids(cleanup=False))
        lost, recovered, done = [], [], []
        for raw, popped_ms in popped:
            job_id = as_text(raw)
            try:
                job = self.job_class.fetch(job_id, connection=self.connection, serializer=self.serializer)
            except NoSuchJobError:
                done.append(job_id)
                continue
            requeued = job.enqueued_at is not None and job.enqueued_at.timestamp() * 1000 > popped_ms
            if (job.get_status(refresh=False) != JobStatus.QUEUED or job_id in started or job.origin != self.name
                    or requeued):
                # It started (rq handles it from there), moved on, or rq already queued it again since the
                # pop (its maintenance retried a started job whose worker died): no second entry.
                done.append(job_id)
                continue
            lost.append(job)
        # Each goes back to the front of its tenant's FIFO: the newest first, so a tenant's jobs keep their order.
        lost.sort(key=lambda job: job.enqueued_at.timestamp() if job.enqueued_at else 0.0, reverse=True)
        for job in lost:
            self.settle(job.id, None)  # its worker held it from the pop until now (charge="runtime")
            if self._script(FairPushScript)(keys, [self._entry(job.id, job, True, from_inflight=True)]).run():
                recovered.append(job.id)
        if done:
            self.connection.zrem(keys.inflight, *done)
        if recovered:
            count_event(self.connection, Keys(self._prefix or self._loaded().prefix), "recovered", self.name,
                        len(recovered))
        return recovered

    # -- what rq's tools read ------------------------------------------------------------------------

    def get_job_ids(self, offset: int = 0, length: int = -1) -> list[str]:
        """The waiting jobs' ids (exactly rq's list), in the order pops would serve them if nothing more
        were pushed (:func:`fair_router.fairqueue.serving_order.serving_order`)."""
        keys = self.fair_keys
        with self.connection.pipeline() as pipe:  # MULTI: one consistent snapshot
            pipe.lrange(self.key, 0, -1)
            pipe.hgetall(keys.members)
            pipe.zrange(keys.active, 0, -1, withscores=True)
            pipe.zrange(keys.kept, 0, -1, withscores=True)
            pipe.hgetall(keys.weights)
            pipe.hget(keys.state, "vtime")
            pipe.hgetall(keys.costs)
            pipe.hgetall(keys.runtimes)
            listed, members, active, kept, weights, vtime, costs, runtimes = pipe.execute()
        snapshot = FairSnapshot(
            listed=[as_text(raw) for raw in listed],
            members={as_text(k): as_text(v) for k, v in members.items()},
            active={as_text(k): float(v) for k, v in active},
            kept={as_text(k): float(v) for k, v in kept},
            weights={as_text(k): float(v) for k, v in weights.items()},
            vtime=float(vtime or 0),
            costs=_estimates(members, costs, runtimes) if self.charge == "runtime" else {},
        )
        ids = serving_order(snapshot)
        end = None if length < 0 else offset + length
        return ids[offset:end]

    def get_job_position(self, job_or_id: Job | str) -> int | None:
        """The job's place in :meth:`get_job_ids` (serving order), None when it is not waiting here."""
        job_id = job_or_id.id if isinstance(job_or_id, Job) else job_or_id
        ids = self.get_job_ids()
        return ids.index(job_id) if job_id in ids else None

    def remove(self, job_or_id: Job | str, pipeline: Pipeline | None = None) -> Any:
        """Take the job out of rq's list and of the fair structure, in one script (rq's LREM result)."""
        job_id = job_or_id.id if isinstance(job_or_id, Job) else job_or_id
        return self._script(FairRemoveScript)(self.fair_keys, job_id).run_or_queue(pipeline)

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
        """Drop ids whose job is gone. rq's version empties the list and rebuilds it, which would leave a
        moment with no list entries for the fair structure; this takes each dead id out with
        :meth:`remove` instead."""
        for raw in cast(list[bytes], self.connection.lrange(self.key, 0, -1)):
            job_id = as_text(raw)
            if not self.job_class.exists(job_id, self.connection):
                self.remove(job_id)


def _with_tenant(kwargs: dict[str, Any], tenant: object, cost: float | None = None) -> dict[str, Any]:
    meta = {**(kwargs.get("meta") or {})}
    if tenant is not None:
        meta[META_TENANT] = str(tenant)
    if cost is not None:
        meta[META_COST] = validated(_COST, cost, "fair_cost=")
    return {**kwargs, "meta": meta} if meta else kwargs


def _estimates(members: dict[bytes, bytes], costs: dict[bytes, bytes], runtimes: dict[bytes, bytes]
               ) -> dict[str, float]:
    """Job id -> what its pop would charge (charge="runtime"), as fair_pop.lua estimates it."""
    means = {as_text(k): float(v) for k, v in runtimes.items()}
    estimates = {}
    for raw, value in members.items():
        job_id = as_text(raw)
        tenant = as_text(value).rpartition("|")[2].rpartition(":")[0]
        declared, _, func = as_text(costs.get(raw, b"|")).partition("|")
        estimates[job_id] = float(declared) if declared else means.get(
            f"{tenant}|{func}", means.get(f"*|{func}", means.get("*|*", FIRST_ESTIMATE)))
    return estimates


def _declared_cost(job: Job) -> float | None:
    """The job's declared ``fair_cost`` (seconds), None when absent or not a valid cost."""
    value = (job.meta or {}).get(META_COST)
    try:
        return None if value is None else _COST.validate_python(value)
    except ValidationError:
        return None


def _tenant_of(job: Job) -> object:
    return _tenant_of_meta(job.meta)


def _tenant_of_meta(meta: dict[str, Any] | None) -> object:
    """The tenant whose FIFO a job joins. A system job joins none (it is served as a job without tenant):
    tenant controls never hold it, so it must not wait behind its tenant's park."""
    tenant = (meta or {}).get(META_TENANT)
    if tenant is None or tenant == "" or (meta or {}).get(META_SYSTEM):
        return None
    return tenant


def _pop(queue: Queue, connection: Redis, given: str) -> PopResult:
    """One pop from one queue: the fair script for a FairQueue, else LPOP / the entry BLPOP took."""
    if isinstance(queue, FairQueue):
        return queue.pop_fair(given)
    if given:
        return PopResult(PopKind.PLAIN, given, -1, None)
    raw = cast(bytes | None, connection.lpop(queue.key))
    if raw is None:
        return PopResult(PopKind.EMPTY, None, -1, None)
    return PopResult(PopKind.PLAIN, as_text(raw), -1, None)


def _fetch(job_cls: type[Job], job_id: str, queue: Queue, connection: Redis, serializer: Any) -> Job | None:
    """The job, or None when it no longer exists or was canceled (skipped, as rq skips missing jobs)."""
    try:
        job = job_cls.fetch(job_id, connection=connection, serializer=serializer)
    except NoSuchJobError:
        return None
    except Exception as exc:
        exc.job_id = job_id  # type: ignore[attr-defined]  # as rq does, for its error report
        exc.queue = queue  # type: ignore[attr-defined]
        raise
    return None if job.get_status(refresh=False) == JobStatus.CANCELED else job
