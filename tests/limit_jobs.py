"""Job functions (and a tier resolver) for the concurrency-limit tests, importable by the rq worker
subprocesses (tests/ on PYTHONPATH). They talk to the Redis of the job that runs them."""

from __future__ import annotations

import json
import os
import signal
import time

from redis import Redis
from rq import get_current_job


def _connection() -> tuple[Redis, str]:
    job = get_current_job()
    assert job is not None, "only meant to run inside an rq worker"
    return job.connection, job.id


def _server_time(connection: Redis) -> float:
    seconds, micros = connection.time()
    return float(seconds) + micros / 1_000_000


def record(log_key: str, seconds: float) -> None:
    """Sleep ``seconds`` between two Redis TIME readings and append ``[start, end, job id, pid]`` to
    ``log_key`` (one clock for every worker process)."""
    connection, job_id = _connection()
    start = _server_time(connection)
    time.sleep(seconds)
    end = _server_time(connection)
    connection.rpush(log_key, json.dumps([start, end, job_id, os.getpid()]))


def boom() -> None:
    raise RuntimeError("planned failure")


def sleep_for(seconds: float) -> None:
    time.sleep(seconds)


def kill_own_horse() -> None:
    """SIGKILL the process running the job: only for forking workers, where that is the work horse."""
    os.kill(os.getpid(), signal.SIGKILL)


def slow_first_run(seconds: float) -> int:
    """Counts its runs in Redis and publishes the pid running it; sleeps ``seconds`` on the first run only."""
    connection, job_id = _connection()
    runs = int(connection.incr(f"test:runs:{job_id}"))
    connection.rpush(f"test:pids:{job_id}", os.getpid())
    if runs == 1:
        time.sleep(seconds)
    return runs


def mark(key: str) -> None:
    connection, _ = _connection()
    connection.set(key, 1)


def sigterm_own_worker(tenant: str) -> str:
    """Tier resolver that sends SIGTERM to the worker process looking the tier up (the worker looks tiers
    up while taking a slot, before the job starts): a shutdown landing in exactly that window."""
    if tenant == "doomed":
        os.kill(os.getpid(), signal.SIGTERM)
    return "free"
