"""The rq seam, Worker side: every override of rq's Worker internals and every private rq name the weighted
workers and crash recovery rely on, for rq 3.0. Upgrading rq means checking this module against rq's
``worker/base.py``, ``worker/worker_classes.py``, ``executions.py`` and ``registry.py``.

:class:`RqWorkerSeam` overrides rq's internal entry points and calls a few hooks, which
:mod:`fair_router.workers.weighted` implements with rq's public API only:

==========================================  ==================================================================
hook                                        called from (rq internals)
==========================================  ==================================================================
``next_fetch_order()``                      ``reorder_queues`` (rq calls it after each dequeue that found a
                                            job), and before the first fetch, which rq does not reorder for
``fetch_wait_cap()``                        ``dequeue_job_and_maintain_ttl``: the longest blocking fetch
``heartbeat_due()``                         the worker process's own heartbeats: rq's loop beats before every
                                            fetch, after every idle wait and after every job; the forking
                                            worker also at each heartbeat of the job its horse runs
``running_job_beat()``                      the in-process worker's beat thread, at each heartbeat of its
                                            running job (the forking worker calls ``heartbeat_due`` there)
``job_started(job, pipeline)``              ``prepare_execution``: rq's job-start MULTI (busy state, execution)
``job_start_replied(job, exe, replies)``   ``prepare_execution``: the replies of that MULTI, before the job
                                            runs (it may raise :class:`JobNotStarted`)
``job_ended(job, queue, seconds, pipe)``    ``increment_total_working_time``: rq's after-job pipeline, however
                                            the job ended (success, failure, retry; horse or worker);
                                            ``seconds``: the worker's time on the job (jobclock.py)
``worker_stopping()``                       ``teardown``, in the worker process (never in the work horse)
``worker_starting()``                       ``bootstrap``, once rq has set up logging and registered the worker
==========================================  ==================================================================

A worker that cannot go on exits non-zero: :mod:`fair_router.rq_internals.fatal` (a base of ``RqWorkerSeam``).

Its services: :meth:`~RqWorkerSeam.hold_warm_shutdown`, :meth:`~RqWorkerSeam.beat_running_jobs`,
:meth:`~RqWorkerSeam.revive_scheduler`, :attr:`~RqWorkerSeam.exception_handlers` and :func:`rebuilt_as`.
Crash recovery's view of rq's StartedJobRegistry is in :mod:`fair_router.rq_internals.registry`; the end of an
interruptible job's turn and warm shutdown reaching a running job in :mod:`fair_router.rq_internals.turns`
(whose ``TurnSeam`` is a base of ``RqWorkerSeam``, with three hooks of its own).

Lean bookkeeping between jobs (heartbeats and state writes without rq's repeats): docs/internals.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from functools import cached_property, partial
from types import TracebackType
from typing import Any

from redis.client import Pipeline
from redis.exceptions import OutOfMemoryError
from rq import Queue
from rq.executions import Execution
from rq.job import Job
from rq.utils import now
from rq.worker import WorkerStatus

from fair_router.rq_internals.fatal import FatalRedisExits
from fair_router.rq_internals.jobbeat import JobBeat
from fair_router.rq_internals.jobclock import JobClock
from fair_router.rq_internals.queue import RqQueueSeam
from fair_router.rq_internals.turns import ForkingTurnSeam, TurnSeam
from fair_router.store.oom import call_riding_oom, execute_riding_oom, grace_of

logger = logging.getLogger("fair_router")

HEARTBEAT_REPEAT = 1.0
"""Seconds within which a heartbeat of at least the same TTL makes another one redundant."""

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]
"""``sys.exc_info()`` of an exception being handled."""

ExceptionHandler = Callable[..., Any]
"""rq's worker exception handler: ``(job, exc_type, exc_value, traceback) -> bool | None``."""


class JobNotStarted(Exception):
    """Raised by ``job_start_replied``: the job is not run (rq's ``execute_job`` stops before running it); the
    raiser's ``execute_job`` catches it."""


