"""A routed enqueue in one round trip on a standalone Redis: rq's save of the job and route.lua's record, choice
and push in one MULTI (all or nothing against a lost connection). rq saves the job as its enqueue would, with the
base queue as origin (:class:`~fair_router.rq_internals.placed.PlacedQueue`); route.lua pushes the id onto the
chosen queue's list and, when a rule moved the job, sets its ``origin`` and ``meta`` for that queue. A job a
rule sends to a fair queue is pushed there in the same MULTI when its tenant's last job went there too (a
tenant over a threshold stays over it for a while), else by a second call (no second save).

Not for ``depends_on``, ``rate_limit``, ``unique``, a caller's pipeline, an explicit queue or shards (the
router's two-step path), nor on a Redis Cluster, where route.lua's keys and rq's are on different slots
(``FairRouter.one_round_trip = False``).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, cast

from redis import Redis
from redis.client import Pipeline
from rq import Queue
from rq.job import Job
from rq.queue import EnqueueArgs

from fair_router.controls.backlog import Capped, TenantBacklogFull, execute, refused_entry
from fair_router.core.keys import Keys
from fair_router.fairqueue.queue import FairQueue
from fair_router.routing.announce import Announcer
from fair_router.routing.placement import Counted, JobMetas, Pending, Route, RouteInputs
from fair_router.routing.unrecord import Unrecord
from fair_router.rq_internals.placed import PlacedQueue
from fair_router.rq_internals.queue import RqQueueSeam
from fair_router.store.luascript import execute_loaded
from fair_router.store.replicas import ReplicaWait
from fair_router.store.scripts import Clock, RouteJob, RoutePush, RouteScript, RouteWaiting, now_arg


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


class Families(NamedTuple):
    """A route's family queues as route.lua's push section names them (lib/routepush.lua); its arguments encoded
    once, as redis-py sends them (an argument it encodes costs it 1-2 µs per enqueue)."""

    fair: str  # per family, base first: '1' for a fair queue
    lists: list[str | bytes]  # each family's rq list
    inflight: tuple[str | bytes, ...]  # with a fair family: each one's fair inflight key (a plain one's list)
    fair_arg: bytes  # ``fair`` as sent


QUEUES_KEY = Queue.redis_queues_keys.encode()
"""rq's set of queue keys, as sent."""


GUESSES = 10_000
"""(job key, tenant) pairs whose last rule a router keeps (all forgotten at once past it)."""


