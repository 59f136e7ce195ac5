"""The rq seam, Worker side: :class:`RqWorkerSeam` holds every override of rq 3.0's Worker and calls the worker's
composed parts (the protocols below); each member: :mod:`~fair_router.rq_internals.members`."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from types import FrameType, TracebackType
from typing import Any, Protocol

from redis.client import Pipeline
from redis.exceptions import OutOfMemoryError
from rq import Queue, SimpleWorker
from rq.executions import Execution
from rq.job import Job
from rq.utils import import_worker_class, now
from rq.worker import BaseWorker, WorkerStatus

from fair_router.rq_internals.fatal import FatalRedisExits
from fair_router.rq_internals.jobbeat import JobBeat
from fair_router.rq_internals.jobclock import JobClock
from fair_router.rq_internals.queue import RqQueueSeam
from fair_router.rq_internals.turns import TURN_SIGNAL, end_turn, tell_horse
from fair_router.store.oom import call_riding_oom, execute_riding_oom, grace_of

HEARTBEAT_REPEAT = 1.0
"""Seconds within which a heartbeat of at least the same TTL makes another one redundant."""

START_UNWRITTEN = ("Worker %s: job %s was taken from queue %s but its start could not be written (Redis out of "
                   "memory): from a FairQueue, the queue's recovery hands it back; from a plain queue it is in no "
                   "queue or registry: once Redis has memory, enqueue it again (Queue(%r).enqueue_job(Job.fetch(%r)))")

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]
"""``sys.exc_info()`` of an exception being handled."""

ExceptionHandler = Callable[..., Any]
"""rq's worker exception handler: ``(job, exc_type, exc_value, traceback) -> bool | None``."""


class JobNotStarted(Exception):
    """Raised from rq's job-start MULTI's replies: rq does not run the job."""


class FetchOrder(Protocol):
    """The queue order of the next fetch (:class:`fair_router.workers.sampling.WeightedOrder`)."""

    def draw(self, strategy: str | None = None) -> list[Queue] | None: ...  # a fresh order, or None to keep rq's


class Starts(Protocol):
    """A job's start and end (:class:`fair_router.workers.start_gate.StartGate`)."""

    def run(self, job: Job, queue: Queue, execute: Callable[[], None]) -> None: ...  # execute now, or it waits
    def on_start(self, job: Job, pipeline: Pipeline) -> None: ...  # writes on rq's job-start MULTI
    def on_start_replies(self, job: Job, execution: Execution, replies: list[Any]) -> None: ...  # or JobNotStarted
    def on_end(self, job: Job, queue: Queue, seconds: float, pipeline: Pipeline) -> None: ...  # rq's after-job pipeline
    def on_turn_end(self, job: Job, queue: Queue, pipeline: Pipeline) -> None: ...  # the MULTI queueing a turn again


class Duties(Protocol):
    """What the worker process does besides jobs (:class:`fair_router.workers.weighted.Duties`): at rq's
    registration, its own heartbeats, an in-process job's heartbeats, its teardown."""

    def starting(self) -> None: ...
    def beat(self) -> None: ...
    def job_beat(self) -> None: ...
    def stopping(self) -> None: ...


class Turns(Protocol):
    """The worker side of interruptible iteration (:data:`fair_router.iteration.turns.HOST`)."""

    def is_end(self, value: Any) -> bool: ...  # whether a job's return value ends a turn
    def hosting(self, active: bool, stop: bool) -> None: ...  # a job starts in this process (before the fork), or ended
    def stop(self) -> None: ...  # warm shutdown: the running job stops at its next checkpoint


