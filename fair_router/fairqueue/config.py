"""A FairQueue's configuration (:class:`FairConfig`: the constructor's arguments, else the settings) and how a
job becomes the :class:`~fair_router.fairqueue.scripts.PushEntry` a push sends (docs/fair-queue.md)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError
from redis import Redis
from rq.job import Job

from fair_router.config.errors import validated
from fair_router.config.sections import Charge, TiersConfig
from fair_router.controls.orgs import OrgBook
from fair_router.controls.tiers import TierBook
from fair_router.core.jobmeta import META_COST, META_SYSTEM, META_TENANT
from fair_router.core.keys import Keys, encode
from fair_router.core.tenancy import META_ORG, InvalidTenant, optional_tenant_id, org_id, stored_org, usable_tenant
from fair_router.core.validation import Prefix, Seconds, TenantMaxBytes
from fair_router.fairqueue.scripts import PushEntry
from fair_router.store.cluster import state_of

if TYPE_CHECKING:
    from fair_router.config.settings import Settings

logger = logging.getLogger("fair_router")

NO_TENANT = "#none"
"""Encoded pseudo-tenant of jobs without a tenant. ``encode`` never yields it: '#' only starts the
64-hex-digit digest form."""

COST: TypeAdapter[float] = TypeAdapter(Seconds)
"""A declared ``fair_cost`` (seconds)."""

_CHARGE: TypeAdapter[Charge] = TypeAdapter(Charge)
_PREFIX: TypeAdapter[str] = TypeAdapter(Prefix)
_MAX_BYTES: TypeAdapter[int] = TypeAdapter(TenantMaxBytes)


class FairConfig:
    """Prefix, tiers, charge, trust in declared costs and the longest tenant id of one FairQueue: given, else
    from ``settings``, else from the settings loaded on first use."""

    def __init__(self, connection: Redis, *, prefix: str | None = None, tiers: TiersConfig | None = None,
                 settings: Settings | None = None, charge: Charge | None = None, trust_cost: bool | None = None,
                 tenant_max_bytes: int | None = None) -> None:
        self.connection = connection
        self._settings = settings
        self._prefix = validated(_PREFIX, prefix, "FairQueue(prefix=...)") if prefix else (
            settings.prefix if settings else None)
        self._tiers = tiers or (settings.tiers if settings else None)
        self._charge: Charge | None = None
        if charge is not None:
            checked: Charge = validated(_CHARGE, charge, "FairQueue(charge=...)")
            self._charge = checked
        self._trust_cost = trust_cost
        self._tenant_max_bytes = None if tenant_max_bytes is None else validated(
            _MAX_BYTES, tenant_max_bytes, "FairQueue(tenant_max_bytes=...)")
        self._tier_book: TierBook | None = None
        self._org_book: OrgBook | None = None

    def use_settings(self, settings: Settings, prefix: str | None = None) -> None:
        """Take prefix and tiers from ``settings`` (``prefix``, when given, wins: a fairness mark's)."""
        self._settings = settings
        self._prefix, self._tiers = prefix or settings.prefix, settings.tiers
        self._tier_book = self._org_book = None

    @property
    def settings(self) -> Settings:
        """The settings given, else loaded now (once)."""
        if self._settings is None:
            from fair_router.config.settings import load_settings  # heavy (pydantic-settings): on first use
            self._settings = load_settings()
        return self._settings

    @property
    def keys(self) -> Keys:
        """The key builder of the queue's prefix."""
        return Keys(self._prefix or self.settings.prefix)

    @property
    def charge(self) -> Charge:
        """What a pop charges its tenant: "jobs" (1 / weight) or "runtime" (run time / weight)."""
        return self._charge or self.settings.fair_charge

    @property
    def trust_cost(self) -> bool:
        """charge="runtime": settle with a job's declared ``fair_cost`` instead of its measured run time."""
        return self.settings.fair_trust_cost if self._trust_cost is None else self._trust_cost

    @property
    def tenant_max_bytes(self) -> int:
        """The longest tenant id the queue takes (bytes of UTF-8): the ``tenant_max_bytes`` setting."""
        return self._tenant_max_bytes or self.settings.tenant_max_bytes

    @property
    def claim_ms(self) -> int:
        """How long a limited tenant's popped job counts against its limit without a release: its slot's lease."""
        return max(1, round(self.settings.concurrency.lease_ttl * 1000))

    @property
    def tier_book(self) -> TierBook:
        """Tenant -> tier (cached), for the weight and backlog cap of each push."""
        if self._tier_book is None:
            # The tier map and overrides are our state (a RedisCluster on a cluster), not on rq's slot.
            self._tier_book = TierBook(state_of(self.connection), self.keys, self._tiers or self.settings.tiers,
                                       orgs=self.settings.orgs)
        return self._tier_book

    def weight(self, tenant: str | None, org: str | None = None) -> float:
        """Fair-share weight of ``tenant`` (under ``org``): its override, else its tier's ``tiers.weights`` entry
        (default 1)."""
        return 1.0 if tenant is None else self.tier_book.profile(tenant, org).weight

    def max_backlog(self, tenant: str, org: str | None = None) -> int | None:
        """``tenant``'s backlog cap (its ``max_backlog`` override, else its tier's), None when uncapped."""
        return self.tier_book.profile(tenant, org).max_backlog

    def tenant_id(self, tenant: object) -> str | None:
        """A ``fair_tenant`` as the queue stores it (None: no tenant); TypeError / InvalidTenant otherwise."""
        return optional_tenant_id(tenant, self.tenant_max_bytes)

    def org_weight(self, org: str) -> float:
        """Fair-share weight of organisation ``org`` against other orgs: its override (``fair-router org set``, cached
        5 s), else settings ``orgs.<org>.weight`` (default 1)."""
        if self._org_book is None:
            self._org_book = OrgBook(state_of(self.connection), self.keys)
        return self._org_book.profile(org, self.settings.orgs).weight

    def org_of(self, meta: dict[str, Any] | None, tenant: str | None) -> str | None:
        """The org a job with this meta is served under: its stored ``fair_org`` when it has a tenant; an unusable
        stored org is read as none (warned)."""
        try:
            org = stored_org(meta, self.tenant_max_bytes)
        except InvalidTenant as exc:
            logger.warning("%s; served without org", exc)
            return None
        if org is None or tenant is None:
            return None
        return org

    def org_arg(self, meta: dict[str, Any] | None, tenant: str | None) -> str:
        """The org of a job put back (fair_park.lua's argument): "<encoded org>|<org weight>", "" for none."""
        org = self.org_of(meta, tenant)
        return "" if org is None else f"{encode(org)}|{self.org_weight(org)!r}"

    def with_tenant(self, kwargs: dict[str, Any], tenant: object, cost: float | None = None,
                    org: object = None) -> dict[str, Any]:
        """rq's enqueue keywords with ``fair_tenant=`` (else the meta's own, checked too), ``fair_org=`` (likewise)
        and ``fair_cost=`` put in the meta; a tenant or org that is not a str or int id raises before anything is
        written, as does an org without tenant."""
        meta = {**(kwargs.get("meta") or {})}
        checked = self.tenant_id(tenant if tenant is not None else meta.get(META_TENANT))
        if checked is not None:
            meta[META_TENANT] = checked
        org_checked = org_id(org, self.tenant_max_bytes) if org is not None else stored_org(meta, self.tenant_max_bytes)
        if org_checked is not None:
            if checked is None:
                raise ValueError(f"fair_org={org_checked!r} needs a tenant (fair_tenant=): an organisation groups "
                                 "tenants, a job without tenant has none")
            meta[META_ORG] = org_checked
        if cost is not None:
            meta[META_COST] = validated(COST, cost, "fair_cost=")
        return {**kwargs, "meta": meta} if meta else kwargs

    def entry(self, job_id: str, job: Job | None, at_front: bool, cap: int = 0, **flags: bool) -> PushEntry:
        """The push entry of ``job`` (None: its hash is gone): its tenant's stored name and weight, and what a
        runtime charge estimates from."""
        name = None if job is None else tenant_of(job.meta, self.tenant_max_bytes)
        func, declared = "", None
        if job is not None and self.charge == "runtime":  # what the pop needs to estimate the job's run time
            func, declared = job.func_name or "", declared_cost(job)
        org = None if job is None else self.org_of(job.meta, name)
        return PushEntry(job_id, tenant_key(name), self.weight(name, org), at_front, cap=cap, **flags, func=func,
                         declared=declared, org="" if org is None else encode(org),
                         org_weight=1.0 if org is None else self.org_weight(org))


def tenant_key(tenant: str | None) -> str:
    """The tenant as the fair state names it: encoded (no ':' or braces), or the no-tenant id."""
    return NO_TENANT if tenant is None else encode(tenant)


def tenant_of(meta: dict[str, Any] | None, max_bytes: int, warn: bool = True) -> str | None:
    """The tenant whose FIFO a job with this meta joins: none for a system job or a stored tenant that is no tenant
    id (served as a job without tenant; the worker fails the latter, logged if ``warn``)."""
    if (meta or {}).get(META_SYSTEM):
        return None
    return usable_tenant(meta, max_bytes, warn)


def declared_cost(job: Job) -> float | None:
    """The job's declared ``fair_cost`` (seconds), None when absent or not a valid cost."""
    value = (job.meta or {}).get(META_COST)
    try:
        return None if value is None else COST.validate_python(value)
    except ValidationError:
        return None
