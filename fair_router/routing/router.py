"""FairRouter: where a job's queue is decided, at enqueue time. One ``lua/route.lua`` call records the enqueue in
its (job key, tenant) window and picks the last throttle rule the tenant exceeds; the job goes into that rule's
queue, in rq's MULTI where it can (:mod:`fair_router.routing.enqueue`). What rq does later (retries, the
scheduler, dependents) goes back to ``job.origin``, never through here: nothing is counted twice or rerouted."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, cast
from uuid import uuid4

from pydantic import TypeAdapter
from redis import Redis
from redis.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from rq import Queue
from rq.group import Group
from rq.job import Job
from rq.queue import EnqueueArgs, EnqueueData

from fair_router.config.errors import validated
from fair_router.config.sections import OrgConfig, TiersConfig
from fair_router.controls.admin import TenantAdmin, delegate
from fair_router.controls.backlog import BacklogCaps, execute, withdraw
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.core.rules import Rule, last_match
from fair_router.core.tenancy import DEFAULT_TENANT_MAX_BYTES, tenant_id, with_org
from fair_router.core.validation import Prefix, TenantMaxBytes
from fair_router.routing.announce import Announcer
from fair_router.routing.enqueue import RoutedEnqueue
from fair_router.routing.placement import Counted, JobMetas, Pending, Placement, Route, RouteInputs, counts_waiting
from fair_router.routing.queues import QueueRegistry
from fair_router.routing.servers import ShardServers
from fair_router.routing.unrecord import Unrecord, recorded_by
from fair_router.store.cluster import pair_of
from fair_router.store.outage import naming_redis
from fair_router.store.replicas import ReplicaWait
from fair_router.store.scripts import Clock, PeekScript, RouteScript, now_arg

__all__ = ["FairRouter", "Placement", "Route", "WindowView"]

_PREFIX: TypeAdapter[str] = TypeAdapter(Prefix)
_MAX_BYTES: TypeAdapter[int] = TypeAdapter(TenantMaxBytes)


@dataclass(frozen=True)
class WindowView:
    """Read-only state of one tenant window (``fair-router stats``)."""

    counts: list[int]
    next_queue: str
    next_rule: Rule | None


class FairRouter:
    """Records enqueues per tenant and routes jobs to throttled queues; one per Redis connection. It has a
    tenant admin (``router.tenants``: tiers, overrides, pause, running and waiting jobs), whose methods it
    offers as thin delegates, and a queue registry (``router.queues``)."""

    def __init__(
        self,
        connection: Redis,
        prefix: str = "fair_router",
        clock: Clock | None = None,
        tiers: TiersConfig | None = None,
        tenant_max_bytes: int = DEFAULT_TENANT_MAX_BYTES,
        shard_urls: Sequence[str] = (),
        replicas: ReplicaWait | None = None,
        orgs: Mapping[str, OrgConfig] | None = None,
    ) -> None:
        """``tenant_max_bytes``: the longest tenant id taken (UTF-8 bytes). ``shard_urls``: the Redis of each shard
        of sharded job keys (shard i on ``shard_urls[i % len]``; none: all on ``connection``; see routing.servers).
        ``replicas``: what each enqueue waits for (settings ``replicas_to_wait``, ``replicas_timeout``); ``orgs``: the
        settings' ``orgs:`` (an org's tier, for tier routing)."""
        keys = Keys(validated(_PREFIX, prefix, "FairRouter(prefix=...)"))
        connection = (pair := pair_of(connection)).state  # a RedisCluster: rq's queues on rq's slot owner
        self.connection, self.rq_connection, self.keys = connection, pair.rq, keys
        self.tiers = TierBook(connection, keys, tiers, orgs=orgs)
        self.tenant_max_bytes: int = validated(_MAX_BYTES, tenant_max_bytes, "FairRouter(tenant_max_bytes=...)")
        self.tenants = TenantAdmin(connection, keys, self.tiers, self.tenant_max_bytes, rq_connection=pair.rq)
        self.clock, self._route, self._peek = clock, RouteScript(connection), PeekScript(connection)
        self.servers = ShardServers(shard_urls) if shard_urls else None
        self.queues = QueueRegistry(pair.rq, keys.prefix, tiers, self.tenant_max_bytes, self.servers)
        self._unrecord, self._meta = Unrecord(connection, keys), JobMetas()
        self.one_round_trip = not pair.cluster  # one MULTI (routing.enqueue); a cluster: route.lua's slot is not rq's
        self._routed, self.announcer = RoutedEnqueue(self), Announcer(keys)
        self.replicas = replicas or ReplicaWait()

    # -- the tenant admin's API: thin delegates to router.tenants (controls.admin.delegate) ---------

    tenant_id = delegate(TenantAdmin.tenant_id)
    set_tier = delegate(TenantAdmin.set_tier)
    get_tier = delegate(TenantAdmin.get_tier)
    set_tenant = delegate(TenantAdmin.set_tenant)
    tenant = delegate(TenantAdmin.tenant)
    pause = delegate(TenantAdmin.pause)
    resume = delegate(TenantAdmin.resume)
    paused = delegate(TenantAdmin.paused)
    tenant_jobs = delegate(TenantAdmin.tenant_jobs)

    # -- recording and choosing ----------------------------------------------------------------

    def record_and_route(self, job_key: str, tenant: str | int, job_id: str, queue: str, rules: Sequence[Rule]) -> str:
        """Record one enqueue of ``job_id`` for ``tenant`` in its window and return the queue it goes to."""
        rule = self.record_and_choose(Route(job_key, queue, tuple(rules)), [(tenant, job_id)])[0]
        return rule.queue if rule else queue

    def record_and_choose(self, route: Route, jobs: Sequence[tuple[str | int, str]]) -> list[Rule | None]:
        """Record (tenant, job id) enqueues in their windows in order, in one Lua call; return the rule each
        one matched (None: its base queue)."""
        checked = [(self.tenant_id(tenant), job_id) for tenant, job_id in jobs]  # all, before any is recorded
        return [placed.rule for placed in self.place(route, [Pending(tenant, job_id, True)
                                                             for tenant, job_id in checked])]

    def place(self, route: Route, jobs: Sequence[Pending], down: Sequence[int] = (), count: Counted = None
              ) -> list[Placement]:
        """Record enqueues, pick rules and least loaded shards (not ``down``) in one Lua call; ``count``: waiting.py."""
        state = self.servers.state(route, jobs, down) if self.servers and route.shards else {"down": down}
        inputs = RouteInputs(route, jobs, self.keys, **state)
        if not jobs or not inputs.needed:
            return [Placement()] * len(jobs)
        call = self._route(inputs.windows, self.keys.routed(route.job_key), inputs.jobs, route.queue, route.rules,
                           now_arg(self.clock), inputs.shards, waiting=inputs.waiting(route, count))
        if not self.announcer.due(route):
            picks = call.run()
        else:
            with self.connection.pipeline(transaction=False) as pipe:
                call.queue(pipe)
                self.announcer.announce(route, pipe)
                picks = self._route.parse(pipe.execute()[0])
        return [Placement(route.rules[rule - 1] if rule else None, None if shard < 0 else shard)
                for rule, shard in picks]

    def peek(self, route: Route, tenant: str | int) -> WindowView:
        """Window counts per rule and where the tenant's next job would go; records nothing."""
        tenant = self.tenant_id(tenant)
        if not route.rules:
            return WindowView([], route.queue, None)
        counts = self._peek(self.keys.window(route.job_key, tenant), route.rules, now_arg(self.clock)).run().counts
        rule = last_match(route.rules, counts)
        return WindowView(counts, rule.queue if rule else route.queue, rule)

    # -- tiers ---------------------------------------------------------------------------------

    def tier_route(self, route: Route, tenant: str | int | None, system: bool = False,
                   org: str | int | None = None) -> Route:
        """``route`` with its base queue moved to ``<queue>_priority`` / ``_default`` / ``_scheduled`` by
        the tenant's tier (one without a tier of its own: its ``org``'s, TierBook.profile); rules saying ``{queue}``
        follow the new base. None: no tenant."""
        checked = None if tenant is None else self.tenant_id(tenant)
        org = None if org is None else tenant_id(org, self.tenant_max_bytes, "org")
        base = f"{route.queue}_{self.tiers.queue_class(checked, system, org)}"
        return replace(route, queue=base, rules=tuple(rule.for_base(base) for rule in route.rules))

    # -- enqueueing ----------------------------------------------------------------------------

    def queue(self, name: str, fair: bool = False, shard: int | None = None) -> Queue:
        """The rq Queue ``name`` this router enqueues into (:meth:`QueueRegistry.get`: kept per name; a FairQueue
        when ``fair``, named in ``fair_queues:`` or marked fair in Redis)."""
        return self.queues.get(name, fair, shard)

    @naming_redis
    def enqueue(
        self,
        route: Route,
        call: EnqueueArgs,
        tenant: str | int | None,
        queue: str | None = None,
        at: datetime | None = None,
        system: bool = False,
        fair: bool = False, fair_org: str | int | None = None,
    ) -> Job:
        """Route and enqueue one job (scheduled for ``at`` when given) through rq's own ``Queue.enqueue_call``
        (``enqueue_at``) with every option as rq parsed it: only the job id (decided here, so the window records it)
        and the meta are ours. An explicit ``queue`` is recorded, never rerouted; a ``system`` job is neither
        throttled nor limited; ``tenant`` None: its base queue, unthrottled; ``fair``: into a FairQueue. A failed
        enqueue's window entry is taken back (routing.unrecord); a lost connection past retries: RedisUnavailable."""
        tenant = None if tenant is None else self.tenant_id(tenant)
        call = call if fair_org is None else call._replace(meta=with_org(call.meta, fair_org, self.tenant_max_bytes))
        if not call.job_id and call.unique:
            # rq requires the caller's own id with unique=True: an id made up here would slip past that
            # check, so the call goes to rq as given and rq's check decides, before anything is recorded.
            call = call._replace(meta=self._meta(call.meta, tenant, Placement(), system, route))
            return self.queue(queue or route.queue, fair).enqueue_call(**call._asdict())
        job_id = call.job_id or str(uuid4())
        if queue is not None and route.shards is not None:  # an explicit queue is taken as it is: no shard
            route = replace(route, shards=None)
        pending = Pending(tenant, job_id, tenant is not None and not system)
        if queue is None and at is None and not fair and self._routed.applies(route, call, pending):
            return self._routed.enqueue(route, call, pending, system)
        down: list[int] = []
        counted = (counts_waiting(self.queue, route, fair, [(call,)], self.servers)
                   if queue is None and at is None else None)
        while True:
            placed = self.place(route, [pending], down, counted)[0]  # an explicit queue too is recorded in the window
            recorded = recorded_by(route, [pending], [placed])
            if queue is not None:
                placed = Placement()
            try:
                return self._enqueue_placed(route, call, job_id, tenant, placed, queue, at, system, fair)
            except BaseException as exc:
                self._unrecord(route.job_key, recorded, self.queue(route.queue, fair).job_class,
                                self._server(placed.shard))
                if not isinstance(exc, RedisConnectionError) or self.servers is None or placed.shard is None:
                    raise
                down.append(placed.shard)  # its server went down since its load was read: the next shard

    def _server(self, shard: int | None) -> Redis:
        """The Redis a job placed on ``shard`` is enqueued into."""
        return self.servers.connection(shard) if self.servers is not None and shard is not None else self.rq_connection

    def _enqueue_placed(self, route: Route, call: EnqueueArgs, job_id: str, tenant: str | None, placed: Placement,
                        queue: str | None, at: datetime | None, system: bool, fair: bool) -> Job:
        target = self.queue(queue or placed.queue(route), fair, placed.shard)
        call = call._replace(job_id=job_id, meta=self._meta(call.meta, tenant, placed, system, route))
        if at is not None:
            return cast(Job, target.enqueue_at(at, call.func, **_parse_args_keywords(call)))
        if call.pipeline is not None or call.depends_on or call.rate_limit is not None:
            # A caller's pipeline is the caller's to execute. With dependencies rq retries its WATCH on
            # them only with a pipeline of its own. A rate-limited job takes rq's own path (rq refuses it on
            # a pipeline): rq saves it as rate_limited and its admission script pushes it when a slot frees.
            return target.enqueue_call(**call._asdict())
        with target.connection.pipeline() as pipe:
            # rq alone would send the queue registration and the job in two round trips; in one pipeline
            # (rq's own enqueue into a caller's pipeline) they go in one.
            job = target.enqueue_call(**call._replace(pipeline=pipe)._asdict())
            _execute(pipe, [(target, job)], self.replicas)
        return job

    @naming_redis
    def enqueue_many(
        self,
        route: Route,
        calls: Iterable[tuple[EnqueueArgs, str | int | None]],
        fair: bool = False,
        pipeline: Pipeline | None = None,
        group: Group | None = None,
    ) -> list[Job]:
        """Route a batch with one Lua call and enqueue it with one pipeline, through rq's ``Queue.prepare_data`` and
        ``enqueue_many`` (``Group.enqueue_many`` with ``group``); jobs return in input order. A caller's ``pipeline``
        is the caller's to execute; when our own fails, the window entries of the jobs not queued are taken back (a
        failure of a caller's leaves them: they leave the window after the rule's ``per``)."""
        batch = [(_batchable(call), None if tenant is None else self.tenant_id(tenant), call.job_id or str(uuid4()))
                 for call, tenant in calls]
        pendings = [Pending(tenant, job_id, tenant is not None) for _, tenant, job_id in batch]
        placements = self.place(route, pendings, count=counts_waiting(self.queue, route, fair, batch, self.servers))
        recorded = recorded_by(route, pendings, placements)
        several = self.servers is not None and route.shards is not None
        try:
            return self._enqueue_batch(route, batch, placements, fair, pipeline, group)
        except BaseException:
            if not several:  # jobs on several servers: their entries stay (they leave the window after `per`)
                self._unrecord(route.job_key, recorded, self.queue(route.queue, fair).job_class,
                                self.rq_connection)
            raise

    def _enqueue_batch(
        self,
        route: Route,
        batch: list[tuple[EnqueueArgs, str | None, str]],
        placements: list[Placement],
        fair: bool,
        pipeline: Pipeline | None,
        group: Group | None,
    ) -> list[Job]:
        """rq's enqueue of a routed batch, each job where ``placements`` put it."""
        by_queue: dict[tuple[str, int | None], list[EnqueueData]] = {}
        for (call, tenant, job_id), where in zip(batch, placements, strict=True):
            data = _enqueue_data(call, job_id, self._meta(call.meta, tenant, where, route=route))
            by_queue.setdefault((where.queue(route), where.shard), []).append(data)
        jobs: dict[str, Job] = {}
        if self.servers is not None and route.shards is not None:
            # Queues on several servers: one pipeline each (a caller's pipeline or group is on one server).
            if pipeline is not None or group is not None:
                raise ValueError("enqueue_many: with shard_urls a sharded batch goes to several Redis servers; "
                                 "it takes no pipeline= or group=")
            for (name, shard), datas in by_queue.items():
                part = self.enqueue_many_into(self.queue(name, fair, shard), datas)
                jobs.update((job.id, job) for job in part)
            return [jobs[job_id] for _, _, job_id in batch]
        placed: list[tuple[Queue, Job]] = []
        with nullcontext(pipeline) if pipeline is not None else self.rq_connection.pipeline() as pipe:
            for (name, _), datas in by_queue.items():
                target = self.queue(name, fair)
                if group is not None:
                    done = group.enqueue_many(target, datas, pipeline=pipe)
                else:
                    done = target.enqueue_many(datas, pipeline=pipe)
                jobs.update((job.id, job) for job in done)
                placed += [(target, job) for job in done]
            if pipeline is None:
                _execute(pipe, placed, self.replicas, group)
        return [jobs[job_id] for _, _, job_id in batch]

    def enqueue_many_into(self, target: Queue, datas: list[EnqueueData]) -> list[Job]:
        """rq's ``enqueue_many`` of ``datas`` into ``target``, in one pipeline on the queue's own server."""
        with target.connection.pipeline() as pipe:
            done: list[Job] = target.enqueue_many(datas, pipeline=pipe)
            _execute(pipe, [(target, job) for job in done], self.replicas)
        return done


