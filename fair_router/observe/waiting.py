"""Per-tenant waiting counts of the plain queues fair-router routes into, counted by route.lua and taken back at a
weighted worker's start, so the dashboard ranks them without scanning a list (docs/observability.md)."""

from __future__ import annotations

from typing import Any

from redis import Redis
from redis.client import Pipeline
from rq.job import Job

from fair_router.core.jobmeta import META_WAITING
from fair_router.core.keys import Keys, encode
from fair_router.store.scripts import RewaitScript, UnwaitScript


def field(queue: str, tenant: str) -> str:
    """The waiting counts' field of ``tenant`` (as given, not encoded) in ``queue``."""
    return f"{queue}|{encode(tenant)}"


def parse_field(name: str) -> tuple[str, str]:
    """(queue, encoded tenant) of a waiting counts' field (queue names hold no '|')."""
    queue, _, tenant = name.partition("|")
    return queue, tenant


class WaitCounts:
    """Takes started jobs out of the plain queues' waiting counts, on one Redis (the worker's)."""

    def __init__(self, connection: Redis, keys: Keys) -> None:
        self.connection = connection
        self.keys = keys
        self._unwait = UnwaitScript(connection)
        self._rewait = RewaitScript(connection)

    def started(self, job: Job, pipe: Pipeline | None) -> int | None:
        """Queue on ``pipe`` (rq's job-start MULTI) the end of ``job``'s count, if it has one, and return the
        place of its reply there (for :meth:`refused`); None: run it now on this object's connection (a Redis
        Cluster: the counts are not on rq's slot), or nothing to do."""
        job_key = (job.meta or {}).get(META_WAITING)
        if not job_key:
            return None
        call = self._unwait(self.keys.waiting(str(job_key)), [job.id])
        if pipe is None:
            call.run()
            return None
        place = len(pipe)
        call.queue(pipe)
        return place

    def refused(self, job: Job, reply: Any, pipe: Pipeline) -> None:
        """``job``'s start was refused after :meth:`started` took its count (``reply``, that call's reply): it
        counts waiting again, queued on ``pipe``."""
        taken = self._unwait.parse(reply)
        job_key = (job.meta or {}).get(META_WAITING)
        if taken and job_key:
            self._rewait(self.keys.waiting(str(job_key)), taken).queue(pipe)
