"""Shuffle-sharding: each tenant is dealt ``per_tenant`` of ``count`` shard queues, the same ones in every process, by a
keyed BLAKE2b digest driving a partial Fisher-Yates shuffle (docs/shards.md)."""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_SHARDS = 1024
"""The most shards a job key may have: every shard is a queue (and a worker group) of its own."""

_PERSON = b"fair-router.sh"  # BLAKE2b personalisation (at most 16 bytes): digests of no other use collide
SHARD_SUFFIX = "_shard"
"""What a shard queue's name adds to its family's before the shard number (route.lua names them too)."""


def shard_queue(queue: str, index: int) -> str:
    """The name of shard ``index`` of queue family ``queue``: ``<queue>_shard<index>``."""
    return f"{queue}{SHARD_SUFFIX}{index}"


_MEMBER = re.compile(r"(.+)_shard(\d+)")


def family_of(queue: str) -> tuple[str, int] | None:
    """``(family, index)`` of a shard queue name (``default_shard3`` -> ``("default", 3)``), else None."""
    found = _MEMBER.fullmatch(queue)
    return None if found is None else (found.group(1), int(found.group(2)))


def _draw(tenant: bytes, step: int, below: int) -> int:
    """The ``step``-th uniform draw in ``[0, below)`` for ``tenant`` (bias at most ``below / 2**64``)."""
    digest = hashlib.blake2b(tenant, digest_size=8, person=_PERSON, salt=step.to_bytes(16, "big")).digest()
    return int.from_bytes(digest, "big") % below


@lru_cache(maxsize=65536)
def _deal(tenant: str, count: int, per_tenant: int) -> tuple[int, ...]:
    """The tenant's shards, ascending (cached: routing asks for the same tenants over and over)."""
    data = tenant.encode("utf-8", "surrogatepass")
    # Partial Fisher-Yates over [0, count) kept sparse (a dict of swapped places), so the cost is
    # O(per_tenant) whatever count.
    swapped: dict[int, int] = {}
    chosen = []
    for step in range(per_tenant):
        pick = step + _draw(data, step, count - step)
        value = swapped.get(pick, pick)
        swapped[pick] = swapped.get(step, step)
        chosen.append(value)
    return tuple(sorted(chosen))


def shards_of(tenant: str | int, count: int, per_tenant: int) -> tuple[int, ...]:
    """The ``per_tenant`` distinct shard indexes in ``[0, count)`` dealt to ``tenant``, ascending; ValueError outside
    ``1 <= per_tenant <= count <= 1024``."""
    if isinstance(tenant, bool) or not isinstance(tenant, (str, int)):
        raise TypeError(f"tenant must be a str or int, got {type(tenant).__name__} {tenant!r}")
    Shards(count=count, per_tenant=per_tenant)  # the one statement of the bounds and their messages
    return _deal(str(tenant), count, per_tenant)


class Shards(BaseModel):
    """How a job key is sharded: ``count`` shard queues per family, ``per_tenant`` dealt to each tenant."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: Annotated[int, Field(ge=1, le=MAX_SHARDS, strict=False)]
    per_tenant: Annotated[int, Field(ge=1, strict=False)]

    @model_validator(mode="after")
    def _fits(self) -> Shards:
        if self.per_tenant > self.count:
            raise ValueError(f"per_tenant ({self.per_tenant}) cannot exceed count ({self.count}): a tenant is "
                             f"dealt per_tenant distinct shards out of count")
        return self

    def of(self, tenant: str | int) -> tuple[int, ...]:
        """The shards dealt to ``tenant`` (:func:`shards_of`)."""
        return _deal(str(tenant), self.count, self.per_tenant)

    def queues(self, queue: str) -> list[str]:
        """Every shard queue of family ``queue``: ``<queue>_shard0`` ... ``<queue>_shard<count-1>``."""
        return [shard_queue(queue, index) for index in range(self.count)]
