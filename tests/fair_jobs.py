"""Job functions and classes for the fair-queue tests, importable by rq worker subprocesses (tests/ on
PYTHONPATH). Jobs log to Redis lists of the job's own connection, so every process shares one record."""

from __future__ import annotations

import os
import signal
import time

from rq import Worker, get_current_job
from rq.job import Job
from rq.queue import Queue

from fair_router import FairQueue

LOG = "test:fair:order"


def log(tenant: str, n: int) -> None:
    """Append ``tenant:n`` to the shared order log: the order the jobs actually ran in."""
    job = get_current_job()
    assert job is not None
    job.connection.rpush(LOG, f"{tenant}:{n}")


def span(tenant: str, seconds: float) -> None:
    """Run for ``seconds``; append ``tenant start end`` (Redis TIME, one clock for all processes)."""
    job = get_current_job()
    assert job is not None
    conn = job.connection
    start = float("{}.{:06d}".format(*conn.time()))
    time.sleep(seconds)
    end = float("{}.{:06d}".format(*conn.time()))
    conn.rpush("test:fair:spans", f"{tenant} {start} {end}")


def fail_once(key: str) -> str:
    """Fails on its first run, succeeds on the next (counts runs in ``key``)."""
    job = get_current_job()
    assert job is not None
    if int(job.connection.incr(key)) == 1:
        raise RuntimeError("first run fails")
    return "ok"


def log_after_a_failure(tenant: str, n: int) -> None:
    """Fails on its first run; logs as :func:`log` on the next."""
    job = get_current_job()
    assert job is not None
    if int(job.connection.incr(f"test:fair:failed:{tenant}:{n}")) == 1:
        raise RuntimeError("first run fails")
    log(tenant, n)


class QuickRecoverFairQueue(FairQueue):
    """A FairQueue that recovers popped-but-unstarted jobs after 0.5 s instead of 60 s."""

    recover_after = 0.5


class DiesAfterPopWorker(Worker):
    """A real rq worker that SIGKILLs itself right after popping a job, before the job starts."""

    def execute_job(self, job: Job, queue: Queue) -> None:
        os.kill(os.getpid(), signal.SIGKILL)



def sleep_ms(ms: float) -> None:
    """Run for ``ms`` milliseconds (the worker-time share tests' jobs)."""
    time.sleep(ms / 1000)
