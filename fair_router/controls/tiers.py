"""Plan tiers: which tier a tenant is on, the tier's base queue, and the values that apply to one tenant
(its :class:`~fair_router.core.profiles.TenantProfile`: concurrency limit, fair-share weight, rate, backlog cap).

A tenant's tier comes from the configured resolver (``tiers.resolver``, "package.module:function",
tenant -> tier name), else from a Redis hash written by :meth:`FairRouter.set_tier` /
``fair-router tier set``. Per-tenant overrides (:meth:`FairRouter.set_tenant`) beat the tier's values;
they live in one small Redis hash per tenant. Lookups are cached in-process for a few seconds: they
change rarely and sit on the enqueue and fetch paths, so a change takes effect fleet-wide within
``cache_ttl``.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable

from pydantic import ValidationError
from redis import Redis

from fair_router.config.settings import TiersConfig
from fair_router.core.keys import Keys
from fair_router.core.profiles import DEFAULT, PRIORITY, SCHEDULED, TenantOverrides, TenantProfile

logger = logging.getLogger("fair_router")


def load_resolver(path: str) -> Callable[[str], object]:
    """Import ``package.module:function`` (validated when settings load)."""
    module_name, _, attribute = path.partition(":")
    resolver: Callable[[str], object] = getattr(importlib.import_module(module_name), attribute)
    return resolver


class TierBook:
    """Tenant -> tier and profile, with a short in-process cache; knows each tier's limits and queue class."""

    def __init__(
        self,
        connection: Redis,
        keys: Keys,
        config: TiersConfig | None = None,
        cache_ttl: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connection = connection
        self.keys = keys
        self.config = config or TiersConfig()
        self.cache_ttl = cache_ttl
        self._clock = clock
        self._resolver = load_resolver(self.config.resolver) if self.config.resolver else None
        self._cache: dict[str, tuple[float, TenantProfile]] = {}

    def tier(self, tenant: str) -> str:
        """The tenant's tier; unknown tenants and unknown tier names count as ``tiers.default``."""
        return self.profile(tenant).tier

    def profile(self, tenant: str) -> TenantProfile:
        """The tenant's tier and the values in effect for it (overrides beat the tier's); one round trip
        per tenant per ``cache_ttl``."""
        now = self._clock()
        cached = self._cache.get(tenant)
        if cached is not None and cached[0] > now:
            return cached[1]
        with self.connection.pipeline(transaction=False) as pipe:
            if self._resolver is None:
                pipe.hget(self.keys.tiers(), tenant)
            pipe.hgetall(self.keys.overrides(tenant))
            pipe.exists(self.keys.paused(tenant))
            *replies, paused = pipe.execute()
        if self._resolver is not None:
            found: object = self._resolver(tenant)
        else:
            found = replies[0].decode() if isinstance(replies[0], bytes) else replies[0]
        tier = found if isinstance(found, str) and found in self.config.concurrency else self.config.default
        profile = self._profile(tier, self._overrides(tenant, replies[-1]), bool(paused))
        if len(self._cache) > 100_000:  # bounded: drop everything rather than track recency
            self._cache.clear()
        self._cache[tenant] = (now + self.cache_ttl, profile)
        return profile

    def _profile(self, tier: str, own: TenantOverrides, paused: bool) -> TenantProfile:
        config = self.config
        return TenantProfile(
            tier=tier,
            limit=own.limit or config.limit(tier),
            weight=own.weight or config.weight(tier),
            rate=own.rate or config.rate.get(tier),
            burst=own.burst or config.burst.get(tier, 1),
            max_backlog=own.max_backlog or config.max_backlog.get(tier),
            overrides=own,
            paused=paused,
        )

    @staticmethod
    def _overrides(tenant: str, raw: dict[bytes, bytes]) -> TenantOverrides:
        """The stored overrides; a value that does not validate (written by hand) is logged and ignored."""
        fields = {key.decode(): value.decode() for key, value in raw.items()}
        try:
            return TenantOverrides(**fields)
        except ValidationError as exc:
            logger.warning("ignoring invalid overrides of tenant %r in Redis: %s", tenant, exc)
            return TenantOverrides()

    def set_overrides(self, tenant: str, overrides: TenantOverrides, reset: bool = False) -> TenantProfile:
        """Store the values set in ``overrides`` (``reset``: drop every earlier override first); returns the
        profile now in effect. Other processes see it within their ``cache_ttl``."""
        key = self.keys.overrides(tenant)
        with self.connection.pipeline() as pipe:
            if reset:
                pipe.delete(key)
            for name, value in overrides.fields().items():
                pipe.hset(key, name, value)
            pipe.execute()
        self._cache.pop(tenant, None)
        return self.profile(tenant)

    def set(self, tenant: str, tier: str) -> None:
        """Store ``tenant``'s tier in Redis (used when no resolver is configured)."""
        if tier not in self.config.concurrency:
            known = ", ".join(sorted(self.config.concurrency))
            raise ValueError(f"unknown tier {tier!r}: known tiers are {known}")
        self.connection.hset(self.keys.tiers(), tenant, tier)
        self._cache.pop(tenant, None)

    def forget(self, tenant: str) -> None:
        """Drop ``tenant`` from this process's cache (after a write here)."""
        self._cache.pop(tenant, None)

    def queue_class(self, tenant: str | None, system: bool = False) -> str:
        """``scheduled`` for system jobs (no tenant, or system=True), ``priority`` for priority tiers,
        else ``default``."""
        if system or tenant is None:
            return SCHEDULED
        return PRIORITY if self.tier(tenant) in self.config.priority else DEFAULT

    def limit(self, tier: str) -> int:
        """How many jobs a tenant on ``tier`` may run at once."""
        return self.config.limit(tier)
