"""The waiting counts ``fair-router tenant show`` prints, reconciled first with rq's lists (rq's own cancels, deletes
and requeues change them without our code)."""

from __future__ import annotations

from rq import Queue

from fair_router.config.settings import Settings
from fair_router.core.keys import encode
from fair_router.dashboard.iterations import known_queues
from fair_router.dashboard.reader import plain_waiting, reconciled
from fair_router.fairqueue.reconcile import RECONCILE_BOUND, fair_queues
from fair_router.observe.waitcheck import WaitingReconciler, routed_job_keys
from fair_router.routing.router import FairRouter

__all__ = ["RECONCILE_BOUND", "reconciled_counts"]


def reconciled_counts(router: FairRouter, settings: Settings, tenant: str) -> tuple[set[str], dict[str, int]]:
    """Reconcile the queues' counts; the approximate queues, and ``tenant``'s jobs waiting per routed plain queue."""
    names = known_queues(router.rq_connection)
    fair = fair_queues(router.rq_connection, settings, names)
    plain = [name for name in names if name not in {queue.name for queue in fair}]
    job_keys = routed_job_keys(router.connection, router.keys, [key for key, job in settings.jobs.items() if job.rules])
    approximate = reconciled(fair, WaitingReconciler(router.connection, router.keys, router.rq_connection,
                                                     tenant_max_bytes=settings.tenant_max_bytes), names, job_keys)
    with router.connection.pipeline(transaction=False) as pipe:
        for job_key in job_keys:
            pipe.hgetall(router.keys.waiting(job_key)[0])
        counts = pipe.execute()
    with router.rq_connection.pipeline(transaction=False) as pipe:
        for queue in plain:
            pipe.llen(Queue.redis_queue_namespace_prefix + queue)
        lengths = dict(zip(plain, pipe.execute(), strict=True))
    wanted = encode(tenant)
    waiting = plain_waiting(counts, lengths)  # an empty list has nothing waiting, whatever counts were left
    return approximate, {queue: tenants[wanted] for queue, tenants in waiting.items() if wanted in tenants}
