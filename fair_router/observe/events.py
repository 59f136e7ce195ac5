"""Event counters kept beside the start records: a hash of ``<event>:<queue>`` -> count.

Events are rare (a worker died between pop and start, a job was abandoned), so a count is a plain
``HINCRBY``, on the caller's pipeline when it has one.
"""

from __future__ import annotations

from typing import Any

from fair_router.keys import Keys

EVENTS = ("recovered", "abandoned", "rate_deferred")
"""Known events. ``recovered``: a fair job popped but never started, given back (``FairQueue.recover``).
``abandoned`` and ``rate_deferred`` are reserved for crash recovery and tenant rate limits."""


def count_event(client: Any, keys: Keys, event: str, queue: str, amount: int = 1) -> Any:
    """Add ``amount`` to ``event`` for ``queue`` (``client``: a connection or a pipeline)."""
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}: known events are {', '.join(EVENTS)}")
    return client.hincrby(keys.observe_events(), f"{event}:{queue}", amount)


def parse_events(raw: dict[Any, Any]) -> dict[tuple[str, str], int]:
    """The events hash as (event, queue) -> count."""
    table: dict[tuple[str, str], int] = {}
    for name, value in raw.items():
        text = name.decode() if isinstance(name, bytes) else str(name)
        event, _, queue = text.partition(":")
        table[(event, queue)] = int(value)
    return table
