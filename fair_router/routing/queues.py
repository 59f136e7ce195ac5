"""The rq Queue objects a router enqueues into: one per name (rq caches its server version on it), a
FairQueue where the queue is fair. A queue is fair when the caller says so (``fair=True``), when it is
named in ``fair_queues:``, or when Redis marks it fair (:mod:`fair_router.fairqueue.marks`), so fairness
does not depend on every producer passing the right flag."""

from __future__ import annotations

from collections.abc import Iterable

from redis import Redis
from rq import Queue

from fair_router.config.sections import TiersConfig
from fair_router.fairqueue.marks import FairnessMarks
from fair_router.fairqueue.queue import FairQueue
from fair_router.routing.servers import ShardServers


class QueueRegistry:
    """Builds and keeps a router's queues: plain or fair, on the router's Redis or a shard's."""

    def __init__(self, connection: Redis, prefix: str, tiers: TiersConfig | None, tenant_max_bytes: int,
                 servers: ShardServers | None = None) -> None:
        self.connection = connection
        self.prefix = prefix
        self.tiers = tiers
        self.tenant_max_bytes = tenant_max_bytes
        self.servers = servers
        self.fair_names: frozenset[str] = frozenset()
        self.marks = FairnessMarks(connection, prefix)
        self._queues: dict[str, Queue] = {}

    def declare_fair(self, names: Iterable[str]) -> None:
        """These queues are FairQueues whatever a caller says (the settings' ``fair_queues:``, and the queues the
        rules of the jobs enqueued through this router route to, with ``throttled_queues: fair``); added to those
        declared before (several decorated functions may share a router)."""
        self.fair_names = self.fair_names | frozenset(names)

    def get(self, name: str, fair: bool = False, shard: int | None = None) -> Queue:
        """The queue ``name`` (shard ``shard``'s with ``shard_urls``); a FairQueue when ``fair``, named in
        ``fair_queues:`` or marked fair in Redis (read on the router's Redis), on the prefix its mark names."""
        prefix = self.prefix
        if not fair:
            marked = None if name in self.fair_names else self.marks.prefix_of(name)
            fair = name in self.fair_names or marked is not None
            prefix = marked or prefix
        key = f"fair:{prefix}:{name}" if fair else name
        if key not in self._queues:
            connection = self.servers.connection(shard) if self.servers and shard is not None else self.connection
            if fair:
                self._queues[key] = FairQueue(name, connection=connection, prefix=prefix, tiers=self.tiers,
                                              tenant_max_bytes=self.tenant_max_bytes)
            else:
                self._queues[key] = Queue(name, connection=connection)
        return self._queues[key]
