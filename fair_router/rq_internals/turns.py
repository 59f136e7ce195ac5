"""The rq seam for interruptible iteration (:mod:`fair_router.iteration`): ending a job's turn without rq's
success handling, and telling a running job about a warm shutdown. Checked against rq 3.0's
``worker/base.py`` and ``worker/worker_classes.py``.

:class:`TurnSeam` (a base of :class:`~fair_router.rq_internals.worker.RqWorkerSeam`) calls three hooks, which
:mod:`fair_router.workers.weighted` implements:

==========================================  ==================================================================
hook                                        called from (rq internals)
==========================================  ==================================================================
``is_turn_end(return_value)``               ``_finalize_success`` (rq's handling of a job that returned; in the
                                            work horse for the forking worker)
``host_turns(active, stop)``                ``execute_job``, before the job (in the worker process, so a work
                                            horse forked for it inherits the state) and after it
``stop_turns()``                            ``handle_warm_shutdown_request`` (rq's hook on SIGTERM/SIGINT); in a
                                            work horse, its :data:`TURN_SIGNAL` handler
==========================================  ==================================================================

What is touched, and why:

- ``BaseWorker._finalize_success`` (private, rq 3.0): where rq takes a job's return value to its success
  handling (status FINISHED, success callback, result, dependents, ``handle_job_success``). The end of a
  turn must reach none of them, and nothing after ``job.perform`` and before this method looks at the
  return value, so it is overridden there: a turn's end goes to :meth:`TurnSeam.end_turn` instead.
- ``Queue._enqueue_job`` (private; :func:`requeue`): the path rq's own retries take (``Job.retry``) to queue
  an existing job again under its id, on a given pipeline. A :class:`~fair_router.fairqueue.queue.FairQueue`
  overrides it (:mod:`fair_router.rq_internals.queue`): the job joins the back of its tenant's FIFO, and is
  not counted as a new enqueue (no backlog cap; the router's windows never see it).
- ``BaseWorker.cleanup_execution`` and ``increment_total_working_time``: as rq calls them after a job, so
  the StartedJobRegistry entry and the execution go, and the turn's run time reaches the worker's stats and
  the seam's ``job_ended`` hook (a runtime-charged FairQueue settles the turn's time).
- ``BaseWorker._stop_requested``: a warm shutdown already pending when a job starts (rq's SIGTERM handler
  sets it while the worker holds a job that left its queue): the job stops at its first checkpoint.
- Warm shutdown in the forking worker: rq's work horse runs in a process group of its own and never sees
  the SIGTERM its worker got. As rq's ``HerokuWorker`` does, the worker sends the horse :data:`TURN_SIGNAL`
  (SIGRTMIN) from ``handle_warm_shutdown_request``; the handler is installed in the worker process
  (``_install_signal_handlers``) so the horse inherits it from the fork (no window where the signal's
  default action, terminating, applies) and again in ``setup_work_horse_signals``. rq's handler only sets
  a flag there (``stop_turns``): unlike HerokuWorker's, it never raises into the job. An interruptible job
  then stops at its next checkpoint; any other job runs to its end, as with rq.
"""

from __future__ import annotations

import contextlib
import os
import signal
from types import FrameType
from typing import Any

from redis.client import Pipeline
from rq import Queue
from rq.executions import Execution
from rq.job import Job
from rq.utils import now
from rq.worker import BaseWorker

TURN_SIGNAL = signal.SIGRTMIN
"""What a forking worker sends its work horse on warm shutdown (rq's HerokuWorker uses it too)."""


