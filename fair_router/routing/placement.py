"""Where a job goes: its route (job key, base queue, rules, shards) and the placement route.lua returns.

A placement is two choices made in one Lua call: the throttle rule picks the queue *family* (the base queue or
a rule's queue), and, for a sharded job key, the least loaded of the tenant's shards picks the *member* of that
family (``default_throttled`` -> ``default_throttled_shard3``). :func:`route_inputs` turns a batch into that
call's windows, jobs and shard section.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rq import Queue

from fair_router.core.jobmeta import META_RATE, META_RULE, META_SHARD, META_SYSTEM, META_TENANT, META_WAITING
from fair_router.core.keys import Keys, encode
from fair_router.core.rates import Rate
from fair_router.core.rules import Rule
from fair_router.core.shards import Shards, shard_queue
from fair_router.rq_internals.queue import RqQueueSeam
from fair_router.store.scripts import RouteJob, RouteWaiting, ShardLoads

NO_TENANT_SHARDS = ""
"""A sharded job without a tenant is dealt the shards of this tenant id (it has no tenant to isolate)."""


@dataclass(frozen=True)
class Route:
    """How one job function is routed: its window name (job key), base queue, rules and shards."""

    job_key: str
    queue: str
    rules: tuple[Rule, ...] = ()
    rate: Rate | None = None  # starts per tenant of this job function, checked when a worker takes a job
    burst: int = 1
    shards: Shards | None = None

    def families(self) -> list[str]:
        """The queue families a job may go to, in route.lua's order: the base queue, then each rule's."""
        return [self.queue, *(rule.queue for rule in self.rules)]


@dataclass(frozen=True)
class Placement:
    """What route.lua decided for one job: the rule that matched (None: the base queue) and its shard."""

    rule: Rule | None = None
    shard: int | None = None

    def queue(self, route: Route) -> str:
        """The queue the job goes to: its family, or the family's member on the chosen shard."""
        family = self.rule.queue if self.rule else route.queue
        return family if self.shard is None else shard_queue(family, self.shard)


@dataclass(frozen=True)
class Pending:
    """One job to place: its tenant, id, and whether its enqueue counts in the tenant's window."""

    tenant: str | None
    job_id: str
    record: bool


class RouteInputs:
    """route.lua's windows, jobs and shard section for one batch of one route."""

    def __init__(
        self,
        route: Route,
        jobs: Sequence[Pending],
        keys: Keys,
        loads: Mapping[str, int] | None = None,
        down: Collection[int] = (),
    ) -> None:
        """``loads``: jobs waiting per shard queue name, read on the shards' own servers (None: read by the
        script with LLEN, the shards being on the routing Redis); ``down``: shards not to choose."""
        tenants: dict[str, int] = {}
        recorded = bool(route.rules)
        self.jobs = [
            RouteJob(tenants.setdefault(job.tenant, len(tenants)) if recorded and job.record and job.tenant is not None
                     else None, job.job_id)
            for job in jobs
        ]
        self._encoded = [encode(tenant) for tenant in tenants]
        self.windows = [keys.window_of(route.job_key, tenant) for tenant in self._encoded]
        self._keys = keys
        self.shards: ShardLoads | None = None
        if route.shards is not None:
            dealt = [tuple(s for s in route.shards.of(job.tenant if job.tenant is not None else NO_TENANT_SHARDS)
                           if s not in down) for job in jobs]
            for job, candidates in zip(jobs, dealt, strict=True):
                if not candidates:
                    raise ShardsUnavailable(route, job.tenant, route.shards.of(job.tenant or NO_TENANT_SHARDS))
            used = sorted({shard for candidates in dealt for shard in candidates})
            position = {shard: i for i, shard in enumerate(used)}
            self.jobs = [job._replace(candidates=tuple(position[s] for s in candidates))
                         for job, candidates in zip(self.jobs, dealt, strict=True)]
            pairs = [shard_queue(family, shard) for family in route.families() for shard in used]
            self.shards = ShardLoads(used, [(Queue.redis_queue_namespace_prefix + name, 0) if loads is None
                                            else (None, loads.get(name, 0)) for name in pairs])

    def waiting(self, route: Route, count: str | None = "all") -> RouteWaiting | None:
        """route.lua's waiting section for this batch: its recorded jobs count waiting (observe/waiting.py), "all"
        of them or only those no rule moved ("unthrottled"); None: none count."""
        if not self.windows or count is None:
            return None
        return RouteWaiting(self._keys.waiting(route.job_key), self._encoded, count == "unthrottled")

    @property
    def needed(self) -> bool:
        """Whether the batch needs the script: a window to record or a shard to choose."""
        return self.shards is not None or any(job.window is not None for job in self.jobs)


