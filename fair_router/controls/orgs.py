"""Organisations' controls (``fair-router org set|show``, ``FairRouter.set_org`` / ``org`` / ``org_jobs``): an org's
weight override, stored in Redis beside the tenants' overrides (:meth:`Keys.org_overrides`) and read by every push
through a per-process cache (:class:`OrgBook`, within ``cache_ttl``), and the org's tenants waiting in each fair
queue. An org's weight is its override, else the settings' ``orgs.<org>.weight``, else 1."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, ValidationError
from redis import Redis
from rq import Queue

from fair_router.config.sections import OrgConfig
from fair_router.controls.fairstate import TENANT_FIELD, record_waiting
from fair_router.core.keys import Keys, encode
from fair_router.core.text import as_text
from fair_router.core.validation import FairWeight

logger = logging.getLogger("fair_router")
WeightSource = Literal["override", "settings", "default"]


class OrgOverrides(BaseModel):
    """One organisation's own values, beating the settings' ``orgs:`` entry (None: the settings' value applies)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: FairWeight | None = None


@dataclass(frozen=True)
class OrgProfile:
    """The values in effect for one organisation, and where its weight comes from."""

    org: str
    weight: float
    source: WeightSource  # "override" (fair-router org set), "settings" (orgs:), "default" (1)


class OrgBook:
    """Org -> its weight override, cached ``cache_ttl`` seconds per process (one HGET per org and period)."""

    def __init__(self, connection: Redis, keys: Keys, cache_ttl: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``connection``: our state (the tenants' overrides' server); ``clock``: monotonic seconds."""
        self.connection, self.keys, self.cache_ttl, self._clock = connection, keys, cache_ttl, clock
        self._cache: dict[str, tuple[float, float | None]] = {}

    def override(self, org: str) -> float | None:
        """``org``'s weight override, None when it has none (or a stored one does not validate: logged)."""
        now = self._clock()
        cached = self._cache.get(org)
        if cached is not None and now - cached[0] < self.cache_ttl:
            return cached[1]
        raw = self.connection.hget(self.keys.org_overrides(org), "weight")
        try:
            weight = OrgOverrides.model_validate({"weight": None if raw is None else as_text(raw)}).weight
        except ValidationError as exc:
            logger.warning("ignoring the invalid weight override of org %r in Redis: %s", org, exc)
            weight = None
        if len(self._cache) > 100_000:  # bounded: drop everything rather than track recency
            self._cache.clear()
        self._cache[org] = (now, weight)
        return weight

    def profile(self, org: str, configured: Mapping[str, OrgConfig] | None = None) -> OrgProfile:
        """``org``'s weight in effect: its override, else ``configured`` (the settings' ``orgs``), else 1."""
        own = self.override(org)
        if own is not None:
            return OrgProfile(org, own, "override")
        found = (configured or {}).get(org)
        return OrgProfile(org, 1.0, "default") if found is None else OrgProfile(org, found.weight, "settings")

    def set(self, org: str, weight: float | None = None, reset: bool = False) -> None:
        """Store ``org``'s weight override (validated: pydantic's ValidationError names the value); ``reset``
        drops its earlier override first. Every producer uses it within its cache's ``cache_ttl``."""
        own = OrgOverrides(weight=weight)
        key = self.keys.org_overrides(org)
        with self.connection.pipeline() as pipe:
            if reset:
                pipe.delete(key)
            if own.weight is not None:
                pipe.hset(key, "weight", repr(float(own.weight)))
            pipe.execute()
        self._cache.pop(org, None)


def org_jobs(rq_connection: Redis, keys: Keys, org: str) -> dict[str, dict[str, int]]:
    """``org``'s tenants waiting in each fair queue that has any: queue name -> tenant -> jobs waiting (a tenant
    whose id is too long to keep in keys is named by its digest, ``#...``). One HGETALL of each queue's state."""
    wanted = encode(org)
    queues = sorted(as_text(raw) for raw in rq_connection.smembers(Queue.redis_queues_keys))
    with rq_connection.pipeline(transaction=False) as pipe:
        for key in queues:
            pipe.hgetall(keys.fair_queue(key).state)
            pipe.llen(key)
        replies = pipe.execute()
    prefix, found = len(Queue.redis_queue_namespace_prefix), {}
    for key, state, length in zip(queues, replies[::2], replies[1::2], strict=True):
        tenants = {}
        for field, record in state.items() if length else ():  # an empty list has nothing waiting
            name, parts = as_text(field), as_text(record).split("|")
            if name.startswith(TENANT_FIELD) and len(parts) >= 8 and parts[4] == wanted:
                tenant = name[len(TENANT_FIELD):]
                tenants[tenant if tenant.startswith("#") else unquote(tenant)] = record_waiting(record)
        if tenants:
            found[key[prefix:]] = dict(sorted(tenants.items()))
    return found


def tenant_orgs(rq_connection: Redis, keys: Keys, tenant: str) -> dict[str, str]:
    """The org ``tenant`` waits under in each fair queue where it waits under one: queue name -> org."""
    queues = sorted(as_text(raw) for raw in rq_connection.smembers(Queue.redis_queues_keys))
    with rq_connection.pipeline(transaction=False) as pipe:
        for key in queues:
            pipe.hget(keys.fair_queue(key).state, TENANT_FIELD + encode(tenant))
        records = pipe.execute()
    prefix = len(Queue.redis_queue_namespace_prefix)
    parts = {key[prefix:]: as_text(record).split("|") for key, record in zip(queues, records, strict=True) if record}
    return {queue: unquote(fields[4]) for queue, fields in parts.items() if len(fields) >= 8 and fields[4]}


