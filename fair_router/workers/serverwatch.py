"""A weighted worker's look at its Redis servers' ``maxmemory-policy`` as it starts: one ``INFO memory`` per server
it writes to, a warning for each that is not ``noeviction`` or cannot be read."""

from __future__ import annotations

from typing import Any

from fair_router.store.serverconf import PolicyReading, policy_readings


def warn_about_server_settings(worker: Any) -> list[PolicyReading]:
    """Read the policy of every server ``worker`` (a weighted worker) writes to; log a warning line naming the server,
    the setting, its value and the fix for each one that may evict keys or does not say. Returns the readings."""
    readings = policy_readings([worker.connection, worker.state_connection, worker.gate.limiter.connection])
    for reading in readings:
        if not reading.safe:
            worker.log.warning("Worker %s: %s", worker.name, reading.describe())
    return readings
