"""One bytes-to-str helper for Redis replies (a client may or may not decode responses)."""

from __future__ import annotations

from typing import Any


def as_text(value: Any) -> str:
    """``value`` as ``str``: bytes decoded as UTF-8 (a bad byte shown as U+FFFD, so a tampered key cannot
    break a read), anything else through ``str``."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
