"""The concurrency limiter the workers run: the controls' slots with their counts kept by ``TierCounters``; wired
here, above both, so that ``controls`` never imports ``observe``."""

from __future__ import annotations

import random

from redis import Redis

from fair_router.config.sections import ConcurrencyConfig
from fair_router.controls.concurrency import ConcurrencySlots
from fair_router.controls.gate import TenantGate
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.observe.counters import TierCounters
from fair_router.store.scripts import Clock


class ConcurrencyLimiter(ConcurrencySlots):
    """Per-tenant concurrency slots whose counts go to a TierCounters (:meth:`counters` reads them)."""

    def __init__(self, connection: Redis, keys: Keys, tiers: TierBook, config: ConcurrencyConfig,
                 clock: Clock | None = None, rng: random.Random | None = None) -> None:
        self.counts = TierCounters(connection, keys)
        super().__init__(connection, keys, tiers, config, self.counts, clock, rng)

    def counters(self) -> dict[str, dict[str, int]]:
        """tier -> {counter: count} for every counter of ``observe.counters.COUNTERS``, from Redis."""
        return self.counts.read()


WorkerGate = TenantGate[ConcurrencyLimiter]
"""The workers' start checks: a :class:`TenantGate` over their limiter."""
