"""``@fair_job``: an rq job function whose enqueues are routed by tenant; the decorated name stays a plain function
(every rq enqueue takes it) and gains ``delay`` / ``enqueue*``, ``job_key`` and ``fair_job`` (docs/api.md)."""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, cast
from uuid import uuid4

from redis import Redis
from redis.client import Pipeline
from rq import Queue
from rq.group import Group
from rq.job import Job
from rq.queue import EnqueueArgs

from fair_router.core.djangoenv import commit_hook
from fair_router.core.names import is_queue_name
from fair_router.core.tenancy import TenantFunc, TenantResolver, resolve_org, stored_org, with_org

if TYPE_CHECKING:  # the rest on first use: a work horse importing a module of jobs needs none of it (pydantic)
    from fair_router.config.settings import Settings
    from fair_router.core.rates import Rate
    from fair_router.core.rules import Rule
    from fair_router.core.shards import Shards
    from fair_router.routing.router import FairRouter, Route

logger = logging.getLogger("fair_router")

P = ParamSpec("P")
R = TypeVar("R")


class FairJob(Generic[P, R]):
    """The tenant-routed enqueue methods of one job function (the ``fair_job`` attribute of a decorated
    function, whose ``delay`` and ``enqueue*`` are these); call it to run the function directly."""

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
        org: TenantFunc | None = None,
    ) -> None:
        functools.update_wrapper(self, func)
        self.func = func
        self.job_key = job_key or f"{func.__module__}.{func.__qualname__}"
        self.options = options
        self._queue = queue
        self._rules: tuple[Rule, ...] | None = None
        self._rate: Rate | None = None
        self._burst: int | None = None
        self._shards: Shards | None = None
        if rules is not None or rate is not None or burst is not None or shards is not None or not is_queue_name(queue):
            # Validated now, with the settings' types: a bad queue name or rate fails at import, naming it.
            # (A queue name alone is checked without pydantic: most decorators give only that.)
            from fair_router.config.sections import JobConfig
            from fair_router.core.rules import Rule

            self._rules = None if rules is None else tuple(r if isinstance(r, Rule) else Rule(**r) for r in rules)
            own = JobConfig(queue=queue, rules=list(self._rules or ()), rate=rate, burst=burst, shards=shards)
            self._rate, self._burst, self._shards = own.rate, own.burst, own.shards
        self._connection = connection
        self._router = router
        self._declared = False  # this job's fair queues declared to its router (a given one included)
        self._settings = settings
        self._route: Route | None = None
        self.tier_routing = tier_routing
        self.fair = fair
        self.tenants = TenantResolver(self.job_key, tenant)
        self.org = org  # called with the job's arguments: the tenant's organisation (None: none)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    @property
    def fair_job(self) -> FairJob[P, R]:
        """Itself: a FairJob returned for a callable that is not a plain function has the decorated
        function's attributes too (:class:`FairJobFunction`)."""
        return self

    # -- lazily bound, so importing a module of jobs needs neither settings nor Redis ---------------

    @property
    def settings(self) -> Settings:
        """Settings used for rules, base queue and connection (loaded on first use)."""
        if self._settings is None:
            from fair_router.config.settings import load_settings  # heavy (pydantic-settings): on first use
            self._settings = load_settings()
        return self._settings

    @property
    def router(self) -> FairRouter:
        """The router this job enqueues through."""
        if self._router is None:
            from fair_router.routing.router import FairRouter
            from fair_router.store.cluster import connections_for
            from fair_router.store.replicas import ReplicaWait

            connection = self._connection or connections_for(self.settings.redis_url, self.settings.redis_cluster).state
            self._router = FairRouter(connection, prefix=self.settings.prefix, tiers=self.settings.tiers,
                                      orgs=self.settings.orgs, tenant_max_bytes=self.settings.tenant_max_bytes,
                                      shard_urls=self.settings.shard_urls,
                                      replicas=ReplicaWait.of(self.settings))
        if not self._declared:
            self._router.queues.declare_fair(self._fair_names())
            self._declared = True
        return self._router

    def _fair_names(self) -> list[str]:
        """The queues this job enqueues into as FairQueues: the settings' (:meth:`Settings.fair_queue_names`) and,
        with ``throttled_queues: fair``, its own rules' queues (a ``{queue}`` rule's for each tier queue)."""
        names = self.settings.fair_queue_names()
        if self.settings.throttled_queues == "fair":
            from fair_router.core.profiles import DEFAULT, PRIORITY, SCHEDULED

            route = self.route
            kinds = (PRIORITY, DEFAULT, SCHEDULED) if self.tier_routing else ()
            bases = [f"{route.queue}_{kind}" for kind in kinds] or [route.queue]
            names += [rule.for_base(base).queue for rule in route.rules for base in bases]
        return names

    @property
    def route(self) -> Route:
        """Job key, base queue and rules: the decorator's, else the settings' for this job key."""
        if self._route is None:
            from fair_router.routing.router import Route

            needed = self._rules is None or self._queue is None or self._rate is None or self._shards is None
            configured = self.settings.job(self.job_key) if needed else None
            if self._rules is None:
                warn_unconfigured(self.job_key, self.settings)
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
        return self._enqueue(self._call(args=args, kwargs=kwargs), None, None, None, False, None)

    def enqueue(
        self, *args: Any, fair_tenant: object = None, queue: str | None = None, system: bool = False,
        fair_org: object = None, **kwargs: Any
    ) -> Job:
        """Like ``rq.Queue.enqueue``: rq options (job_timeout, retry, meta, ...) mix with the function's
        arguments. ``fair_tenant=`` overrides the tenant callable, ``fair_org=`` the org callable; ``queue=`` is
        recorded, not rerouted; ``system=True`` marks a system job (scheduled queue with tier routing; never
        throttled or limited)."""
        return self._enqueue(self._call(*args, **kwargs), fair_tenant, queue, None, system, fair_org)

    def enqueue_at(
        self,
        when: datetime,
        *args: Any,
        fair_tenant: object = None,
        queue: str | None = None,
        system: bool = False,
        fair_org: object = None,
        **kwargs: Any,
    ) -> Job:
        """Schedule for ``when``; counted in the tenant window now, when it is scheduled."""
        return self._enqueue(self._call(*args, **kwargs), fair_tenant, queue, when, system, fair_org)

    def enqueue_in(
        self,
        delay: timedelta,
        *args: Any,
        fair_tenant: object = None,
        queue: str | None = None,
        system: bool = False,
        fair_org: object = None,
        **kwargs: Any,
    ) -> Job:
        """Schedule after ``delay``; counted in the tenant window now, when it is scheduled."""
        when = datetime.now(timezone.utc) + delay
        return self.enqueue_at(when, *args, fair_tenant=fair_tenant, queue=queue, system=system, fair_org=fair_org,
                               **kwargs)

    def enqueue_many(
        self,
        calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]],
        pipeline: Pipeline | None = None,
        group: Group | None = None,
    ) -> list[Job]:
        """Enqueue ``[(args, kwargs), ...]`` with the decorator's options; one Lua call routes the batch.
        A ``fair_tenant`` key in an item's kwargs sets that item's tenant, a ``fair_org`` key its org. As with rq's
        ``Queue.enqueue_many``, ``pipeline`` is executed by the caller; ``group`` is an rq ``Group`` the
        jobs join (rq's ``Group.enqueue_many``)."""
        batch = []
        for item in calls:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise TypeError(f"enqueue_many takes (args, kwargs) pairs, got {item!r}")
            args, kwargs = item
            kwargs = dict(kwargs)
            explicit, explicit_org = kwargs.pop("fair_tenant", None), kwargs.pop("fair_org", None)
            tenant = self.tenants.resolve(explicit, args, kwargs, self.router.tenant_max_bytes)
            batch.append((self._with_org(self._call(args=tuple(args), kwargs=kwargs), explicit_org), tenant))
        wait = commit_hook() if pipeline is None and batch else None  # a caller's pipeline is the caller's
        if wait is None:
            return self._enqueue_batch(batch, pipeline, group)
        fixed = [(call._replace(job_id=call.job_id or str(uuid4())), tenant) for call, tenant in batch]
        wait(partial(self._enqueue_batch, fixed, None, group),
             f"{len(fixed)} jobs of {self.job_key} (ids {', '.join(str(call.job_id) for call, _ in fixed)})")
        return [self._to_be(call) for call, _ in fixed]

    def _enqueue_batch(self, batch: list[tuple[EnqueueArgs, str | None]], pipeline: Pipeline | None,
                       group: Group | None) -> list[Job]:
        if not self.tier_routing:
            return self.router.enqueue_many(self.route, batch, self.fair, pipeline, group)
        batch = [(call._replace(job_id=call.job_id or str(uuid4())), tenant) for call, tenant in batch]
        by_class: dict[Route, list[tuple[EnqueueArgs, str | None]]] = {}
        for call, tenant in batch:  # one routed batch per tier queue class
            route = self.router.tier_route(self.route, tenant, org=stored_org(call.meta))
            by_class.setdefault(route, []).append((call, tenant))
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

    def _with_org(self, call: EnqueueArgs, explicit: object) -> EnqueueArgs:
        """``call`` with its organisation (``fair_org=``, else the ``org=`` callable's) in its meta."""
        org = resolve_org(explicit, self.org, call.args or (), call.kwargs or {}, self.router.tenant_max_bytes)
        return call if org is None else call._replace(meta=with_org(call.meta, org))

    def _enqueue(
        self, call: EnqueueArgs, explicit: object, queue: str | None, at: datetime | None, system: bool,
        explicit_org: object = None,
    ) -> Job:
        tenant = self.tenants.resolve(explicit, call.args or (), call.kwargs or {}, self.router.tenant_max_bytes)
        call = self._with_org(call, explicit_org)

        def enqueue(call: EnqueueArgs) -> Job:
            route = (self.router.tier_route(self.route, tenant, system, stored_org(call.meta)) if self.tier_routing
                     else self.route)
            return self.router.enqueue(route, call, tenant, queue=queue, at=at, system=system, fair=self.fair)

        wait = commit_hook()
        if wait is None or call.pipeline is not None or (call.unique and not call.job_id):
            return enqueue(call)  # now; or the caller's pipeline, to execute; or rq's refusal, raised now
        fixed = call._replace(job_id=call.job_id or str(uuid4()))
        wait(partial(enqueue, fixed), f"job {fixed.job_id} of {self.job_key} (tenant {tenant!r})")
        return self._to_be(fixed)

    def _to_be(self, call: EnqueueArgs) -> Job:
        """The job an enqueue put off until its Django transaction commits: its id is fixed now, and it is saved
        in Redis at the commit (``job.refresh()`` or ``Job.fetch(job.id)`` then reads it; never, on a rollback)."""
        return Job(str(call.job_id), connection=self.router.rq_connection)