class RqWorkerSeam(TurnSeam, FatalRedisExits):
    """rq's worker with its internal entry points turned into hooks, and its bookkeeping between jobs lean."""

    # -- hooks (no-ops here) --------------------------------------------------------------------------------

    def next_fetch_order(self) -> list[Queue] | None:
        """The queue order for the next fetch, or None to keep rq's (its dequeue strategy)."""
        return None

    def fetch_wait_cap(self) -> int | None:
        """The longest blocking fetch in whole seconds, or None for rq's ``dequeue_timeout``."""
        return None

    def running_job_beat(self) -> None:
        """An in-process worker's running job was heartbeated from its thread (a long job must not hold back
        duties that cannot wait for its end; the forking worker runs ``heartbeat_due`` at those beats)."""

    def job_started(self, job: Job, pipeline: Pipeline) -> None:
        """Queue writes on rq's job-start MULTI (busy state and execution), before it runs."""

    def job_start_replied(self, job: Job, execution: Execution, replies: list[Any]) -> None:
        """rq's job-start MULTI has run (``replies``, its commands' in order): read what ``job_started`` queued
        there. Raise :class:`JobNotStarted` to not run the job, after undoing what its start wrote."""

    def job_ended(self, job: Job, queue: Queue, seconds: float, pipeline: Pipeline) -> None:
        """Queue writes on rq's after-job pipeline; ``seconds`` is the run time rq adds to the worker's stats."""

    def worker_stopping(self) -> None:
        """The worker process is tearing down (not called in a work horse)."""

    # -- services -------------------------------------------------------------------------------------------

    def hold_warm_shutdown(self) -> None:
        """Busy from here, in memory: rq's SIGTERM handler then lets the job finish (warm shutdown) instead of
        raising StopRequested. For a job that has left its queue before rq's own busy write; the write to
        Redis goes with the next state write on a pipeline (or rq's in ``prepare_execution``)."""
        self._state = WorkerStatus.BUSY

    def beat_running_jobs(self, every: int) -> None:
        """Heartbeat a running job at least every ``every`` seconds (rq's ``job_monitoring_interval``: the
        forking worker's monitoring period, also the base of the job's heartbeat TTL)."""
        self.job_monitoring_interval = min(self.job_monitoring_interval, every)

    @property
    def exception_handlers(self) -> list[ExceptionHandler]:
        """The worker's exception handlers, which rq's maintenance also passes for abandoned jobs."""
        return self._exc_handlers

    def revive_scheduler(self) -> None:
        """Start this worker's rq scheduler (``--with-scheduler``) again if its process died, as rq's
        maintenance does (``self.scheduler`` and its ``_process``)."""
        scheduler = self.scheduler
        if scheduler is None or self._burst_scheduler:  # a burst worker's scheduler ran once, as rq meant it
            return
        process = scheduler._process
        if process is None or not process.is_alive():
            if process is not None:
                self.log.warning("Worker %s: its scheduler process died; restarting it", self.name)
            scheduler.acquire_locks(auto_start=True)  # type: ignore[no-untyped-call]

    _burst_scheduler = False
    """rq ran this worker's scheduler once, in burst mode, rather than as a process: there is none to revive."""

    def _start_scheduler(self, burst: bool = False, *args: Any, **kwargs: Any) -> None:
        """rq's, noting burst mode (rq keeps no trace of it) for :meth:`revive_scheduler`."""
        self._burst_scheduler = burst
        super()._start_scheduler(burst, *args, **kwargs)

    # -- fetch ----------------------------------------------------------------------------------------------

    _order_drawn = False

    _seam_dequeued = False
    """The job in hand was dequeued through a seam queue class (never onto rq's intermediate list). Noted where rq
    calls ``reorder_queues``, right after its ``dequeue_any`` returned: ``queue_class`` may change at any heartbeat
    (a queue marked fair becomes a FairQueue), so only the class of that very call tells."""

    def reorder_queues(self, reference_queue: Queue) -> None:
        """rq's (its dequeue strategy, and the strategy's validation), then the hook's order if it gives one:
        the order is drawn after each dequeue, for the next."""
        self._seam_dequeued = issubclass(self.queue_class, RqQueueSeam)
        super().reorder_queues(reference_queue)
        self._draw_fetch_order()

    def _draw_fetch_order(self) -> None:
        self._order_drawn = True
        order = self.next_fetch_order()
        if order is not None:
            self._ordered_queues = order

    def dequeue_job_and_maintain_ttl(
        self, timeout: int | None, max_idle_time: int | None = None
    ) -> tuple[Job, Queue] | None:
        """rq's, with the first order drawn and the blocking wait capped. Overridden because rq has no hook for
        either: it calls ``reorder_queues`` only after a dequeue (never before the first fetch), and it blocks
        for ``dequeue_timeout`` (re-issuing the fetch with the same order on each idle timeout)."""
        self.job_clock.fetching()
        if not self._order_drawn:
            self._draw_fetch_order()
        cap = self.fetch_wait_cap()
        if timeout is not None and cap is not None:
            timeout = min(timeout, cap)
        with self.exit_on_fatal_redis():
            return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)

    # -- bookkeeping between jobs (see the module docstring) ------------------------------------------------

    _last_beat: tuple[float, int] | None = None
    """(monotonic time, TTL) of the last heartbeat this process sent or queued on a pipeline."""

    def heartbeat(self, timeout: int | None = None, pipeline: Pipeline | None = None) -> None:
        """rq's heartbeat as one round trip, skipped when a recent one already set at least this TTL; outside a
        pipeline, in the worker process, then ``heartbeat_due``. Hooked here rather than into rq's maintenance
        hooks, whose meaning (every ``maintenance_interval``) rq's own tests pin down."""
        with self.exit_on_fatal_redis():
            self._send_heartbeat(timeout, pipeline)
            if pipeline is None and not self.is_horse:
                self.beat_duties()

    def _send_heartbeat(self, timeout: int | None, pipeline: Pipeline | None) -> None:
        ttl = timeout or self.worker_ttl + 60  # rq's own default
        if pipeline is not None:
            super().heartbeat(ttl, pipeline=pipeline)
        else:
            last = self._last_beat
            if last is not None and last[1] >= ttl and time.monotonic() - last[0] < HEARTBEAT_REPEAT:
                return
            call_riding_oom(partial(self._beat_now, ttl), grace_of(self.connection))
        self._last_beat = (time.monotonic(), ttl)

    def _beat_now(self, ttl: int) -> None:
        with self.connection.pipeline(transaction=False) as pipe:
            super().heartbeat(ttl, pipeline=pipe)
            pipe.execute()

    def maintain_heartbeats(self, job: Job, execution: Execution) -> None:
        """rq's heartbeat of a running job (one MULTI, idempotent), sent again while Redis is out of memory, up
        to the outage grace (:func:`fair_router.store.oom.call_riding_oom`): a job is not killed for a missed
        beat that memory freed a second later lets through."""
        call_riding_oom(partial(super().maintain_heartbeats, job, execution), grace_of(self.connection))

    def set_state(self, state: str, pipeline: Pipeline | None = None) -> Any:
        """rq's set_state, minus the write when the worker is in that state already."""
        if pipeline is None and state == self.get_state():
            return None
        return super().set_state(state, pipeline=pipeline)

    # -- a job's run ----------------------------------------------------------------------------------------

    def prepare_execution(self, job: Job) -> Execution:
        """rq 3.0's ``rq.executions.prepare_execution`` (what ``BaseWorker.prepare_execution`` calls as the
        worker takes a job up, before the fork) restated, plus ``job_started`` on the same MULTI. rq's own:
        create the Execution (the StartedJobRegistry entry, the job's execution registry and the worker's
        execution index) with the job's heartbeat TTL, note it in ``executions`` and write the busy state, in
        one pipeline. Keep in step with rq's when upgrading it."""
        with self.connection.pipeline() as pipeline:
            heartbeat_ttl = self.get_heartbeat_ttl(job)
            execution = Execution.create(job, heartbeat_ttl, pipeline=pipeline, worker_name=self.name)
            self.executions[execution.id] = execution
            self.set_state(WorkerStatus.BUSY, pipeline=pipeline)
            self.job_started(job, pipeline)
            # refused whole while Redis is out of memory: sent again whole, up to the outage grace
            try:
                replies = execute_riding_oom(pipeline, self.connection)
            except OutOfMemoryError:
                self.log.error("Worker %s: job %s was taken from queue %s but its start could not be written (Redis "
                               "out of memory): from a FairQueue, the queue's recovery hands it back; from a plain "
                               "queue it is in no queue or registry: once Redis has memory, enqueue it again "
                               "(Queue(%r).enqueue_job(Job.fetch(%r)))", self.name, job.id, job.origin, job.origin,
                               job.id)
                raise
        self.job_start_replied(job, execution, replies)
        return execution

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        """rq's, minus its LREM from the queue's intermediate list when this worker's last dequeue went through a
        seam queue class (:meth:`RqQueueSeam.dequeue_any` pops with LPOP/BLPOP and never moves a job onto that
        list, so rq's LREM there would be one wasted command on every job)."""
        if self._seam_dequeued:
            remove_from_intermediate_queue = False
        self._seam_dequeued = False
        super().prepare_job_execution(job, remove_from_intermediate_queue)

    _running: tuple[Job, Queue] | None = None
    """The job this worker (or its work horse, a fork of it) runs, and the queue it came from."""

    @cached_property
    def job_clock(self) -> JobClock:
        """The worker's time on the job it runs (``job_ended``'s seconds)."""
        return JobClock()

    def execute_job(self, job: Job, queue: Queue) -> None:
        """rq's, with the job noted while it runs (for ``job_ended``, with the worker's time on it); the job's
        own heartbeat TTL then makes the next plain heartbeat due."""
        self._running = (job, queue)
        self.job_clock.take(timed_fetch=self._seam_dequeued)
        try:
            with self.exit_on_fatal_redis():
                super().execute_job(job, queue)
        finally:
            self.job_clock.done()
            self._running = None
            self._last_beat = None
            self._seam_dequeued = False

    def fail_unrun(self, job: Job, queue: Queue, exc_info: ExcInfo) -> None:
        """Fail ``job`` in this process without running it, as rq fails a job that raised: rq's start
        bookkeeping (``prepare_execution``, ``prepare_job_execution``), then its ``_finalize_failure`` (the
        job's failure callback, the exception handlers, ``handle_job_failure``: a retry if the job has one
        left, else FailedJobRegistry with ``exc_info``, and its dependents). For a job that cannot be served
        at all (an unusable stored tenant), so that neither the worker nor its work horse stops over it."""
        self._running = (job, queue)
        try:
            execution = self.prepare_execution(job)
            self.prepare_job_execution(job, len(self.queues) == 1)
            job.started_at = now()
            self._finalize_failure(job, queue, execution, exc_info)
            self.set_state(WorkerStatus.IDLE)
        finally:
            self.job_clock.done()
            self._running = None
            self._last_beat = None
            self._seam_dequeued = False

    def increment_total_working_time(self, job_execution_time: timedelta, pipeline: Pipeline) -> None:
        """rq adds each job's run time (ended_at - started_at) to the worker's stats here, on the pipeline of
        its after-job writes, whichever way the job ended (in the work horse, or in the worker when the horse
        died): the one place that sees the job's end with a pipeline, so ``job_ended`` is called from it, with
        the worker's time on the job (jobclock.py; rq's run time in a spawned work horse)."""
        super().increment_total_working_time(job_execution_time, pipeline)
        running = self._running
        if running is not None:
            seconds = self.job_clock.seconds(job_execution_time.total_seconds())
            self.job_ended(running[0], running[1], seconds, pipeline)

    def teardown(self) -> None:
        """``worker_stopping``, then rq's teardown (in a work horse: rq's only). A worker ending on a fatal Redis
        error skips ``worker_stopping`` (its pending start records and counters are dropped) and says goodbye
        (rq's register_death) once, without waiting for Redis."""
        if self._fatal is not None and not self.is_horse:
            self.teardown_without_redis()
            return
        if not self.is_horse:
            self.worker_stopping()
        super().teardown()  # type: ignore[no-untyped-call]

