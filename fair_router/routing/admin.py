"""The per-tenant admin API a :class:`~fair_router.routing.router.FairRouter` offers: a tenant's tier, its
overrides of the tier's values, pause and resume, and its running and waiting jobs.

Used by ``fair-router tier|tenant`` and the dashboard's actions. It is apart from the router's own work
(recording enqueues, choosing and enqueueing into queues) because it shares none of it: only the connection,
the keys and the tier book. FairRouter inherits it, so ``router.pause(tenant)`` and the rest stay where
callers find them.
"""

from __future__ import annotations

from redis import Redis
from rq import Queue
from rq.utils import as_text

from fair_router.controls.pauses import TenantPauses
from fair_router.controls.rates import Rate
from fair_router.routing.tiers import TenantOverrides, TenantProfile, TierBook
from fair_router.store.keys import Keys, encode


class TenantAdmin:
    """Read and change one tenant's controls; every worker and producer sees a change within 5 s."""

    def __init__(self, connection: Redis, keys: Keys, tiers: TierBook) -> None:
        self.connection = connection
        self.keys = keys
        self.tiers = tiers
        self._pauses = TenantPauses(connection, keys)

    # -- tiers ---------------------------------------------------------------------------------

    def set_tier(self, tenant: str, tier: str) -> None:
        """Put ``tenant`` on ``tier`` (stored in Redis; used when no tier resolver is configured)."""
        self.tiers.set(tenant, tier)

    def get_tier(self, tenant: str) -> str:
        """``tenant``'s tier (``tiers.default`` when unknown)."""
        return self.tiers.tier(tenant)

    # -- tenant controls -------------------------------------------------------------------------

    def set_tenant(
        self,
        tenant: str,
        limit: int | None = None,
        weight: float | None = None,
        rate: str | Rate | None = None,
        burst: int | None = None,
        max_backlog: int | None = None,
        reset: bool = False,
    ) -> TenantProfile:
        """Override ``tenant``'s tier values: concurrency ``limit``, fair-share ``weight``, ``rate`` ("10/s")
        with its ``burst``, and ``max_backlog`` (per fair queue). Values left None stay as they were;
        ``reset`` drops every earlier override first. Validated (pydantic's ValidationError names the
        value); every worker and producer uses it within its tier cache's life (5 s). Returns the profile
        now in effect."""
        overrides = TenantOverrides(limit=limit, weight=weight, rate=rate, burst=burst, max_backlog=max_backlog)
        return self.tiers.set_overrides(tenant, overrides, reset=reset)

    def tenant(self, tenant: str) -> TenantProfile:
        """The values in effect for ``tenant`` (tier, limit, weight, rate, burst, max_backlog, overrides)."""
        return self.tiers.profile(tenant)

    def pause(self, tenant: str) -> None:
        """No job of ``tenant`` starts until :meth:`resume`; its jobs wait (nothing is failed or lost).
        System jobs are not paused."""
        self._pauses.pause(tenant)

    def resume(self, tenant: str) -> None:
        """``tenant``'s jobs may start again (fair queues serve it at once)."""
        self._pauses.resume(tenant)

    def paused(self, tenant: str) -> bool:
        """Whether ``tenant`` is paused."""
        return self._pauses.paused(tenant)

    def tenant_jobs(self, tenant: str) -> tuple[int, dict[str, int]]:
        """``tenant``'s running jobs (unexpired concurrency leases; 0 when limits are off) and its waiting jobs
        per fair queue that has any (queue name -> count)."""
        queues = sorted(as_text(raw) for raw in self.connection.smembers(Queue.redis_queues_keys))
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.time()
            pipe.zrange(self.keys.leases(tenant), 0, -1, withscores=True)
            for key in queues:
                pipe.hget(self.keys.fair_queue(key).backlog, encode(tenant))
            (seconds, micros), leases, *counts = pipe.execute()
        now_ms = seconds * 1000 + micros // 1000
        running = sum(1 for _, expiry in leases if expiry > now_ms)
        prefix = len(Queue.redis_queue_namespace_prefix)
        waiting = {key[prefix:]: int(count) for key, count in zip(queues, counts, strict=True) if count}
        return running, waiting
