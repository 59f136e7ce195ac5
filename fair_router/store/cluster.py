"""Redis Cluster: the two connections fair-router uses there (:class:`Connections`: ``state``, a ``RedisCluster``;
``rq``, a plain client to the owner of rq's slot) and the slot map they rely on (docs/production-redis.md)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, cast
from weakref import WeakKeyDictionary

from redis import Redis, RedisCluster
from redis.backoff import EqualJitterBackoff, NoBackoff
from redis.connection import Connection, ConnectionPool
from redis.crc import key_slot
from redis.exceptions import ClusterDownError, MovedError, RedisError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.retry import Retry

from fair_router.core.text import as_text as _text
from fair_router.store.oom import note_grace

StateConnection = Redis
"""Where our own state lives: a plain client or a ``RedisCluster``, typed as ``Redis`` (the same commands, but no
subclass: :func:`is_cluster` tells them apart)."""

_TAG = re.compile(r"\{([^{}]+)\}")


class ClusterSetupError(ValueError):
    """Settings or environment that cannot run on a Redis Cluster (the message says what to change)."""


def rq_prefix() -> str:
    """rq's key prefix as rq itself read it (``rq.defaults.RQ_KEY_PREFIX``, from the environment at import)."""
    from rq.defaults import RQ_KEY_PREFIX

    return str(RQ_KEY_PREFIX)


def check_rq_prefix(prefix: str | None = None) -> str:
    """The hash tag of rq's key prefix (``rq`` for ``{rq}``); :class:`ClusterSetupError` naming ``RQ_KEY_PREFIX``
    when it has none (rq's keys would spread over every slot)."""
    prefix = rq_prefix() if prefix is None else prefix
    match = _TAG.search(prefix)
    if match is None or prefix.find("{") != match.start():
        raise ClusterSetupError(
            f"redis_cluster is on but RQ_KEY_PREFIX={prefix!r} has no hash tag: rq's keys would spread over the "
            "cluster's slots. Set the environment variable RQ_KEY_PREFIX to a tagged prefix such as '{rq}' "
            "for every producer and worker, before rq is imported (rq reads it once, at import).")
    return match.group(1)


def slot_owner(seeds: list[tuple[str, int]], slot: int, timeout: float = 2.0) -> tuple[str, int]:
    """The (host, port) of the master serving ``slot``, asked of the first seed that answers ``CLUSTER SLOTS``;
    ``seeds`` is extended with every node named. redis-py's ConnectionError when no seed answers or none owns it."""
    last: Exception | None = None
    for host, port in list(seeds):
        # No retry of its own (redis-py's default spends seconds on a refused connection): the next seed instead.
        client = Redis(host=host, port=port, socket_timeout=timeout, socket_connect_timeout=timeout,
                       retry=Retry(NoBackoff(), 0))
        try:
            ranges = client.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]
        except (RedisError, OSError, AttributeError, ValueError) as exc:
            # Whatever a node going down or coming up answers (a refused or reset connection, a garbled
            # handshake: redis-py raised AttributeError on one mid-failover): the next seed is asked.
            last = exc
            continue
        finally:
            client.close()
        seeds.remove((host, port))
        seeds.insert(0, (host, port))  # asked first next time (a dead seed costs a refused connection each time)
        owner: tuple[str, int] | None = None
        for start, end, master, *replicas in ranges:
            for node in (master, *replicas):
                address = (_text(node[0]) or host, int(node[1]))
                if address not in seeds:
                    seeds.append(address)
            if int(start) <= slot <= int(end):
                owner = (_text(master[0]) or host, int(master[1]))
        if owner is not None:
            return owner
        last = RedisConnectionError(f"no node of the cluster at {host}:{port} serves slot {slot} yet")
    raise RedisConnectionError(f"no Redis Cluster node among {seeds} could name the owner of slot {slot}: {last}")


class SlotMoved(RedisConnectionError):
    """rq's slot is served by another node now (a ``MOVED`` reply): reconnect, which asks the cluster again."""


class RqSlotConnection(Connection):
    """A connection to whichever master serves ``slot`` now (``CLUSTER SLOTS`` of ``seeds`` at every connect); a
    ``MOVED`` reply raised as :class:`SlotMoved`, a connection error the client's retry policy reconnects after."""

    def __init__(self, *, seeds: tuple[tuple[str, int], ...] = (), slot: int = 0, **kwargs: Any) -> None:
        self.seeds = list(seeds)
        self.slot = slot
        kwargs.setdefault("host", seeds[0][0] if seeds else "localhost")
        kwargs.setdefault("port", seeds[0][1] if seeds else 6379)
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]

    def _connect(self) -> Any:
        self.host, self.port = slot_owner(self.seeds, self.slot, self.socket_connect_timeout or 2.0)
        return super()._connect()  # type: ignore[no-untyped-call]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except (ClusterDownError, TryAgainError) as exc:  # a failover under way: wait as for a lost connection
            self.disconnect()  # type: ignore[no-untyped-call]
            raise SlotMoved(f"rq's slot {self.slot} is not served right now ({exc}): reconnecting") from exc
        except MovedError as exc:
            if exc.slot_id != self.slot:  # a key of another slot sent on rq's connection: a bug, not a failover
                raise MovedError(f"{exc.args[0]} (a key outside rq's slot {self.slot} was sent on the connection "
                                 "to rq's slot owner)") from exc
            self.disconnect()  # type: ignore[no-untyped-call]
            raise SlotMoved(f"rq's slot {self.slot} moved ({exc}): reconnecting to its new owner") from exc


