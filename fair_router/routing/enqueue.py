"""A routed enqueue in one round trip on a standalone Redis: rq's save of the job and route.lua's record, choice
and push in one MULTI (all or nothing against a lost connection). rq saves the job as its enqueue would, with the
base queue as origin (:class:`~fair_router.rq_internals.placed.PlacedQueue`); route.lua pushes the id onto the
chosen queue's list and, when a rule moved the job, sets its ``origin`` and ``meta`` for that queue. A job a
rule sends to a fair queue is pushed there by a second call (no second save).

Not for ``depends_on``, ``rate_limit``, ``unique``, a caller's pipeline, an explicit queue or shards (the
router's two-step path), nor on a Redis Cluster, where route.lua's keys and rq's are on different slots
(``FairRouter.one_round_trip = False``).
"""

from __future__ import annotations

from typing import Protocol, cast

from redis import Redis
from redis.client import Pipeline
from rq import Queue
from rq.job import Job
from rq.queue import EnqueueArgs

from fair_router.core.keys import Keys
from fair_router.fairqueue.queue import FairQueue
from fair_router.routing.announce import Announcer
from fair_router.routing.placement import JobMetas, Pending, Route, RouteInputs
from fair_router.routing.unrecord import Unrecord
from fair_router.rq_internals.placed import PlacedQueue
from fair_router.rq_internals.queue import RqQueueSeam
from fair_router.store.luascript import execute_loaded
from fair_router.store.replicas import ReplicaWait
from fair_router.store.scripts import Clock, RoutePush, RouteScript, now_arg


class Router(Protocol):
    """What of :class:`~fair_router.routing.router.FairRouter` the one-trip enqueue uses (named here: the
    router imports this module)."""

    connection: Redis
    keys: Keys
    clock: Clock | None
    one_round_trip: bool
    _route: RouteScript
    _meta: JobMetas
    _unrecord: Unrecord
    announcer: Announcer
    replicas: ReplicaWait

    def queue(self, name: str, fair: bool = False, shard: int | None = None) -> Queue: ...


class RoutedEnqueue:
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
                router._unrecord(route.job_key, [(pending.tenant, job.id, job.origin)], type(job))
            raise
