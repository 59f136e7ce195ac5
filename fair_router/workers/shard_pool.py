"""Which queues (and which Redis) serve one shard: ``fair-router worker --shard I`` and ``fair-router pool``
(a ``pool:`` group naming sharded families is dealt out per shard, each on its shard's Redis)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from fair_router.core.shards import family_of, shard_queue

if TYPE_CHECKING:
    from fair_router.config.settings import Settings


def shard_queues(settings: Settings, index: int, families: Sequence[str] = ()) -> list[str]:
    """The queues of shard ``index``: each of ``families``' member on it, else every sharded family's that has it."""
    return [shard_queue(family, index) for family in (families or settings.sharded_families(index))]


def shard_count(settings: Settings, families: Sequence[str]) -> int:
    """How many shards the sharded job keys routing to any of ``families`` have (0 when none is sharded)."""
    counts = [job.shards.count for job in settings.jobs.values()
              if job.shards is not None and set(job.families()) & set(families)]
    return max(counts, default=0)


def pool_allocation(settings: Settings) -> tuple[dict[str, int], dict[str, str]]:
    """``pool:`` with every group of sharded families dealt out per shard, and each such group's Redis
    (``shard_urls``). A group of plain queues, or of shard queues named outright, stays as it is."""
    sharded = set(settings.sharded_families())
    allocation: dict[str, int] = {}
    urls: dict[str, str] = {}
    for group, workers in settings.pool.items():
        names = [name.strip() for name in group.split(",")]
        if not names or not set(names) <= sharded:
            allocation[group] = workers
            member = family_of(names[0]) if len(names) == 1 else None
            if member is not None and settings.shard_urls:
                urls[group] = settings.shard_url(member[1])
            continue
        for index in range(shard_count(settings, names)):
            per_shard = ",".join(shard_queue(name, index) for name in names)
            allocation[per_shard] = workers
            urls[per_shard] = settings.shard_url(index)
    return allocation, urls
