"""Plan tiers: a tenant's tier (the resolver, else the Redis tier map, else for a job under an organisation the org's
tier, else ``tiers.default``), its base queue, and its :class:`~fair_router.core.profiles.TenantProfile` (tier values
with the tenant's overrides on top). The one place a tier is resolved (docs/tenant-controls.md, "Which tier").

Profiles sit on the enqueue and fetch paths and change rarely, so each process caches them until they change: every
write through our API notes the tenant (``lua/profile_note.lua``), and once per ``cache_ttl`` a lookup polls those notes
and evicts only the changed tenants (docs/tenant-controls.md)."""

from __future__ import annotations

import importlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from pydantic import ValidationError
from redis import Redis

from fair_router.config.sections import OrgConfig, TiersConfig
from fair_router.core.keys import Keys
from fair_router.core.profiles import DEFAULT, PRIORITY, SCHEDULED, TenantOverrides, TenantProfile
from fair_router.core.text import as_text
from fair_router.store.profile_scripts import PROFILE_HORIZON, NoteChangeScript, PollChangesScript

logger = logging.getLogger("fair_router")


def load_resolver(path: str) -> Callable[[str], object]:
    """Import ``package.module:function`` (validated when settings load)."""
    module_name, _, attribute = path.partition(":")
    resolver: Callable[[str], object] = getattr(importlib.import_module(module_name), attribute)
    return resolver


class Cached(NamedTuple):
    """One tenant's cached profile and what it was made from."""

    read_at: float  # clock time its Redis part (tier, overrides, pause flag) was read
    resolved_at: float  # clock time the resolver last answered (a configured resolver only)
    own: TenantOverrides
    paused: bool
    profile: TenantProfile  # on its own tier, else tiers.default (without an org)
    own_tier: str | None = None  # its own tier (tier map or resolver), None: none (its org's, else the default)
    on_org_tier: dict[tuple[str, str], TenantProfile] | None = None  # (org, its tier) -> the profile on it: built once


MAX_AGE = 60.0
"""Seconds a cached profile lives at most, changed or not: the safety net for writes the change notes never hear of (a
hand edit, a restored backup, a lost note), so they still take effect within a minute."""

POLL_OVERLAP_MS = 1000
"""A poll asks for changes since the last poll minus this, so a change noted meanwhile is still seen."""

POLL_CAP = 1000
"""More changes than this since the last poll (a bulk migration): clear the whole cache instead."""


