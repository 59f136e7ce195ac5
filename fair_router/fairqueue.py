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
    stride choice, whose id is then LREMed from the list (from the nearer end, by an estimate of its
    place) and the head goes back. A member whose id is no longer on the list was removed by rq behind
    our back: the pop drops it when the scheduler reaches it. All fair keys carry the hash tag
    ``{rq:queue:<name>}``, the cluster slot of rq's untagged list key, so each script touches one slot.

Listings
    ``get_job_ids`` (and ``jobs``, ``get_jobs``, job positions) replay the pops on one snapshot
    (:mod:`fair_router.serving_order`): the exact waiting set, in the order the jobs would be served if
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
    - Popping a fair choice that is not the list head costs an LREM, O(distance from the nearer end of
      the list); with every tenant's jobs deep in a very long list that is the price of exact counts.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, cast

from redis import Redis
from redis.client import Pipeline
from rq import Queue
from rq.exceptions import DequeueTimeout, NoSuchJobError
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, JobStatus
from rq.utils import as_text, backend_class

from fair_router.keys import FairQueueKeys, Keys, encode
from fair_router.observe.events import count_event
from fair_router.router import META_TENANT
from fair_router.scripts import (
    FairParkScript,
    FairPopScript,
    FairPushScript,
    FairRemoveScript,
    FairUnparkScript,
    PopKind,
    PopResult,
    PushEntry,
)
from fair_router.serving_order import FairSnapshot, serving_order
from fair_router.settings import Settings, TiersConfig, load_settings
from fair_router.tiers import TierBook

NO_TENANT = "#none"
"""Encoded pseudo-tenant of jobs without a tenant. ``encode`` never yields it: '#' only starts the
64-hex-digit digest form."""

