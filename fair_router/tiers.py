"""Plan tiers: which tier a tenant is on, and the tier's base queue (Specvital ADR-16).

A tenant's tier comes from the configured resolver (``tiers.resolver``, "package.module:function",
tenant -> tier name), else from a Redis hash written by :meth:`FairRouter.set_tier` /
``fair-router tier set``. Lookups are cached in-process for a few seconds: tiers change rarely and
the lookup sits on the enqueue and fetch paths, so a change takes effect within ``cache_ttl``.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable

from redis import Redis

from fair_router.keys import Keys
from fair_router.settings import TiersConfig

PRIORITY, DEFAULT, SCHEDULED = "priority", "default", "scheduled"


def load_resolver(path: str) -> Callable[[str], object]:
    """Import ``package.module:function`` (validated when settings load)."""
    module_name, _, attribute = path.partition(":")
    resolver: Callable[[str], object] = getattr(importlib.import_module(module_name), attribute)
    return resolver


class TierBook:
    """Tenant -> tier, with a short in-process cache; knows each tier's limits and queue class."""

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
        self._cache: dict[str, tuple[float, str]] = {}

    def tier(self, tenant: str) -> str:
        """The tenant's tier; unknown tenants and unknown tier names count as ``tiers.default``."""
        now = self._clock()
        cached = self._cache.get(tenant)
        if cached is not None and cached[0] > now:
            return cached[1]
        if self._resolver is not None:
            found: object = self._resolver(tenant)
        else:
            raw = self.connection.hget(self.keys.tiers(), tenant)
            found = raw.decode() if isinstance(raw, bytes) else raw
        tier = found if isinstance(found, str) and found in self.config.concurrency else self.config.default
        if len(self._cache) > 100_000:  # bounded: drop everything rather than track recency
            self._cache.clear()
        self._cache[tenant] = (now + self.cache_ttl, tier)
        return tier

    def set(self, tenant: str, tier: str) -> None:
        """Store ``tenant``'s tier in Redis (used when no resolver is configured)."""
        if tier not in self.config.concurrency:
            known = ", ".join(sorted(self.config.concurrency))
            raise ValueError(f"unknown tier {tier!r}: known tiers are {known}")
        self.connection.hset(self.keys.tiers(), tenant, tier)
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
