"""Jobs popped from a FairQueue but never started (their worker died between pop and start), given back to the
front of their tenant's FIFO: by rq's worker maintenance (``FairQueue.recover``) and crash recovery."""

from __future__ import annotations

import time
from typing import cast

from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus

from fair_router.core.keys import FairQueueKeys
from fair_router.core.text import as_text
from fair_router.fairqueue.config import FairConfig
from fair_router.fairqueue.scripts import FairPushScript, FairSettleScript
from fair_router.observe.events import count_event
from fair_router.store.scripts import Clock, now_arg


def recover_popped(queue: Queue, keys: FairQueueKeys, config: FairConfig, grace: float,
                   clock: Clock | None) -> list[str]:
    """Give back ``queue``'s jobs popped more than ``grace`` seconds ago that never started; their ids. A job
    that started, moved on or was queued again by rq since its pop is only forgotten."""
    cutoff = int((time.time() - grace) * 1000)
    connection = queue.connection
    popped = cast(list[tuple[bytes, float]],
                  connection.zrangebyscore(keys.inflight, "-inf", cutoff, withscores=True))
    if not popped:
        return []
    started = set(queue.started_job_registry.get_job_ids(cleanup=False))
    lost: list[Job] = []
    recovered, done = [], []
    for raw, popped_ms in popped:
        job_id = as_text(raw)
        try:
            job = queue.job_class.fetch(job_id, connection=connection, serializer=queue.serializer)
        except NoSuchJobError:
            done.append(job_id)
            continue
        requeued = job.enqueued_at is not None and job.enqueued_at.timestamp() * 1000 > popped_ms
        if (job.get_status(refresh=False) != JobStatus.QUEUED or job_id in started or job.origin != queue.name
                or requeued):
            # It started (rq handles it from there), moved on, or rq already queued it again since the
            # pop (its maintenance retried a started job whose worker died): no second entry.
            done.append(job_id)
            continue
        lost.append(job)
    # Each goes back to the front of its tenant's FIFO: the newest first, so a tenant's jobs keep their order.
    lost.sort(key=lambda job: job.enqueued_at.timestamp() if job.enqueued_at else 0.0, reverse=True)
    settle, push = FairSettleScript(connection), FairPushScript(connection)
    for job in lost:
        settle(keys, job.id, None, config.trust_cost, now_arg(clock)).run()  # held from its pop until now (runtime)
        if push(keys, [config.entry(job.id, job, True, from_inflight=True)]).run():
            recovered.append(job.id)
    if done:
        connection.zrem(keys.inflight, *done)
    if recovered:
        count_event(connection, config.keys, "recovered", queue.name, len(recovered))
    return recovered