class RqWorkerSeam(BaseWorker):
    """rq's worker (forking or SimpleWorker) with its internals calling the composed parts; lean bookkeeping."""

    fetch_order: FetchOrder
    starts: Starts
    duties: Duties
    turns: Turns
    fetch_wait_cap: int | None = None
    """The longest blocking fetch in whole seconds (idle workers wake for crash recovery)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fatal = FatalRedisExits(self)
        self.job_clock = JobClock()
        # rq's SimpleWorker sends no heartbeat while a job runs: a thread does (None: a forking worker)
        self.job_beat = JobBeat(self.job_monitoring_interval, self._beat) if isinstance(self, SimpleWorker) else None

    _running: tuple[Job, Queue] | None = None
    _seam_dequeued = False
    """The job in hand came through a seam queue class's ``dequeue_any``, which times its blocking wait."""
    _last_beat: tuple[float, int] | None = None
    _previous_turn_handler: Any = None
    _burst_scheduler = False

    # -- services the parts use ------------------------------------------------------------------------------

    def hold_warm_shutdown(self) -> None:
        """Busy in memory: rq's SIGTERM handler lets a job already off its queue finish (warm shutdown)."""
        self._state = WorkerStatus.BUSY

    def beat_running_jobs(self, every: int) -> None:
        """Heartbeat a running job at least every ``every`` seconds (rq's ``job_monitoring_interval``)."""
        self.job_monitoring_interval = min(self.job_monitoring_interval, every)
        if self.job_beat is not None:
            self.job_beat.every = every

    @property
    def exception_handlers(self) -> list[ExceptionHandler]:
        """The worker's exception handlers, which rq's maintenance also passes for abandoned jobs."""
        return self._exc_handlers

    def replace_queue(self, old: Queue, new: Queue) -> None:
        """Serve ``new`` instead of ``old`` (a queue marked fair) from the next fetch on."""
        self.queues = [new if queue is old else queue for queue in self.queues]
        self._ordered_queues = [new if queue is old else queue for queue in self._ordered_queues]

    def _start_scheduler(self, burst: bool = False, *args: Any, **kwargs: Any) -> None:
        self._burst_scheduler = burst  # rq keeps no trace of it
        super()._start_scheduler(burst, *args, **kwargs)

    # -- rq's loop steps under the fatal-Redis exit --------------------------------------------------------

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        with self.fatal.guard():
            super().bootstrap(*args, **kwargs)
            self.duties.starting()

    def check_for_suspension(self, burst: bool) -> None:
        with self.fatal.guard():
            super().check_for_suspension(burst)

    def run_maintenance_tasks(self) -> None:
        """rq's; put off to the next ``maintenance_interval`` while Redis is out of memory."""
        with self.fatal.guard():
            try:
                super().run_maintenance_tasks()  # type: ignore[no-untyped-call]
            except OutOfMemoryError as exc:
                self.last_cleaned_at = now()  # type: ignore[assignment]  # rq types it None
                self.fatal.warn_put_off("maintenance", exc)

    # -- fetch ----------------------------------------------------------------------------------------------

    def dequeue_job_and_maintain_ttl(self, timeout: int | None,
                                     max_idle_time: int | None = None) -> tuple[Job, Queue] | None:
        """rq's, after a fresh fetch order is drawn, with the blocking wait capped."""
        self.job_clock.fetching()
        order = self.fetch_order.draw(self._dequeue_strategy)
        if order is not None:
            self._ordered_queues = order
        if timeout is not None and self.fetch_wait_cap is not None:
            timeout = min(timeout, self.fetch_wait_cap)
        # Noted before the fetch: queue_class only ever becomes a seam class during it (a queue marked fair at a
        # heartbeat), and then the job's time counts from its start rather than its fetch.
        seam = issubclass(self.queue_class, RqQueueSeam)
        with self.fatal.guard():
            result = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
        self._seam_dequeued = seam and result is not None
        return result

    # -- bookkeeping between jobs ----------------------------------------------------------------------------

    def heartbeat(self, timeout: int | None = None, pipeline: Pipeline | None = None) -> None:
        """rq's heartbeat as one round trip, skipped when a recent one set at least this TTL; the worker
        process's own beats run its duties."""
        with self.fatal.guard():
            ttl = timeout or self.worker_ttl + 60  # rq's own default
            last = self._last_beat
            if pipeline is not None:
                super().heartbeat(ttl, pipeline=pipeline)
                self._last_beat = (time.monotonic(), ttl)
            elif last is None or last[1] < ttl or time.monotonic() - last[0] >= HEARTBEAT_REPEAT:
                call_riding_oom(partial(self._beat_now, ttl), grace_of(self.connection))
                self._last_beat = (time.monotonic(), ttl)
            if pipeline is None and not self.is_horse:
                self.fatal.put_off_duties(self.duties.beat)

    def _beat_now(self, ttl: int) -> None:
        with self.connection.pipeline(transaction=False) as pipe:
            super().heartbeat(ttl, pipeline=pipe)
            pipe.execute()

    def set_state(self, state: str, pipeline: Pipeline | None = None) -> Any:
        """rq's, minus the write when the worker is in that state already."""
        if pipeline is None and state == self.get_state():
            return None
        return super().set_state(state, pipeline=pipeline)

    def maintain_heartbeats(self, job: Job, execution: Execution) -> None:
        """rq's running-job heartbeat, sent again while Redis is out of memory; a forking worker's duties too."""
        self._beat_running(job, execution)
        if self.job_beat is None:
            self.fatal.put_off_duties(self.duties.beat)

    def _beat(self, job: Job) -> None:
        """The in-process job's heartbeat, from its thread (``executions`` holds its execution while it runs)."""
        execution = next(iter(self.executions.values()), None)
        if execution is not None:
            self._beat_running(job, execution)
            self.duties.job_beat()

    def _beat_running(self, job: Job, execution: Execution) -> None:
        call_riding_oom(partial(super().maintain_heartbeats, job, execution), grace_of(self.connection))

    # -- a job's run ----------------------------------------------------------------------------------------

    def prepare_execution(self, job: Job) -> Execution:
        """rq 3.0's ``executions.prepare_execution`` restated (keep in step with rq's), with the start parts'
        writes on the same MULTI, sent again while Redis is out of memory."""
        with self.connection.pipeline() as pipeline:
            execution = Execution.create(job, self.get_heartbeat_ttl(job), pipeline=pipeline, worker_name=self.name)
            self.executions[execution.id] = execution
            self.set_state(WorkerStatus.BUSY, pipeline=pipeline)
            self.starts.on_start(job, pipeline)
            try:
                replies = execute_riding_oom(pipeline, self.connection)
            except OutOfMemoryError:
                self.log.error(START_UNWRITTEN, self.name, job.id, job.origin, job.origin, job.id)
                raise
        self.starts.on_start_replies(job, execution, replies)
        return execution

    def execute_job(self, job: Job, queue: Queue) -> None:
        """rq's, if the start parts let the job start now."""
        self.starts.run(job, queue, partial(self._run_job, job, queue))

    def _run_job(self, job: Job, queue: Queue) -> None:
        self._running = (job, queue)
        self.job_clock.take(job, timed_fetch=self._seam_dequeued)
        if self.job_beat is not None:
            self.job_beat.follow(job)
        self.turns.hosting(True, bool(self._stop_requested))
        try:
            with self.fatal.guard():
                super().execute_job(job, queue)
        finally:
            self.turns.hosting(False, False)
            if self.job_beat is not None:
                self.job_beat.stop()
            self._job_done()

    def _job_done(self) -> None:
        self.job_clock.done()
        self._running = self._last_beat = None  # the job's own heartbeat TTL makes the next plain one due
        self._seam_dequeued = False

    def fail_unrun(self, job: Job, queue: Queue, exc_info: ExcInfo) -> None:
        """Fail ``job`` without running it, through rq's start bookkeeping and ``_finalize_failure``."""
        self._running = (job, queue)
        try:
            execution = self.prepare_execution(job)
            self.prepare_job_execution(job, len(self.queues) == 1)
            job.started_at = now()
            self._finalize_failure(job, queue, execution, exc_info)
            self.set_state(WorkerStatus.IDLE)
        finally:
            self._job_done()

    def cleanup_execution(self, job: Job, pipeline: Pipeline, execution: Execution | None = None) -> None:
        """No in-process job heartbeat after rq deletes the execution."""
        if self.job_beat is not None:
            self.job_beat.stop()
        super().cleanup_execution(job, pipeline, execution)

    def increment_total_working_time(self, job_execution_time: timedelta, pipeline: Pipeline) -> None:
        """rq's after-job pipeline, however the job ended: the start parts settle there."""
        super().increment_total_working_time(job_execution_time, pipeline)
        if self._running is not None:
            seconds = self.job_clock.seconds(job_execution_time.total_seconds())
            self.starts.on_end(self._running[0], self._running[1], seconds, pipeline)

    def _finalize_success(self, job: Job, queue: Queue, execution: Execution, return_value: Any) -> None:
        """rq's handling of a job that returned, unless it ended an interruptible turn."""
        if self.turns.is_end(return_value):
            end_turn(self, job, queue, execution, self.starts.on_turn_end)
        else:
            super()._finalize_success(job, queue, execution, return_value)

    # -- warm shutdown reaches a running interruptible job; teardown -------------------------------------------

    def handle_warm_shutdown_request(self) -> None:
        super().handle_warm_shutdown_request()  # type: ignore[no-untyped-call]
        self.turns.stop()
        tell_horse(self.horse_pid)

    def _install_signal_handlers(self) -> None:
        """rq's, and (forking) the turn signal's, which a horse forked later inherits."""
        super()._install_signal_handlers()  # type: ignore[no-untyped-call]
        if self.job_beat is None:
            self._previous_turn_handler = signal.signal(TURN_SIGNAL, self._turn_signal)

    def setup_work_horse_signals(self) -> None:
        super().setup_work_horse_signals()  # type: ignore[no-untyped-call]
        signal.signal(TURN_SIGNAL, self._turn_signal)

    def _turn_signal(self, signum: int, frame: FrameType | None) -> None:
        self.turns.stop()

    def teardown(self) -> None:
        """The parts' stopping duties, then rq's teardown (without waiting for Redis after a fatal error)."""
        if self.job_beat is not None:
            self.job_beat.close()
        if self.fatal.error is not None and not self.is_horse:
            self.fatal.teardown_without_redis(super().teardown)
        else:
            if not self.is_horse:
                self.duties.stopping()
            super().teardown()  # type: ignore[no-untyped-call]
        if not self.is_horse and self._previous_turn_handler is not None:
            signal.signal(TURN_SIGNAL, self._previous_turn_handler)  # the process may go on without this worker
            self._previous_turn_handler = None


