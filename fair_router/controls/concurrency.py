"""Fleet-wide per-tenant concurrency limits.

Before a job with a tenant runs, its worker takes a slot in Redis (``lua/acquire.lua``): expired
leases are dropped, and the job is admitted if it already holds a slot or fewer than its tier's
limit are held. So the limit holds across every worker process and machine sharing the Redis, which
an in-process limiter could not do. A slot is a *lease*: it is refreshed while the job runs and
expires ``lease_ttl`` after the last refresh, so a SIGKILLed worker's slot comes back by itself.

The same script call also checks the tenant's pause flag and its rate limits (``fair_router.controls.gate``), so
those cost no round trip of their own.

A job over its limit is snoozed, not failed: rescheduled to its own queue after ``snooze`` plus a uniform
jitter (so a burst of snoozed jobs does not wake as one herd), and not counted as a failure.

Counters per tier (:data:`COUNTERS`) are plain increments; they ride along in the next acquire, release,
snooze or defer pipeline rather than costing a round trip of their own.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from redis import Redis
from redis.client import Pipeline
from rq import Queue
from rq.job import Job

from fair_router.config.settings import ConcurrencyConfig
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.store.scripts import AcquireScript, Admission, Clock, RateScope, Verdict, now_arg

logger = logging.getLogger("fair_router")
COUNTERS = ("acquired", "refused", "paused", "rate_deferred", "snoozed", "parked", "released", "reclaimed")
"""Per-tier counters. A job start refused is counted once by its reason: ``refused`` (the tenant at its
concurrency limit), ``paused`` or ``rate_deferred``; and once by what became of the job: ``parked`` (its
tenant parked in a FairQueue), ``snoozed`` (a plain queue's job rescheduled after the snooze: at its limit
or paused) or deferred to its reserved start (a rate on a plain queue: ``rate_deferred`` only)."""
REFUSALS = {Verdict.AT_LIMIT: "refused", Verdict.PAUSED: "paused", Verdict.RATE: "rate_deferred",
            Verdict.RESERVED: "rate_deferred"}
"""The counter of each refusal verdict of acquire.lua."""


@dataclass(frozen=True)
class Lease:
    """A held slot: whose, on which tier, for which job."""

    tenant: str
    tier: str
    job_id: str


class ConcurrencyLimiter:
    """acquire / release / keep_alive / snooze for per-tenant concurrency slots."""

    def __init__(
        self,
        connection: Redis,
        keys: Keys,
        tiers: TierBook,
        config: ConcurrencyConfig,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.connection = connection
        self.keys = keys
        self.tiers = tiers
        self.config = config
        self.clock = clock
        self._rng = rng or random.Random()
        self._acquire = AcquireScript(connection)
        self._pending: Counter[str] = Counter()
        self._held: dict[str, Lease] = {}
        self._refresher: threading.Thread | None = None
        self._lock = threading.RLock()

    @property
    def lease_ms(self) -> int:
        return max(1, round(self.config.lease_ttl * 1000))

    def acquire(
        self, tenant: str, job_id: str, pipeline: Pipeline | None = None, refresh: bool = False
    ) -> Lease | None:
        """Take a slot for ``job_id`` (idempotent); None when the tenant is at its limit (or paused). With
        ``pipeline``, the call rides in the same round trip as the commands queued there. ``refresh``: the
        job already runs in this slot (a refused refresh is a lost slot, not a refused job)."""
        return self.admit(tenant, job_id, pipeline, refresh=refresh)[1]

    def admit(
        self,
        tenant: str,
        job_id: str,
        pipeline: Pipeline | None = None,
        *,
        rates: Sequence[RateScope] = (),
        reserve: bool = False,
        slot: bool = True,
        refresh: bool = False,
        tenant_scopes: int = 0,
    ) -> tuple[Admission, Lease | None]:
        """One acquire.lua call for a job start: the tenant's pause, the GCRA ``rates`` (``reserve``: on a
        rate refusal, take the job's token and reserve its start) and, with ``slot``, a concurrency slot
        under the tenant's limit (its override, else its tier's). The lease is None unless a slot is held.
        A refusal is counted by its reason (``refused``: at the limit, ``paused``, ``rate_deferred``), with
        the next round trip; with ``pipeline``, the counts pending from earlier ride in this one. The first
        ``tenant_scopes`` rates hold all of the tenant's jobs: an admission says when they allow its next start."""
        profile = self.tiers.profile(tenant)
        keys = self.keys
        if pipeline is not None:
            self._flush(pipeline)
        call = self._acquire(
            keys.leases(tenant), keys.paused(tenant), keys.rate_paid(tenant, job_id), job_id,
            profile.limit if slot else 0, self.lease_ms, now_arg(self.clock), rates, reserve, tenant_scopes,
        )
        # With ``pipeline``, the call joins the commands already queued there and runs with them.
        admission = call.run() if pipeline is None else self._acquire.parse(call.queue(pipeline).execute()[-1])
        refused = REFUSALS.get(admission.status)
        with self._lock:
            self._pending[f"{profile.tier}:reclaimed"] += admission.reclaimed
            self._pending[f"{profile.tier}:acquired"] += slot and admission.status == Verdict.GRANTED
            if refused is not None and not refresh:
                self._pending[f"{profile.tier}:{refused}"] += 1
        held = slot and admission.admitted
        return admission, Lease(tenant, profile.tier, job_id) if held else None

    def release(self, lease: Lease, also: Callable[[Pipeline], None] | None = None) -> None:
        """Give the slot back (idempotent); pending counters, and whatever ``also`` queues on the
        pipeline (the worker's own writes after a job), go in the same round trip."""
        self._drop(lease, "released", also)

    def reclaim(self, tenant: str, job_id: str, also: Callable[[Pipeline], None] | None = None) -> bool:
        """Free the slot of a job whose worker died, as crash recovery hands the job back, instead of
        waiting for the lease to expire; counted as reclaimed. True if the job still held a slot."""
        return self._drop(Lease(tenant, self.tiers.tier(tenant), job_id), "reclaimed", also)

    def _drop(self, lease: Lease, counter: str, also: Callable[[Pipeline], None] | None) -> bool:
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.zrem(self.keys.leases(lease.tenant), lease.job_id)
            self._flush(pipe)
            if also is not None:
                also(pipe)
            removed = int(pipe.execute()[0])
        with self._lock:  # counted with the next round trip (or flush())
            self._pending[f"{lease.tier}:{counter}"] += removed
        return removed > 0

    def snooze(self, job: Job, queue: Queue, lease_tier: str) -> datetime:
        """Reschedule ``job`` to its own queue after snooze + U(0, jitter); not a failure."""
        delay = self.config.snooze + self._rng.uniform(0, self.config.jitter)
        when = datetime.now(timezone.utc) + timedelta(seconds=delay)
        with self._lock:
            self._pending[f"{lease_tier}:snoozed"] += 1
        self.defer(job, queue, when)
        return when

    def defer(self, job: Job, queue: Queue, when: datetime) -> None:
        """Put ``job`` in its queue's ScheduledJobRegistry for ``when`` (rq's scheduler moves it back); pending
        counters go in the same round trip."""
        with job.connection.pipeline() as pipe:
            pipe.lrem(queue.intermediate_queue_key, 1, job.id)  # rq parks single-queue fetches there
            queue.schedule_job(job, when, pipeline=pipe)
            self._flush(pipe)
            pipe.execute()

    @contextmanager
    def keep_alive(self, lease: Lease, also: Callable[[Pipeline], None] | None = None) -> Iterator[None]:
        """Keep the lease refreshed (every lease_ttl / 3) while the block runs, then release it (with
        ``also``, as in release), however the block ends. One refresher thread per limiter serves every
        lease, so a job costs no thread."""
        with self._lock:
            self._held[lease.job_id] = lease
            if self._refresher is None:
                self._refresher = threading.Thread(target=self._refresh_forever, name="fair-router-leases",
                                                   daemon=True)
                self._refresher.start()
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(lease.job_id, None)
            self.release(lease, also)

    def _refresh_forever(self) -> None:
        """Extend every held lease each lease_ttl / 3; a lost slot is logged, a Redis blip retried."""
        while True:
            time.sleep(self.config.lease_ttl / 3)
            with self._lock:
                held = list(self._held.values())
            for lease in held:
                try:
                    with self._lock:  # still held? (else a refresh would re-take a just-released slot)
                        if lease.job_id not in self._held:
                            continue
                        kept = self.acquire(lease.tenant, lease.job_id, refresh=True)
                    if kept is None:
                        logger.warning("job %s lost its %s slot (lease expired and was taken)",
                                       lease.job_id, lease.tenant)
                except Exception:
                    logger.exception("refreshing the lease of job %s failed", lease.job_id)

    def counters(self) -> dict[str, dict[str, int]]:
        """tier -> {counter: count} for every counter of :data:`COUNTERS`, from Redis."""
        raw = self.connection.hgetall(self.keys.limit_stats())
        table: dict[str, dict[str, int]] = {}
        for field, value in raw.items():
            tier, _, name = (field.decode() if isinstance(field, bytes) else field).rpartition(":")
            table.setdefault(tier, dict.fromkeys(COUNTERS, 0))[name] = int(value)
        return table

    def count(self, tier: str, counter: str, amount: int = 1) -> None:
        """Add to one of ``tier``'s counters (:data:`COUNTERS`) with the next round trip (or :meth:`flush`)."""
        if counter not in COUNTERS:
            raise ValueError(f"unknown counter {counter!r}: known counters are {', '.join(COUNTERS)}")
        with self._lock:
            self._pending[f"{tier}:{counter}"] += amount

    def flush(self) -> None:
        """Write pending counter increments now (the worker calls this when it stops)."""
        with self.connection.pipeline(transaction=False) as pipe:
            if self._flush(pipe):
                pipe.execute()

    def _flush(self, pipe: Pipeline) -> int:
        """Queue pending counter increments on ``pipe``; returns how many fields."""
        with self._lock:
            pending, self._pending = self._pending, Counter()
        fields = 0
        for field, amount in pending.items():
            if amount:
                pipe.hincrby(self.keys.limit_stats(), field, amount)
                fields += 1
        return fields
