"""Durations as users write them (``30``, ``timedelta(hours=1)``, ``"250ms"``, ``"1h"``), parsed in one place so the
YAML, the environment and the API agree."""

from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
MAX_DURATION = 366 * 86400.0
"""Longest duration taken (366 days): any calendar window fits, and anything longer is a typo."""
_PATTERN = re.compile(r"^\s*(\d{1,30}(?:\.\d{1,30})?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(value: object) -> float:
    """Return ``value`` in seconds; raise ValueError naming the value when it is not a positive duration."""
    if isinstance(value, bool):
        raise ValueError(f"duration must be a number of seconds or a string like '30s', got {value!r}")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:  # an int past a double's range
            raise ValueError("duration must be at most 366d, got an int past the range of a float") from None
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        if match is None:
            raise ValueError(f"invalid duration {value!r}: use seconds or a number with a unit ms, s, m, h or d "
                             "('250ms', '1h')")
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise ValueError(f"duration must be seconds, a timedelta or a string like '5m', got {value!r}")
    if not seconds >= 0.001:  # also rejects NaN
        raise ValueError(f"duration must be at least 1ms, got {value!r}")
    if seconds > MAX_DURATION:
        raise ValueError(f"duration must be at most 366d, got {value!r}")
    return seconds


def format_duration(seconds: float) -> str:
    """Shortest exact spelling of ``seconds`` in the units parse_duration reads (for tables and logs)."""
    for unit in ("d", "h", "m", "s"):
        size = _UNITS[unit]
        if seconds >= size and (seconds / size).is_integer():
            return f"{int(seconds / size)}{unit}"
    ms = seconds * 1000
    return f"{ms:g}ms" if seconds < 1 else f"{seconds:g}s"
