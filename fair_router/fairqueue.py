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

rq's list stays the truth for counting and for blocking
    Every fair push also RPUSHes the job id onto rq's own ``rq:queue:<name>`` list as a *token*, so
    ``LLEN`` is the backlog that ``rq info``, rq-dashboard and ``len(queue)`` show, and idle workers
    BLPOP rq's list keys as usual (no polling; a push wakes one at once). Tokens are interchangeable:
    whichever token reaches the head, the pop serves the fair choice. A list entry that is not a token
    (``tokens`` counts them per id) was pushed by rq's internals with a plain ``Queue`` (the scheduler,
    dependents of another queue class, registry requeues): the pop serves it as it is, so nothing
    pushed behind our back is lost. All fair keys carry the hash tag ``{rq:queue:<name>}``, which is the
    cluster slot of rq's untagged list key, so each script touches one slot, rq's list included.

Token accounting
    ``LLEN + held - stale`` is always the number of waiting jobs (what :attr:`FairQueue.count` returns).
    *held*: tokens taken off the list while only parked tenants had jobs (see limits below), so that no
    worker spins on them; *stale*: jobs that left without their token (served from a plain entry,
    removed), whose token is dropped when it surfaces. Without concurrency limits held stays 0. rq's
    ``Job.cancel`` / ``Job.delete`` LREM the id through a plain Queue, which takes a token behind our
    back: the job stays in its FIFO until served, is skipped then, and :meth:`FairQueue.forget` settles
    the token (``fair_forget.lua``).

Claim-time concurrency limits
    A pop cannot read lease keys (other slots). When the weighted worker's slot is refused for a job
    of a FairQueue, it calls :meth:`FairQueue.park` (one script): the job goes back to the *front* of
    its tenant's FIFO and the tenant is *parked*: pops skip it, so other tenants are not blocked and no
    job is snoozed through the scheduler. A fair pop's step of the tenant's pass is taken back (the job
    did not run), so a tenant at its limit loses no turn per refusal. A worker that releases one of the
    tenant's slots unparks it in its fair queues (and puts one held token back so a blocked worker
    wakes). A park also ends by itself after ``lease_ttl``: a slot can free in a queue this worker does
    not serve, and a lease never outlives that bound. Blocking workers cap their BLPOP at the first park
    end.

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
    ``enqueue(..., unique=True)`` uses rq's own atomic push script and is served as a plain entry;
    jobs the scheduler moves in (``enqueue_at/in``, retries with an interval) arrive plain too. Plain
    entries are served in list order, ahead of fair tokens behind them.

