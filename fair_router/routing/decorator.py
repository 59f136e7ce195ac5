"""``@fair_job``: an rq job function whose enqueues are routed by tenant.

The decorated object is still callable (workers import it by its dotted path and call it), and adds
``delay`` / ``enqueue`` / ``enqueue_in`` / ``enqueue_at`` / ``enqueue_many`` that go through
:class:`~fair_router.routing.router.FairRouter`. Rules and the base queue come from the decorator, else from
settings under the job key (``module.qualname`` unless ``job_key=`` says otherwise).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, Generic, ParamSpec, TypeVar
from uuid import uuid4

from redis import Redis
from redis.client import Pipeline
from rq import Queue
from rq.group import Group
from rq.job import Job
from rq.queue import EnqueueArgs

from fair_router.config.settings import JobConfig, Settings, load_settings
from fair_router.core.rates import Rate
from fair_router.core.rules import Rule
from fair_router.core.shards import Shards
from fair_router.core.tenancy import TenantFunc, TenantResolver
from fair_router.routing.router import FairRouter, Route
from fair_router.store.replicas import ReplicaWait

P = ParamSpec("P")
R = TypeVar("R")


class FairJob(Generic[P, R]):
    """A job function with tenant-routed enqueue methods; call it to run the function directly."""

    def __init__(
        self,
        func: Callable[P, R],
        queue: str | None,
        rules: Sequence[Rule | Mapping[str, Any]] | None,
        tenant: TenantFunc | None,
        connection: Redis | None,
        router: FairRouter | None,
        settings: Settings | None,
        job_key: str | None,
        options: dict[str, Any],
        tier_routing: bool = False,
        fair: bool = False,
        rate: str | Rate | None = None,
        burst: int | None = None,
        shards: Shards | Mapping[str, Any] | None = None,
    ) -> None:
        functools.update_wrapper(self, func)
        self.func = func
        self.job_key = job_key or f"{func.__module__}.{func.__qualname__}"
        self.options = options
        self._queue = queue
        self._rules = None if rules is None else tuple(r if isinstance(r, Rule) else Rule(**r) for r in rules)
        # Validated now, with the settings' types: a bad queue name or rate fails at import, naming it.
        own = JobConfig(queue=queue, rate=rate, burst=burst, shards=shards)
        self._rate, self._burst, self._shards = own.rate, own.burst, own.shards
        self._connection = connection
        self._router = router
        self._settings = settings
        self._route: Route | None = None
        self.tier_routing = tier_routing
        self.fair = fair
        self.tenants = TenantResolver(self.job_key, tenant)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    # -- lazily bound, so importing a module of jobs needs neither settings nor Redis ---------------

    @property
    def settings(self) -> Settings:
        """Settings used for rules, base queue and connection (loaded on first use)."""
        if self._settings is None:
            self._settings = load_settings()
        return self._settings

    @property
    def router(self) -> FairRouter:
        """The router this job enqueues through."""
        if self._router is None:
            connection = self._connection or Redis.from_url(self.settings.redis_url)
            self._router = FairRouter(connection, prefix=self.settings.prefix, tiers=self.settings.tiers,
                                      tenant_max_bytes=self.settings.tenant_max_bytes,
                                      shard_urls=self.settings.shard_urls,
                                      replicas=ReplicaWait.of(self.settings))
            self._router.queues.declare_fair(self.settings.fair_queues)
        return self._router

    @property
    def route(self) -> Route:
        """Job key, base queue and rules: the decorator's, else the settings' for this job key."""
        if self._route is None:
            needed = self._rules is None or self._queue is None or self._rate is None or self._shards is None
            configured = self.settings.job(self.job_key) if needed else None
            queue = self._queue or (configured.queue if configured else None) or "default"
            rules = self._rules if self._rules is not None else tuple(configured.rules if configured else ())
            if not self.tier_routing:  # with tier routing, `{queue}` follows each call's tier queue instead
                rules = tuple(rule.for_base(queue) for rule in rules)
            rate, burst = self._rate, self._burst
            if rate is None and configured is not None:
                rate, burst = configured.rate, configured.burst
            shards = self._shards or (configured.shards if configured else None)
            self._route = Route(self.job_key, queue, rules, rate, burst or 1, shards)
        return self._route

    # -- enqueueing -------------------------------------------------------------------------------

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Enqueue with the decorator's rq options; every argument goes to the function."""
        return self._enqueue(self._call(args=args, kwargs=kwargs), None, None, None, False)

    def enqueue(
        self, *args: Any, fair_tenant: object = None, queue: str | None = None, system: bool = False, **kwargs: Any
    ) -> Job:
        """Like ``rq.Queue.enqueue``: rq options (job_timeout, retry, meta, ...) mix with the function's
        arguments. ``fair_tenant=`` overrides the tenant callable; ``queue=`` is recorded, not rerouted;
        ``system=True`` marks a system job (scheduled queue with tier routing; never throttled or limited)."""
        return self._enqueue(self._call(*args, **kwargs), fair_tenant, queue, None, system)

    def enqueue_at(
        self,
        when: datetime,
        *args: Any,
        fair_tenant: object = None,
        queue: str | None = None,
        system: bool = False,
        **kwargs: Any,
    ) -> Job:
        """Schedule for ``when``; counted in the tenant window now, when it is scheduled."""
        return self._enqueue(self._call(*args, **kwargs), fair_tenant, queue, when, system)

    def enqueue_in(
        self,
        delay: timedelta,
        *args: Any,
        fair_tenant: object = None,
        queue: str | None = None,
        system: bool = False,
        **kwargs: Any,
    ) -> Job:
        """Schedule after ``delay``; counted in the tenant window now, when it is scheduled."""
        when = datetime.now(timezone.utc) + delay
        return self.enqueue_at(when, *args, fair_tenant=fair_tenant, queue=queue, system=system, **kwargs)

    def enqueue_many(
        self,
        calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]],
        pipeline: Pipeline | None = None,
        group: Group | None = None,
    ) -> list[Job]:
        """Enqueue ``[(args, kwargs), ...]`` with the decorator's options; one Lua call routes the batch.
        A ``fair_tenant`` key in an item's kwargs sets that item's tenant. As with rq's
        ``Queue.enqueue_many``, ``pipeline`` is executed by the caller; ``group`` is an rq ``Group`` the
        jobs join (rq's ``Group.enqueue_many``)."""
        batch = []
        for item in calls:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise TypeError(f"enqueue_many takes (args, kwargs) pairs, got {item!r}")
            args, kwargs = item
            kwargs = dict(kwargs)
            explicit = kwargs.pop("fair_tenant", None)
            tenant = self.tenants.resolve(explicit, args, kwargs, self.router.tenant_max_bytes)
            batch.append((self._call(args=tuple(args), kwargs=kwargs), tenant))
        if not self.tier_routing:
            return self.router.enqueue_many(self.route, batch, self.fair, pipeline, group)
        batch = [(call._replace(job_id=call.job_id or str(uuid4())), tenant) for call, tenant in batch]
        by_class: dict[Route, list[tuple[EnqueueArgs, str | None]]] = {}
        for call, tenant in batch:  # one routed batch per tier queue class
            by_class.setdefault(self.router.tier_route(self.route, tenant), []).append((call, tenant))
        jobs = {
            job.id: job
            for route, part in by_class.items()
            for job in self.router.enqueue_many(route, part, self.fair, pipeline, group)
        }
        return [jobs[str(call.job_id)] for call, _ in batch]

    def _call(self, *args: Any, **kwargs: Any) -> EnqueueArgs:
        """rq's own parsing of enqueue arguments, over the decorator's defaults."""
        parsed: EnqueueArgs = Queue.parse_args(self.func, *args, **{**self.options, **kwargs})
        return parsed

    def _enqueue(
        self, call: EnqueueArgs, explicit: object, queue: str | None, at: datetime | None, system: bool
    ) -> Job:
        tenant = self.tenants.resolve(explicit, call.args or (), call.kwargs or {}, self.router.tenant_max_bytes)
        route = self.router.tier_route(self.route, tenant, system) if self.tier_routing else self.route
        return self.router.enqueue(route, call, tenant, queue=queue, at=at, system=system, fair=self.fair)


