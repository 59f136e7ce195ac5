"""rq workers that poll their queues in a freshly weighted random order before every fetch.

``rq worker -w fair_router.WeightedWorker default default_throttled default_superslow`` works with
the unchanged rq CLI. Weights come from settings (``queues:``; an unlisted queue weighs 1), or from
``weights=`` when the worker is built in code. Every fetch gets a fresh order drawn by
:func:`fair_router.workers.sampling.weighted_order`: ``"strict"`` queues first, in the worker's listed order,
then the rest so that a queue is polled first with probability ``w / W``. rq pops from the first
non-empty queue in that order, so an empty queue is skipped and the others keep their proportions. The
order is drawn in rq's ``reorder_queues`` hook, after each dequeue for the next one, and before the first.
A worker none of whose queues has a configured weight keeps rq's own order (and ``--dequeue-strategy``,
which has no effect once weights apply).

Queues named in ``fair_queues`` (or built by ``--queue-class fair_router.FairQueue``) are
:class:`~fair_router.fairqueue.queue.FairQueue`: the worker then dequeues through ``FairQueue.dequeue_any``,
which serves fair and plain queues alike, and a tenant at its concurrency limit is parked in its fair
queue (skipped by pops until one of its slots frees) instead of having its job snoozed.

Before a tenant's job runs, both run its start controls (:mod:`fair_router.controls.gate`: pause, with
``concurrency.enabled`` a slot, and rate limits, as a pipeline of :mod:`fair_router.controls.pipeline`) in one
script call riding rq's job-start MULTI (:mod:`fair_router.workers.startride`); a job that may not start yet
waits (parked in its FairQueue, or deferred on a plain queue, as the refusing control says), never failed.

Both workers also leave out rq's repeated heartbeats and state writes between jobs, record each job's
wait as they start it (:mod:`fair_router.observe`; sent in batches about once a second, and when the worker
stops), and take part in bounded crash recovery
(:mod:`fair_router.workers.recovery`): they heartbeat running jobs every ``recovery.abandon_after / 3``, wake
from an idle fetch at least every couple of seconds, and hand back jobs whose worker stopped heartbeating.

Both ride out a Redis outage of up to ``redis_outage_grace``: the connection they are given gets a retry
policy bounded by that time (:mod:`fair_router.store.outage`; it is the caller's client, so code sharing it
waits as long), which rq's scheduler, the work horse and the limiter's pool inherit.

Everything that touches rq's internals (overrides of rq's non-public worker methods, private attributes, the
lean bookkeeping) is in :mod:`fair_router.rq_internals.worker`; this module implements its hooks
(``next_fetch_order``, ``fetch_wait_cap``, ``job_started``, ``job_ended``, ``heartbeat_due``,
``running_job_beat``, ``worker_stopping``; for interruptible iteration ``is_turn_end``, ``host_turns``,
``stop_turns``) with rq's public API.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from redis.client import Pipeline
from rq import Queue, SimpleWorker, Worker
from rq.executions import Execution
from rq.job import Job
from rq.worker import WorkerStatus

from fair_router.config.settings import Settings, load_settings
from fair_router.controls.concurrency import Lease
from fair_router.core.jobmeta import META_SYSTEM
from fair_router.core.keys import Keys
from fair_router.core.tenancy import InvalidStoredTenant, stored_tenant
from fair_router.core.validation import QueueWeight
from fair_router.fairqueue.marks import FairnessMarks
from fair_router.fairqueue.queue import FairQueue
from fair_router.iteration.turns import turns_started
from fair_router.observe.recorder import StartRecorder
from fair_router.observe.waiting import WaitCounts
from fair_router.rq_internals.worker import ForkingWorkerSeam, InProcessWorkerSeam
from fair_router.store.cluster import ride_cluster_outages, state_of
from fair_router.store.outage import OUTAGES, ride_outages
from fair_router.store.scripts import Admission
from fair_router.workers.marked import FollowsFairnessMarks
from fair_router.workers.recovery import Recovery
from fair_router.workers.sampling import weighted_order
from fair_router.workers.serverwatch import warn_about_server_settings
from fair_router.workers.setup import (
    build_gate,
    on_rq_slot,
    validate_weights,
    warn_unserved_rule_queues,
    weight_of,
    with_fair_queues,
)
from fair_router.workers.startride import StartRefused, StartRide
from fair_router.workers.turnaway import turn_away
from fair_router.workers.unparking import Unparker


class WeightedFetchMixin(FollowsFairnessMarks):
    """What both weighted workers add to rq's, through the seam's hooks (:mod:`fair_router.rq_internals.worker`):
    the weighted fetch order, tenant controls at job start, start records, runtime-charge settlement and
    their share of crash recovery."""

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
        if settings.redis_cluster:  # rq gets the owner of rq's slot, whatever node --url named
            queues = on_rq_slot(queues, kwargs)
        if weights is None:
            configured = settings.queues
        else:
            configured = validate_weights(weights, f"{type(self).__name__}(weights=...)")
        if settings.fair_queue_names():
            queues = with_fair_queues(queues, settings, kwargs)
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
        # None means "no queue of this worker is weighted": leave rq's order alone, as documented.
        listed = {queue.name: weight for queue in self.queues
                  if (weight := weight_of(configured, queue.name)) is not None}
        self.fetch_weights: list[tuple[Queue, QueueWeight]] | None = (
            [(queue, listed.get(queue.name, 1.0)) for queue in self.queues] if listed else None
        )
        self.gate = build_gate(self.connection, settings)
        self.unparker = Unparker(self.fair_queues, self.gate, self.connection, settings)
        # None when concurrency limits are off (the gate then takes no slots): what rq-facing code checks.
        self.limiter = self.gate.limiter if settings.concurrency.enabled else None
        self.start_recorder = (StartRecorder(self.state_connection, Keys(settings.prefix), settings.observe,
                                             tenant_max_bytes=settings.tenant_max_bytes)
                               if settings.observe.record else None)
        self.wait_counts = WaitCounts(self.state_connection, Keys(settings.prefix))
        self.recovery = Recovery(self.connection, Keys(settings.prefix), settings.recovery.abandon_after,
                                 outages=OUTAGES, max_resumes=settings.interruptible.max_resumes)
        self.count_turns = settings.interruptible.count_turns
        self.beat_running_jobs(self.recovery.beat_every)
        self.settings = settings
        self.marks = FairnessMarks(self.connection, settings.prefix)
        # `fair_queues:` alone makes a queue fair, for producers too: the mark says so in Redis
        self.marks.mark([queue.name for queue in fair if settings.is_fair(queue.name)])
        self.follow_fairness_marks(starting=True)

    # -- fetch ----------------------------------------------------------------------------------------------

    def next_fetch_order(self) -> list[Queue] | None:
        """A fresh weighted order for every fetch (None: no queue is weighted, rq's order stands)."""
        return None if self.fetch_weights is None else weighted_order(self.fetch_weights)

    def fetch_wait_cap(self) -> int:
        """Idle workers wake for their recovery check even when every queue is empty."""
        return self.recovery.wait_cap

    # -- job start: tenant controls, then the start record ----------------------------------------------------

    def execute_job(self, job: Job, queue: Queue) -> None:
        """Run the job if its tenant may start one now (not paused, within its rates, and with
        ``concurrency.enabled`` inside one of its slots); otherwise it waits, never failed (see _turn_away).
        A job whose stored tenant is no tenant id fails at once (rq's failure path), and the worker goes on."""
        try:
            tenant = stored_tenant(job.meta, self.settings.tenant_max_bytes)
        except InvalidStoredTenant as exc:  # rq's exception handlers log it, with the job
            self.fail_unrun(job, queue, (type(exc), exc, exc.__traceback__))
            return
        if tenant is None or job.meta.get(META_SYSTEM):
            super().execute_job(job, queue)  # no tenant, or a system job: tenant controls do not apply
            return
        # The job has left its queue, so a SIGTERM while we look the tenant up, take the slot or snooze must
        # wait for us (warm shutdown) rather than stop the worker midway and strand the job.
        self.hold_warm_shutdown()
        scopes = self.gate.checks(tenant, job)
        if scopes and turns_started(job) and not self.count_turns:
            scopes = []  # a later turn of an interruptible job: rates count its first start only
        if scopes is None:
            super().execute_job(job, queue)  # nothing can hold this start: no round trip spent on checks
            return
        fair = isinstance(queue, FairQueue)
        fair_queue = queue.name if fair else ""
        if self.state_connection is self.connection and not (fair and self.gate.own_rate(tenant, scopes)):
            self._execute_riding(job, queue, StartRide(tenant, scopes, reserve=not fair, fair_queue=fair_queue))
            return
        # State and every check: one round trip (on a cluster a RedisCluster pipeline, which sends each to
        # its slot's node).
        with self.state_connection.pipeline(transaction=False) as pipe:
            self.set_state(WorkerStatus.BUSY, pipeline=pipe)
            admission, lease = self.gate.acquire(tenant, job, scopes, reserve=not fair, pipeline=pipe,
                                                 fair_queue=fair_queue)
        if admission.admitted and isinstance(queue, FairQueue) and self.gate.own_rate(tenant, scopes):
            self._rate_hold = (queue, tenant, admission.next_ms)  # rides rq's job-start MULTI (job_started)
        if lease is not None:
            with self.gate.limiter.keep_alive(lease, also=partial(self._slot_freed, lease),
                                              wake=partial(self.unparker.wake_parked, lease.tenant, lease.job_id)):
                super().execute_job(job, queue)
        elif admission.admitted:
            super().execute_job(job, queue)
        else:
            self._turn_away(job, queue, tenant, admission)

    def _execute_riding(self, job: Job, queue: Queue, ride: StartRide) -> None:
        """The checks ride rq's job-start MULTI (:mod:`fair_router.workers.startride`); a slot taken is kept
        alive from the verdict (``job_start_replied``) until the job ends."""
        self._ride = ride
        try:
            with ride.leases:
                super().execute_job(job, queue)
        except StartRefused as refused:
            self._turn_away(job, queue, ride.tenant, refused.admission)
        finally:
            self._ride = None

    _ride: StartRide | None = None
    """The start check riding rq's job-start MULTI of the job being started."""
    _rate_hold: tuple[FairQueue, str, int] | None = None
    """(queue, tenant with a rate of its own, ms its next start is allowed): reported on the job start's MULTI."""

    def _turn_away(self, job: Job, queue: Queue, tenant: str, admission: Admission) -> None:
        """The job may not start now (:func:`fair_router.workers.turnaway.turn_away`)."""
        said = turn_away(self.gate, job, queue, tenant, admission)
        if said:
            self.log.info("Worker %s: %s", self.name, said)

    def _slot_freed(self, lease: Lease, pipe: Pipeline) -> None:
        """Queued on the slot's release: unpark the tenant in this worker's fair queues (its job's claim
        ends there, lua/lib/claims.lua), and send the heartbeat rq's loop sends after every job here, in the
        same round trip (rq's own is then skipped as a repeat, see fair_router.rq_internals.worker)."""
        self.unparker.unpark(lease.tenant, pipe, lease.job_id)
        self.heartbeat(pipeline=pipe)

    def job_started(self, job: Job, pipeline: Pipeline) -> None:
        """The job's start record (:mod:`fair_router.observe.recorder`) and the park of a tenant whose rate
        holds its next start, on rq's job-start MULTI: no round trip. A riding start check goes there too."""
        ride = self._ride
        if ride is not None:
            ride.queue(self.gate, job, pipeline)
        if self._rate_hold is not None:
            queue, tenant, until_ms = self._rate_hold
            self._rate_hold = None
            queue.hold(tenant, until_ms, pipeline, paced=True)
        if self.start_recorder is not None and ride is not None:
            self.start_recorder.flush_due(pipeline)  # this start is gathered once admitted (job_start_replied)
        elif self.start_recorder is not None:
            # On a cluster the records' slot is not rq's: they are sent on their own, with the next flush.
            self.start_recorder.job_started(job, pipeline if self.state_connection is self.connection else None)
        if all(job.origin != queue.name for queue in self.fair_queues):  # a routed job stops counting waiting
            place = self.wait_counts.started(job, pipeline if self.state_connection is self.connection else None)
            if ride is not None:
                ride.unwait_at = place

    def job_start_replied(self, job: Job, execution: Execution, replies: list[Any]) -> None:
        """A riding start check's verdict: admitted, its slot is kept alive and its start gathered; refused,
        what the MULTI wrote for the start is undone (one round trip, on this rare path) and the job turned
        away by ``_execute_riding``."""
        ride = self._ride
        if ride is None:
            return
        admission, lease = ride.answer(self.gate, replies)
        if admission.admitted:
            if lease is not None:
                ride.leases.enter_context(self.gate.limiter.keep_alive(
                    lease, also=partial(self._slot_freed, lease),
                    wake=partial(self.unparker.wake_parked, lease.tenant, lease.job_id)))
            if self.start_recorder is not None:
                self.start_recorder.note(job)
            return
        with self.connection.pipeline() as pipe:
            self.cleanup_execution(job, pipe, execution)
            ride.undo(job, replies, self.wait_counts, pipe)
            pipe.execute()
        raise StartRefused(admission)

    # -- job end --------------------------------------------------------------------------------------------

    def job_ended(self, job: Job, queue: Queue, seconds: float, pipeline: Pipeline) -> None:
        """A FairQueue charging run time settles the job's charge, on the round trip of rq's after-job writes."""
        if isinstance(queue, FairQueue) and queue.charge == "runtime":
            queue.settle(job.id, seconds, pipeline=pipeline)

    # -- crash recovery, at the worker's own heartbeats ------------------------------------------------------

    def heartbeat_due(self) -> None:
        """Hand back abandoned jobs when a check is due; send the gathered start records if overdue; serve
        queues marked fair since the last look as FairQueues."""
        self.recover_abandoned()
        self.flush_start_records(overdue=True)
        self.follow_fairness_marks()
        self.report_plain_pops()

    def running_job_beat(self) -> None:
        """A long job does not hold back the start records gathered before it."""
        self.flush_start_records(overdue=True)

    def recover_abandoned(self) -> list[str]:
        """Hand back the jobs of this worker's queues whose worker stopped heartbeating (when a check is
        due, on the queues whose turn this worker takes); returns their ids.

        A check where this worker took a queue's turn also restarts its rq scheduler (``--with-scheduler``)
        if that died, rather than at rq's maintenance (every ``maintenance_interval``, 10 minutes): until
        some scheduler runs, scheduled jobs, retries with an interval and jobs snoozed by the concurrency
        limit stay where they are, and rq's scheduler process exits when Redis stays away past redis-py's
        retries (a Redis restart); a scheduler that died with its worker holds its locks for 61 s more.
        Taking turns makes that about one attempt per queue per interval in the whole fleet."""
        if not self.recovery.due():
            return []
        handed_back = self.recovery.run(
            self.queues,
            exception_handlers=self.exception_handlers,
            on_abandoned=self.unparker.reclaim,
            death_penalty_class=self.death_penalty_class,
        )
        if self.recovery.last_turns:
            self.revive_scheduler()
        return handed_back

    # -- start and stop -------------------------------------------------------------------------------------

    def worker_starting(self) -> None:
        """Warn about a Redis that may evict keys (workers.serverwatch) and rule queues left unserved."""
        warn_about_server_settings(self)
        warn_unserved_rule_queues(self)

    def worker_stopping(self) -> None:
        """Write the start records and pending counters before the worker goes; look for plain pops a last time."""
        self.flush_start_records()
        self.report_plain_pops(now=True)
        self.gate.limiter.flush()

    # -- start records (fair_router.observe.recorder) ---------------------------------------------------------

    def flush_start_records(self, overdue: bool = False) -> None:
        """Send the gathered job starts from the worker process (a horse's are its own): all, or if ``overdue``."""
        if self.start_recorder is not None and not self.is_horse:
            self.start_recorder.send_overdue() if overdue else self.start_recorder.send()


class WeightedWorker(WeightedFetchMixin, ForkingWorkerSeam, Worker):
    """rq's forking Worker with weighted fetch order (``rq worker -w fair_router.WeightedWorker``)."""


class WeightedSimpleWorker(WeightedFetchMixin, InProcessWorkerSeam, SimpleWorker):
    """rq's SimpleWorker (jobs run in the worker process) with weighted fetch order."""