PUSH_BATCH = 1000
"""Jobs per fair_push.lua call in ``enqueue_many``: one call stays a few ms of Redis time."""

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
        **kwargs: Any,
    ) -> None:
        """rq's arguments, plus where the fair state lives (``prefix``) and the tiers that give weights
        (``tiers``); both default to ``settings`` (else loaded on first use, as ``--queue-class`` builds
        queues with rq's arguments only)."""
        super().__init__(name, connection, *args, **kwargs)
        if "{" in name or "}" in name:
            raise ValueError(f"fair queue names cannot hold braces: {name!r}")
        self._settings = settings
        self._prefix = prefix or (settings.prefix if settings else None)
        self._tiers_config = tiers or (settings.tiers if settings else None)
        if recover_after is not None:
            self.recover_after = recover_after
        self._fair_keys: FairQueueKeys | None = None
        self._tier_book: TierBook | None = None
        self._scripts: dict[str, Any] = {}
        self._enqueuing: Job | None = None  # the job rq's _enqueue_job is about to push (see push_job_id)
        self._batches: dict[int, list[PushEntry]] = {}  # id(pipeline) -> enqueue_many's pushes
        # Popped through this object -> FIFO seq of a fair choice (None: a plain entry); acknowledged with
        # the next pop.
        self._handed_out: dict[str, int | None] = {}

    # -- configuration, bound lazily ----------------------------------------------------------------

    def use_settings(self, settings: Settings) -> None:
        """Take prefix and tiers from ``settings`` (the weighted worker calls this on queues rq built)."""
        self._settings = settings
        self._prefix, self._tiers_config = settings.prefix, settings.tiers
        self._fair_keys = self._tier_book = None

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

    def _script(self, kind: type[Any]) -> Any:
        name = kind.__name__
        if name not in self._scripts:
            self._scripts[name] = kind(self.connection)
        return self._scripts[name]

    def weight(self, tenant: str | None) -> float:
        """Fair-share weight of ``tenant``: its tier's ``tiers.weights`` entry (default 1)."""
        if tenant is None:
            return 1.0
        book = self.tier_book
        return book.config.weight(book.tier(tenant))

    @staticmethod
    def tenant_key(tenant: str | None) -> str:
        """The tenant as the fair structure names it: encoded (no ':' or braces), or the no-tenant id."""
        return NO_TENANT if tenant is None else encode(tenant)

    def _entry(self, job_id: str, tenant: object, at_front: bool, **flags: bool) -> PushEntry:
        name = None if tenant is None else str(tenant)
        return PushEntry(job_id, self.tenant_key(name), self.weight(name), at_front, **flags)

    # -- pushing -------------------------------------------------------------------------------------

    def enqueue(self, f: Any, *args: Any, fair_tenant: object = None, **kwargs: Any) -> Job:
        """rq's ``enqueue``; ``fair_tenant=`` goes to ``job.meta["fair_tenant"]`` (else the meta's own)."""
        return super().enqueue(f, *args, **_with_tenant(kwargs, fair_tenant))

    def enqueue_call(self, *args: Any, fair_tenant: object = None, **kwargs: Any) -> Job:
        """rq's ``enqueue_call`` with ``fair_tenant=``."""
        return super().enqueue_call(*args, **_with_tenant(kwargs, fair_tenant))

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
        self._enqueuing = job
        try:
            job = super()._enqueue_job(job, pipeline=pipeline, at_front=at_front, unique=unique)
        finally:
            self._enqueuing = None
        if unique and self.is_async:
            self._script(FairPushScript)(self.fair_keys, [self._entry(job.id, _tenant_of(job), bool(at_front),
                                                                     listed=True)])
        return job

    def push_job_id(self, job_id: str, pipeline: Pipeline | None = None, at_front: bool = False) -> None:
        """Where rq puts an id on the list. Overriding it, rather than ``_enqueue_async_job``, keeps rq's
        own job saving and its MULTI: the fair push joins rq's pipeline, so the job is saved and queued
        atomically as in rq."""
        job = self._enqueuing
        if job is not None and job.id == job_id:
            tenant = _tenant_of(job)
        else:  # pushed without _enqueue_job: read the tenant from the job
            try:
                tenant = _tenant_of(self.job_class.fetch(job_id, connection=self.connection,
                                                         serializer=self.serializer))
            except NoSuchJobError:
                tenant = None
        entry = self._entry(job_id, tenant, bool(at_front))  # rq's enqueue_many may pass at_front=None
        batch = None if pipeline is None else self._batches.get(id(pipeline))
        if batch is not None:
            batch.append(entry)  # enqueue_many pushes the whole batch at the end of its pipeline
        else:
            self._script(FairPushScript)(self.fair_keys, [entry], client=pipeline)

    def enqueue_many(
        self, job_datas: Iterable[Any], pipeline: Pipeline | None = None, group_id: str | None = None
    ) -> list[Job]:
        """rq's ``enqueue_many``. Jobs without dependencies are pushed by one script call per
        ``PUSH_BATCH`` jobs at the end of rq's pipeline, still in the MULTI that saves them, instead of
        one call each (packing 13 keys per call is most of a fair push's client cost)."""
        datas = list(job_datas)
        if any(data.depends_on for data in datas):  # rq runs those in several pipeline steps: push one by one
            return super().enqueue_many(datas, pipeline=pipeline, group_id=group_id)
        pipe = pipeline if pipeline is not None else self.connection.pipeline()
        batch: list[PushEntry] = []
        self._batches[id(pipe)] = batch
        try:
            jobs = super().enqueue_many(datas, pipeline=pipe, group_id=group_id)
        finally:
            # Also when rq raised midway: the jobs it saved into a caller's pipeline get their pushes, as
            # with rq's own push per job.
            del self._batches[id(pipe)]
            for start in range(0, len(batch), PUSH_BATCH):
                self._script(FairPushScript)(self.fair_keys, batch[start:start + PUSH_BATCH], client=pipe)
        if pipeline is None:
            pipe.execute()
        return jobs

    # -- popping -------------------------------------------------------------------------------------

    def pop_fair(self, given: str = "") -> PopResult:
        """One pop script call. ``given``: an entry already taken off rq's list by BLPOP."""
        acks, self._handed_out = list(self._handed_out), {}
        result: PopResult = self._script(FairPopScript)(self.fair_keys, given, acks, "")
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
        )

    def unpark(self, tenant: str, pipeline: Pipeline | None = None) -> Any:
        """One of ``tenant``'s slots was released: it may be served here again (one worker is woken)."""
        return self._script(FairUnparkScript)(self.fair_keys, self.tenant_key(tenant), client=pipeline)

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
        ids = [as_text(raw) for raw in cast(list[bytes], self.connection.zrangebyscore(keys.inflight, "-inf", cutoff))]
        if not ids:
            return []
        started = set(self.started_job_registry.get_job_ids(cleanup=False))
        lost, recovered, done = [], [], []
        for job_id in ids:
            try:
                job = self.job_class.fetch(job_id, connection=self.connection, serializer=self.serializer)
            except NoSuchJobError:
                done.append(job_id)
                continue
            if job.get_status(refresh=False) != JobStatus.QUEUED or job_id in started or job.origin != self.name:
                done.append(job_id)  # it started (rq handles it from there), or moved on
                continue
            lost.append(job)
        # Each goes back to the front of its tenant's FIFO: the newest first, so a tenant's jobs keep their order.
        lost.sort(key=lambda job: job.enqueued_at.timestamp() if job.enqueued_at else 0.0, reverse=True)
        for job in lost:
            if self._script(FairPushScript)(keys, [self._entry(job.id, _tenant_of(job), True, from_inflight=True)]):
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
        were pushed (:func:`fair_router.serving_order.serving_order`)."""
        keys = self.fair_keys
        with self.connection.pipeline() as pipe:  # MULTI: one consistent snapshot
            pipe.lrange(self.key, 0, -1)
            pipe.hgetall(keys.members)
            pipe.zrange(keys.active, 0, -1, withscores=True)
            pipe.zrange(keys.kept, 0, -1, withscores=True)
            pipe.hgetall(keys.weights)
            pipe.hget(keys.state, "vtime")
            listed, members, active, kept, weights, vtime = pipe.execute()
        snapshot = FairSnapshot(
            listed=[as_text(raw) for raw in listed],
            members={as_text(k): as_text(v) for k, v in members.items()},
            active={as_text(k): float(v) for k, v in active},
            kept={as_text(k): float(v) for k, v in kept},
            weights={as_text(k): float(v) for k, v in weights.items()},
            vtime=float(vtime or 0),
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
        return self._script(FairRemoveScript)(self.fair_keys, job_id, client=pipeline)

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


def _with_tenant(kwargs: dict[str, Any], tenant: object) -> dict[str, Any]:
    if tenant is None:
        return kwargs
    return {**kwargs, "meta": {**(kwargs.get("meta") or {}), META_TENANT: str(tenant)}}


def _tenant_of(job: Job) -> object:
    tenant = (job.meta or {}).get(META_TENANT)
    return None if tenant is None or tenant == "" else tenant


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
