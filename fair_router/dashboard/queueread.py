"""The queue rows of a snapshot: what one queue costs to read, and the shard queues on the shard servers (one pipelined
round trip per server; a server that does not answer within ``TIMEOUT`` is shown as down, never an error)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import RedisError
from rq import Queue
from rq.registry import StartedJobRegistry

from fair_router.config.settings import Settings
from fair_router.core.keys import Keys
from fair_router.core.shards import shard_queue
from fair_router.core.text import as_text
from fair_router.dashboard.model import QueueView, ShardServerView
from fair_router.fairqueue.scripts import tenant_orgs, tenant_waiting, tenant_weights
from fair_router.routing.servers import TIMEOUT, ShardServers
from fair_router.store.outage import redis_address

PER_QUEUE = 5
"""Commands per queue: length, running, fair state, parked, abandoned count."""


@dataclass
class QueueRead:
    """One queue as read: its row, and for a fair queue its tenants waiting and parked."""

    view: QueueView
    backlog: dict[str, int] | None = None  # fair queues: tenant key -> jobs waiting
    parked: set[str] = field(default_factory=set)
    abandoned: int | None = None  # started jobs handed back by recovery (None: never)
    weights: dict[str, float] = field(default_factory=dict)  # fair queues: tenant key -> its weight
    orgs: dict[str, tuple[str, float]] = field(default_factory=dict)  # tenant key -> (org key, org weight)


def queue_commands(pipe: Pipeline, connection: Redis, keys: Keys, name: str, now: float) -> None:
    """Queue the :data:`PER_QUEUE` commands that read queue ``name`` (on ``connection``'s server)."""
    fair = keys.fair_queue(Queue.redis_queue_namespace_prefix + name)
    started = StartedJobRegistry(name, connection=connection).key
    pipe.llen(fair.rq_list)
    pipe.zcount(started, now, "+inf")
    pipe.hgetall(fair.state)
    pipe.zrangebyscore(fair.parked, now * 1000, "+inf")
    pipe.get(keys.abandoned_total(started))


def parse_queue(settings: Settings, name: str, replies: list[Any], server: str = "") -> QueueRead:
    """The :class:`QueueRead` of queue ``name`` from its :data:`PER_QUEUE` replies."""
    length, running, state_raw, parked_raw, abandoned = replies
    state = {as_text(k): v for k, v in state_raw.items()}
    backlog = tenant_waiting(state)  # the tenants' records in the fair queue's state hash (lua/lib/fifo.lua)
    stale, plain = state.get("stale"), state.get("plain")
    # an empty list has nothing waiting, whatever members a plain rq worker left (fairqueue.stale)
    backlog = {k: v for k, v in backlog.items() if v > 0 and length}
    fair = settings.is_fair(name) or bool(backlog)
    parked = {as_text(t) for t in parked_raw} if fair else set()
    view = QueueView(name, settings.weight(name), int(length), int(running), fair,
                     len(backlog), len(parked), server=server, stale_pops=int(stale or 0), plain_pops=int(plain or 0))
    weights = {tenant: weight for tenant, weight in tenant_weights(state).items() if tenant in backlog}
    orgs = {tenant: (fields[0], float(fields[1] or 1)) for tenant, fields in tenant_orgs(state).items()
            if tenant in backlog}
    return QueueRead(view, backlog if fair else None, parked, None if abandoned is None else int(abandoned),
                     weights, orgs)


def server_label(url: str) -> str:
    """A shard server as shown: ``host:port/db`` (a socket's path), never its password."""
    return redis_address(Redis.from_url(url))


class ShardQueues:
    """The shard queues on the shard servers of ``settings.shard_urls`` (none without them)."""

    def __init__(self, settings: Settings, keys: Keys, timeout: float = TIMEOUT) -> None:
        self.settings = settings
        self.keys = keys
        self._servers = ShardServers(settings.shard_urls, timeout) if settings.shard_urls else None
        counts = [job.shards.count for job in settings.jobs.values() if job.shards is not None]
        # url -> [(shard, queue name)], in shard order
        self.layout: dict[str, list[tuple[int, str]]] = {}
        if self._servers is not None:
            for shard in range(max(counts, default=0)):
                self.layout.setdefault(settings.shard_url(shard), []).extend(
                    (shard, shard_queue(family, shard)) for family in settings.sharded_families(shard))
        self.names = frozenset(name for members in self.layout.values() for _, name in members)

    def read(self, now: float) -> tuple[list[ShardServerView], list[QueueRead]]:
        """Every shard server's state and queues: one pipelined round trip per server."""
        views: list[ShardServerView] = []
        reads: list[QueueRead] = []
        servers = self._servers
        if servers is None:
            return views, reads
        for url, members in self.layout.items():
            label, shards = server_label(url), sorted({shard for shard, _ in members})
            connection = servers.connection(shards[0])
            try:
                with connection.pipeline(transaction=False) as pipe:
                    for _, name in members:
                        queue_commands(pipe, connection, self.keys, name, now)
                    replies = pipe.execute()
            except RedisError as exc:
                views.append(ShardServerView(label, shards, False, f"{type(exc).__name__}: {exc}"))
                reads.extend(QueueRead(QueueView(name, self.settings.weight(name), 0, 0,
                                                 self.settings.is_fair(name), server=label, down=True))
                             for _, name in members)
                continue
            views.append(ShardServerView(label, shards, True))
            reads.extend(parse_queue(self.settings, name, replies[PER_QUEUE * i: PER_QUEUE * (i + 1)], label)
                         for i, (_, name) in enumerate(members))
        return views, reads