def fair_job(
    queue: str | None = None,
    *,
    rules: Sequence[Rule | Mapping[str, Any]] | None = None,
    tenant: TenantFunc | None = None,
    connection: Redis | None = None,
    router: FairRouter | None = None,
    settings: Settings | None = None,
    job_key: str | None = None,
    tier_routing: bool = False,
    fair: bool = False,
    rate: str | Rate | None = None,
    burst: int | None = None,
    shards: Shards | Mapping[str, Any] | None = None,
    **rq_options: Any,
) -> Callable[[Callable[P, R]], FairJob[P, R]]:
    """Decorate a job function for tenant-routed enqueueing.

    ``queue``: base queue (else settings ``jobs.<job key>.queue``, else ``default``).
    ``rules``: throttle rules, least to most restrictive (else settings ``jobs.<job key>.rules``).
    ``tenant``: called with the job's arguments, returns the tenant id.
    ``connection`` / ``router``: where to enqueue (else ``settings.redis_url``).
    ``tier_routing``: base queue becomes ``<queue>_priority`` / ``_default`` / ``_scheduled`` by tier.
    ``fair``: enqueue into a FairQueue (per-tenant FIFOs, weighted fair share at dequeue).
    ``rate`` / ``burst``: job starts per tenant of this function ("10/s", "N/m", "N/h"; else settings
    ``jobs.<job key>.rate`` / ``.burst``), checked by weighted workers when they take a job.
    ``shards``: shuffle-sharding, e.g. ``Shards(count=8, per_tenant=2)``: each job goes to the least loaded of
    its tenant's shards, queue ``<queue>_shard<i>`` (else settings ``jobs.<job key>.shards``).
    ``rq_options``: defaults for rq (``job_timeout``, ``retry``, ``result_ttl``, ...).
    """

    def decorate(func: Callable[P, R]) -> FairJob[P, R]:
        return FairJob(
            func, queue, rules, tenant, connection, router, settings, job_key, rq_options, tier_routing, fair,
            rate, burst, shards,
        )

    return decorate
