"""Shuffle-sharding: each tenant is dealt ``per_tenant`` of ``count`` shards, the same ones everywhere.

A shard is a queue of its own (``<queue>_shard<i>``, with its own workers, possibly on its own Redis). A
tenant's jobs only ever go to its dealt shards, so a tenant flooding its queue fills those shards and no
others: only tenants dealt exactly the same set share its whole fate, 1 in C(count, per_tenant) of them
(28 for 8 shards, 2 each), and every other tenant keeps at least one shard the flood does not reach.

The deal must be the same in every producer, worker and dashboard, on every machine and Python version, so
it is derived from a keyed BLAKE2b digest of the tenant's UTF-8 bytes (never ``hash()``, which is salted
per process) by a partial Fisher-Yates shuffle whose every draw is one more digest. Uniform draws make every
set of ``per_tenant`` shards equally likely, which spreads tenants evenly over all shards.

This module is ground floor: it imports nothing from fair-router's feature packages, so routing, workers,
the settings and the dashboard can all speak of shards.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_SHARDS = 1024
"""The most shards a job key may have: every shard is a queue (and a worker group) of its own."""

_PERSON = b"fair-router.sh"  # BLAKE2b personalisation (at most 16 bytes): digests of no other use collide
_SUFFIX = "_shard"
SHARD_SUFFIX = _SUFFIX
"""What a shard queue's name adds to its family's before the shard number (route.lua names them too)."""


def shard_queue(queue: str, index: int) -> str:
    """The name of shard ``index`` of queue family ``queue``: ``<queue>_shard<index>``."""
    return f"{queue}{_SUFFIX}{index}"


_MEMBER = re.compile(r"(.+)_shard(\d+)")


def family_of(queue: str) -> tuple[str, int] | None:
    """``(family, index)`` of a shard queue name (``default_shard3`` -> ``("default", 3)``), else None."""
    found = _MEMBER.fullmatch(queue)
    return None if found is None else (found.group(1), int(found.group(2)))


def _draw(tenant: bytes, step: int, below: int) -> int:
    """The ``step``-th uniform draw in ``[0, below)`` for ``tenant``: 8 digest bytes modulo ``below``
    (bias at most ``below / 2**64``, nil for at most 1024 shards)."""
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
    """The ``per_tenant`` distinct shard indexes in ``[0, count)`` dealt to ``tenant``, ascending.

    Deterministic across processes, machines and Python versions; every set of ``per_tenant`` shards is
    equally likely over tenants. Raises ValueError for counts outside ``1 <= per_tenant <= count <= 1024``.
    """
    if isinstance(tenant, bool) or not isinstance(tenant, (str, int)):
        raise TypeError(f"tenant must be a str or int, got {type(tenant).__name__} {tenant!r}")
    Shards(count=count, per_tenant=per_tenant)  # the one statement of the bounds and their messages
    return _deal(str(tenant), count, per_tenant)


class Shards(BaseModel):
    """How a job key is sharded: ``count`` shard queues per queue family, ``per_tenant`` of them dealt to each
    tenant (a job goes to the least loaded of its tenant's shards)."""

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
