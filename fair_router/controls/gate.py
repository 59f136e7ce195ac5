"""The workers' job-start checks: pause, (with ``slots``) the concurrency slot, and rates, run as a
:class:`~fair_router.controls.pipeline.StartPipeline` in that order, one script call per start queued on rq's
job-start MULTI (:mod:`fair_router.workers.start_gate`; on a Redis Cluster in the same pipeline as the worker's
"busy" state write), so they cost no round trip of their own.

The order is the controls' contract: a job that already holds its slot is a lease refresh and passes
(the slot's ``held`` pass, before every check); a paused tenant is refused as paused even when its slots are
all taken; a rate goes last, because its refusal with ``reserve`` takes the job's token. A paused tenant's
jobs wait: a FairQueue parks the tenant (pops skip it) until ``TenantPauses.resume`` unparks it in every fair
queue (or, as a safety net, for ``pauses.PAUSE_PARK`` seconds); a plain queue's job is deferred like a
concurrency snooze. System jobs (and jobs without a tenant) are never checked.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, NamedTuple

from redis.client import Pipeline
from rq import Queue
from rq.job import Job

from fair_router.controls.concurrency import ConcurrencySlot, ConcurrencySlots, Lease
from fair_router.controls.pauses import PauseCheck
from fair_router.controls.pipeline import Refusal, Start, StartControl, StartPipeline
from fair_router.controls.ratelimit import RateLimiter
from fair_router.store.scripts import Admission, RateScope


class PendingStart(NamedTuple):
    """A start check queued on someone else's pipeline: the start, and the place of its reply."""

    start: Start
    place: int


class TenantGate:
    """acquire / defer for one job start: the configured start controls, decided by one script call that
    rides in the caller's pipeline."""

    def __init__(self, limiter: ConcurrencySlots, rates: RateLimiter, slots: bool) -> None:
        self.limiter = limiter
        self.rates = rates
        self.slots = slots
        controls: list[StartControl] = [PauseCheck(limiter.keys)]
        if slots:
            controls.append(ConcurrencySlot(limiter.keys, limiter.config))
        controls.append(rates)
        self.pipeline = StartPipeline(limiter.connection, controls, limiter.tally, limiter.clock)

    def start(self, tenant: str, job: Job, scopes: list[RateScope] | None = None, reserve: bool = False,
              fair_queue: str = "") -> Start:
        """``job``'s start as the controls see it (the tenant's profile from the tier cache); ``fair_queue``: the
        FairQueue it came from, where a refusal at the limit parks the tenant ('' none)."""
        rates = tuple(scopes or ())
        return Start(tenant, job.id, self.limiter.tiers.profile(tenant), rates,
                     int(self.own_rate(tenant, list(rates))), reserve, fair_queue=fair_queue)

    def checks(self, tenant: str, job: Job) -> list[RateScope] | None:
        """The rate scopes ``job``'s start must pass, or None when no control needs a call: no concurrency
        slots, no rate, and its tenant not paused as of the tier cache (5 s). So with limits off and no
        controls in use a job start costs no round trip; with limits on the checks ride in the slot's call."""
        profile = self.limiter.tiers.profile(tenant)
        scopes = self.rates.scopes(tenant, profile, job)
        start = Start(tenant, job.id, profile, tuple(scopes))
        return scopes if self.pipeline.needed(start) else None

    def acquire(self, tenant: str, job: Job, scopes: list[RateScope], reserve: bool,
                pipeline: Pipeline | None = None, fair_queue: str = "") -> tuple[Admission, Lease | None]:
        """Decide whether ``job`` may start now (``scopes`` from :meth:`checks`). ``reserve`` (plain queues):
        a rate refusal takes the job's token and reserves its start time, returned as ``at_ms``. The lease
        is set when a slot is held. The tenant's own rate comes first in ``scopes`` (:meth:`RateLimiter.scopes`):
        an admission's ``next_ms`` is when it allows the tenant's next start. ``fair_queue``: as in :meth:`start`."""
        start = self.start(tenant, job, scopes, reserve, fair_queue)
        admission = self.pipeline.run(start, pipeline)
        return admission, self._lease(start, admission)

    def queue_check(self, tenant: str, job: Job, scopes: list[RateScope], reserve: bool,
                    pipeline: Pipeline, fair_queue: str = "") -> PendingStart:
        """:meth:`acquire`'s call queued on a pipeline someone else executes (rq's job-start MULTI, so the
        check costs no round trip of its own); :meth:`answer` reads its decision from the replies."""
        start = self.start(tenant, job, scopes, reserve, fair_queue)
        return PendingStart(start, self.pipeline.queue(start, pipeline))

    def answer(self, pending: PendingStart, replies: list[Any]) -> tuple[Admission, Lease | None]:
        """What :meth:`acquire` returns, from the replies of the pipeline ``pending`` was queued on."""
        admission = self.pipeline.answer(pending.start, replies[pending.place])
        return admission, self._lease(pending.start, admission)

    def _lease(self, start: Start, admission: Admission) -> Lease | None:
        held = self.slots and admission.admitted
        return Lease(start.tenant, start.profile.tier, start.job_id) if held else None

    def refusal(self, tenant: str, job: Job, admission: Admission) -> Refusal | None:
        """What becomes of ``job``, refused by ``admission`` (None: it was admitted), from the refusing control."""
        return self.pipeline.refusal(self.start(tenant, job), admission)

    def own_rate(self, tenant: str, scopes: list[RateScope] | None) -> bool:
        """True when the tenant has a rate of its own, the first of ``scopes`` (its override or tier's)."""
        return bool(scopes) and self.limiter.tiers.profile(tenant).rate is not None

    def defer_until(self, job: Job, queue: Queue, at_ms: int) -> datetime:
        """Reschedule ``job`` to its queue for ``at_ms`` (rounded up to whole seconds, as rq's scheduler keeps
        them, so it never comes back early). It comes back at the front of its queue: its start is reserved (its
        token paid), so it must not wait again behind the jobs that came after it, which would delay every
        later token of a backlog too."""
        when = datetime.fromtimestamp(math.ceil(at_ms / 1000), timezone.utc)
        job.enqueue_at_front = True
        self.limiter.defer(job, queue, when)
        return when
