"""rq workers that poll their queues in a freshly weighted random order before every fetch.

``rq worker -w fair_router.WeightedWorker default default_throttled default_superslow`` works with
the unchanged rq CLI. Weights come from settings (``queues:``; an unlisted queue weighs 1), or from
``weights=`` when the worker is built in code. Before each fetch the order is drawn by
:func:`fair_router.sampling.weighted_order`: ``"strict"`` queues first, in the worker's listed order,
then the rest so that a queue is polled first with probability ``w / W``. rq pops from the first
non-empty queue in that order, so an empty queue is skipped and the others keep their proportions.
A worker none of whose queues has a configured weight keeps rq's own order (and ``--dequeue-strategy``,
which has no effect once weights apply).

Queues named in ``fair_queues`` (or built by ``--queue-class fair_router.FairQueue``) are
:class:`~fair_router.fairqueue.FairQueue`: the worker then dequeues through ``FairQueue.dequeue_any``,
which serves fair and plain queues alike, and a tenant at its concurrency limit is parked in its fair
queue (skipped by pops until one of its slots frees) instead of having its job snoozed.

Both workers also leave out rq's repeated heartbeats and state writes between jobs
(:mod:`fair_router.bookkeeping`), and record each job's wait as they start it (:mod:`fair_router.observe`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError
from redis import ConnectionPool, Redis
from redis.client import Pipeline
from rq import Queue, SimpleWorker, Worker
from rq.executions import Execution
from rq.job import Job
from rq.worker import BaseWorker, WorkerStatus

from fair_router.bookkeeping import LeanBookkeepingMixin
from fair_router.fairqueue import FairQueue
from fair_router.keys import Keys
from fair_router.limits import ConcurrencyLimiter
from fair_router.observe.recorder import StartRecorder
from fair_router.router import META_SYSTEM, META_TENANT
from fair_router.rules import QueueName
from fair_router.sampling import weighted_order
from fair_router.settings import Settings, SettingsError, Weight, describe_errors, load_settings
from fair_router.tiers import TierBook

QueueWeight = float | Literal["strict"]

_WEIGHTS: TypeAdapter[dict[str, QueueWeight]] = TypeAdapter(dict[QueueName, Weight])


def validate_weights(weights: Mapping[str, object], source: str = "weights=") -> dict[str, QueueWeight]:
    """Check an explicit queue -> weight mapping with the same rules as the ``queues:`` setting.

    Raises SettingsError naming each bad queue, its value and the reason.
    """
    try:
        return _WEIGHTS.validate_python(dict(weights))
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, source)) from None


class WeightedFetchMixin(BaseWorker):
    """Re-samples the queue order by weight before every fetch, and (when ``concurrency.enabled``) runs
    each tenant's job inside a fleet-wide concurrency slot; shared by both weighted workers."""

    def __init__(
        self,
        queues: Any,
        *args: Any,
        weights: Mapping[str, object] | None = None,
        settings: Settings | None = None,
        **kwargs: Any,
    ) -> None:
        """Takes rq's arguments plus ``weights`` (queue -> weight, else settings' ``queues:``) and
        ``settings`` (else loaded from the file and environment)."""
        # Checked before rq connects, so a bad weight is reported even while Redis is down.
        settings = settings or load_settings()  # validated at load: errors name the file and key
        if weights is None:
            configured = settings.queues
        else:
            configured = validate_weights(weights, f"{type(self).__name__}(weights=...)")
        if settings.fair_queues:
            queues = _with_fair_queues(queues, settings, kwargs)
        super().__init__(queues, *args, **kwargs)
        fair = [queue for queue in self.queues if isinstance(queue, FairQueue)]
        for queue in fair:  # also those rq built from names with --queue-class: same prefix and tiers
            queue.use_settings(settings)
        if fair and not issubclass(self.queue_class, FairQueue):
            self.queue_class = FairQueue  # its dequeue_any serves fair and plain queues alike
        self.fair_queues: list[FairQueue] = fair
        # None means "no queue of this worker is weighted": leave rq's order alone, as documented.
        self.fetch_weights: list[tuple[Queue, QueueWeight]] | None = (
            [(queue, configured.get(queue.name, 1.0)) for queue in self.queues]
            if any(queue.name in configured for queue in self.queues)
            else None
        )
        self.limiter = build_limiter(self.connection, settings) if settings.concurrency.enabled else None
        self.start_recorder = (StartRecorder(self.connection, Keys(settings.prefix), settings.observe)
                               if settings.observe.record else None)

    def prepare_execution(self, job: Job) -> Execution:
        """rq seam, job start: rq 2.12's ``rq.executions.prepare_execution`` (what ``BaseWorker.prepare_execution``
        calls as the worker takes a job up, before the fork) restated, plus the job's start record
        (:mod:`fair_router.observe.recorder`) on the same MULTI, so recording costs no round trip. rq's own:
        create the Execution (the StartedJobRegistry entry) with the job's heartbeat TTL and write the busy
        state, in one pipeline. Keep in step with rq's when upgrading it."""
        with self.connection.pipeline() as pipeline:
            heartbeat_ttl = self.get_heartbeat_ttl(job)
            self.execution = Execution.create(job, heartbeat_ttl, pipeline=pipeline, worker_name=self.name)
            self.set_state(WorkerStatus.BUSY, pipeline=pipeline)
            if self.start_recorder is not None:
                self.start_recorder.job_started(job, pipeline)
            pipeline.execute()
        return self.execution

    def execute_job(self, job: Job, queue: Queue) -> None:
        """Run the job inside its tenant's slot; a tenant at its limit has the job snoozed instead."""
        tenant = job.meta.get(META_TENANT)
        if self.limiter is None or not tenant or job.meta.get(META_SYSTEM):
            super().execute_job(job, queue)  # no limiter, or a system job: limits do not apply
            return
        # Busy from here: the job has left its queue, so a SIGTERM while we take the slot or snooze must
        # wait for us (warm shutdown) rather than raise StopRequested midway and strand the job.
        with self.connection.pipeline(transaction=False) as pipe:  # state and slot: one round trip
            self.set_state(WorkerStatus.BUSY, pipeline=pipe)
            lease = self.limiter.acquire(tenant, job.id, pipeline=pipe)
        if lease is None and isinstance(queue, FairQueue):
            # Claim-time limit: back to the front of its tenant's FIFO, tenant skipped until a slot frees
            # (or lease_ttl at most); no trip through the scheduler.
            queue.park(job, tenant, self.limiter.config.lease_ttl)
            self.log.info("Worker %s: %s is at its limit; job %s back in %s, tenant parked",
                          self.name, tenant, job.id, queue.name)
            return
        if lease is None:
            when = self.limiter.snooze(job, queue, self.limiter.tiers.tier(tenant))
            self.log.info("Worker %s: %s is at its limit; job %s snoozed until %s", self.name, tenant, job.id, when)
            return
        with self.limiter.keep_alive(lease, also=partial(self._slot_freed, tenant)):
            super().execute_job(job, queue)

    def _slot_freed(self, tenant: str, pipe: Pipeline) -> None:
        """Queued on the slot's release: unpark ``tenant`` in this worker's fair queues, and send the
        heartbeat rq's loop sends after every job here, in the same round trip (rq's own is then
        skipped as a repeat, see fair_router.bookkeeping)."""
        for queue in self.fair_queues:
            queue.unpark(tenant, pipeline=pipe)
        self.heartbeat(pipeline=pipe)

    def teardown(self) -> None:
        """Write the limiter's pending counters before the worker goes."""
        if self.limiter is not None and not self.is_horse:
            self.limiter.flush()
        super().teardown()  # type: ignore[no-untyped-call]

    def dequeue_job_and_maintain_ttl(
        self, timeout: int | None, max_idle_time: int | None = None
    ) -> tuple[Job, Queue] | None:
        """Draw a new order before each fetch; rq's ``reorder_queues`` only runs after one (not the first)."""
        # Blocking fetches that time out idle are re-issued by rq with this same order; harmless, as every
        # queue was empty until then.
        if self.fetch_weights is not None:
            self._ordered_queues = weighted_order(self.fetch_weights)
        return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)


