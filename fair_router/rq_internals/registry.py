"""The rq seam, registry side: crash recovery's view of rq 3.0's StartedJobRegistry (members ``<job id>:<execution
id>``, the execution's ``last_heartbeat``, ``cleanup`` and ``get_queue``)."""

from __future__ import annotations

import logging
from typing import Any

from redis import Redis
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.executions import Execution
from rq.job import JobStatus
from rq.registry import StartedJobRegistry
from rq.utils import parse_composite_key

from fair_router.core.text import as_text

logger = logging.getLogger("fair_router")


def started_key(queue: Queue) -> str:
    """The key of ``queue``'s StartedJobRegistry (members ``<job id>:<execution id>``, scored by deadline)."""
    return StartedJobRegistry(queue=queue).key


def execution_key(member: str, connection: Redis) -> str:
    """The execution hash a StartedJobRegistry member names (its ``last_heartbeat``: the job's, epoch seconds)."""
    return Execution.from_composite_key(member, connection).key


def has_execution(member: str) -> bool:
    """Whether a StartedJobRegistry member names an execution (rq >= 2.0); one without has only rq's deadline."""
    _, execution_id = parse_composite_key(member)
    return bool(execution_id)


class StagedRegistry(StartedJobRegistry):
    """rq's StartedJobRegistry of ``queue`` pointed at ``key``, so that its ``cleanup`` (rq's handling of abandoned
    jobs) runs on exactly the entries staged there: it relies on rq's ``cleanup`` reading and trimming only
    ``self.key`` and getting the queue to retry on from ``get_queue()``."""

    def __init__(self, queue: Queue, key: str, death_penalty_class: Any) -> None:
        super().__init__(queue=queue, job_class=queue.job_class, death_penalty_class=death_penalty_class)
        self.key = key
        self._queue = queue

    def get_queue(self) -> Queue:
        """The worker's own queue object (a FairQueue stays one), as rq's worker uses for a failed job's
        retry; rq's maintenance would build a plain ``Queue(name)``."""
        return self._queue

    def cleanup(self, timestamp: float | None = None, exception_handlers: list[Any] | None = None) -> None:
        """rq's cleanup, after the entries of jobs that never started (taken up, not yet STARTED) are put back on their
        queue: rq 3.0's would drop them, leaving such a job QUEUED on no queue."""
        for raw in self.connection.zrange(self.key, 0, -1):
            member = as_text(raw)
            job_id, _ = parse_composite_key(member)
            try:
                job = self.job_class.fetch(job_id, connection=self.connection, serializer=self.serializer)
            except NoSuchJobError:
                continue  # rq's cleanup skips it too
            if job.get_status(refresh=False) == JobStatus.QUEUED and job.origin == self._queue.name:
                if self.connection.lpos(self._queue.key, job_id) is None:
                    self._queue.push_job_id(job_id, at_front=True)  # not a new enqueue: no cap, no record
                    logger.warning("crash recovery: job %s never started before its worker died; queued again", job_id)
                self.connection.zrem(self.key, member)
        super().cleanup(timestamp, exception_handlers)


def job_id_of(member: str) -> str:
    """The job id of a StartedJobRegistry member (``<job id>:<execution id>``, or a bare job id)."""
    job_id, _ = parse_composite_key(member)
    return str(job_id)