class TierBook:
    """Tenant -> tier and profile, cached until the tenant changes or ``max_age`` passes."""

    def __init__(
        self,
        connection: Redis,
        keys: Keys,
        config: TiersConfig | None = None,
        cache_ttl: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        max_age: float = MAX_AGE,
        orgs: Mapping[str, OrgConfig] | None = None,
    ) -> None:
        """``cache_ttl``: how often changes are polled (how soon one takes effect); ``clock``: monotonic seconds;
        ``orgs``: the settings' ``orgs:`` (an org's configured tier)."""
        self.connection = connection
        self.keys = keys
        self.config = config or TiersConfig()
        self.cache_ttl = cache_ttl
        self.max_age = max_age
        self._clock = clock
        self._resolver = load_resolver(self.config.resolver) if self.config.resolver else None
        self.orgs = orgs or {}
        self._cache: dict[str, Cached] = {}
        self._org_tiers: dict[str, tuple[float, str | None]] = {}  # org -> (read at, its tier)
        self._poll_changes = PollChangesScript(connection)
        self._note_change = NoteChangeScript(connection)
        self._next_poll = -math.inf
        self._polled_ms: int | None = None  # server time of the last poll
        self._polled_at = -math.inf  # clock time of the last poll
        self._polls = 0  # polls so far: a read that saw one happen meanwhile is not cached (_read)

    def tier(self, tenant: str, org: str | None = None) -> str:
        """The tenant's tier (:meth:`profile`); unknown tenants and unknown tier names count as ``tiers.default``."""
        return self.profile(tenant, org).tier

    def profile(self, tenant: str, org: str | None = None) -> TenantProfile:
        """The tenant's tier and values in effect (for a job under ``org``: a tenant without a tier of its own takes
        its org's): cached while unchanged, else one round trip (the org's tier read in it too)."""
        now = self._clock()
        if now >= self._next_poll:
            self._poll(now)
        cached = self._cache.get(tenant)
        if cached is None or now - cached.read_at >= self.max_age:
            cached = self._read(tenant, now, org)
        elif self._resolver is not None and now - cached.resolved_at >= self.cache_ttl:
            tier = self._own_tier(self._resolver(tenant))
            profile = self._profile(tier, cached.own, cached.paused) if tier != cached.own_tier else cached.profile
            cached = self._cache[tenant] = cached._replace(resolved_at=now, profile=profile, own_tier=tier)
        org_tier = None if org is None or cached.own_tier is not None else self._org_tier(org, now)
        if org is None or org_tier is None:
            return cached.profile
        built = {} if cached.on_org_tier is None else cached.on_org_tier  # a start asks about three times: built once
        on_tier = built.get((org, org_tier))
        if on_tier is None:
            on_tier = built[(org, org_tier)] = self._profile(org_tier, cached.own, cached.paused, f"org {org}")
        return on_tier

    def _org_tier(self, org: str, now: float, stored: object = "") -> str | None:
        """``org``'s tier: its override (``stored``, else read), else ``orgs.<org>.tier``; None for none (or a tier
        not configured). Cached as a tenant's profile: until noted changed (as ``!<org>``), ``max_age`` at most."""
        found = self._org_tiers.get(org)
        if stored == "" and found is not None and now - found[0] < self.max_age:
            return found[1]
        raw = self.connection.hget(self.keys.org_overrides(org), "tier") if stored == "" else stored
        tier = self._own_tier(raw and as_text(raw)) or self._own_tier(getattr(self.orgs.get(org), "tier", None))
        if len(self._org_tiers) > 100_000:  # bounded, as the tenants' cache
            self._org_tiers.clear()
        self._org_tiers[org] = (now, tier)
        return tier

    def _poll(self, now: float) -> None:
        """Evict the tenants changed since the last poll; clear all when changes may have been missed."""
        since = None if self._polled_ms is None else self._polled_ms - POLL_OVERLAP_MS
        changes = self._poll_changes(self.keys.profile_changes(), since, POLL_CAP).run()
        horizon_ms = PROFILE_HORIZON * 1000
        if (since is None or changes.tenants is None or changes.now_ms - since >= horizon_ms
                or (now - self._polled_at) * 1000 + POLL_OVERLAP_MS >= horizon_ms):
            self._cache.clear()
            self._org_tiers.clear()
        else:
            for tenant in changes.tenants:  # an org's change is noted as "!<org>" (OrgBook.set)
                self._cache.pop(tenant, None)
                if tenant.startswith("!"):
                    self._org_tiers.pop(tenant[1:], None)
        self._polled_ms, self._polled_at, self._next_poll = changes.now_ms, now, now + self.cache_ttl
        self._polls += 1

    def _read(self, tenant: str, now: float, org: str | None = None) -> Cached:
        """Read the tenant's tier, overrides and pause flag (one round trip, with ``org``'s tier when not cached) and
        cache its profile, unless another thread polled meanwhile: then a change may have been missed, so the read
        is not cached."""
        polls = self._polls
        known = None if org is None else self._org_tiers.get(org)
        read_org = org is not None and (known is None or now - known[0] >= self.max_age)
        with self.connection.pipeline(transaction=False) as pipe:
            if self._resolver is None:
                pipe.hget(self.keys.tiers(), tenant)
            pipe.hgetall(self.keys.overrides(tenant))
            pipe.exists(self.keys.paused(tenant))
            if read_org:
                pipe.hget(self.keys.org_overrides(str(org)), "tier")
            replies = list(pipe.execute())
        if read_org:
            self._org_tier(str(org), now, replies.pop())
        *replies, paused = replies
        if self._resolver is not None:
            found: object = self._resolver(tenant)
        else:
            found = replies[0].decode() if isinstance(replies[0], bytes) else replies[0]
        own, own_tier = self._overrides(tenant, replies[-1]), self._own_tier(found)
        cached = Cached(now, now, own, bool(paused), self._profile(own_tier, own, bool(paused)), own_tier, {})
        if polls != self._polls:
            return cached
        if len(self._cache) > 100_000:  # bounded: drop everything rather than track recency
            self._cache.clear()
        self._cache[tenant] = cached
        return cached

    def _own_tier(self, found: object) -> str | None:
        """The tier a resolver, the tier map or an org named, if it is a configured tier; else None."""
        return found if isinstance(found, str) and found in self.config.concurrency else None

    def _profile(self, tier: str | None, own: TenantOverrides, paused: bool, source: str = "own") -> TenantProfile:
        """The values of ``tier`` (None: ``tiers.default``) with ``own`` on top; ``source``: where the tier is from."""
        config = self.config
        if tier is None:
            tier, source = config.default, "default"
        return TenantProfile(
            tier=tier,
            tier_source=source,
            limit=own.limit or config.limit(tier),
            weight=own.weight or config.weight(tier),
            rate=own.rate or config.rate.get(tier),
            burst=own.burst or config.burst.get(tier, 1),
            max_backlog=own.max_backlog or config.max_backlog.get(tier),
            overrides=own,
            paused=paused,
        )

    @staticmethod
    def _overrides(tenant: str, raw: dict[bytes, bytes]) -> TenantOverrides:
        """The stored overrides; a value that does not validate (written by hand) is logged and ignored."""
        fields = {key.decode(): value.decode() for key, value in raw.items()}
        try:
            return TenantOverrides(**fields)
        except ValidationError as exc:
            logger.warning("ignoring invalid overrides of tenant %r in Redis: %s", tenant, exc)
            return TenantOverrides()

    def set_overrides(self, tenant: str, overrides: TenantOverrides, reset: bool = False) -> TenantProfile:
        """Store ``overrides`` (``reset``: drop earlier ones first); the profile now in effect."""
        key = self.keys.overrides(tenant)
        with self.connection.pipeline() as pipe:
            if reset:
                pipe.delete(key)
            for name, value in overrides.fields().items():
                pipe.hset(key, name, value)
            self._note_change(self.keys.profile_changes(), tenant).queue(pipe)  # after the writes, same slot
            pipe.execute()
        self._cache.pop(tenant, None)
        return self.profile(tenant)

    def set(self, tenant: str, tier: str) -> None:
        """Store ``tenant``'s tier in Redis (used without a resolver); others see it within ``cache_ttl``."""
        if tier not in self.config.concurrency:
            known = ", ".join(sorted(self.config.concurrency))
            raise ValueError(f"unknown tier {tier!r}: known tiers are {known}")
        with self.connection.pipeline() as pipe:
            pipe.hset(self.keys.tiers(), tenant, tier)
            self._note_change(self.keys.profile_changes(), tenant).queue(pipe)  # after the write, same slot
            pipe.execute()
        self._cache.pop(tenant, None)

    def forget(self, tenant: str | None = None, org: str | None = None) -> None:
        """Drop ``tenant`` (and ``org``'s tier) from this process's cache (after a write here)."""
        self._cache.pop(tenant or "", None)
        if org is not None:
            self._org_tiers.pop(org, None)

    def queue_class(self, tenant: str | None, system: bool = False, org: str | None = None) -> str:
        """``scheduled`` for system jobs, ``priority`` for priority tiers (a tenant's own, else under ``org`` its
        org's), else ``default``."""
        if system or tenant is None:
            return SCHEDULED
        return PRIORITY if self.tier(tenant, org) in self.config.priority else DEFAULT

    def limit(self, tier: str) -> int:
        """How many jobs a tenant on ``tier`` may run at once."""
        return self.config.limit(tier)