class FairJobFunction(Protocol[P, R]):
    """What ``@fair_job`` returns, for type checkers: the function (callable with its own arguments) with the
    routed enqueue methods of its :class:`FairJob` (``fair_job``)."""

    job_key: str

    @property
    def fair_job(self) -> FairJob[P, R]: ...

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> Job: ...

    def enqueue(self, *args: Any, fair_tenant: object = None, queue: str | None = None, system: bool = False,
                fair_org: object = None, **kwargs: Any) -> Job: ...

    def enqueue_at(self, when: datetime, *args: Any, fair_tenant: object = None, queue: str | None = None,
                   system: bool = False, fair_org: object = None, **kwargs: Any) -> Job: ...

    def enqueue_in(self, delay: timedelta, *args: Any, fair_tenant: object = None, queue: str | None = None,
                   system: bool = False, fair_org: object = None, **kwargs: Any) -> Job: ...

    def enqueue_many(self, calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]], pipeline: Pipeline | None = None,
                     group: Group | None = None) -> list[Job]: ...


ATTRIBUTES = ("delay", "enqueue", "enqueue_at", "enqueue_in", "enqueue_many")
"""The FairJob methods a decorated function carries as its own attributes (rq's ``@job`` adds ``delay``)."""


def with_routing(func: Callable[P, R], bundle: FairJob[P, R]) -> FairJobFunction[P, R]:
    """A copy of the plain function ``func`` (code, globals, defaults, closure, names, attributes) carrying ``bundle``'s
    methods, which rq imports by its dotted name; any other callable gets ``bundle`` itself."""
    if not isinstance(func, types.FunctionType):
        return cast(FairJobFunction[P, R], bundle)
    copy = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    copy.__module__, copy.__qualname__, copy.__doc__ = func.__module__, func.__qualname__, func.__doc__
    copy.__annotations__ = dict(func.__annotations__)
    copy.__dict__.update(func.__dict__)
    copy.__kwdefaults__ = dict(func.__kwdefaults__) if func.__kwdefaults__ else None
    for name in ATTRIBUTES:
        setattr(copy, name, getattr(bundle, name))
    copy.job_key = bundle.job_key  # type: ignore[attr-defined]  # `fair-router check` reads it
    copy.fair_job = bundle  # type: ignore[attr-defined]
    return cast(FairJobFunction[P, R], copy)