class RoutedEnqueue:
    """A router's one-round-trip enqueue (module docstring): when it applies, and the enqueue."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self._bases: dict[str, PlacedQueue] = {}
        self._routed: dict[str, bytes] = {}  # job key -> its routed counters' key (Keys.routed), encoded
        self._last: dict[tuple[str, str | None], int] = {}  # (job key, tenant) -> the rule its last enqueue took
        self._families: dict[tuple[int, ...], Families] = {}  # the families' queue objects -> their push keys
        # (job key, tenant, which jobs count waiting) -> route.lua's windows and waiting section for one job
        self._tenant: dict[tuple[str, str | None, str], tuple[list[bytes], RouteWaiting | None]] = {}

    def families(self, queues: list[Queue]) -> Families:
        """The push section's keys of these family queues (the router's registry keeps each queue object: the
        same objects, the same keys), worked out once rather than at every enqueue."""
        known = tuple(id(queue) for queue in queues)
        families = self._families.get(known)
        if families is None:
            fair = "".join("1" if isinstance(queue, RqQueueSeam) else "0" for queue in queues)
            inflight = tuple((queue.fair_keys.inflight if isinstance(queue, FairQueue) else queue.key).encode()
                             for queue in queues) if "1" in fair else ()
            families = self._families[known] = Families(fair, [queue.key.encode() for queue in queues], inflight,
                                                        fair.encode())
        return families

    def tenant_inputs(self, route: Route, pending: Pending,
                      count: Counted) -> tuple[list[bytes], RouteWaiting | None]:
        """route.lua's windows (one: the tenant's) and waiting section for a job of ``pending.tenant`` (its jobs
        count ``count``: fair queues count their own), worked out and encoded once per (job key, tenant) rather
        than per job."""
        known = (route.job_key, pending.tenant, str(count))
        found = self._tenant.get(known)
        if found is None:
            inputs = RouteInputs(route, [pending], self.router.keys)
            waiting = inputs.waiting(route, count)
            if waiting is not None:
                waiting = waiting._replace(keys=(_bytes(waiting.keys[0]), _bytes(waiting.keys[1])),
                                           tenants=[_bytes(tenant) for tenant in waiting.tenants])
            found = self._tenant[known] = ([window.encode() for window in inputs.windows], waiting)
        return found

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
        """rq's save of the job, route.lua's record, choice and push, in one MULTI (EVALSHA: the pipeline is ours,
        re-run after NOSCRIPT: every command in it may run twice). A fair queue's push goes in that MULTI when the
        job's tenant took that queue's rule last time (it adds the job only if route.lua chose the queue:
        lib/routepush.lua), else, when route.lua chose a fair queue, in a second round trip."""
        router = self.router
        metas = router._meta.per_family(call.meta, pending.tenant, route, system)
        families = route.families()
        queues = [router.queue(name) for name in families]
        keyed = self.families(queues)
        fair = keyed.fair
        windows, waiting = self.tenant_inputs(route, pending, "unthrottled" if "1" in fair else "all")
        base = self._bases.get(route.queue)
        if base is None:
            base = self._bases[route.queue] = PlacedQueue(route.queue, router.connection)
        routed = self._routed.get(route.job_key)
        if routed is None:
            routed = self._routed[route.job_key] = router.keys.routed(route.job_key).encode()
        at: list[int] = []
        last = (route.job_key, pending.tenant)
        guess = self._last.get(last, 0)  # a tenant over a rule's threshold stays there for a while: its queue
        pushed: list[tuple[int, Capped | None]] = []  # the guessed fair queue's push: its place, its cap

        def push(job: Job, pipe: Pipeline, at_front: bool) -> None:
            serialized = [job.serializer.dumps(meta) for meta in metas[1:]]  # the base family's: rq's save
            target = RoutePush(job.key, QUEUES_KEY, at_front, job.id, keyed.lists, serialized, keyed.fair_arg,
                               keyed.inflight)
            router._route(windows, routed, [RouteJob(0, pending.job_id)], route.queue, route.rules,
                          now_arg(router.clock), None, target, waiting).queue_loaded(pipe)
            at.append(len(pipe.command_stack) - 1)
            if fair[guess] == "1":
                pushed.append(self._fair_push(cast(FairQueue, queues[guess]), job, at_front, pipe))

        with router.connection.pipeline() as pipe:
            job = base.enqueue_with(push, call._replace(job_id=pending.job_id, meta=metas[0], pipeline=pipe))
            if router.announcer.due(route):
                router.announcer.announce(route, pipe)
            with router.replicas.confirming(pipe) as confirmation:
                results = execute_loaded(pipe, execute)  # a fair push's cap refusal is read below
        rule = router._route.parse(results[at[-1]])[0][0]
        job.meta, job.origin = metas[rule], families[rule]
        if len(self._last) >= GUESSES:
            self._last.clear()
            self._tenant.clear()
        self._last[last] = rule
        confirmation.check([job.id])
        if fair[rule] == "1":
            if rule != guess:  # the second round trip: the fair push route.lua expected was not in its MULTI
                with router.connection.pipeline() as pipe:
                    pushed.append(self._fair_push(cast(FairQueue, queues[rule]), job, bool(call.at_front), pipe))
                    with router.replicas.confirming(pipe) as confirmation:
                        results = execute_loaded(pipe, execute)
                    confirmation.check([job.id])
            place, capped = pushed[-1]
            if capped is not None and refused_entry(results[place]) is not None:
                self._refused(route, job, pending, cast(FairQueue, queues[rule]))
                raise TenantBacklogFull(capped.tenant, job.origin, capped.cap)
        return job

    @staticmethod
    def _fair_push(queue: FairQueue, job: Job, at_front: bool, pipe: Pipeline) -> tuple[int, Capped | None]:
        """Queue ``job``'s fair push into ``queue`` on ``pipe``: its place there and its backlog cap."""
        capped = queue.push_marked(job, at_front, pipe)
        return len(pipe.command_stack) - 1, capped

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


def _bytes(text: str | bytes) -> bytes:
    """``text`` as sent."""
    return text if isinstance(text, bytes) else text.encode()