def revive_scheduler(worker: RqWorkerSeam) -> None:
    """Start ``worker``'s rq scheduler (``--with-scheduler``) again if its process died, not stopped on request."""
    scheduler = worker.scheduler
    if scheduler is None or worker._burst_scheduler or worker._stop_requested:  # a burst worker's ran once
        return
    process = scheduler._process
    if process is None or not process.is_alive():
        if process is not None:
            worker.log.warning("Worker %s: its scheduler process died; restarting it", worker.name)
        scheduler.acquire_locks(auto_start=True)  # type: ignore[no-untyped-call]


def rebuilt_as(queue_class: type[Queue], queue: Queue, **extra: Any) -> Queue:
    """``queue`` (built by the rq CLI from a name) built again as ``queue_class`` with the same connection,
    serializer, job class, death penalty and default job timeout (rq keeps it in ``Queue._default_timeout``)."""
    return queue_class(queue.name, connection=queue.connection, serializer=queue.serializer,
                       job_class=queue.job_class, death_penalty_class=queue.death_penalty_class,
                       default_timeout=queue._default_timeout, **extra)


def worker_class(name: str) -> type[BaseWorker]:
    """The worker class a dotted path names, checked as ``rq worker --worker-class`` checks it (``rq.utils``)."""
    return import_worker_class(name)