def rq_connection_for(cluster: RedisCluster, **kwargs: Any) -> Redis:
    """A plain client to the master serving rq's slot, seeded with ``cluster``'s known nodes and carrying its
    connection settings (password, timeouts) that ``kwargs`` does not override."""
    nodes = cluster.get_nodes()  # type: ignore[no-untyped-call]
    seeds = tuple((node.host, int(node.port)) for node in nodes)
    base = dict(nodes[0].redis_connection.connection_pool.connection_kwargs) if nodes else {}
    for name in ("host", "port", "connection_class", "db"):
        base.pop(name, None)
    base.update(kwargs)
    slot = key_slot(check_rq_prefix().encode())  # every rq key's (checked: rq's prefix is hash-tagged)
    pool = ConnectionPool(connection_class=RqSlotConnection, seeds=seeds, slot=slot, **base)
    return Redis(connection_pool=pool)


@dataclass(frozen=True)
class Connections:
    """The client for our own state and the plain client for rq (the same client on a standalone Redis)."""

    state: StateConnection
    rq: Redis

    @property
    def cluster(self) -> bool:
        return isinstance(self.state, RedisCluster)


_PAIRS: WeakKeyDictionary[Any, Connections] = WeakKeyDictionary()
"""Per client (a RedisCluster, or the rq-slot client made for it), the pair it belongs to: so every part handed
one of the two finds the other, and a process keeps one RedisCluster and one rq-slot pool per seed."""


def pair_of(connection: Any, cluster: bool = False) -> Connections:
    """The two connections ``connection`` belongs to (itself twice for a plain standalone client); ``cluster``: take a
    plain client as a seed node of a Redis Cluster (what rq's CLI builds from ``--url``)."""
    known = _PAIRS.get(connection)
    if known is not None:
        return known
    if isinstance(connection, RedisCluster):
        pair = Connections(cast(Redis, connection), rq_connection_for(connection))
    elif is_rq_slot_client(connection):
        kwargs = connection.connection_pool.connection_kwargs
        host, port = kwargs["seeds"][0]
        pair = Connections(cast(Redis, RedisCluster(host=host, port=port, **_cluster_kwargs(kwargs))), connection)
    elif cluster:
        kwargs = connection.connection_pool.connection_kwargs
        state = RedisCluster(host=kwargs.get("host", "localhost"), port=int(kwargs.get("port", 6379)),
                             **_cluster_kwargs(kwargs))
        pair = Connections(cast(Redis, state), rq_connection_for(state))
    else:
        return Connections(connection, connection)
    _PAIRS[pair.state] = _PAIRS[pair.rq] = pair
    if connection is not pair.state and connection is not pair.rq:
        _PAIRS[connection] = pair
    return pair


def _cluster_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The connection settings of a plain client a ``RedisCluster`` takes too (credentials, timeouts)."""
    names = ("username", "password", "socket_timeout", "socket_connect_timeout", "ssl", "ssl_cert_reqs",
             "ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "client_name")
    return {name: kwargs[name] for name in names if kwargs.get(name) is not None}


def ride_cluster_outages(state: Any, grace: float) -> None:
    """Give a ``RedisCluster`` a retry policy lasting about ``grace`` seconds through a failover (redis-py counts
    attempts, each after a ClusterDown waits 0.25 s); a plain client is left alone."""
    if isinstance(state, RedisCluster):
        state.set_retry(Retry(EqualJitterBackoff(cap=1.0, base=0.05), retries=max(3, math.ceil(grace / 0.25))))
        note_grace(state, grace)  # how long its writes that can wait ride an out-of-memory Redis (store/oom.py)


def is_rq_slot_client(connection: Any) -> bool:
    """Whether ``connection`` is a plain client following rq's slot on a cluster (:func:`rq_connection_for`)."""
    pool = getattr(connection, "connection_pool", None)
    return pool is not None and isinstance(pool.connection_class, type) and issubclass(
        pool.connection_class, RqSlotConnection)


def state_of(connection: Any) -> StateConnection:
    """Where our own state goes: the RedisCluster of ``connection``'s cluster pair, else ``connection`` itself."""
    return pair_of(connection).state


def rq_of(connection: Any) -> Redis:
    """The plain client for rq's keys that goes with ``connection`` (itself on a standalone Redis)."""
    return pair_of(connection).rq


def connections_for(url: str, cluster: bool, **kwargs: Any) -> Connections:
    """The two connections for the Redis at ``url`` (``cluster``: any node of a Redis Cluster, as a seed).
    Refuses a cluster whose rq keys are not hash-tagged (:func:`check_rq_prefix`) before connecting."""
    if not cluster:
        plain = Redis.from_url(url, **kwargs)
        return Connections(plain, plain)
    check_rq_prefix()
    return pair_of(RedisCluster.from_url(url, **kwargs))


def is_cluster(connection: Any) -> bool:
    """Whether ``connection`` is a ``RedisCluster`` client (our state then spreads over its masters)."""
    return isinstance(connection, RedisCluster)


class RqSlotRedis(Redis):
    """For rq's own CLI on a cluster (``rq worker --connection-class fair_router.store.cluster.RqSlotRedis``):
    ``from_url`` takes the URL as a seed and returns the client that follows rq's slot."""

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> Redis:
        return pair_of(RedisCluster.from_url(url, **kwargs)).rq
