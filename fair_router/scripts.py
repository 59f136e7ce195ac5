"""Typed wrappers around the Lua scripts in ``fair_router/lua``: one class per script.

Each script file is read once per wrapper with importlib.resources and registered on the client
(redis-py sends EVALSHA and reloads on NOSCRIPT). The wrapper's signature names the script's KEYS
and ARGV, so the Lua side never assembles key names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from importlib.resources import files
from typing import Any

from redis import Redis
from redis.commands.core import Script

from fair_router.keys import Keys
from fair_router.rules import Rule

Clock = Callable[[], float]
"""Returns epoch seconds. ``None`` in its place means Redis server ``TIME``."""


def load_script(connection: Redis, name: str) -> Script:
    """Register ``fair_router/lua/<name>.lua`` on ``connection``."""
    source = files("fair_router").joinpath("lua").joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return connection.register_script(source)


def now_arg(clock: Clock | None) -> str:
    """The ``now_ms`` ARGV slot: the injected clock in ms, or '' for server TIME."""
    return "" if clock is None else str(round(clock() * 1000))


class RouteScript:
    """route.lua: record each job in its tenant window and return the matching rule per job."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "route")
        self._headers: dict[tuple[Rule, ...], list[int]] = {}

    def __call__(
        self,
        windows: Sequence[str],
        jobs: Sequence[tuple[int, str]],
        rules: tuple[Rule, ...],
        now_ms: str,
        client: Any = None,
    ) -> list[int]:
        """KEYS = ``windows``; ``jobs`` = (index into windows, job id). Returns 0 or 1-based rule index."""
        args: list[str | int | bytes] = [now_ms, *self._header(rules)]
        for index, job_id in jobs:
            args += (index + 1, Keys.member(job_id))
        return [int(x) for x in self._script(keys=list(windows), args=args, client=client)]

    def _header(self, rules: tuple[Rule, ...]) -> list[int]:
        """ARGV after now_ms: ttl_ms, cap, n_rules, (per_ms, threshold)...; built once per rule set."""
        header = self._headers.get(rules)
        if header is None:
            header = [max(r.per_ms for r in rules), max(r.threshold for r in rules) + 1, len(rules)]
            for rule in rules:
                header += (rule.per_ms, rule.threshold)
            self._headers[rules] = header
        return header


class PeekScript:
    """peek.lua: read-only count of one window for each rule's period."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "peek")

    def __call__(self, window: str, rules: Sequence[Rule], now_ms: str) -> tuple[int, list[int]]:
        """Returns (now in ms, [count within each rule's period])."""
        result = self._script(keys=[window], args=[now_ms, *(rule.per_ms for rule in rules)])
        return int(result[0]), [int(x) for x in result[1:]]


class AcquireScript:
    """acquire.lua: take or extend a tenant's concurrency slot for one job."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "acquire")

    def __call__(self, leases: str, job_id: str, limit: int, lease_ms: int, now_ms: str) -> tuple[int, int]:
        """KEYS = [leases]. Returns (status: 0 refused / 1 granted / 2 already held, leases reclaimed)."""
        status, reclaimed = self._script(keys=[leases], args=[now_ms, job_id, limit, lease_ms])
        return int(status), int(reclaimed)
