"""Tenant controls checked when a worker takes a job: rate limits (GCRA), pause, and the concurrency slot.

All of them are decided by one ``lua/acquire.lua`` call per job start, queued in the same pipeline as the
worker's "busy" state write, so they cost no round trip of their own (with or without concurrency limits).

Rate limits
    GCRA (the generic cell rate algorithm): per (scope, tenant) one timestamp, the *theoretical arrival
    time*. A rate of N per unit allows a start every ``unit / N``; ``burst`` starts may come at once after
    a quiet spell. A job start must pass its tenant's rate (``tiers.rate`` or the tenant's override) and
    its job function's (``@fair_job(rate=...)`` / ``jobs.<key>.rate``), both keyed by tenant. A job over
    its rate is never failed or dropped: in a FairQueue its tenant is parked until its next allowed start
    (other tenants flow, nothing churns); on a plain queue the job's start is *reserved* (its token taken
    now) and the job deferred to exactly that time through rq's scheduler, so a backlog on a plain queue
    comes back one job per token instead of as a herd.

Pause
    A paused tenant's jobs wait: a FairQueue parks the tenant (pops skip it) until ``TenantPauses.resume``
    unparks it in every fair queue (or, as a safety net, for ``pauses.PAUSE_PARK`` seconds, after which the next
    pop looks again); a plain queue's job is deferred like a concurrency snooze. System jobs (and jobs
    without a tenant) are never checked.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from datetime import datetime, timezone

from redis.client import Pipeline
from rq import Queue
from rq.job import Job

from fair_router.config.settings import JobConfig
from fair_router.controls.concurrency import ConcurrencyLimiter, Lease
from fair_router.core.jobmeta import META_RATE
from fair_router.core.keys import Keys
from fair_router.core.profiles import TenantProfile
from fair_router.core.rates import Rate, parse_rate
from fair_router.store.scripts import Admission, RateScope

logger = logging.getLogger("fair_router")

def scope(key: str, rate: Rate, burst: int) -> RateScope:
    """The GCRA parameters of ``rate`` with ``burst`` starts at once."""
    interval = rate.interval_ms
    return RateScope(key, interval, (burst - 1) * interval)


class RateLimiter:
    """Which rate scopes a job start must pass: its tenant's rate and its job function's."""

    def __init__(self, keys: Keys, jobs: Mapping[str, JobConfig] | None = None) -> None:
        self.keys = keys
        self.jobs = jobs or {}

    def scopes(self, tenant: str, profile: TenantProfile, job: Job) -> list[RateScope]:
        """The tenant's rate (override, else tier), then the job function's: the rate the enqueue wrote into
        the job (``@fair_job(rate=...)`` or ``jobs.<key>.rate`` of the producer's settings), else this
        worker's ``jobs.<function path>.rate``."""
        found = []
        if profile.rate is not None:
            found.append(scope(self.keys.rate(tenant), profile.rate, profile.burst))
        own = job.meta.get(META_RATE)
        if isinstance(own, dict) and own.get("rate"):
            found.append(scope(self.keys.rate(tenant, str(own["job_key"])), parse_rate(own["rate"]),
                               int(own.get("burst") or 1)))
        elif self.jobs and job.func_name:
            name = job.func_name
            configured = self.jobs.get(name)
            if configured is not None and configured.rate is not None:
                found.append(scope(self.keys.rate(tenant, name), configured.rate, configured.burst or 1))
        return found


class TenantGate:
    """acquire / defer for one job start: pause, rates and (with ``slots``) the concurrency slot, decided by
    one acquire.lua call that rides in the caller's pipeline."""

    def __init__(self, limiter: ConcurrencyLimiter, rates: RateLimiter, slots: bool) -> None:
        self.limiter = limiter
        self.rates = rates
        self.slots = slots

    def checks(self, tenant: str, job: Job) -> list[RateScope] | None:
        """The rate scopes ``job``'s start must pass, or None when nothing can hold it: no concurrency slots,
        no rate, and its tenant not paused as of the tier cache (5 s). So with limits off and no controls in
        use a job start costs no round trip; with limits on the checks ride in the slot's acquire."""
        profile = self.limiter.tiers.profile(tenant)
        scopes = self.rates.scopes(tenant, profile, job)
        if not (self.slots or scopes or profile.paused):
            return None
        return scopes

    def acquire(self, tenant: str, job: Job, scopes: list[RateScope], reserve: bool,
                pipeline: Pipeline | None = None) -> tuple[Admission, Lease | None]:
        """Decide whether ``job`` may start now (``scopes`` from :meth:`checks`). ``reserve`` (plain queues):
        a rate refusal takes the job's token and reserves its start time, returned as ``at_ms``. The lease
        is set when a slot is held. The tenant's own rate comes first in ``scopes`` (:meth:`RateLimiter.scopes`):
        an admission's ``next_ms`` is when it allows the tenant's next start."""
        return self.limiter.admit(tenant, job.id, pipeline, rates=scopes, reserve=reserve, slot=self.slots,
                                  tenant_scopes=int(self.own_rate(tenant, scopes)))

    def own_rate(self, tenant: str, scopes: list[RateScope] | None) -> bool:
        """True when the tenant has a rate of its own, the first of ``scopes`` (its override or tier's)."""
        return bool(scopes) and self.limiter.tiers.profile(tenant).rate is not None

    def defer_until(self, job: Job, queue: Queue, at_ms: int) -> datetime:
        """Reschedule ``job`` to its queue for ``at_ms`` (rounded up to whole seconds, as rq's scheduler keeps
        them, so it never comes back early)."""
        when = datetime.fromtimestamp(math.ceil(at_ms / 1000), timezone.utc)
        self.limiter.defer(job, queue, when)
        return when
