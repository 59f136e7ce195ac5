"""Job functions for the crash-recovery and reliability tests, importable by the rq worker subprocesses
(tests/ on PYTHONPATH). They talk to the Redis of the job that runs them, or write files."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from rq import get_current_job


def _server_time() -> float:
    job = get_current_job()
    assert job is not None, "only meant to run inside an rq worker"
    seconds, micros = job.connection.time()
    return float(seconds) + micros / 1_000_000


def slow_first_run(seconds: float) -> int:
    """Appends ``[server time, pid]`` to ``test:starts:<job id>`` as each run starts; sleeps ``seconds`` on
    the first run only (the run a test kills), so a rerun ends at once. Returns the run's number."""
    job = get_current_job()
    assert job is not None, "only meant to run inside an rq worker"
    runs = int(job.connection.rpush(f"test:starts:{job.id}", json.dumps([_server_time(), os.getpid()])))
    if runs == 1:
        time.sleep(seconds)
    return runs


def long_job(seconds: float) -> int:
    """Counts its runs in ``test:starts:<job id>`` and works ``seconds`` every time (a job that is alive)."""
    job = get_current_job()
    assert job is not None, "only meant to run inside an rq worker"
    runs = int(job.connection.rpush(f"test:starts:{job.id}", json.dumps([_server_time(), os.getpid()])))
    time.sleep(seconds)
    return runs


def chaos_job(runs_dir: str, seconds: float) -> str:
    """Writes one file per run start (``<job id>.<pid>.<ns>``, outside Redis, so a Redis restart cannot
    lose it) and sleeps ``seconds``: long enough for a kill to land mid-job."""
    job = get_current_job()
    assert job is not None, "only meant to run inside an rq worker"
    Path(runs_dir, f"{job.id}.{os.getpid()}.{time.time_ns()}").touch()
    time.sleep(seconds)
    return job.id
