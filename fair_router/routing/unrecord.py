"""Taking back what routing recorded for an enqueue that then failed, so no phantom entry counts in a window.

route.lua records a job before rq's MULTI saves it (two hash tags: not one atomic step). When the enqueue fails
(``maxmemory``, a lost connection, a backlog cap), :class:`Unrecord` runs ``lua/unrecord.lua`` for the jobs whose
hash does not exist (rq's enqueue is one MULTI: an existing hash was queued). When Redis cannot be reached even
for that, the entry stays until it leaves its window (logged): the gap is the outage itself."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from redis import Redis
from redis.exceptions import RedisError
from rq.job import Job

from fair_router.core.keys import Keys
from fair_router.routing.placement import Pending, Placement, Route
from fair_router.store.scripts import UnrecordScript

logger = logging.getLogger("fair_router")

Recorded = tuple[str, str, str]
"""One job routing recorded: (tenant, job id, the queue route.lua counted it for)."""


def recorded_by(route: Route, pendings: Sequence[Pending], placements: Sequence[Placement]) -> list[Recorded]:
    """What route.lua recorded for these jobs: (tenant, job id, the family it counted it for)."""
    return [(pending.tenant, pending.job_id, placed.rule.queue if placed.rule else route.queue)
            for pending, placed in zip(pendings, placements, strict=True)
            if pending.record and pending.tenant is not None]


class Unrecord:
    """Removes the window entries of recorded jobs whose enqueue did not happen."""

    def __init__(self, connection: Redis, keys: Keys) -> None:
        self.connection = connection
        self.keys = keys
        self._unrecord = UnrecordScript(connection)

    def __call__(self, job_key: str, recorded: Sequence[Recorded], job_class: type[Job] = Job,
                 jobs_on: Redis | None = None) -> int:
        """Take back the entries of ``recorded`` (jobs of ``job_key``) whose job hash does not exist (on
        ``jobs_on``, the Redis the jobs were enqueued into: a shard's; else the router's); returns how many were
        removed. Never raises: it runs while another error is on its way to the caller."""
        if not recorded:
            return 0
        try:
            with (jobs_on or self.connection).pipeline(transaction=False) as pipe:
                for _, job_id, _ in recorded:
                    pipe.exists(job_class.key_for(job_id))
                present = pipe.execute()
            missing = [entry for entry, found in zip(recorded, present, strict=True) if not found]
            if not missing:
                return 0
            tenants: dict[str, int] = {}
            jobs = [(tenants.setdefault(tenant, len(tenants)), job_id, queue) for tenant, job_id, queue in missing]
            windows = [self.keys.window(job_key, tenant) for tenant in tenants]
            return self._unrecord(windows, self.keys.routed(job_key), jobs, self.keys.waiting(job_key)).run()
        except RedisError as exc:
            logger.warning("routing: could not take back the window entries of %d jobs of %s whose enqueue "
                           "failed (%s); they count toward their tenants' rules until they leave the window",
                           len(recorded), job_key, exc)
            return 0
