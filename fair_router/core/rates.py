"""Rates as users write them (``"2/s"``, ``"100/m"``, ``"5000/h"``), parsed in one place; enforced by GCRA in
``lua/lib/start_rate.lua``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_PATTERN = re.compile(r"^\s*(\d{1,30}(?:\.\d{1,30})?)\s*/\s*(s|m|h)\s*$")
MAX_RATE = 1e6
"""Most starts per unit: past a million per second the 1 ms GCRA interval cannot tell rates apart anyway."""


@dataclass(frozen=True)
class Rate:
    """``count`` job starts per ``per`` seconds."""

    count: float
    per: float

    @property
    def interval_ms(self) -> int:
        """Milliseconds between two starts at a steady pace (at least 1)."""
        return max(1, round(self.per * 1000 / self.count))

    def __str__(self) -> str:
        unit = next(name for name, size in _UNITS.items() if size == self.per)
        return f"{self.count:g}/{unit}"


def parse_rate(value: object) -> Rate:
    """``"N/s"``, ``"N/m"`` or ``"N/h"`` (N > 0) as a Rate; raise ValueError naming the value otherwise."""
    if isinstance(value, Rate):
        return value
    match = _PATTERN.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"rate must be 'N/s', 'N/m' or 'N/h' (jobs started per second, minute or hour), "
                         f"got {value!r}")
    count = float(match.group(1))
    if not (count > 0 and math.isfinite(count)):
        raise ValueError(f"rate must allow more than 0 jobs, got {value!r}")
    if count > MAX_RATE:
        raise ValueError(f"rate must be at most {MAX_RATE:g} jobs per unit, got {value!r}")
    return Rate(count, _UNITS[match.group(2)])