class WeightedWorker(WeightedFetchMixin, LeanBookkeepingMixin, Worker):
    """rq's forking Worker with weighted fetch order (``rq worker -w fair_router.WeightedWorker``)."""


class WeightedSimpleWorker(WeightedFetchMixin, LeanBookkeepingMixin, SimpleWorker):
    """rq's SimpleWorker (jobs run in the worker process) with weighted fetch order."""


def _with_fair_queues(queues: Any, settings: Settings, kwargs: dict[str, Any]) -> list[Any]:
    """The worker's queues with each one named in ``fair_queues`` built as a FairQueue (names, and the
    plain Queue objects the rq CLI builds from names before it creates the worker)."""
    items = [queues] if isinstance(queues, (str, Queue)) else list(queues)
    built: list[Any] = []
    for item in items:
        if isinstance(item, str) and item in settings.fair_queues:
            item = FairQueue(item, connection=kwargs.get("connection"), serializer=kwargs.get("serializer"),
                             settings=settings)
        elif type(item) is Queue and item.name in settings.fair_queues:
            item = FairQueue(item.name, connection=item.connection, serializer=item.serializer,
                             job_class=item.job_class, death_penalty_class=item.death_penalty_class,
                             default_timeout=item._default_timeout, settings=settings)
        built.append(item)
    return built


def build_limiter(connection: Redis, settings: Settings) -> ConcurrencyLimiter:
    """A limiter on its own connection pool: its lease-refresh thread never shares a socket (or a
    pool lock, across the work-horse fork) with rq's own use of the worker's connection."""
    own = Redis(connection_pool=ConnectionPool(**connection.connection_pool.connection_kwargs))
    keys = Keys(settings.prefix)
    return ConcurrencyLimiter(own, keys, TierBook(own, keys, settings.tiers), settings.concurrency)
