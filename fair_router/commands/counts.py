"""The waiting counts ``fair-router tenant show`` prints, reconciled with rq's lists first: rq's own cancels,
deletes, empties and requeues change the lists without our code (:mod:`fair_router.fairqueue.reconcile` for
fair queues, :mod:`fair_router.observe.waitcheck` for the plain queues routers count jobs in)."""

from __future__ import annotations

from typing import Any

from rq import Queue

from fair_router.config.settings import Settings
from fair_router.core.keys import encode
from fair_router.fairqueue.reconcile import RECONCILE_BOUND, fair_queues, reconcile_queues
from fair_router.observe.waitcheck import WaitingReconciler, routed_job_keys
from fair_router.observe.waiting import parse_field
from fair_router.routing.router import FairRouter

__all__ = ["RECONCILE_BOUND", "reconciled_counts"]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def reconciled_counts(router: FairRouter, settings: Settings, tenant: str) -> tuple[set[str], dict[str, int]]:
    """Reconcile every known queue's counts with rq's lists; returns the queues whose counts are approximate
    (beyond the bound) and ``tenant``'s jobs waiting per routed plain queue that has any."""
    prefix = len(Queue.redis_queue_namespace_prefix)
    names = sorted(_text(key)[prefix:] for key in router.rq_connection.smembers(Queue.redis_queues_keys))
    fair = fair_queues(router.rq_connection, settings, names)
    done = reconcile_queues(fair)
    fair_names = {queue.name for queue in fair}
    plain = [name for name in names if name not in fair_names]
    job_keys = routed_job_keys(router.connection, router.keys, [key for key, job in settings.jobs.items() if job.rules])
    checked = WaitingReconciler(router.connection, router.keys, router.rq_connection,
                                tenant_max_bytes=settings.tenant_max_bytes).reconcile(job_keys, plain)
    approximate = {name for name, one in done.items() if not one.exact} | {n for n, ok in checked.items() if not ok}
    routed: dict[str, int] = {}
    with router.connection.pipeline(transaction=False) as pipe:
        for job_key in job_keys:
            pipe.hgetall(router.keys.waiting(job_key)[0])
        replies = pipe.execute()
    wanted = encode(tenant)
    for counts in replies:
        for name, count in counts.items():
            queue, who = parse_field(_text(name))
            if who == wanted and queue in plain and int(count) > 0:
                routed[queue] = routed.get(queue, 0) + int(count)
    if routed:  # an empty list has nothing waiting, whatever counts were left (observe.waiting)
        with router.rq_connection.pipeline(transaction=False) as pipe:
            for queue in routed:
                pipe.llen(Queue.redis_queue_namespace_prefix + queue)
            lengths = pipe.execute()
        routed = {queue: count for (queue, count), length in zip(routed.items(), lengths, strict=True) if length}
    return approximate, routed
