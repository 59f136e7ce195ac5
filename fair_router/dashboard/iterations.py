"""The interruptible jobs running now, with their cursor, turns and items (the dashboard, ``fair-router tenant
show``): two pipelined round trips, bounded by the busy workers."""

from __future__ import annotations

from collections.abc import Sequence

from redis import Redis
from rq import Queue
from rq.job import Job
from rq.registry import StartedJobRegistry

from fair_router.core.tenancy import DEFAULT_TENANT_MAX_BYTES, InvalidStoredTenant, stored_tenant
from fair_router.core.text import as_text
from fair_router.dashboard.model import RunningIteration
from fair_router.iteration.turns import CURSOR, ITEMS, TURNS
from fair_router.rq_internals.registry import job_id_of

CURSOR_SHOWN = 40
"""Characters of a cursor's repr shown (a cursor can be any value the job's serializer stores)."""


def known_queues(connection: Redis) -> list[str]:
    """Every queue rq knows (its set of queues)."""
    prefix = len(Queue.redis_queue_namespace_prefix)
    return sorted(as_text(raw)[prefix:] for raw in connection.smembers(Queue.redis_queues_keys))


def running_iterations(connection: Redis, queues: Sequence[str], tenant: str | None = None,
                       tenant_max_bytes: int = DEFAULT_TENANT_MAX_BYTES) -> list[RunningIteration]:
    """The interruptible jobs running in ``queues`` that started a turn (of ``tenant`` if given), by queue, job id."""
    with connection.pipeline(transaction=False) as pipe:
        for name in queues:
            pipe.zrange(StartedJobRegistry(name, connection=connection).key, 0, -1)
        replies = pipe.execute()
    running = [(name, job_id_of(as_text(member)))
               for name, members in zip(queues, replies, strict=True) for member in members]
    if not running:
        return []
    found = []
    for (name, _), job in zip(running, Job.fetch_many([job_id for _, job_id in running], connection=connection),
                              strict=True):
        if job is None or TURNS not in job.meta:
            continue
        try:
            owner = stored_tenant(job.meta, tenant_max_bytes)
        except InvalidStoredTenant as exc:  # run by a plain rq worker: shown, never matching a tenant
            owner = f"(no tenant id: {exc.shown})"
            if tenant is not None:
                continue
        if tenant is not None and owner != tenant:
            continue
        cursor = repr(job.meta.get(CURSOR))
        found.append(RunningIteration(
            job.id, name, owner, job.func_name or "",
            cursor if len(cursor) <= CURSOR_SHOWN else cursor[:CURSOR_SHOWN - 1] + "…",
            int(job.meta.get(TURNS) or 0), int(job.meta.get(ITEMS) or 0)))
    return sorted(found, key=lambda it: (it.queue, it.job_id))
