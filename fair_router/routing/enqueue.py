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

from fair_router.controls.backlog import Capped, TenantBacklogFull, execute, refused_entry
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
        """rq's save of the job, route.lua's record, choice and push, and the fair push of each fair family (only
        the chosen one's adds the job: lib/routepush.lua), in one MULTI (EVALSHA: the pipeline is ours, re-run
        after NOSCRIPT: every command in it may run twice)."""
        router = self.router
        inputs = RouteInputs(route, [pending], router.keys)
        metas = router._meta.per_family(call.meta, pending.tenant, route, system)
        families = route.families()
        queues = [router.queue(name) for name in families]
        fair = "".join("1" if isinstance(queue, RqQueueSeam) else "0" for queue in queues)
        base = self._bases.get(route.queue)
        if base is None:
            base = self._bases[route.queue] = PlacedQueue(route.queue, router.connection)
        routed = self._routed.get(route.job_key)
        if routed is None:
            routed = self._routed[route.job_key] = router.keys.routed(route.job_key)
        at: list[int] = []
        caps: dict[int, tuple[int, Capped | None]] = {}  # fair family -> its push's place on the pipe, its cap

        def push(job: Job, pipe: Pipeline, at_front: bool) -> None:
            lists = [queue.key for queue in queues]
            inflight = tuple(queue.fair_keys.inflight if isinstance(queue, FairQueue) else queue.key
                             for queue in queues) if "1" in fair else ()
            serialized = [job.serializer.dumps(meta) for meta in metas[1:]]  # the base family's: rq's save
            target = RoutePush(job.key, Queue.redis_queues_keys, at_front, job.id, lists, serialized, fair, inflight)
            waiting = inputs.waiting(route, "unthrottled" if "1" in fair else "all")  # fair queues count their own
            router._route(inputs.windows, routed, inputs.jobs, route.queue, route.rules, now_arg(router.clock),
                          None, target, waiting).queue_loaded(pipe)
            at.append(len(pipe.command_stack) - 1)
            for family, queue in enumerate(queues):
                if isinstance(queue, FairQueue):
                    capped = queue.push_marked(job, at_front, pipe)
                    caps[family] = (len(pipe.command_stack) - 1, capped)

        with router.connection.pipeline() as pipe:
            job = base.enqueue_with(push, call._replace(job_id=pending.job_id, meta=metas[0], pipeline=pipe))
            if router.announcer.due(route):
                router.announcer.announce(route, pipe)
            with router.replicas.confirming(pipe) as confirmation:
                results = execute_loaded(pipe, execute)  # a fair push's cap refusal is read below
        rule = router._route.parse(results[at[-1]])[0][0]
        job.meta, job.origin = metas[rule], families[rule]
        place, capped = caps.get(rule, (0, None))
        if capped is not None and refused_entry(results[place]) is not None:
            self._refused(route, job, pending, cast(FairQueue, queues[rule]))
            raise TenantBacklogFull(capped.tenant, job.origin, capped.cap)
        confirmation.check([job.id])
        return job

    def _refused(self, route: Route, job: Job, pending: Pending, queue: FairQueue) -> None:
        """The fair push of a job a rule sent to ``queue`` met its tenant's backlog cap: the job is deleted, out of
        the queue's inflight, and its window entry taken back, as when the two-step path's enqueue is refused."""
        router = self.router
        with router.connection.pipeline() as pipe:
            pipe.delete(job.key)
            pipe.zrem(queue.fair_keys.inflight, job.id)
            pipe.execute()
        if pending.tenant is not None:  # always, on this path (applies: a recorded enqueue)
            router._unrecord(route.job_key, [(pending.tenant, job.id, job.origin)], type(job))
