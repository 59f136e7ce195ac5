"""Where a released slot ends its tenant's parks: in the worker's own fair queues on the release's round trip, and
in every other fair queue a refused start parked the tenant in (lua/release.lua); crash recovery's too."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from redis import Redis
from redis.client import Pipeline
from rq.job import Job

from fair_router.core.jobmeta import META_SYSTEM
from fair_router.core.tenancy import usable_tenant
from fair_router.fairqueue.queue import FairQueue
from fair_router.workers.limiter import WorkerGate

if TYPE_CHECKING:
    from fair_router.config.settings import Settings


class Unparker:
    """Ends a tenant's parks when its slot is released. ``own``: the worker's fair queues (the list itself, which
    grows as queues are marked fair)."""

    def __init__(self, own: list[FairQueue], gate: WorkerGate, connection: Redis, settings: Settings) -> None:
        self.own, self.gate, self.connection, self.settings = own, gate, connection, settings
        self._others: dict[str, FairQueue] = {}  # fair queues the worker does not serve, built once each
        gate.limiter.wake_org = self.wake_org_parked

    def unpark(self, tenant: str, pipe: Pipeline, job_id: str = "", org: str | None = None) -> None:
        """Unpark ``tenant`` in the worker's own fair queues (queued on the release's pipeline), and its org
        ``org`` (the job's) where a pop parked it at its limit."""
        limit, org_limit = self._limit(tenant, org), self._org_limit(org)
        for queue in self.own:
            queue.unpark(tenant, pipeline=pipe, job_id=job_id, limit=limit, org=org, org_limit=org_limit, ours=True)

    def wake_parked(self, tenant: str, job_id: str, names: list[str], pipe: Pipeline) -> None:
        """``tenant`` was parked at its limit in fair queues ``names``: unpark it in those the worker does not
        serve (its own were unparked with the release)."""
        own = {queue.name for queue in self.own}
        limit = self._limit(tenant)
        for name in names:
            if name not in own:
                self._other(name).unpark(tenant, pipeline=pipe, job_id=job_id, limit=limit)

    def wake_org_parked(self, parks: list[tuple[str, str]], pipe: Pipeline, org: str | None = None) -> None:
        """Org ``org``'s release took these ``(tenant, fair queue)`` parks its limit made: unpark each tenant there,
        and the org where its refusal parked it."""
        own = {queue.name: queue for queue in self.own}
        org_limit = self._org_limit(org)
        for tenant, name in parks:
            queue = own.get(name) or self._other(name)
            queue.unpark(tenant, pipeline=pipe, limit=self._limit(tenant, org), org=org, org_limit=org_limit)

    def reclaim(self, job: Job) -> None:
        """A job crash recovery handed back frees its tenant's slot now rather than when its lease expires, and
        ends the tenant's parks as a release does."""
        tenant = usable_tenant(job.meta, self.settings.tenant_max_bytes)  # an unusable one took no slot
        if self.gate.slots and tenant is not None and not job.meta.get(META_SYSTEM):
            org = self.gate.org_of(job)[0]
            self.gate.limiter.reclaim(tenant, job.id, also=partial(self.unpark, tenant, job_id=job.id, org=org),
                                      wake=partial(self.wake_parked, tenant, job.id), org=org)

    def _limit(self, tenant: str, org: str | None = None) -> int | None:
        return self.gate.limiter.tiers.profile(tenant, org).limit if self.gate.slots else None

    def _org_limit(self, org: str | None) -> int | None:
        """The org's concurrency limit as workers report it to fair queues (0 none, None not known)."""
        found = self.gate.limiter.org_profile
        if org is None or not self.gate.slots or found is None:
            return None
        return found(org).limit or 0

    def _other(self, name: str) -> FairQueue:
        queue = self._others.get(name)
        if queue is None:
            queue = self._others[name] = FairQueue(name, connection=self.connection, settings=self.settings)
        return queue
