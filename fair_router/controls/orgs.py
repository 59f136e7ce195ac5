"""Organisations' controls (``fair-router org set|show|pause|resume``, ``FairRouter.set_org`` / ``org`` /
``org_jobs``): an org's weight and limit overrides (concurrency, rate, burst), stored in Redis beside the tenants'
overrides (:meth:`Keys.org_overrides`) and read with its pause flag through a per-process cache (:class:`OrgBook`,
within ``cache_ttl``) by every push and every worker's start, and the org's tenants waiting in each fair queue. Each
value is its override, else the settings' ``orgs.<org>`` entry, else (limits) its ``tier``'s, else weight 1 and
no limit."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, cast
from urllib.parse import unquote

from pydantic import BaseModel, ConfigDict, ValidationError
from redis import Redis
from rq import Queue

from fair_router.config.sections import OrgConfig, TiersConfig
from fair_router.controls.fairstate import TENANT_FIELD, record_waiting
from fair_router.core.keys import Keys, encode
from fair_router.core.rates import Rate
from fair_router.core.text import as_text
from fair_router.core.validation import AtLeastOne, FairWeight, RateField, TierName
from fair_router.store.profile_scripts import NoteChangeScript

logger = logging.getLogger("fair_router")
WeightSource = Literal["override", "settings", "default"]


class OrgOverrides(BaseModel):
    """One organisation's own values, beating the settings' ``orgs:`` entry (None: the settings' value applies)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: FairWeight | None = None
    concurrency: AtLeastOne | None = None
    rate: RateField | None = None
    burst: AtLeastOne | None = None
    tier: TierName | None = None  # beats orgs.<org>.tier (a tier of tiers:, checked by TenantAdmin.set_org)

    def fields(self) -> dict[str, str]:
        """The values set, as the strings stored in Redis."""
        return {name: repr(float(value)) if name == "weight" else str(value)
                for name, value in self.model_dump(exclude_none=True, mode="json").items()}


@dataclass(frozen=True)
class OrgProfile:
    """The values in effect for one organisation, and where its weight and limits come from."""

    org: str
    weight: float
    source: WeightSource  # "override" (fair-router org set), "settings" (orgs:), "default" (1)
    limit: int | None = None  # jobs of its tenants running at once (None: no org limit)
    rate: Rate | None = None  # starts of its tenants' jobs (None: no org rate)
    burst: int = 1
    tier: str | None = None  # its override (org set --tier), else orgs.<org>.tier
    paused: bool = False  # as of the org cache (the start script reads the flag itself)
    limit_source: str = "none"  # "override", "settings", "tier <name>" or "none"
    rate_source: str = "none"
    tier_source: str = "none"  # "override", "settings" or "none"


class Cached(NamedTuple):
    """One org's overrides and pause flag, as read at ``read_at`` (monotonic seconds)."""

    read_at: float
    own: OrgOverrides
    paused: bool


class OrgBook:
    """Org -> its overrides and pause flag, cached ``cache_ttl`` seconds per process (one round trip per org and
    period)."""

    def __init__(self, connection: Redis, keys: Keys, cache_ttl: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``connection``: our state (the tenants' overrides' server); ``clock``: monotonic seconds."""
        self.connection, self.keys, self.cache_ttl, self._clock = connection, keys, cache_ttl, clock
        self._cache: dict[str, Cached] = {}
        self._note_change = NoteChangeScript(connection)

    def own(self, org: str) -> Cached:
        """``org``'s overrides (none when a stored one does not validate: logged) and pause flag."""
        now = self._clock()
        cached = self._cache.get(org)
        if cached is not None and now - cached[0] < self.cache_ttl:
            return cached
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.org_overrides(org))
            pipe.exists(self.keys.org_paused(org))
            raw, paused = pipe.execute()
        try:
            own = OrgOverrides.model_validate({as_text(key): as_text(value) for key, value in raw.items()})
        except ValidationError as exc:
            logger.warning("ignoring the invalid overrides of org %r in Redis: %s", org, exc)
            own = OrgOverrides()
        if len(self._cache) > 100_000:  # bounded: drop everything rather than track recency
            self._cache.clear()
        cached = self._cache[org] = Cached(now, own, bool(paused))
        return cached

    def override(self, org: str) -> float | None:
        """``org``'s weight override, None when it has none."""
        return self.own(org).own.weight

    def profile(self, org: str, configured: Mapping[str, OrgConfig] | None = None,
                tiers: TiersConfig | None = None) -> OrgProfile:
        """``org``'s values in effect: each its override, else ``configured`` (the settings' ``orgs``), else (limits)
        its tier's in ``tiers`` (``tiers.concurrency``, ``tiers.rate``, ``tiers.burst``), else weight 1 and no
        limit."""
        cached = self.own(org)
        own, found = cached.own, (configured or {}).get(org) or OrgConfig()
        listed = org in (configured or {})
        tier_source = "override" if own.tier else "settings" if found.tier else "none"
        found = found.model_copy(update={"tier": own.tier}) if own.tier else found
        tier = found.tier if tiers is not None and found.tier in tiers.concurrency else None
        weight, source = ((own.weight, "override") if own.weight is not None
                          else (found.weight, "settings") if listed else (1.0, "default"))
        limit, limit_source = _first((own.concurrency, "override"), found.configured_limit(tiers))
        rate, rate_source = _first((own.rate, "override"), (found.rate, "settings"),
                                   (tiers.rate.get(tier) if tier and tiers else None, f"tier {tier}"))
        burst = own.burst or found.burst or (tiers.burst.get(tier, 1) if tier and tiers else 1)
        return OrgProfile(org, weight, cast(WeightSource, source), limit, rate, burst, found.tier, cached.paused,
                          limit_source, rate_source, tier_source)

    def set(self, org: str, weight: float | None = None, reset: bool = False, concurrency: int | None = None,
            rate: str | Rate | None = None, burst: int | None = None, tier: str | None = None) -> None:
        """Store ``org``'s overrides (validated: pydantic's ValidationError names the value); ``reset`` drops its
        earlier overrides first. Every producer and worker uses them within its cache's ``cache_ttl`` (a tier: its
        tier cache's, noted as ``!<org>``)."""
        own = OrgOverrides(weight=weight, concurrency=concurrency, rate=rate, burst=burst, tier=tier)
        key = self.keys.org_overrides(org)
        with self.connection.pipeline() as pipe:
            if reset:
                pipe.delete(key)
            for name, value in own.fields().items():
                pipe.hset(key, name, value)
            self._note_change(self.keys.profile_changes(), "!" + org).queue(pipe)  # after the writes, same slot
            pipe.execute()
        self.forget(org)

    def forget(self, org: str) -> None:
        """Drop ``org`` from this process's cache (after a write here)."""
        self._cache.pop(org, None)


def _first(*candidates: tuple[Any, str]) -> tuple[Any, str]:
    """The first candidate value that is set, with its source; (None, "none") when none is."""
    return next(((value, source) for value, source in candidates if value is not None), (None, "none"))


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


