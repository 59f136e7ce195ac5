"""The per-tier job-start counters (refusals by reason, slots acquired, released, reclaimed, parked, snoozed) as
``<tier>:<counter>`` fields of one hash. The controls report to a tally (:class:`TierCounters`), whose increments ride
the limiter's next round trip."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from redis import Redis
from redis.client import Pipeline

from fair_router.core.keys import Keys
from fair_router.core.text import as_text

COUNTERS = ("acquired", "refused", "paused", "rate_deferred", "snoozed", "parked", "released", "reclaimed")
"""Per-tier counters. A refused start counts once by reason (``refused`` at the limit, ``paused``, ``rate_deferred``)
and once by what became of the job (``parked`` in a FairQueue, ``snoozed`` on a plain queue)."""


def counter_table(raw: dict[Any, Any]) -> dict[str, dict[str, int]]:
    """The counters hash as tier -> every counter of :data:`COUNTERS` (0 when never written)."""
    table: dict[str, dict[str, int]] = {}
    for field, value in raw.items():
        tier, _, name = as_text(field).rpartition(":")
        table.setdefault(tier, dict.fromkeys(COUNTERS, 0))[name] = int(value)
    return table


class TierCounters:
    """Counts gathered in memory and written with the next pipeline that passes by (a Tally)."""

    def __init__(self, connection: Redis, keys: Keys) -> None:
        self.connection = connection
        self.keys = keys
        self._pending: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, tier: str, counter: str, amount: int = 1) -> None:
        """Add to one of ``tier``'s counters with the next round trip (or :meth:`flush`)."""
        if counter not in COUNTERS:
            raise ValueError(f"unknown counter {counter!r}: known counters are {', '.join(COUNTERS)}")
        if amount:
            with self._lock:
                self._pending[f"{tier}:{counter}"] += amount

    def queue(self, pipe: Pipeline) -> int:
        """Queue the pending increments on ``pipe``; returns how many fields."""
        with self._lock:
            pending, self._pending = self._pending, Counter()
        fields = 0
        for field, amount in pending.items():
            if amount:
                pipe.hincrby(self.keys.limit_stats(), field, amount)
                fields += 1
        return fields

    def flush(self) -> None:
        """Write the pending increments now (a worker does when it stops)."""
        with self.connection.pipeline(transaction=False) as pipe:
            if self.queue(pipe):
                pipe.execute()

    def read(self) -> dict[str, dict[str, int]]:
        """tier -> {counter: count} for every counter of :data:`COUNTERS`, from Redis."""
        return counter_table(self.connection.hgetall(self.keys.limit_stats()))