class TurnSeam(BaseWorker):
    """rq's worker with the end of a job's turn recognised, and warm shutdown passed on to the running job."""

    # -- hooks (no-ops here) --------------------------------------------------------------------------------

    def is_turn_end(self, return_value: Any) -> bool:
        """Whether a job's return value ends a turn (then the job is queued again, rq's success skipped)."""
        return False

    def host_turns(self, active: bool, stop: bool) -> None:
        """A job is about to run in this process (``active``; ``stop``: a warm shutdown is already pending),
        or has ended. For the forking worker this runs before the fork: the work horse inherits it."""

    def stop_turns(self) -> None:
        """Warm shutdown: the job running in this process should stop at its next checkpoint."""

    def turn_ended(self, job: Job, queue: Queue, pipeline: Pipeline) -> None:
        """Queue writes on the MULTI that puts a job back in its queue at the end of a turn."""

    # -- a job's run ----------------------------------------------------------------------------------------

    def execute_job(self, job: Job, queue: Queue) -> None:
        """rq's, with ``host_turns`` around it."""
        self.host_turns(True, bool(self._stop_requested))
        try:
            super().execute_job(job, queue)
        finally:
            self.host_turns(False, False)

    def _finalize_success(self, job: Job, queue: Queue, execution: Execution, return_value: Any) -> None:
        """rq's handling of a job that returned, unless the return value ends a turn (module docstring)."""
        if self.is_turn_end(return_value):
            self.end_turn(job, queue, execution)
        else:
            super()._finalize_success(job, queue, execution, return_value)

    def end_turn(self, job: Job, queue: Queue, execution: Execution) -> None:
        """The job gave up its worker at a checkpoint: one MULTI takes its run time into the worker's stats
        (and ``job_ended``), removes its execution (StartedJobRegistry entry included) and queues it again
        under its id, its meta (the saved cursor) written with it. Not a success: no status FINISHED, no
        callback, result, dependents or rq rate-limit release (a job queued again keeps its rq slot, as a
        retried one does)."""
        job._result = None  # rq keeps the return value here and would save it with the job
        job.ended_at = now()
        with self.connection.pipeline() as pipe:
            if job.started_at is not None:
                self.increment_total_working_time(job.ended_at - job.started_at, pipe)
            self.cleanup_execution(job, pipeline=pipe, execution=execution)
            requeue(queue, job, pipe)
            self.turn_ended(job, queue, pipe)
            pipe.execute()
        self.log.info("Worker %s: job %s gave up its turn; queued again in %s", self.name, job.id, queue.name)

    def handle_warm_shutdown_request(self) -> None:
        """rq's (a log line), then ``stop_turns``: a job running in this process (SimpleWorker), or one this
        worker forks next, stops at its next checkpoint."""
        super().handle_warm_shutdown_request()  # type: ignore[no-untyped-call]
        self.stop_turns()


class ForkingTurnSeam(TurnSeam):
    """For rq's forking Worker: warm shutdown reaches the work horse as :data:`TURN_SIGNAL`."""

    _previous_turn_handler: Any = None

    def _install_signal_handlers(self) -> None:
        """rq's SIGINT/SIGTERM handlers, and the turn signal's, which a horse forked later inherits (the
        process's previous one is put back at teardown: the process may go on without this worker)."""
        super()._install_signal_handlers()  # type: ignore[no-untyped-call]
        self._previous_turn_handler = signal.signal(TURN_SIGNAL, self._turn_signal)

    def teardown(self) -> None:
        """rq's teardown; in the worker process, the turn signal's previous handler back."""
        super().teardown()  # type: ignore[no-untyped-call]
        if not self.is_horse and self._previous_turn_handler is not None:
            signal.signal(TURN_SIGNAL, self._previous_turn_handler)
            self._previous_turn_handler = None

    def setup_work_horse_signals(self) -> None:
        """rq's (SIGINT ignored, SIGTERM default), and the turn signal's handler."""
        super().setup_work_horse_signals()  # type: ignore[no-untyped-call]
        signal.signal(TURN_SIGNAL, self._turn_signal)

    def handle_warm_shutdown_request(self) -> None:
        """Also tell the running work horse, if any."""
        super().handle_warm_shutdown_request()
        pid = self.horse_pid
        if pid:
            with contextlib.suppress(ProcessLookupError):  # the horse ended meanwhile
                os.kill(pid, TURN_SIGNAL)

    def _turn_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_turns()


def requeue(queue: Queue, job: Job, pipeline: Pipeline) -> None:
    """Queue ``job`` again under its id on ``pipeline``, as rq's retries do (``Queue._enqueue_job``: status
    QUEUED, the job saved with its meta, its id pushed; a FairQueue puts it at the back of its tenant's FIFO,
    not counted as a new enqueue)."""
    queue._enqueue_job(job, pipeline=pipeline)
