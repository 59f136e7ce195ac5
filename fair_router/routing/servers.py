"""Shards on several Redis primaries (``shard_urls``): shard ``i`` lives on ``shard_urls[i % len]``; windows,
tiers and leases stay on ``redis_url``. route.lua picks the least loaded shard from loads read first on the
shards' own servers (one pipelined LLEN round trip per server: exact, where a count kept on ``redis_url`` would
drift), so a server that does not answer is left out before the job is placed (every shard down:
:class:`~fair_router.routing.placement.ShardsUnavailable`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import Redis
from redis.exceptions import RedisError
from rq import Queue

from fair_router.core.shards import shard_queue
from fair_router.routing.placement import NO_TENANT_SHARDS, Pending, Route

TIMEOUT = 2.0
"""Seconds to wait for a shard server before taking it for down."""


class ShardServers:
    """One connection per distinct shard URL, and the loads of candidate shards read from them."""

    def __init__(self, urls: Sequence[str], timeout: float = TIMEOUT) -> None:
        self.urls = list(urls)
        self._servers = {url: Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
                         for url in dict.fromkeys(self.urls)}

    def connection(self, shard: int) -> Redis:
        """The Redis of shard ``shard``."""
        return self._servers[self.urls[shard % len(self.urls)]]

    def state(self, route: Route, jobs: Sequence[Pending], down: Sequence[int] = ()) -> dict[str, Any]:
        """``loads`` (jobs waiting per candidate shard queue) and ``down`` (shards whose server did not
        answer, with ``down`` already known) for :class:`~fair_router.routing.placement.RouteInputs`."""
        assert route.shards is not None
        wanted = sorted({shard for job in jobs
                         for shard in route.shards.of(job.tenant if job.tenant is not None else NO_TENANT_SHARDS)
                         if shard not in down})
        by_url: dict[str, list[str]] = {}
        shards_of_url: dict[str, list[int]] = {}
        for shard in wanted:
            url = self.urls[shard % len(self.urls)]
            shards_of_url.setdefault(url, []).append(shard)
            by_url.setdefault(url, []).extend(shard_queue(family, shard) for family in route.families())
        loads: dict[str, int] = {}
        unreachable = set(down)
        for url, names in by_url.items():
            try:
                with self._servers[url].pipeline(transaction=False) as pipe:
                    for name in names:
                        pipe.llen(Queue.redis_queue_namespace_prefix + name)
                    loads.update(zip(names, map(int, pipe.execute()), strict=True))
            except RedisError:
                unreachable.update(shards_of_url[url])
        return {"loads": loads, "down": unreachable}