def fair_job(
    queue: str | None = None,
    *,
    rules: Sequence[Rule | Mapping[str, Any]] | None = None,
    tenant: TenantFunc | None = None,
    org: TenantFunc | None = None,
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
) -> Callable[[Callable[P, R]], FairJobFunction[P, R]]:
    """Decorate a job function for tenant-routed enqueueing; the result is the function (a copy) with
    ``delay`` / ``enqueue*`` / ``job_key`` / ``fair_job`` added, so rq's own enqueues still take it. Each
    parameter: docs/api.md."""

    def decorate(func: Callable[P, R]) -> FairJobFunction[P, R]:
        bundle = FairJob(
            func, queue, rules, tenant, connection, router, settings, job_key, rq_options, tier_routing, fair,
            rate, burst, shards, org,
        )
        return with_routing(func, bundle)

    return decorate


def warn_unconfigured(job_key: str, settings: Settings) -> None:
    """Log once per decorated function a job whose rules come from the settings but whose job key they do not name
    (while they name others: a typo or a moved function), naming the nearest job key they have."""
    if job_key in settings.jobs or not settings.jobs:
        return
    import difflib  # only when warning
    close = difflib.get_close_matches(job_key, list(settings.jobs), n=1, cutoff=0.5)
    hint = f"; did you mean {close[0]!r}?" if close else f" (they name {', '.join(sorted(settings.jobs))})"
    logger.warning("@fair_job %s: the settings (%s) have no rules for this job key, so its jobs go to their base "
                   "queue unthrottled%s", job_key, settings.source_file or "no settings file", hint)
