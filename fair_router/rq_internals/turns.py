"""The rq seam of interruptible iteration: a turn's end taken out of rq's success handling, and the signal that
tells a forking worker's horse about a warm shutdown (docs/interruptible.md, "Inside the worker")."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable

from redis.client import Pipeline
from rq import Queue
from rq.executions import Execution
from rq.job import Job
from rq.utils import now
from rq.worker import BaseWorker

TURN_SIGNAL = signal.SIGRTMIN
"""What a forking worker sends its work horse on warm shutdown (rq's HerokuWorker uses it too)."""


def end_turn(worker: BaseWorker, job: Job, queue: Queue, execution: Execution,
             also: Callable[[Job, Queue, Pipeline], None]) -> None:
    """The job gave up its worker at a checkpoint: one MULTI adds its run time to the worker's stats, removes its
    execution and queues it again under its id with its meta; no success handling."""
    job._result = None  # rq keeps the return value here and would save it with the job
    job.ended_at = now()
    with worker.connection.pipeline() as pipe:
        if job.started_at is not None:
            worker.increment_total_working_time(job.ended_at - job.started_at, pipe)
        worker.cleanup_execution(job, pipeline=pipe, execution=execution)
        requeue(queue, job, pipe)
        also(job, queue, pipe)
        pipe.execute()
    worker.log.info("Worker %s: job %s gave up its turn; queued again in %s", worker.name, job.id, queue.name)


def tell_horse(pid: int) -> None:
    """Send a running work horse (``pid``, 0 for none) the turn signal: rq's horse runs in a process group of its
    own and never sees its worker's SIGTERM."""
    if pid:
        with contextlib.suppress(ProcessLookupError):  # the horse ended meanwhile
            os.kill(pid, TURN_SIGNAL)


def requeue(queue: Queue, job: Job, pipeline: Pipeline) -> None:
    """Queue ``job`` again under its id on ``pipeline``, as rq's retries do (``Queue._enqueue_job``; a FairQueue
    puts it at the back of its tenant's FIFO, not counted as a new enqueue)."""
    queue._enqueue_job(job, pipeline=pipeline)
