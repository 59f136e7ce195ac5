"""The queue the router's one-round-trip enqueue saves a job with (:mod:`fair_router.routing.enqueue`): rq's
enqueue up to the save, the push left to the route.lua call queued after it on the same MULTI."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from redis.client import Pipeline
from rq import Queue
from rq.job import Job
from rq.queue import EnqueueArgs

PushCall = Callable[[Job, Pipeline, bool], None]
"""Queues the route.lua call that pushes ``job`` (``at_front``) on the pipeline that saved it."""


class PlacedQueue(Queue):
    """rq's Queue of a route's base family whose enqueue saves the job as rq's does but leaves the push, and the
    queue's registration, to route.lua (``push_job_id`` queues that call instead)."""

    def __init__(self, name: str, connection: Any) -> None:
        super().__init__(name, connection=connection)
        self._local = threading.local()  # per thread (a router may serve several): .job, .push_call

    def enqueue_with(self, push_call: PushCall, call: EnqueueArgs) -> Job:
        """rq's ``enqueue_call`` of ``call`` (whose pipeline is the router's), its push by ``push_call``."""
        self._local.push_call = push_call
        try:
            job: Job = self.enqueue_call(**call._asdict())
            return job
        finally:
            self._local.push_call = None

    def enqueue_job(self, job: Job, pipeline: Pipeline | None = None, at_front: bool = False,
                    unique: bool = False) -> Job:
        if pipeline is None or unique or job._dependency_ids or job.has_rate_limit:
            raise ValueError("PlacedQueue enqueues into the router's pipeline only, without dependencies, "
                             "rate limits or unique")
        self._local.job = job
        try:
            return self._enqueue_job(job, pipeline=pipeline, at_front=at_front)
        finally:
            self._local.job = None

    def push_job_id(self, job_id: str, pipeline: Pipeline | None = None, at_front: bool = False) -> None:
        job, push_call = getattr(self._local, "job", None), getattr(self._local, "push_call", None)
        if job is None or job.id != job_id or pipeline is None or push_call is None:
            raise RuntimeError(f"PlacedQueue {self.name!r}: push of {job_id!r} outside the router's enqueue")
        push_call(job, pipeline, bool(at_front))
