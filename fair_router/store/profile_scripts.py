"""The scripts of the profile changes set: every write of a tenant's profile notes the tenant
(``lua/profile_note.lua``); each tier cache polls it (``lua/profile_poll.lua``) and evicts only those."""

from __future__ import annotations

from typing import Any, NamedTuple

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
