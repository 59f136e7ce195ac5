"""Fewer Redis round trips in rq's worker loop between two jobs (both weighted workers use it).

Between the end of one job and the start of the next, rq 2.x writes the worker's heartbeat five times
(after the job, with the suspension check, before the fetch, after it, and with the job's preparation),
three of them as two round trips each (HSET, then EXPIRE), and writes the "idle" state twice. On a
busy worker those writes are a third of the ~17 round trips between two jobs. They decide how long a
job that arrives while every worker is busy waits for one to come free, and how many jobs a worker
gets through.

This mixin keeps what the heartbeat is for (the worker hash outlives the worker's next heartbeat) and
drops the repeats:

- a heartbeat sent without a pipeline goes as one round trip (HSET and EXPIRE pipelined);
- it is skipped when another heartbeat set at least the same TTL less than ``HEARTBEAT_REPEAT``
  seconds ago (the worker key then expires at most that much earlier than rq would have let it);
- writing the state the worker is already in is skipped (only this worker writes its state).

Heartbeats inside rq's own pipelines (job preparation, suspension check, the forking worker's job
monitoring) are sent as rq sends them. Preparing a job sets a job-specific TTL, possibly in the work
horse, whose heartbeats the worker process never sees; so every job ends with the last beat
forgotten, and the plain heartbeat rq sends after it restores the worker's TTL.
"""

from __future__ import annotations

import time
from typing import Any

from redis.client import Pipeline
from rq.job import Job
from rq.queue import Queue
from rq.worker import BaseWorker

HEARTBEAT_REPEAT = 1.0
"""Seconds within which a heartbeat of at least the same TTL makes another one redundant."""


class LeanBookkeepingMixin(BaseWorker):
    """rq's worker with repeated heartbeats and state writes between jobs left out."""

    _last_beat: tuple[float, int] | None = None
    """(monotonic time, TTL) of the last heartbeat this process sent or queued on a pipeline."""

    def heartbeat(self, timeout: int | None = None, pipeline: Pipeline | None = None) -> None:
        """rq's heartbeat as one round trip, skipped when a recent one already set at least this TTL."""
        ttl = timeout or self.worker_ttl + 60  # rq's own default
        if pipeline is not None:
            super().heartbeat(ttl, pipeline=pipeline)
        else:
            last = self._last_beat
            if last is not None and last[1] >= ttl and time.monotonic() - last[0] < HEARTBEAT_REPEAT:
                return
            with self.connection.pipeline(transaction=False) as pipe:
                super().heartbeat(ttl, pipeline=pipe)
                pipe.execute()
        self._last_beat = (time.monotonic(), ttl)

    def set_state(self, state: str, pipeline: Pipeline | None = None) -> Any:
        """rq's set_state, minus the write when the worker is in that state already."""
        if pipeline is None and state == self.get_state():
            return None
        return super().set_state(state, pipeline=pipeline)

    def execute_job(self, job: Job, queue: Queue) -> None:
        """rq's execute_job; the job's own heartbeat TTL then makes the next plain heartbeat due."""
        try:
            super().execute_job(job, queue)
        finally:
            self._last_beat = None
