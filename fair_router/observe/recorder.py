"""Recording at the source: each job start adds its wait to bounded per-tenant records in Redis.

A weighted worker calls :meth:`StartRecorder.job_started` with the pipeline rq itself sends as the job
starts (the ``job_started`` hook of :mod:`fair_router.rq_internals.worker`, from its ``prepare_execution``), so
the record costs no round trip of its own: one ``EVAL`` of ``fair_router/lua/observe_start.lua`` inside rq's MULTI.

What a record holds (all of it bounded):

- per minute, for the last 62 minutes: the starts by wait bucket (:mod:`fair_router.observe.buckets`),
  whence the wait p50/p95 over 5 and 60 minutes and each tenant's share of the starts;
- per 10-second tick, for the last ~10 minutes: the starts and their total wait, whence the live chart;
- since the record was created: the starts by bucket and their total wait, whence the Prometheus
  histogram (a record idle for ``observe.retention`` expires; Prometheus reads that as a counter reset).

At most ``observe.tenants_per_minute`` tenants get a record of their own in any minute; the starts of the
others that minute go to the ``#other`` record. Every start also goes to ``#all``.

The wait is rq's: the job's start (now, on the worker's clock) minus ``job.enqueued_at`` (the enqueuer's
clock). rq resets ``enqueued_at`` when its scheduler enqueues a job, so a job snoozed by a concurrency limit
counts its wait from its return to the queue. A job parked by a fair queue keeps its ``enqueued_at``.
"""

from __future__ import annotations

import time
from typing import Any

from redis import Redis
from redis.client import Pipeline
from rq.job import Job

from fair_router.config.settings import ObserveConfig
from fair_router.observe.buckets import N_BUCKETS, bucket_of
from fair_router.routing.jobmeta import META_TENANT
from fair_router.store.keys import Keys, encode
from fair_router.store.luascript import assemble, compact
from fair_router.store.scripts import Clock, now_arg

MINUTE_SLOTS = 62
"""Minutes a record keeps: 60 whole ones for the 60-minute figures, the current one, one spare."""
TICK_SECONDS = 10
"""Resolution of the live chart's series."""
TICK_SLOTS = 62
"""Ticks a record keeps (about 10 minutes)."""
RECENT_SECONDS = 180
"""How long a tenant stays in the "recent" set after its last admission (first start of a minute)."""

ALL = "#all"
"""Record of every start. Like the two below, never the encoding of a tenant id: ``encode`` yields '#'
only before a 64-digit digest."""
OTHER = "#other"
"""Record of the starts of tenants past the per-minute cap."""
NO_TENANT = "#none"
"""Tenant part of jobs without a tenant (as in :mod:`fair_router.fairqueue.queue`)."""


class StartRecorder:
    """Queues the start record of a job on a pipeline (no round trip of its own)."""

    def __init__(self, connection: Redis, keys: Keys, config: ObserveConfig, clock: Clock | None = None) -> None:
        """``clock``: epoch seconds for the wait and the record's minute (tests); None uses the worker's
        clock for the wait and Redis ``TIME`` for the minute."""
        self.keys = keys
        self.config = config
        self.clock = clock
        constants = (config.tenants_per_minute, max(1, round(config.retention)), MINUTE_SLOTS, TICK_SECONDS * 1000,
                     TICK_SLOTS, N_BUCKETS, RECENT_SECONDS * 1000)
        source = (f"local cap, ttl, minute_slots, tick_ms, tick_slots, n_buckets, recent_ms = "
                  f"{', '.join(map(str, constants))}\n" + compact(assemble("observe_start")))
        self._script = connection.register_script(source)
        self._source = source.encode()  # as bytes: redis-py packs it as it is, with every call
        # Bytes, as the script: redis-py packs them as they are (each argument costs the worker time to pack).
        self._fixed_keys = tuple(key.encode() for key in
                                 (keys.observe_record(OTHER), keys.observe_record(ALL), keys.observe_recent()))

    def job_started(self, job: Job, pipeline: Pipeline) -> None:
        """Queue ``job``'s start on ``pipeline`` (rq's own, at job start). A job without ``enqueued_at``
        (never enqueued, e.g. run directly) has no wait to record."""
        if job.enqueued_at is None:
            return
        now = self.clock() if self.clock is not None else time.time()
        tenant = job.meta.get(META_TENANT)
        self.record(None if tenant is None or tenant == "" else str(tenant), now - job.enqueued_at.timestamp(),
                    pipeline)

    def record(self, tenant: str | None, wait: float, client: Any) -> Any:
        """Record one start of ``tenant`` (None: no tenant) that waited ``wait`` seconds; queued when
        ``client`` is a pipeline, else run at once (returns 1 if it went to the tenant's own record)."""
        part = NO_TENANT if tenant is None else encode(tenant)
        wait_us = max(0, round(wait * 1e6))
        record = self.keys.observe_record(part)
        args: list[int | str] = [bucket_of(wait_us), wait_us]
        if self.clock is not None:
            args.append(now_arg(self.clock))
        if isinstance(client, Pipeline):  # EVAL, as luascript.Call.queue does, with the fewest arguments to pack
            return client.eval(self._source, 4, record, *self._fixed_keys, *args)  # type: ignore[arg-type]
        return self._script(keys=[record, *self._fixed_keys], args=args, client=client)
