"""What every part of FairQueue shares: its configuration (prefix, tiers, charge, bound lazily from
settings), its keys and script wrappers, and how a job becomes a fair-structure entry (tenant, weight,
cost). The design is explained in :mod:`fair_router.fairqueue`."""

from __future__ import annotations

from typing import Any, TypeVar, cast

from pydantic import TypeAdapter, ValidationError
from redis import Redis
from redis.client import Pipeline
from rq.job import Job

from fair_router.config.settings import Charge, Settings, TiersConfig, load_settings, validated
from fair_router.controls.backlog import BacklogCaps
from fair_router.controls.tiers import TierBook
from fair_router.core.jobmeta import META_COST, META_SYSTEM, META_TENANT
from fair_router.core.keys import FairQueueKeys, Keys, encode
from fair_router.core.tenancy import optional_tenant_id
from fair_router.core.validation import Prefix, Seconds, TenantMaxBytes
from fair_router.fairqueue.marks import FairnessMarks
from fair_router.rq_internals.queue import RqQueueSeam
from fair_router.store.cluster import is_cluster, rq_of, state_of
from fair_router.store.fair_scripts import FairMigrateScript, PushEntry
from fair_router.store.luascript import LuaScript

_S = TypeVar("_S", bound=LuaScript[Any])

NO_TENANT = "#none"
"""Encoded pseudo-tenant of jobs without a tenant. ``encode`` never yields it: '#' only starts the
64-hex-digit digest form."""

COST: TypeAdapter[float] = TypeAdapter(Seconds)
"""A declared ``fair_cost`` (seconds)."""

_CHARGE: TypeAdapter[Charge] = TypeAdapter(Charge)
_PREFIX: TypeAdapter[str] = TypeAdapter(Prefix)
_MAX_BYTES: TypeAdapter[int] = TypeAdapter(TenantMaxBytes)


