"""The per-tier job-start counters (refusals by reason, slots acquired, released, reclaimed, parked, snoozed) as
``<tier>:<counter>`` fields of one hash. The controls report to a tally (:class:`TierCounters`), whose increments ride
the limiter's next round trip; the two counted at every job (:data:`BATCHED`) only once a second."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from redis import Redis
from redis.client import Pipeline

from fair_router.core.keys import Keys
from fair_router.core.text import as_text

COUNTERS = ("acquired", "refused", "paused", "rate_deferred", "snoozed", "parked", "released", "reclaimed")
"""Per-tier counters. A refused start counts once by reason (``refused`` at the limit, ``paused``, ``rate_deferred``)
and once by what became of the job (``parked`` in a FairQueue, ``snoozed`` on a plain queue)."""


BATCHED = ("acquired", "released")
"""The counters every job with a slot adds to: written when the oldest unwritten one is :data:`BATCH_SECONDS` old (or
with any other counter, or at a flush), not on every pipeline that passes by (two commands per job otherwise)."""
BATCH_SECONDS = 1.0


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
        self._since: float | None = None  # when the oldest unwritten count was added (monotonic)
        self._lock = threading.Lock()

    def add(self, tier: str, counter: str, amount: int = 1) -> None:
        """Add to one of ``tier``'s counters with the next round trip (:data:`BATCHED`: once due; or :meth:`flush`)."""
        if counter not in COUNTERS:
            raise ValueError(f"unknown counter {counter!r}: known counters are {', '.join(COUNTERS)}")
        if amount:
            with self._lock:
                self._pending[f"{tier}:{counter}"] += amount
                if self._since is None:
                    self._since = time.monotonic()

    def _due(self) -> bool:
        if any(field.rpartition(":")[2] not in BATCHED for field in self._pending):
            return True
        return self._since is not None and time.monotonic() - self._since >= BATCH_SECONDS

    def queue(self, pipe: Pipeline, force: bool = False) -> int:
        """Queue the pending increments on ``pipe`` if due (``force``: whatever their age); returns how many fields."""
        with self._lock:
            if not (force or self._due()):
                return 0
            pending, self._pending, self._since = self._pending, Counter(), None
        fields = 0
        for field, amount in pending.items():
            if amount:
                pipe.hincrby(self.keys.limit_stats(), field, amount)
                fields += 1
        return fields

    def flush(self) -> None:
        """Write the pending increments now (a worker does when it stops)."""
        with self.connection.pipeline(transaction=False) as pipe:
            if self.queue(pipe, force=True):
                pipe.execute()

    def read(self) -> dict[str, dict[str, int]]:
        """tier -> {counter: count} for every counter of :data:`COUNTERS`, from Redis."""
        return counter_table(self.connection.hgetall(self.keys.limit_stats()))
