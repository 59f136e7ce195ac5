"""The per-tenant admin API (``fair-router tier|tenant``, the dashboard's actions): a tenant's tier, its
overrides, pause and resume, its running and waiting jobs. Apart from the router's work, whose connection, keys
and tier book it shares only; a FairRouter has one (``router.tenants``) and delegates to it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from redis import Redis
from rq import Queue

from fair_router.config.sections import TiersConfig
from fair_router.controls.fairstate import TENANT_FIELD, FairUnparkScript, record_waiting
from fair_router.controls.orgs import OrgBook, OrgProfile, org_jobs, tenant_orgs
from fair_router.controls.pauses import TenantPauses
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys, encode
from fair_router.core.profiles import TenantOverrides, TenantProfile
from fair_router.core.rates import Rate
from fair_router.core.tenancy import DEFAULT_TENANT_MAX_BYTES, tenant_id
from fair_router.core.text import as_text
from fair_router.store.scripts import Clock

P = ParamSpec("P")
R = TypeVar("R")


def delegate(method: Callable[Concatenate[TenantAdmin, P], R]) -> Callable[Concatenate[Any, P], R]:
    """``method`` of TenantAdmin as a method of a class that *has* one as ``self.tenants`` (FairRouter): a
    thin delegate with the same signature and docstring, instead of inheriting the admin."""
    def delegated(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return method(self.tenants, *args, **kwargs)
    delegated.__name__, delegated.__qualname__, delegated.__doc__ = method.__name__, method.__name__, method.__doc__
    return delegated


class TenantAdmin:
    """Read and change one tenant's controls; every worker and producer sees a change within 5 s.

    Every method takes a tenant id as a ``str`` or an ``int`` (:func:`~fair_router.core.tenancy.tenant_id`:
    TypeError for other types, InvalidTenant past ``tenant_max_bytes``), checked before anything is written."""

    def __init__(self, connection: Redis, keys: Keys, tiers: TierBook,
                 tenant_max_bytes: int = DEFAULT_TENANT_MAX_BYTES, rq_connection: Redis | None = None,
                 clock: Clock | None = None) -> None:
        """``connection``: our state (a RedisCluster on a cluster); ``rq_connection``: rq's keys and the fair
        queues' state (on a cluster the owner of rq's slot; else ``connection``); ``clock``: the fair queues'
        now for pauses (epoch seconds; tests inject one), else this host's clock and Redis server TIME."""
        self.connection = connection
        self.rq_connection = rq_connection or connection
        self.keys = keys
        self.tiers = tiers
        self.tenant_max_bytes = tenant_max_bytes
        self._pauses = TenantPauses(connection, keys, self.rq_connection, clock)
        self._unpark = FairUnparkScript(self.rq_connection)
        self.orgs = OrgBook(connection, keys)

    def tenant_id(self, tenant: object) -> str:
        """``tenant`` normalised (an int as its decimal string) and checked against ``tenant_max_bytes``."""
        return tenant_id(tenant, self.tenant_max_bytes)

    # -- tiers ---------------------------------------------------------------------------------

    def set_tier(self, tenant: str | int, tier: str) -> None:
        """Put ``tenant`` on ``tier`` (stored in Redis; used when no tier resolver is configured)."""
        tenant = self.tenant_id(tenant)
        self.tiers.set(tenant, tier)
        self._limit_changed(tenant, self.tiers.profile(tenant))

    def get_tier(self, tenant: str | int) -> str:
        """``tenant``'s tier (``tiers.default`` when unknown)."""
        return self.tiers.tier(self.tenant_id(tenant))

    # -- tenant controls -------------------------------------------------------------------------

    def set_tenant(
        self,
        tenant: str | int,
        limit: int | None = None,
        weight: float | None = None,
        rate: str | Rate | None = None,
        burst: int | None = None,
        max_backlog: int | None = None,
        reset: bool = False,
    ) -> TenantProfile:
        """Override ``tenant``'s tier values: concurrency ``limit``, fair-share ``weight``, ``rate`` ("10/s")
        with its ``burst``, and ``max_backlog`` (per fair queue). Values left None stay as they were;
        ``reset`` drops every earlier override first. Validated (pydantic's ValidationError names the
        value); every worker and producer uses it at its tier cache's next poll (within 5 s). Returns the profile
        now in effect."""
        tenant = self.tenant_id(tenant)
        overrides = TenantOverrides(limit=limit, weight=weight, rate=rate, burst=burst, max_backlog=max_backlog)
        profile = self.tiers.set_overrides(tenant, overrides, reset=reset)
        self._limit_changed(tenant, profile)
        return profile

    def _limit_changed(self, tenant: str, profile: TenantProfile) -> None:
        """The fair queues that mirror ``tenant``'s concurrency limit (lua/lib/claims.lua: workers reported it
        there, so limits are on) learn its new one now, and end its park there when it is below it: parked at
        its old limit, a tenant whose limit was raised would otherwise wait for a release (or a lease's life)
        with a slot free. Not while it is paused (its park holds it); a tier resolver's changes are not seen."""
        if self._pauses.paused(tenant):
            return
        queues = sorted(as_text(raw) for raw in self.rq_connection.smembers(Queue.redis_queues_keys))
        fair = [self.keys.fair_queue(key) for key in queues]
        with self.rq_connection.pipeline(transaction=False) as pipe:
            for keys in fair:
                pipe.hexists(keys.limits, encode(tenant))
            known = pipe.execute()
        with self.rq_connection.pipeline(transaction=False) as pipe:
            for keys, mirrored in zip(fair, known, strict=True):
                if mirrored:  # only workers with limits on report a limit: none is made up here
                    self._unpark(keys, encode(tenant), "", profile.limit).queue(pipe)
            pipe.execute()

    def tenant(self, tenant: str | int, org: str | int | None = None) -> TenantProfile:
        """The values in effect for ``tenant`` (tier, limit, weight, rate, burst, max_backlog, overrides), for its
        jobs under ``org`` when given (a tenant without a tier of its own takes its org's)."""
        org = None if org is None else tenant_id(org, self.tenant_max_bytes, "org")
        return self.tiers.profile(self.tenant_id(tenant), org)

    def pause(self, tenant: str | int) -> None:
        """No job of ``tenant`` starts until :meth:`resume`; its jobs wait (nothing is failed or lost).
        System jobs are not paused."""
        tenant = self.tenant_id(tenant)
        self._pauses.pause(tenant)
        self.tiers.forget(tenant)  # other processes' tier caches see it at their next poll

    def resume(self, tenant: str | int) -> None:
        """``tenant``'s jobs may start again (fair queues serve it at once)."""
        tenant = self.tenant_id(tenant)
        self._pauses.resume(tenant)
        self.tiers.forget(tenant)
        self._limit_changed(tenant, self.tiers.profile(tenant))  # a limit changed while it was paused

    def paused(self, tenant: str | int) -> bool:
        """Whether ``tenant`` is paused."""
        return self._pauses.paused(self.tenant_id(tenant))

    def paused_since(self, tenant: str | int) -> datetime | None:
        """When ``tenant`` was paused (UTC, Redis server time); None when it is not paused (or its pause predates
        recorded pause times)."""
        return self._pauses.paused_since(self.tenant_id(tenant))

    def tenant_jobs(self, tenant: str | int) -> tuple[int, dict[str, int]]:
        """``tenant``'s running jobs (unexpired concurrency leases, its own and, under the orgs it waits under in a
        fair queue, those; 0 when limits are off) and its waiting jobs per fair queue that has any (queue name ->
        count)."""
        tenant = self.tenant_id(tenant)
        queues = sorted(as_text(raw) for raw in self.rq_connection.smembers(Queue.redis_queues_keys))
        apart = self.rq_connection is not self.connection  # a cluster: the leases are on another slot
        with self.rq_connection.pipeline(transaction=False) as pipe:
            pipe.time()
            if not apart:
                pipe.zrange(self.keys.leases(tenant), 0, -1, withscores=True)
            for key in queues:
                pipe.hget(self.keys.fair_queue(key).state, TENANT_FIELD + encode(tenant))
                pipe.llen(key)
            (seconds, micros), *replies = pipe.execute()
        lease_key = self.keys.leases(tenant)
        leases = cast(list[tuple[bytes, float]],
                      self.connection.zrange(lease_key, 0, -1, withscores=True) if apart else replies.pop(0))
        # an empty list has nothing waiting, whatever members a plain rq worker left behind (fairqueue.stale)
        counts = [record_waiting(record) if length else 0
                  for record, length in zip(replies[::2], replies[1::2], strict=True)]
        now_ms = seconds * 1000 + micros // 1000
        running = sum(1 for _, expiry in leases if expiry > now_ms)
        if orgs := sorted(set(tenant_orgs(self.rq_connection, self.keys, tenant).values())):
            # its jobs under an org hold leases on the org's slot (Keys.lease_base): those of the orgs it waits under
            with self.connection.pipeline(transaction=False) as pipe:
                for org in orgs:
                    pipe.zcount(self.keys.leases(tenant, org), now_ms + 1, "+inf")
                running += sum(int(count) for count in pipe.execute())
        prefix = len(Queue.redis_queue_namespace_prefix)
        waiting = {key[prefix:]: int(count) for key, count in zip(queues, counts, strict=True) if count}
        return running, waiting

    # -- organisations ---------------------------------------------------------------------------

    def set_org(self, org: str | int, weight: float | None = None, reset: bool = False, concurrency: int | None = None,
                rate: str | Rate | None = None, burst: int | None = None, tier: str | None = None) -> None:
        """Override organisation ``org``'s fair-share ``weight``, its ``concurrency`` limit, its ``rate`` (with
        ``burst``) and its ``tier`` (a tier of ``tiers:``; ValueError else): each beats the settings' ``orgs.<org>``
        value (and its tier's); ``reset`` drops its earlier overrides first. Validated (pydantic's ValidationError
        names the value); every producer and worker uses them after its org cache's 5 s (controls/orgs.py). A
        raised limit ends its tenants' parks within a lease's life (or at the org's next release)."""
        if tier is not None and tier not in (known := self.tiers.config.concurrency):
            raise ValueError(f"unknown tier {tier!r}: known tiers are {', '.join(sorted(known))}")
        org = tenant_id(org, self.tenant_max_bytes, "org")
        self.orgs.set(org, weight, reset, concurrency, rate, burst, tier)
        self.tiers.forget(org=org)

    def org(self, org: str | int, configured: Mapping[str, Any] | None = None, tiers: TiersConfig | None = None
            ) -> OrgProfile:
        """``org``'s values in effect and their sources: each its override, else ``configured`` (the settings'
        ``orgs``), else (limits) its tier's in ``tiers``, else weight 1 and no limit."""
        return self.orgs.profile(tenant_id(org, self.tenant_max_bytes, "org"), configured, tiers)

    def pause_org(self, org: str | int) -> None:
        """No job of any tenant of ``org`` starts until :meth:`resume_org`; they wait (nothing is failed or lost).
        Its tenants waiting in a fair queue are parked there at once; others are refused at their start."""
        org = tenant_id(org, self.tenant_max_bytes, "org")
        self._pauses.pause_org(org, self._org_tenants(org))
        self.orgs.forget(org)

    def resume_org(self, org: str | int) -> None:
        """``org``'s tenants' jobs may start again: its tenants waiting in fair queues are unparked at once."""
        org = tenant_id(org, self.tenant_max_bytes, "org")
        self._pauses.resume_org(org, self._org_tenants(org))
        self.orgs.forget(org)

    def org_paused_since(self, org: str | int) -> datetime | None:
        """When ``org`` was paused (UTC, Redis server time); None when it is not."""
        return self._pauses.org_paused_since(tenant_id(org, self.tenant_max_bytes, "org"))

    def _org_tenants(self, org: str) -> dict[str, list[str]]:
        """Fair queue key -> the (decoded) tenants of ``org`` waiting there."""
        prefix = Queue.redis_queue_namespace_prefix
        return {prefix + queue: list(tenants) for queue, tenants in org_jobs(self.rq_connection, self.keys,
                                                                             org).items()}

    def org_jobs(self, org: str | int) -> dict[str, dict[str, int]]:
        """``org``'s tenants waiting per fair queue that has any: queue name -> tenant -> jobs waiting."""
        return org_jobs(self.rq_connection, self.keys, tenant_id(org, self.tenant_max_bytes, "org"))
