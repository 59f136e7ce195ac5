"""One bytes-to-str helper for Redis replies (a client may or may not decode responses)."""

from __future__ import annotations

from typing import Any


def as_text(value: Any) -> str:
    """``value`` as ``str``: bytes decoded as UTF-8 (bad bytes as U+FFFD), anything else through ``str``."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