class ForkingWorkerSeam(ForkingTurnSeam, RqWorkerSeam):
    """For rq's forking Worker: the worker process also takes its heartbeat duties at each heartbeat of the job
    its horse runs, so they do not wait for the job to end."""

    def maintain_heartbeats(self, job: Job, execution: Execution) -> None:
        """rq's heartbeat of the running job (every ``job_monitoring_interval`` while the horse works), then
        ``heartbeat_due``."""
        super().maintain_heartbeats(job, execution)
        self.beat_duties()


class InProcessWorkerSeam(RqWorkerSeam):
    """For rq's SimpleWorker, which sends no heartbeat while a job runs: heartbeats it from a thread (every
    ``job_monitoring_interval``, see ``beat_running_jobs``), as rq's forking worker does from its monitor."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.job_beat = JobBeat(self.job_monitoring_interval, self._beat)

    def beat_running_jobs(self, every: int) -> None:
        """rq's monitoring period, and the thread's."""
        super().beat_running_jobs(every)
        self.job_beat.every = every

    def execute_job(self, job: Job, queue: Queue) -> None:
        """rq's, with the job heartbeated from the thread while it runs."""
        self.job_beat.follow(job)
        try:
            super().execute_job(job, queue)
        finally:
            self.job_beat.stop()

    def cleanup_execution(self, job: Job, pipeline: Pipeline, execution: Execution | None = None) -> None:
        """rq deletes the job's execution here as it ends; no heartbeat may land after that."""
        self.job_beat.stop()
        super().cleanup_execution(job, pipeline, execution)

    def teardown(self) -> None:
        """End the heartbeat thread with the worker."""
        self.job_beat.close()
        super().teardown()

    def _beat(self, job: Job) -> None:
        # ``executions`` holds the job's execution while it runs (prepare_execution to cleanup_execution); rq's
        # ``execution`` property would fall back to a Redis read when it is empty
        execution = next(iter(self.executions.values()), None)
        if execution is not None:
            self.maintain_heartbeats(job, execution)
            self.running_job_beat()


def rebuilt_as(queue_class: type[Queue], queue: Queue, **extra: Any) -> Queue:
    """``queue`` (one the rq CLI built from a name before it created the worker) built again as
    ``queue_class``, with the same connection, serializer, job class, death penalty and default job timeout
    (rq keeps the last in ``Queue._default_timeout``)."""
    return queue_class(queue.name, connection=queue.connection, serializer=queue.serializer,
                       job_class=queue.job_class, death_penalty_class=queue.death_penalty_class,
                       default_timeout=queue._default_timeout, **extra)