class FairQueueBase(RqQueueSeam):
    """Configuration, keys, scripts and entries of a FairQueue; the parts in :mod:`fair_router.fairqueue`
    (pushing, popping, maintenance, listing) build on it."""

    recover_after: float = 60.0
    """Seconds a popped job may stay unstarted before maintenance gives it back to the queue."""

    def __init__(
        self,
        name: str = "default",
        connection: Redis | None = None,
        *args: Any,
        prefix: str | None = None,
        tiers: TiersConfig | None = None,
        settings: Settings | None = None,
        recover_after: float | None = None,
        charge: Charge | None = None,
        trust_cost: bool | None = None,
        tenant_max_bytes: int | None = None,
        **kwargs: Any,
    ) -> None:
        """rq's arguments, plus where the fair state lives (``prefix``), the tiers that give weights
        (``tiers``), what a pop charges its tenant (``charge``: "jobs" or "runtime", see
        :mod:`fair_router.fairqueue`), whether a declared ``fair_cost`` is the charge (``trust_cost``) and the
        longest ``fair_tenant`` id taken (``tenant_max_bytes``, UTF-8 bytes); all default to ``settings``
        (else loaded on first use, as ``--queue-class`` builds queues with rq's arguments only)."""
        if is_cluster(connection):  # our state there; the queue itself on the owner of rq's slot
            connection = rq_of(connection)
        super().__init__(name, connection, *args, **kwargs)
        if "{" in name or "}" in name:
            raise ValueError(f"fair queue names cannot hold braces: {name!r}")
        self._settings = settings
        self._prefix = validated(_PREFIX, prefix, "FairQueue(prefix=...)") if prefix else (
            settings.prefix if settings else None)
        self._tiers_config = tiers or (settings.tiers if settings else None)
        if recover_after is not None:
            self.recover_after = recover_after
        self._charge: Charge | None = None
        if charge is not None:
            checked: Charge = validated(_CHARGE, charge, "FairQueue(charge=...)")
            self._charge = checked
        self._trust_cost = trust_cost
        self._tenant_max_bytes = None if tenant_max_bytes is None else validated(
            _MAX_BYTES, tenant_max_bytes, "FairQueue(tenant_max_bytes=...)")
        self._fair_keys: FairQueueKeys | None = None
        self._tier_book: TierBook | None = None
        self._scripts: dict[type[LuaScript[Any]], LuaScript[Any]] = {}
        # Popped through this object -> FIFO seq of a fair choice (None: a plain entry); acknowledged with
        # the next pop (popping.py).
        self._handed_out: dict[str, int | None] = {}
        self.caps = BacklogCaps(name)  # backlog caps of the pushes in flight (fair_router.controls.backlog)
        self._capping = False  # set while a new enqueue (not a retry, requeue or dependent) is under way

    def use_settings(self, settings: Settings, prefix: str | None = None) -> None:
        """Take prefix and tiers from ``settings`` (the weighted worker calls this on queues rq built);
        ``prefix``: the queue's fairness mark names another prefix for its fair state."""
        self._settings = settings
        self._prefix, self._tiers_config = prefix or settings.prefix, settings.tiers
        self._fair_keys = self._tier_book = None

    _marked = False

    def mark_fair(self, pipeline: Pipeline | None = None) -> None:
        """Record in Redis that this queue is fair (its fairness mark, :mod:`fair_router.fairqueue.marks`),
        once per object, on ``pipeline`` when given: from then on every weighted worker and producer of ours
        serves and fills it as a FairQueue, whatever flags they were started with."""
        if not self._marked:
            self._marked = True
            FairnessMarks(self.connection, self.prefix_keys.prefix).mark([self.name], pipeline)

    @property
    def charge(self) -> Charge:
        """What a pop charges its tenant: "jobs" (1 / weight) or "runtime" (run time / weight)."""
        return self._charge or self._loaded().fair_charge

    @property
    def trust_cost(self) -> bool:
        """charge="runtime": settle with a job's declared ``fair_cost`` instead of its measured run time."""
        return self._loaded().fair_trust_cost if self._trust_cost is None else self._trust_cost

    @property
    def tenant_max_bytes(self) -> int:
        """The longest tenant id this queue takes (bytes of UTF-8): the ``tenant_max_bytes`` setting."""
        return self._tenant_max_bytes or self._loaded().tenant_max_bytes

    def tenant_id(self, tenant: object) -> str | None:
        """A ``fair_tenant`` as this queue stores it: None (no tenant), else
        :func:`~fair_router.core.tenancy.tenant_id` (TypeError / InvalidTenant before anything is written)."""
        return optional_tenant_id(tenant, self.tenant_max_bytes)

    def _loaded(self) -> Settings:
        if self._settings is None:
            self._settings = load_settings()
        return self._settings

    @property
    def prefix_keys(self) -> Keys:
        """The key builder of this queue's prefix."""
        return Keys(self._prefix or self._loaded().prefix)

    @property
    def fair_keys(self) -> FairQueueKeys:
        """This queue's fair keys (all on the cluster slot of rq's list)."""
        if self._fair_keys is None:
            keys = self.prefix_keys.fair_queue(self.key)
            # Once per object: jobs left waiting by a build before tenant records keep their places.
            self._script(FairMigrateScript)(keys, self.prefix_keys.fair_queue_legacy(self.key)).run()
            self._fair_keys = keys
        return self._fair_keys

    @property
    def tier_book(self) -> TierBook:
        """Tenant -> tier (cached), for the weight of each push."""
        if self._tier_book is None:
            tiers = self._tiers_config or self._loaded().tiers
            # The tier map and overrides are our state (a RedisCluster on a cluster), not on rq's slot.
            self._tier_book = TierBook(state_of(self.connection), self.prefix_keys, tiers)
        return self._tier_book

    def _script(self, kind: type[_S]) -> _S:
        """This queue's wrapper of one script, built (script read, assembled, registered) on first use."""
        script = self._scripts.get(kind)
        if script is None:
            script = self._scripts[kind] = kind(self.connection)
        return cast(_S, script)

    def weight(self, tenant: str | None) -> float:
        """Fair-share weight of ``tenant``: its override, else its tier's ``tiers.weights`` entry (default 1)."""
        if tenant is None:
            return 1.0
        return self.tier_book.profile(tenant).weight

    @staticmethod
    def tenant_key(tenant: str | None) -> str:
        """The tenant as the fair structure names it: encoded (no ':' or braces), or the no-tenant id."""
        return NO_TENANT if tenant is None else encode(tenant)

    def _entry(self, job_id: str, job: Job | None, at_front: bool, cap: int = 0, **flags: bool) -> PushEntry:
        tenant = None if job is None else tenant_of(job.meta)
        name = None if tenant is None else str(tenant)
        func, declared = "", None
        if job is not None and self.charge == "runtime":  # what the pop needs to estimate the job's run time
            func, declared = job.func_name or "", _declared_cost(job)
        return PushEntry(job_id, self.tenant_key(name), self.weight(name), at_front, cap=cap, **flags, func=func,
                         declared=declared)


def tenant_of(meta: dict[str, Any] | None) -> object:
    """The tenant whose FIFO a job with this meta joins. A system job joins none (it is served as a job
    without tenant): tenant controls never hold it, so it must not wait behind its tenant's park."""
    tenant = (meta or {}).get(META_TENANT)
    if tenant is None or tenant == "" or (meta or {}).get(META_SYSTEM):
        return None
    return tenant


def _declared_cost(job: Job) -> float | None:
    """The job's declared ``fair_cost`` (seconds), None when absent or not a valid cost."""
    value = (job.meta or {}).get(META_COST)
    try:
        return None if value is None else COST.validate_python(value)
    except ValidationError:
        return None