def _execute(pipe: Pipeline, placed: list[tuple[Queue, Job]], replicas: ReplicaWait,
             group: Group | None = None) -> None:
    """Run an enqueue pipeline of ours. When a fair queue's push in it hit a backlog cap, take every job
    of the call back (those pushed to other queues too) and raise TenantBacklogFull: all or nothing. Then
    confirm the writes reached ``replicas`` (its WAIT goes in the same write as the pipeline)."""
    with replicas.confirming(pipe) as confirmation:
        results = execute(pipe)
    for queue in {id(queue): queue for queue, _ in placed}.values():
        caps = getattr(queue, "caps", None)  # a FairQueue's
        refused = caps.refusal(pipe, results) if isinstance(caps, BacklogCaps) else None
        if refused is not None:
            withdraw(queue.connection, placed, group)
            raise refused
    confirmation.check([job.id for _, job in placed])


def _parse_args_keywords(call: EnqueueArgs) -> dict[str, Any]:
    """``call`` back as the keywords ``Queue.parse_args`` reads, for rq's entry points that parse their own
    options (``enqueue_at``): the same names as ``EnqueueArgs`` except the timeout (``job_timeout``), with
    the function's arguments given explicitly as ``args=`` / ``kwargs=``."""
    keywords = call._asdict()
    del keywords["func"]
    keywords["job_timeout"] = keywords.pop("timeout")
    return keywords