Entries rq removes behind our back
    Tokens are interchangeable, so a fair job that has already run can leave its id on rq's list,
    standing in for another waiting job. Deleting or canceling that finished job through rq, or a plain
    Queue's ``get_jobs`` dropping the id once the job expired, LREMs the entry. rq's maintenance (every
    worker's ``maintenance_interval``, 10 minutes by default) then runs :meth:`FairQueue.reconcile`,
    which puts the missing tokens back and corrects the per-id counts. Until then the count is short,
    the waiting job is served at the next pop but may not wake a blocked worker, and a plain push of
    the same id (a reused custom ``job_id``) would be taken for a token.

Known gaps (not by design; tests do not cover them)
    - A refused job's park uses its old FIFO place. If its tenant went idle and was refilled before
      the park lands, and a ``remove`` left a hole at exactly that place, the job lands among the
      newer jobs instead of at the front.
    - Recovery orders jobs of one tenant by ``enqueued_at``, which puts an ``at_front`` job after
      older ones.
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
from fair_router.router import META_TENANT
from fair_router.scripts import (
    FairForgetScript,
    FairParkScript,
    FairPopScript,
    FairPushScript,
    FairReconcileScript,
    FairRemoveScript,
    FairUnparkScript,
    PushEntry,
)
from fair_router.settings import Settings, TiersConfig, load_settings
from fair_router.tiers import TierBook

NO_TENANT = "#none"
"""Encoded pseudo-tenant of jobs without a tenant. ``encode`` never yields it: '#' only starts the
64-hex-digit digest form."""

_UNSET = object()
PUSH_BATCH = 1000
"""Jobs per fair_push.lua call in ``enqueue_many``: one call stays a few ms of Redis time."""


class FairIntermediateQueue(IntermediateQueue):
    """rq's intermediate-queue maintenance hook, extended to recover fair jobs whose worker died."""

    def cleanup(self, worker: Any, queue: Queue) -> None:
        super().cleanup(worker, queue)
        if isinstance(queue, FairQueue):
            queue.recover()
            queue.reconcile()


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
        self._staged: dict[str, object] = {}  # job id -> tenant, from _prepare_for_queue to push_job_id
        self._batches: dict[int, list[PushEntry]] = {}  # id(pipeline) -> enqueue_many's pushes
        # Popped through this object -> (pop kind, FIFO seq of a fair choice); acknowledged with the next pop.
        self._handed_out: dict[str, tuple[int, int | None]] = {}

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

    def _prepare_for_queue(self, job: Job) -> None:
        """rq calls this on the Job right before ``push_job_id(job.id)`` in the same enqueue: note the
        tenant here so the push needs no extra round trip to read the job back."""
        super()._prepare_for_queue(job)
        self._staged[job.id] = _tenant_of(job)

    def push_job_id(self, job_id: str, pipeline: Pipeline | None = None, at_front: bool = False) -> None:
        """Where every rq enqueue path (enqueue, enqueue_many, dependents, the worker's retries) puts an id
        on the list. Overriding it, rather than ``_enqueue_async_job``, keeps rq's own job saving and its
        MULTI: the fair push joins rq's pipeline, so the job is saved and queued atomically as in rq."""
        tenant = self._staged.pop(job_id, _UNSET)
        if tenant is _UNSET:  # pushed without _prepare_for_queue: read the tenant from the job
            try:
                tenant = _tenant_of(self.job_class.fetch(job_id, connection=self.connection,
                                                         serializer=self.serializer))
            except NoSuchJobError:
                tenant = None
        name = None if tenant is None else str(tenant)
        entry = (job_id, self.tenant_key(name), self.weight(name), at_front, False)
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

    def pop_fair(self, given: str = "") -> tuple[str | None, int]:
        """One pop script call: (job id or None, wake_ms). ``given``: an entry already taken by BLPOP."""
        acks, self._handed_out = list(self._handed_out), {}
        kind, job_id, wake, seq = self._script(FairPopScript)(self.fair_keys, given, acks, "")
        if kind == 0:
            return None, wake
        self._handed_out[job_id] = (kind, seq)
        return job_id, -1

    def pop_job_id(self) -> str | None:
        """The next job id by fair share (non-blocking)."""
        return self.pop_fair()[0]

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
        seconds (None: return None at once) and raising DequeueTimeout when it runs out. Fair queues pop
        through their script, plain ones with LPOP, so a worker may mix them; the wait is one BLPOP over
        every queue's list (capped at the first park end), and a fair queue's popped entry is handed to
        its script as ``given``."""
        queues = list(queues)
        job_cls: type[Job] = backend_class(cls, "job_class", override=job_class)
        deadline = None if timeout is None else time.monotonic() + timeout
        by_key = {queue.key: queue for queue in queues}
        while True:
            wake_ms = -1
            for queue in queues:
                while True:
                    job_id, wake = _pop(queue, connection, "")
                    if wake > 0:
                        wake_ms = wake if wake_ms < 0 else min(wake_ms, wake)
                    if job_id is None:
                        break
                    job = _fetch(job_cls, job_id, queue, connection, serializer)
                    if job is not None:
                        return job, queue
            if deadline is None:
                return None
            left = deadline - time.monotonic()
            block = left
            if wake_ms > 0:
                block = min(block, max(0.05, wake_ms / 1000 - time.time()))
            if left <= 0:
                raise DequeueTimeout(timeout, list(by_key))
            result = connection.blpop(list(by_key), max(0.01, block))
            if result is None:
                if block >= left:
                    raise DequeueTimeout(timeout, list(by_key))
                continue
            key, entry = as_text(result[0]), as_text(result[1])
            queue = by_key[key]
            job_id, _ = _pop(queue, connection, entry)
            if job_id is not None:
                job = _fetch(job_cls, job_id, queue, connection, serializer)
                if job is not None:
                    return job, queue

    # -- limits --------------------------------------------------------------------------------------

    def park(self, job: Job, tenant: str, seconds: float) -> None:
        """``tenant`` is at its concurrency limit: put ``job`` back in its FIFO and skip the tenant until
        :meth:`unpark` or for ``seconds`` at most. When ``job`` came from this object's latest pop by a fair
        choice, it goes back to its own place (jobs refused at once keep their order) and the tenant's pass
        gets that pop's step back: a refusal costs it no turn. Otherwise it goes to the front."""
        until_ms = int((time.time() + seconds) * 1000)
        _, seq = self._handed_out.pop(job.id, (0, None))
        self._script(FairParkScript)(
            self.fair_keys, job.id, self.tenant_key(tenant), self.weight(tenant), until_ms, seq
        )

    def forget(self, job_id: str) -> None:
        """A job this object popped will not run (rq canceled or deleted it): when rq's own removal took
        its token off the list, put one back for the jobs still waiting (one script, only in this case)."""
        kind, _ = self._handed_out.get(job_id, (0, None))
        if kind in (2, 3):
            self._script(FairForgetScript)(self.fair_keys, job_id, spent=kind == 2)

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
            tenant = _tenant_of(job)
            name = None if tenant is None else str(tenant)
            entry = (job.id, self.tenant_key(name), self.weight(name), True, True)
            if self._script(FairPushScript)(keys, [entry]):
                recovered.append(job.id)
        if done:
            self.connection.zrem(keys.inflight, *done)
        return recovered

    def reconcile(self) -> tuple[int, int]:
        """Repair the token accounting after rq removed list entries behind our back (``Job.delete`` or
        ``Job.cancel`` of a job whose id stood in as another job's token, a plain Queue's ``get_jobs``
        dropping ids of expired jobs). rq's maintenance runs it; O(list length). Returns (tokens put back,
        token counts corrected)."""
        return cast(tuple[int, int], self._script(FairReconcileScript)(self.fair_keys))

    # -- what rq's tools read ------------------------------------------------------------------------

    @property
    def count(self) -> int:
        """Waiting jobs: LLEN (one entry per waiting job) plus held minus stale tokens (0 without limits)."""
        with self.connection.pipeline() as pipe:
            pipe.llen(self.key)
            pipe.hmget(self.fair_keys.state, ["held", "stale"])
            length, (held, stale) = pipe.execute()
        return int(length) + int(held or 0) - int(stale or 0)

    def get_job_ids(self, offset: int = 0, length: int = -1) -> list[str]:
        """The waiting jobs' ids: plain entries in list order, then fair jobs in per-tenant FIFO order,
        interleaved by position (a round-robin approximation of the serving order)."""
        keys = self.fair_keys
        with self.connection.pipeline() as pipe:  # MULTI: one consistent snapshot
            pipe.lrange(self.key, 0, -1)
            pipe.hgetall(keys.tokens)
            pipe.hgetall(keys.fifo)
            listed, tokens, fifo = pipe.execute()
        left = {as_text(k): int(v) for k, v in tokens.items()}
        plain = []
        for raw in listed:
            job_id = as_text(raw)
            if left.get(job_id, 0) > 0:
                left[job_id] -= 1
            else:
                plain.append(job_id)
        fair = []
        for field, job_id in fifo.items():
            tenant, _, seq = as_text(field).rpartition(":")
            fair.append((int(seq), tenant, as_text(job_id)))
        ids = plain + [job_id for _, _, job_id in sorted(fair)]
        end = None if length < 0 else offset + length
        return ids[offset:end]

    def get_job_position(self, job_or_id: Job | str) -> int | None:
        job_id = job_or_id.id if isinstance(job_or_id, Job) else job_or_id
        ids = self.get_job_ids()
        return ids.index(job_id) if job_id in ids else None

    def remove(self, job_or_id: Job | str, pipeline: Pipeline | None = None) -> Any:
        """Take the job out of rq's list and of the fair structure, in one script."""
        job_id = job_or_id.id if isinstance(job_or_id, Job) else job_or_id
        return self._script(FairRemoveScript)(self.fair_keys, job_id, client=pipeline)

    def empty(self) -> Any:
        """rq's ``empty`` (deletes the listed jobs), plus the fair jobs without a list entry and the fair keys."""
        members = [as_text(raw) for raw in self.connection.hkeys(self.fair_keys.members)]
        removed = super().empty()  # type: ignore[no-untyped-call]
        with self.connection.pipeline() as pipe:
            for job_id in members:
                pipe.delete(self.job_class.key_for(job_id), self.job_class.dependents_key_for(job_id))
            pipe.delete(*self.fair_keys.all())
            pipe.execute()
        return removed

    def delete(self, delete_jobs: bool = True) -> None:
        """rq's ``delete``; the fair keys go too."""
        super().delete(delete_jobs=delete_jobs)
        self.connection.delete(*self.fair_keys.all())

    def compact(self) -> None:
        """Drop ids whose job is gone, keeping the fair accounting right (rq's version rebuilds the list
        and would turn tokens into plain entries)."""
        for job_id in self.get_job_ids():
            if not self.job_class.exists(job_id, self.connection):
                self.remove(job_id)


def _with_tenant(kwargs: dict[str, Any], tenant: object) -> dict[str, Any]:
    if tenant is None:
        return kwargs
    return {**kwargs, "meta": {**(kwargs.get("meta") or {}), META_TENANT: str(tenant)}}


def _tenant_of(job: Job) -> object:
    tenant = (job.meta or {}).get(META_TENANT)
    return None if tenant is None or tenant == "" else tenant


def _pop(queue: Queue, connection: Redis, given: str) -> tuple[str | None, int]:
    """(job id or None, wake_ms) from one queue: the fair script for a FairQueue, else LPOP / the entry."""
    if isinstance(queue, FairQueue):
        return queue.pop_fair(given)
    if given:
        return given, -1
    raw = cast(bytes | None, connection.lpop(queue.key))
    return (None if raw is None else as_text(raw)), -1


def _fetch(job_cls: type[Job], job_id: str, queue: Queue, connection: Redis, serializer: Any) -> Job | None:
    """The job, or None when it no longer exists or was canceled (rq's ``Job.cancel`` only LREMs through
    a plain Queue, so a canceled fair job can still come out of the fair structure: skip it, and let the
    fair queue settle the token rq took)."""
    try:
        job = job_cls.fetch(job_id, connection=connection, serializer=serializer)
    except NoSuchJobError:
        job = None
    except Exception as exc:
        exc.job_id = job_id  # type: ignore[attr-defined]  # as rq does, for its error report
        exc.queue = queue  # type: ignore[attr-defined]
        raise
    if job is not None and job.get_status(refresh=False) != JobStatus.CANCELED:
        return job
    if isinstance(queue, FairQueue):
        queue.forget(job_id)
    return None
