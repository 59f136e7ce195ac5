"""Event counters beside the start records (``<event>:<queue>`` -> count): events are rare, so each is a plain
``HINCRBY``."""

from __future__ import annotations

from typing import Any

from fair_router.core.keys import Keys
from fair_router.core.text import as_text

EVENTS = ("recovered", "abandoned")
"""Known events: ``recovered`` (a fair job popped, never started, given back) and ``abandoned`` (counted by
``abandon.lua`` in ``Keys.abandoned_total``, its own slot; the reader merges both)."""


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