def _batchable(call: EnqueueArgs) -> EnqueueArgs:
    """``call``, checked before anything is recorded: rq's batch (``Queue.prepare_data``) has no per-job
    ``pipeline`` or ``unique``, so an item setting one (or any option rq's batch lacks) is refused rather
    than silently dropped."""
    for name in _NOT_IN_BATCH:
        value = getattr(call, name)
        if value == getattr(_PARSED_DEFAULTS, name):
            continue
        if name == "rate_limit":
            raise TypeError("enqueue_many: rate_limit= is not supported in a batch (rq admits a rate-limited job "
                            "with its own script and refuses it on a pipeline): enqueue such jobs one by one "
                            "with .enqueue()/.delay()")
        raise TypeError(f"enqueue_many: rq's batch enqueue (Queue.prepare_data) takes no per-job "
                        f"{name}= (got {value!r})")
    return call


def _enqueue_data(call: EnqueueArgs, job_id: str, meta: dict[str, Any]) -> EnqueueData:
    """rq's ``Queue.prepare_data`` of every option of ``call`` a batch item carries, with our id and meta."""
    options = {name: getattr(call, name) for name in _BATCH_OPTIONS}
    options["job_id"] = job_id
    options["meta"] = meta
    data: EnqueueData = Queue.prepare_data(**options)
    return data


# Constants read off rq's own types, so that an option rq adds flows through without a change here.
_PARSED_DEFAULTS: EnqueueArgs = Queue.parse_args("fair_router.routing.router.FairRouter")
"""rq's value for every option a call leaves out (what ``Queue.parse_args`` fills in)."""
_BATCH_OPTIONS = tuple(name for name in EnqueueData._fields if name in EnqueueArgs._fields)
_NOT_IN_BATCH = tuple(name for name in EnqueueArgs._fields if name not in EnqueueData._fields)
