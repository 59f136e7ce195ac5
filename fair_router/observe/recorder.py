"""A worker's job starts gathered in memory and added to bounded per-tenant records about once a second, riding
rq's job-start pipeline (``lua/observe_start.lua``); layout, cost and loss bound: docs/observability.md."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import RedisError
from rq.job import Job

from fair_router.config.sections import ObserveConfig
from fair_router.core.keys import Keys, encode
from fair_router.core.tenancy import DEFAULT_TENANT_MAX_BYTES, InvalidStoredTenant, stored_tenant
from fair_router.observe.buckets import N_BUCKETS, bucket_of
from fair_router.store.scripts import Clock, ObserveStartScript

logger = logging.getLogger("fair_router")

MINUTE_SLOTS = 62
"""Minutes a record keeps: 60 whole ones for the 60-minute figures, the current one, one spare."""
TICK_SECONDS = 10
"""Resolution of the live chart's series."""
TICK_SLOTS = 62
"""Ticks a record keeps (about 10 minutes)."""
RECENT_SECONDS = 180
"""How long a tenant stays in the "recent" set after its last admission (first start of a minute)."""

ALL = "#all"
"""Record of every start; like the two below, never a tenant's encoding (``#`` only precedes a digest)."""
OTHER = "#other"
"""Record of the starts of tenants past the per-minute cap."""
NO_TENANT = "#none"
"""Tenant part of jobs without a tenant (as in :mod:`fair_router.fairqueue.config`)."""


MAX_GROUPS = 1000
"""Groups per script call: a larger buffer goes as several calls, so no Lua argument list grows unbounded."""


@dataclass(slots=True)
class _Group:
    """One tenant's starts within one second of the worker's clock."""

    first: float
    starts: int = 0
    total_us: int = 0
    buckets: dict[int, int] = field(default_factory=dict)


class StartRecorder:
    """Gathers job starts and sends them in batches (see the module's docstring)."""

    def __init__(self, connection: Redis, keys: Keys, config: ObserveConfig, clock: Clock | None = None,
                 tenant_max_bytes: int = DEFAULT_TENANT_MAX_BYTES) -> None:
        """``clock``: epoch seconds for the waits, interval and minutes (tests); None uses the worker's clock, and Redis
        ``TIME`` for the minutes."""
        self.keys = keys
        self.tenant_max_bytes = tenant_max_bytes
        self.config = config
        self.clock = clock
        self.interval = config.flush_interval
        constants = (config.tenants_per_minute, max(1, round(config.retention)), MINUTE_SLOTS, TICK_SECONDS * 1000,
                     TICK_SLOTS, N_BUCKETS, RECENT_SECONDS * 1000)
        self._script = ObserveStartScript(connection, constants)
        self.connection = connection
        self._fixed_keys = [keys.observe_record(OTHER), keys.observe_record(ALL), keys.observe_recent()]
        self._pending: dict[tuple[str | None, int], _Group] = {}
        # A WeightedSimpleWorker's job heartbeat thread may flush while the worker thread adds a start.
        self._lock = threading.Lock()
        self._last_flush = self._now()  # a new worker's first starts wait for the interval like any others

    def _now(self) -> float:
        return self.clock() if self.clock is not None else time.time()

    @property
    def pending(self) -> int:
        """Starts gathered and not yet sent."""
        with self._lock:
            return sum(group.starts for group in self._pending.values())

    def job_started(self, job: Job, pipeline: Pipeline | None) -> None:
        """:meth:`note` ``job``'s start, then :meth:`flush_due` on ``pipeline`` (rq's own; None on a cluster)."""
        self.note(job)
        self.flush_due(pipeline)

    def note(self, job: Job) -> None:
        """Gather ``job``'s start, nothing sent (none without ``enqueued_at`` or a usable tenant)."""
        if job.enqueued_at is None:
            return
        try:
            tenant = stored_tenant(job.meta, self.tenant_max_bytes)
        except InvalidStoredTenant:
            return
        now = self._now()
        self.add(tenant, now - job.enqueued_at.timestamp(), now)

    def flush_due(self, pipeline: Pipeline | None) -> None:
        """When the interval has passed, queue the flush on ``pipeline`` (None: send it now, errors logged)."""
        if self._now() - self._last_flush < self.interval:
            return
        if pipeline is not None:
            self.flush(pipeline)
        else:
            self.send()

    def send(self, older_than: float = 0.0) -> None:
        """Send the gathered starts now (with ``older_than``, only if the last flush is that old). A Redis error is
        logged, not raised: a stopping worker must still register its death."""
        try:
            self.flush(self.connection, older_than=older_than)
        except RedisError as exc:
            logger.warning("job start records lost (%s)", exc)

    def send_overdue(self) -> None:
        """:meth:`send` if no job start flushed for twice the interval (an idle worker, or one on a long job)."""
        self.send(older_than=2 * self.interval)

    def add(self, tenant: str | None, wait: float, at: float | None = None) -> None:
        """Gather one start of ``tenant`` at ``at`` (default now) that waited ``wait`` seconds; nothing sent."""
        at = self._now() if at is None else at
        wait_us = max(0, round(wait * 1e6))
        bucket = bucket_of(wait_us)
        with self._lock:
            group = self._pending.get((tenant, int(at)))
            if group is None:
                group = self._pending[(tenant, int(at))] = _Group(at)
            group.starts += 1
            group.total_us += wait_us
            group.buckets[bucket] = group.buckets.get(bucket, 0) + 1

    def flush(self, client: Any, *, older_than: float = 0.0) -> list[int] | None:
        """Send the gathered starts: queued on a pipeline (returns None), else run now (returns per group 1 if it went
        to the tenant's own record, 0 if to ``#other``). ``older_than`` as in :meth:`send`."""
        now = self._now()
        with self._lock:
            if not self._pending or now - self._last_flush < older_than:
                return None
            groups, self._pending = list(self._pending.items()), {}
            self._last_flush = now
        groups.sort(key=lambda item: item[1].first)
        placed: list[int] = []
        for start in range(0, len(groups), MAX_GROUPS):
            result = self._send(groups[start:start + MAX_GROUPS], now, client)
            if not isinstance(client, Pipeline):
                placed.extend(int(flag) for flag in result)
        return None if isinstance(client, Pipeline) else placed

    def record(self, tenant: str | None, wait: float, client: Any) -> Any:
        """Record one start of ``tenant`` now, past the buffer (tests, benchmarks); 1: its own record, 0: ``#other``."""
        now = self._now()
        wait_us = max(0, round(wait * 1e6))
        group = _Group(now, 1, wait_us, {bucket_of(wait_us): 1})
        result = self._send([((tenant, int(now)), group)], now, client)
        return result if isinstance(client, Pipeline) else int(result[0])

    def _send(self, groups: list[tuple[tuple[str | None, int], _Group]], now: float, client: Any) -> Any:
        """One script call for ``groups``: queued on ``client`` when it is a pipeline, else run now."""
        records: list[str] = []
        args: list[int | str] = [round(now * 1000) if self.clock is not None else ""]  # "": Redis TIME
        for (tenant, _), group in groups:
            records.append(self.keys.observe_record(NO_TENANT if tenant is None else encode(tenant)))
            args += [max(0, round((now - group.first) * 1000)), group.starts, group.total_us, len(group.buckets)]
            for bucket, count in group.buckets.items():
                args += [bucket, count]
        return self._script(self._fixed_keys, records, args).run_or_queue(client if isinstance(client, Pipeline)
                                                                          else None)
