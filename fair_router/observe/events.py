"""Event counters kept beside the start records: a hash of ``<event>:<queue>`` -> count.

Events are rare (a worker died between pop and start, a job was abandoned), so a count is a plain
``HINCRBY``, on the caller's pipeline when it has one.
"""

from __future__ import annotations

from typing import Any

from fair_router.core.keys import Keys
from fair_router.core.text import as_text

EVENTS = ("recovered", "abandoned")
"""Known events. ``recovered``: a fair job popped but never started, given back (``FairQueue.recover``);
``abandoned``: a started job whose worker stopped heartbeating, handed back by crash recovery. Abandoned jobs
are not counted in this hash but by ``abandon.lua`` itself, in the queue's ``Keys.abandoned_total`` (the
script's own cluster slot, so the count is part of the same write); the reader merges both."""


def count_event(client: Any, keys: Keys, event: str, queue: str, amount: int = 1) -> Any:
    """Add ``amount`` to ``event`` for ``queue`` (``client``: a connection or a pipeline)."""
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}: known events are {', '.join(EVENTS)}")
    return client.hincrby(keys.observe_events(), f"{event}:{queue}", amount)


def parse_events(raw: dict[Any, Any]) -> dict[tuple[str, str], int]:
    """The events hash as (event, queue) -> count."""
    table: dict[tuple[str, str], int] = {}
    for name, value in raw.items():
        event, _, queue = as_text(name).partition(":")
        table[(event, queue)] = int(value)
    return table
