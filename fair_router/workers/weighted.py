"""rq workers that poll their queues in a freshly weighted random order before every fetch, and run each tenant's
start controls, crash recovery and fairness marks; the seam and its parts: docs/internals.md ("Workers")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rq import Queue, SimpleWorker, Worker

from fair_router.config.settings import Settings, load_settings
from fair_router.core.keys import Keys
from fair_router.core.validation import QueueWeight
from fair_router.fairqueue.queue import FairQueue
from fair_router.iteration.turns import HOST
from fair_router.observe.recorder import StartRecorder
from fair_router.observe.waiting import WaitCounts
from fair_router.rq_internals.worker import RqWorkerSeam, revive_scheduler
from fair_router.store.cluster import ride_cluster_outages, state_of
from fair_router.store.outage import OUTAGES, ride_outages
from fair_router.workers import setup
from fair_router.workers.fairness_marks import FairnessFollower
from fair_router.workers.recovery import Recovery
from fair_router.workers.sampling import WeightedOrder
from fair_router.workers.start_gate import StartGate


class WeightedBase(RqWorkerSeam):
    """What both weighted workers are built from: rq's arguments, ``weights`` and ``settings``, and the parts."""

    fetch_order: WeightedOrder
    starts: StartGate

    def __init__(self, queues: Any, *args: Any, weights: Mapping[str, object] | None = None,
                 settings: Settings | None = None, **kwargs: Any) -> None:
        """Takes rq's arguments plus ``weights`` (queue -> weight, else settings' ``queues:``; an unlisted queue
        weighs 1) and ``settings`` (else loaded from the file and environment)."""
        # Checked before rq connects, so a bad weight is reported even while Redis is down.
        settings = self.settings = settings or load_settings()
        if settings.redis_cluster:  # rq gets the owner of rq's slot, whatever node --url named
            queues = setup.on_rq_slot(queues, kwargs)
        configured = (settings.queues if weights is None
                      else setup.validate_weights(weights, f"{type(self).__name__}(weights=...)"))
        if settings.fair_queue_names():
            queues = setup.with_fair_queues(queues, settings, kwargs)
        super().__init__(queues, *args, **kwargs)
        # Before anything copies the connection's settings (the limiter's pool, rq's scheduler, the horse).
        ride_outages(self.connection, settings.redis_outage_grace)
        # Our own state: the same client on a standalone Redis, a RedisCluster on a cluster.
        self.state_connection = state_of(self.connection)
        ride_cluster_outages(self.state_connection, settings.redis_outage_grace)
        fair = [queue for queue in self.queues if isinstance(queue, FairQueue)]
        for queue in fair:  # also those rq built from names with --queue-class: same prefix and tiers
            queue.use_settings(settings)
        if fair and not issubclass(self.queue_class, FairQueue):
            self.queue_class = FairQueue  # its dequeue_any serves fair and plain queues alike
        self.fair_queues: list[FairQueue] = fair
        listed = {queue.name: weight for queue in self.queues
                  if (weight := setup.weight_of(configured, queue.name)) is not None}
        self.fetch_order = WeightedOrder([(queue, listed.get(queue.name, 1.0)) for queue in self.queues]
                                         if listed else None)
        self.gate = setup.build_gate(self.connection, settings)
        # None when concurrency limits are off (the gate then takes no slots)
        self.limiter = self.gate.limiter if settings.concurrency.enabled else None
        keys = Keys(settings.prefix)
        recorder = (StartRecorder(self.state_connection, keys, settings.observe,
                                  tenant_max_bytes=settings.tenant_max_bytes) if settings.observe.record else None)
        self.starts = StartGate(self, settings, self.gate, self.state_connection, fair, recorder,
                                WaitCounts(self.state_connection, keys))
        self.recovery = Recovery(self.connection, keys, settings.recovery.abandon_after, outages=OUTAGES,
                                 max_resumes=settings.interruptible.max_resumes)
        self.fetch_wait_cap = self.recovery.wait_cap  # idle workers wake for their recovery check
        self.beat_running_jobs(self.recovery.beat_every)
        self.fairness = FairnessFollower(self, settings, fair, self.fetch_order)
        # `fair_queues:` alone makes a queue fair, for producers too: the mark says so in Redis
        self.fairness.marks.mark([queue.name for queue in fair if settings.is_fair(queue.name)])
        self.fairness.follow(starting=True)
        self.duties = Duties(self)
        self.turns = HOST

    @property
    def fetch_weights(self) -> list[tuple[Queue, QueueWeight]] | None:
        """(queue, weight) of each of the worker's queues; None when none has a configured weight."""
        return self.fetch_order.weights


class Duties:
    """What a weighted worker process does besides jobs, at its start, its own heartbeats and its stop."""

    def __init__(self, worker: WeightedBase) -> None:
        self.worker = worker

    def starting(self) -> None:
        """Warn about a Redis that may evict keys, another Redis than the settings', and rule queues left unserved."""
        setup.warn_about_server_settings(self.worker)
        setup.warn_about_other_redis(self.worker)
        setup.warn_unserved_rule_queues(self.worker)

    def beat(self) -> None:
        """Hand back abandoned jobs when a check is due; send overdue start records; follow the fairness marks."""
        self.recover_abandoned()
        self.worker.starts.flush_records(overdue=True)
        self.worker.fairness.follow()
        self.worker.fairness.report_plain_pops()

    def job_beat(self) -> None:
        """A long in-process job does not hold back the start records gathered before it."""
        self.worker.starts.flush_records(overdue=True)

    def stopping(self) -> None:
        """Write the start records and pending counters; look for plain pops a last time."""
        self.worker.starts.flush_records()
        self.worker.fairness.report_plain_pops(now=True)
        self.worker.gate.limiter.flush()

    def recover_abandoned(self) -> list[str]:
        """Hand back the abandoned jobs of the worker's queues when a check is due; returns their ids. A check that took
        a queue's turn also restarts a dead rq scheduler (docs/recovery.md)."""
        worker, recovery = self.worker, self.worker.recovery
        if not recovery.due():
            return []
        handed_back = recovery.run(worker.queues, exception_handlers=worker.exception_handlers,
                                   on_abandoned=worker.starts.unparker.reclaim,
                                   death_penalty_class=worker.death_penalty_class)
        if recovery.last_turns:
            revive_scheduler(worker)
        return handed_back


class WeightedWorker(WeightedBase, Worker):
    """rq's forking Worker with weighted fetch order (``rq worker -w fair_router.WeightedWorker``)."""


class WeightedSimpleWorker(WeightedBase, SimpleWorker):
    """rq's SimpleWorker (jobs run in the worker process) with weighted fetch order."""
