"""The worker-time scenario's worker: it notes each job's *worker time* (fetch start to after-job writes) and
*cycle* (from the previous job's end), written to one list as the worker stops (docs/benchmarks.md)."""

from __future__ import annotations

import json
import time
from typing import Any

from redis import Redis
from rq.job import Job
from rq.queue import Queue

from fair_router.core.tenancy import usable_tenant
from fair_router.demo.metrics import JobTiming
from fair_router.rq_internals.jobclock import waited_until
from fair_router.workers.weighted import WeightedSimpleWorker

SPANS = "fair_router_flood:worker_spans"  # LIST of JSON [tenant, taken (epoch s), worker s, cycle s]


class TimedWorker(WeightedSimpleWorker):
    """WeightedSimpleWorker noting each job's worker time and cycle (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._spans: list[str] = []
        self._last_end: float | None = None
        self._fetching: float = 0.0

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        self._fetching = time.perf_counter()
        return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)

    def execute_job(self, job: Job, queue: Queue) -> None:
        taken = time.time()
        waited = waited_until(job)
        fetched = self._fetching if waited is None else max(self._fetching, waited)
        try:
            super().execute_job(job, queue)
        finally:
            ended = time.perf_counter()
            cycle = ended - (self._last_end if self._last_end is not None else fetched)
            self._last_end = ended
            tenant = usable_tenant(job.meta, warn=False)
            self._spans.append(json.dumps([tenant, taken, ended - fetched, cycle]))

    def teardown(self) -> None:
        if self._spans and not self.is_horse:
            self.connection.rpush(SPANS, *self._spans)
            self._spans.clear()
        super().teardown()


def read_spans(connection: Redis) -> tuple[list[JobTiming], list[JobTiming]]:
    """Take the spans TimedWorkers wrote: each job's worker time and cycle, as JobTimings."""
    with connection.pipeline() as pipe:
        pipe.lrange(SPANS, 0, -1)
        pipe.delete(SPANS)
        raw, _ = pipe.execute()
    worker, cycle = [], []
    for item in raw:
        tenant, taken, spent, whole = json.loads(item)
        worker.append(JobTiming(tenant, "mixed", 0.0, taken, taken + spent))
        cycle.append(JobTiming(tenant, "mixed", 0.0, taken, taken + whole))
    return worker, cycle
