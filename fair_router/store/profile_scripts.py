"""The scripts of the profile changes set: every write of a tenant's profile notes the tenant
(``lua/profile_note.lua``); each tier cache polls it (``lua/profile_poll.lua``) and evicts only those. And the
pause flag's write (``lua/pause.lua``), which keeps the time of the pause."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, NamedTuple

from fair_router.core.text import as_text
from fair_router.store.luascript import Call, LuaScript

PROFILE_HORIZON = 3600.0
"""Seconds a change stays in the set. A cache whose last poll is older than that may have missed a trimmed
change, so it starts over empty (:class:`~fair_router.controls.tiers.TierBook`)."""


class NoteChangeScript(LuaScript[int]):
    """profile_note.lua: ``tenant``'s profile was just written (run it after the write, never before: a poll in
    between would evict the tenant and re-read the old value)."""

    name = "profile_note"

    def __call__(self, changes: str, tenant: str, now_ms: str = "") -> Call[int]:
        """KEYS = [changes]; ARGV = tenant, the horizon (ms), now_ms ('' = server TIME). Result: the time noted."""
        return self.call([changes], [tenant, round(PROFILE_HORIZON * 1000), now_ms])

    def parse(self, reply: Any) -> int:
        return int(reply)


class Changes(NamedTuple):
    """What profile_poll.lua read."""

    now_ms: int  # the script's clock (server TIME)
    tenants: list[str] | None  # changed since the time asked for; None: more than the cap: clear everything


class PollChangesScript(LuaScript[Changes]):
    """profile_poll.lua: read-only; the tenants changed since ``since_ms``."""

    name = "profile_poll"

    def __call__(self, changes: str, since_ms: int | None, cap: int, now_ms: str = "") -> Call[Changes]:
        """KEYS = [changes]; ARGV = since_ms ('' = first poll), cap, now_ms ('' = server TIME)."""
        return self.call([changes], ["" if since_ms is None else since_ms, cap, now_ms])

    def parse(self, reply: Any) -> Changes:
        now_ms, count, *tenants = reply
        if int(count) < 0:
            return Changes(int(now_ms), None)
        return Changes(int(now_ms), [raw.decode() if isinstance(raw, bytes) else str(raw) for raw in tenants])


class PauseScript(LuaScript[int]):
    """pause.lua: set a tenant's pause flag to the time of the pause (server TIME, or the injected clock), kept
    when it is already paused; one call, as the plain SET it replaces."""

    name = "pause"

    def __call__(self, flag: str, now_ms: str = "") -> Call[int]:
        return self.call([flag], [now_ms])

    def parse(self, reply: Any) -> int:
        return int(reply)


def pause_time(flag: bytes | str | None) -> datetime | None:
    """A pause flag's value as the time of the pause: it holds ms since the pause, or ``1`` (an older pause)."""
    try:
        ms = int(as_text(flag)) if flag is not None else 0
    except ValueError:
        return None
    return datetime.fromtimestamp(ms / 1000, timezone.utc) if ms > 1 else None
