"""A routed enqueue in one round trip, on a standalone Redis.

Routing decides the job's queue in Redis (``lua/route.lua`` records the enqueue in the tenant's window and
picks the rule), so a routed enqueue used to be two round trips: the script, then rq's MULTI that saves and
pushes the job into the queue it returned. Here both go in one MULTI: rq saves the job exactly as its
enqueue would (``Queue.enqueue_call`` on a pipeline, with the base queue as origin and the base queue's
meta), and instead of rq's push the route.lua call that follows in the same MULTI pushes the id onto the
chosen queue's list and, when a rule moved the job, sets its ``origin`` and ``meta`` (which names the rule)
for that queue. One MULTI is also all or nothing against a lost connection: no enqueue is recorded in a
window without its job (nor the reverse).

It applies to an enqueue without ``depends_on``, ``rate_limit``, ``unique``, a caller's pipeline, an explicit
queue, shards or a fair queue among the route's queues: those keep the router's two-step path (rq's own
path for the first three, as rq needs it). On a Redis Cluster route.lua's keys and rq's are on different
slots: set ``FairRouter.one_round_trip = False`` there (two round trips, each on its own slot).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol, cast

from redis import Redis
from redis.client import Pipeline
from rq import Queue
from rq.job import Job
from rq.queue import EnqueueArgs

from fair_router.core.keys import Keys
from fair_router.fairqueue.queue import FairQueue
from fair_router.routing.announce import Announcer
from fair_router.routing.placement import JobMetas, Pending, Route, RouteInputs
from fair_router.routing.takeback import TakeBack
from fair_router.rq_internals.queue import RqQueueSeam
from fair_router.store.luascript import execute_loaded
from fair_router.store.replicas import ReplicaWait
from fair_router.store.scripts import Clock, RoutePush, RouteScript, now_arg

PushCall = Callable[[Job, Pipeline, bool], None]
"""Queues the route.lua call that pushes ``job`` (``at_front``) on the pipeline that saved it."""


class PlacedQueue(Queue):
    """rq's Queue of a route's base family whose enqueue saves the job as rq's does but leaves the push, and
    the queue's registration in ``rq:queues``, to route.lua (the queue is only known there).

    rq's ``enqueue_call`` builds the job and calls ``enqueue_job``; overridden here to skip what only applies
    to options the one-trip path never takes (dependencies, rate limits, ``unique``: the router checked) and
    the registration of the base queue, then rq's ``_enqueue_job`` saves the job on the pipeline (status,
    hash, TTLs) and calls ``push_job_id``, overridden to queue the route.lua call instead."""

    def __init__(self, name: str, connection: Any) -> None:
        super().__init__(name, connection=connection)
        self._local = threading.local()  # per thread (a router may serve several): .job, .push_call

    def enqueue_with(self, push_call: PushCall, call: EnqueueArgs) -> Job:
        """rq's ``enqueue_call`` of ``call`` (whose pipeline is the router's), its push by ``push_call``."""
        self._local.push_call = push_call
        try:
            job: Job = self.enqueue_call(**call._asdict())
            return job
        finally:
            self._local.push_call = None

    def enqueue_job(self, job: Job, pipeline: Pipeline | None = None, at_front: bool = False,
                    unique: bool = False) -> Job:
        if pipeline is None or unique or job._dependency_ids or job.has_rate_limit:
            raise ValueError("PlacedQueue enqueues into the router's pipeline only, without dependencies, "
                             "rate limits or unique")
        self._local.job = job
        try:
            return self._enqueue_job(job, pipeline=pipeline, at_front=at_front)
        finally:
            self._local.job = None

    def push_job_id(self, job_id: str, pipeline: Pipeline | None = None, at_front: bool = False) -> None:
        job, push_call = getattr(self._local, "job", None), getattr(self._local, "push_call", None)
        if job is None or job.id != job_id or pipeline is None or push_call is None:
            raise RuntimeError(f"PlacedQueue {self.name!r}: push of {job_id!r} outside the router's enqueue")
        push_call(job, pipeline, bool(at_front))


class Router(Protocol):
    """What of :class:`~fair_router.routing.router.FairRouter` the one-trip enqueue uses (named here: the
    router imports this module)."""

    connection: Redis
    keys: Keys
    clock: Clock | None
    one_round_trip: bool
    _route: RouteScript
    _meta: JobMetas
    _take_back: TakeBack
    announcer: Announcer
    replicas: ReplicaWait

    def queue(self, name: str, fair: bool = False, shard: int | None = None) -> Queue: ...


class OneTrip:
    """A router's one-round-trip enqueue (module docstring): when it applies, and the enqueue."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._bases: dict[str, PlacedQueue] = {}
        self._routed: dict[str, str] = {}  # job key -> its routed counters' key (Keys.routed)

    def applies(self, route: Route, call: EnqueueArgs, pending: Pending) -> bool:
        """Whether ``call`` can go in one round trip: an enqueue to record (else rq's MULTI alone is one round
        trip), no option that needs rq's own path, no shards, and the route's base queue a plain one on the
        router's Redis (a fair queue's push is its own script: a job a rule sends to a fair queue takes a second
        round trip, :meth:`enqueue`)."""
        router = self.router
        recorded = bool(route.rules) and pending.record and pending.tenant is not None
        if (not router.one_round_trip or not recorded or route.shards is not None or call.pipeline is not None
                or call.depends_on or call.rate_limit is not None or call.unique):
            return False
        return not isinstance(router.queue(route.queue), RqQueueSeam)

    def enqueue(self, route: Route, call: EnqueueArgs, pending: Pending, system: bool) -> Job:
        """rq's save of the job and route.lua's record, choice and push, in one MULTI (EVALSHA: the pipeline is
        ours, re-run after NOSCRIPT: every command in it may run twice)."""
        router = self.router
        inputs = RouteInputs(route, [pending], router.keys)
        metas = router._meta.per_family(call.meta, pending.tenant, route, system)
        families = route.families()
        fair = "".join("1" if isinstance(router.queue(name), RqQueueSeam) else "0" for name in families)
        base = self._bases.get(route.queue)
        if base is None:
            base = self._bases[route.queue] = PlacedQueue(route.queue, router.connection)
        routed = self._routed.get(route.job_key)
        if routed is None:
            routed = self._routed[route.job_key] = router.keys.routed(route.job_key)
        at: list[int] = []

        def push(job: Job, pipe: Pipeline, at_front: bool) -> None:
            lists = [Queue.redis_queue_namespace_prefix + name for name in families]
            serialized = [job.serializer.dumps(meta) for meta in metas[1:]]  # the base family's: rq's save
            target = RoutePush(job.key, Queue.redis_queues_keys, at_front, job.id, lists, serialized, fair)
            waiting = inputs.waiting(route, "unthrottled" if "1" in fair else "all")  # fair queues count their own
            router._route(inputs.windows, routed, inputs.jobs, route.queue, route.rules, now_arg(router.clock),
                          None, target, waiting).queue_loaded(pipe)
            at.append(len(pipe.command_stack) - 1)

        with router.connection.pipeline() as pipe:
            job = base.enqueue_with(push, call._replace(job_id=pending.job_id, meta=metas[0], pipeline=pipe))
            if router.announcer.due(route):
                router.announcer.announce(route, pipe)
            with router.replicas.confirming(pipe) as confirmation:
                results = execute_loaded(pipe, lambda p: p.execute())
        rule = router._route.parse(results[at[-1]])[0][0]
        job.meta, job.origin = metas[rule], families[rule]
        confirmation.check([job.id])
        if fair[rule] == "1":  # route.lua set its origin and meta but left the push to the fair queue
            return self._to_fair_queue(route, bool(call.at_front), job, pending)
        return job

    def _to_fair_queue(self, route: Route, at_front: bool, job: Job, pending: Pending) -> Job:
        """The second round trip of a job a rule sent to a fair queue: route.lua saved its origin and meta, so the
        queue only pushes it (no rebuild, no second save), its backlog cap checked. If that fails, the job is
        deleted and its window entry taken back, as when the two-step path's enqueue fails."""
        router = self.router
        try:
            return cast(FairQueue, router.queue(job.origin)).push_saved(job, at_front)
        except BaseException:
            router.connection.delete(job.key)
            if pending.tenant is not None:  # always, on this path (applies: a recorded enqueue)
                router._take_back(route.job_key, [(pending.tenant, job.id, job.origin)], type(job))
            raise
