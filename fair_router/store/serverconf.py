"""The Redis setting fair-router relies on, read from ``INFO memory`` (managed services block ``CONFIG GET``):
``maxmemory-policy``; an evicting policy fails ``fair-router check --ping`` and workers warn."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redis import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from fair_router.store.cluster import is_rq_slot_client, pair_of
from fair_router.store.outage import redis_address

SAFE_POLICY = "noeviction"
POLICY_FIX = ("set `maxmemory-policy noeviction` (CONFIG SET maxmemory-policy noeviction and CONFIG REWRITE, "
              "`maxmemory-policy noeviction` in redis.conf, or the managed service's parameter group)")


@dataclass(frozen=True)
class PolicyReading:
    """One server's ``maxmemory-policy`` (None: unknown, ``why`` says why) and ``maxmemory`` (bytes, 0: none)."""

    server: str
    policy: str | None
    maxmemory: int | None = None
    why: str = ""

    @property
    def evicts(self) -> bool:
        """The server may evict keys (a known policy other than ``noeviction``)."""
        return self.policy is not None and self.policy != SAFE_POLICY

    @property
    def safe(self) -> bool:
        return self.policy == SAFE_POLICY

    def describe(self) -> str:
        """What the reading means, with the fix; for a log line or a ``check`` finding."""
        if self.evicts:
            limit = (f"maxmemory {self.maxmemory} bytes" if self.maxmemory
                     else "maxmemory 0 now, so it evicts once a maxmemory is set")
            return (f"Redis at {self.server}: maxmemory-policy is {self.policy} ({limit}): at maxmemory Redis evicts "
                    f"keys, and queued jobs, fair queues' state and leases are lost in silence; {POLICY_FIX}")
        if self.policy is None:
            return (f"Redis at {self.server}: maxmemory-policy unknown ({self.why}); fair-router needs "
                    f"`maxmemory-policy noeviction`: check it on the server")
        return f"Redis at {self.server}: maxmemory-policy {self.policy}"


def servers_of(client: Any) -> list[tuple[str, Any]]:
    """(address, plain client) of every server ``client`` writes to: each cluster primary, else its own."""
    if is_rq_slot_client(client):
        client = pair_of(client).state
    if isinstance(client, RedisCluster):
        return [(f"{node.host}:{node.port}", node.redis_connection)
                for node in client.get_primaries()]  # type: ignore[no-untyped-call]
    return [(redis_address(client), client)]


def read_policy(server: str, client: Any) -> PolicyReading:
    """``server``'s policy from ``INFO memory``; unreachable raises, any other refusal reads unknown."""
    try:
        info = client.info("memory")
    except (RedisConnectionError, RedisTimeoutError):
        raise
    except RedisError as exc:
        return PolicyReading(server, None, why=f"INFO memory refused: {exc}")
    policy = info.get("maxmemory_policy")
    if policy is None:
        return PolicyReading(server, None, why="INFO memory does not report maxmemory_policy")
    maxmemory = info.get("maxmemory")
    return PolicyReading(server, str(policy), int(maxmemory) if isinstance(maxmemory, int) else None)


def policy_readings(clients: Iterable[Any]) -> list[PolicyReading]:
    """One reading per server that ``clients`` write to (a server reached by several clients is read once)."""
    seen: dict[str, Any] = {}
    for client in clients:
        for server, plain in servers_of(client):
            seen.setdefault(server, plain)
    return [read_policy(server, plain) for server, plain in seen.items()]