class ShardsUnavailable(RuntimeError):
    """Every shard dealt to a tenant is on a Redis that cannot be reached: the job cannot be enqueued."""

    def __init__(self, route: Route, tenant: str | None, shards: Sequence[int]) -> None:
        super().__init__(f"{route.job_key}: cannot enqueue for tenant {tenant!r}: every one of its shards "
                         f"{list(shards)} is on a Redis that cannot be reached")
        self.tenant = tenant
        self.shards = tuple(shards)


class JobMetas:
    """A routed job's meta: the caller's plus ``fair_tenant``, ``fair_rule`` (the rule as a dict, or None),
    for system jobs ``fair_system``, when the job function has a rate, ``fair_rate`` (job key, rate, burst:
    what the worker checks when it takes the job), and on a sharded route ``fair_shard``."""

    def __init__(self) -> None:
        self._rules: dict[Rule, dict[str, Any]] = {}  # each rule's model_dump, made once

    def __call__(self, meta: dict[str, Any] | None, tenant: str | None, placed: Placement, system: bool = False,
                 route: Route | None = None) -> dict[str, Any]:
        described, rule = None, placed.rule
        if rule is not None:
            if rule not in self._rules:
                self._rules[rule] = rule.model_dump()
            described = dict(self._rules[rule])
        extra: dict[str, Any] = {META_SYSTEM: True} if system else {}
        if route is not None and route.rate is not None:
            extra[META_RATE] = {"job_key": route.job_key, "rate": str(route.rate), "burst": route.burst}
        if placed.shard is not None:
            extra[META_SHARD] = placed.shard
        if route is not None and tenant is not None and not system:
            extra[META_WAITING] = route.job_key  # counted waiting under it while in a plain queue (WaitCounts)
        return {**(meta or {}), META_TENANT: tenant, META_RULE: described, **extra}

    def per_family(self, meta: dict[str, Any] | None, tenant: str | None, route: Route, system: bool = False
                   ) -> list[dict[str, Any]]:
        """The meta of an unsharded job of ``route`` in each of its families (base, then each rule's), as
        :meth:`__call__` makes them: the base family's built once, the others copies with their rule."""
        base = self(meta, tenant, Placement(), system, route)
        metas = [base]
        for rule in route.rules:
            if rule not in self._rules:
                self._rules[rule] = rule.model_dump()
            metas.append({**base, META_RULE: dict(self._rules[rule])})
        return metas


Counted = Literal["all", "unthrottled"] | None
"""Which routed jobs count waiting (:func:`counts_waiting`): all, only those no rule moved, or none."""


def counts_waiting(queue_of: Callable[[str, bool], Queue], route: Route, fair: bool,
                   calls: Sequence[tuple[Any, ...]], shard_servers: object) -> Counted:
    """Which jobs of ``calls`` (each item's first element, an EnqueueArgs) route.lua counts waiting in the queues
    it chooses: "all" when every queue of the route (as ``queue_of(name, fair)`` gives it) is a plain one,
    "unthrottled" (the jobs no rule moved) when only the rules' queues are fair (they count their own jobs),
    None otherwise; only on the router's Redis (``shard_servers`` None for a sharded route), and only for jobs
    pushed at once by rq's ordinary path (no dependencies, no rate limit)."""
    if shard_servers is not None and route.shards is not None:
        return None
    if any(item[0].depends_on or item[0].rate_limit is not None for item in calls):
        return None
    fair_families = [isinstance(queue_of(name, fair), RqQueueSeam) for name in route.families()]
    if not any(fair_families):
        return "all"
    return "unthrottled" if not fair_families[0] else None
