"""The rate control of a job start: GCRA, decided by ``lua/lib/start_rate.lua`` in the start script, per tenant for its
own rate and its job function's. A start over its rate is never failed: in a FairQueue its tenant is parked until its
next allowed start; on a plain queue its token is reserved now and the job deferred to that time, so a backlog returns
one job per token rather than as a herd (docs/tenant-controls.md)."""

from __future__ import annotations

from collections.abc import Mapping

from rq.job import Job

from fair_router.config.sections import JobConfig
from fair_router.controls.gate import Admission, Rates, RateScope, Refusal, Section, Start, Verdict
from fair_router.controls.orgs import OrgProfile
from fair_router.core.jobmeta import META_RATE
from fair_router.core.keys import Keys
from fair_router.core.profiles import TenantProfile
from fair_router.core.rates import Rate, parse_rate


def scope(key: str, rate: Rate, burst: int) -> RateScope:
    """The GCRA parameters of ``rate`` with ``burst`` starts at once."""
    interval = rate.interval_ms
    return RateScope(key, interval, (burst - 1) * interval)


class RateLimiter(Rates):
    """The start control of rates: the scopes a start must pass, and what becomes of a start over one."""

    piece = "start_rate"
    verdicts = (Verdict.RATE, Verdict.RESERVED)
    counter = "rate_deferred"

    def __init__(self, keys: Keys, jobs: Mapping[str, JobConfig] | None = None) -> None:
        self.keys = keys
        self.jobs = jobs or {}

    def scopes(self, tenant: str, profile: TenantProfile, job: Job, org: str | None = None,
               org_profile: OrgProfile | None = None) -> list[RateScope]:
        """The tenant's rate (override, else tier), then the job function's: the one the enqueue wrote into the job,
        else this worker's ``jobs.<function path>.rate``; then, for a job under ``org``, the org's rate (its
        override, settings or tier: ``org_profile``). Every key under the org's tag when ``org``."""
        found = []
        if profile.rate is not None:
            found.append(scope(self.keys.rate(tenant, org=org), profile.rate, profile.burst))
        own = job.meta.get(META_RATE)
        if isinstance(own, dict) and own.get("rate"):
            found.append(scope(self.keys.rate(tenant, str(own["job_key"]), org), parse_rate(own["rate"]),
                               int(own.get("burst") or 1)))
        elif self.jobs and job.func_name:
            name = job.func_name
            configured = self.jobs.get(name)
            if configured is not None and configured.rate is not None:
                found.append(scope(self.keys.rate(tenant, name, org), configured.rate, configured.burst or 1))
        if org is not None and org_profile is not None and org_profile.rate is not None:
            found.append(scope(self.keys.org_rate(org), org_profile.rate, org_profile.burst))
        return found

    def needed(self, start: Start) -> bool:
        """Only a start with a rate to pass."""
        return bool(start.rates)

    def section(self, start: Start) -> Section:
        """The job's reserved start, one GCRA state per scope and, for a fair queue's start held by the tenant's
        own rate, its pace mark there; reserve, tenant_scopes, paced, (interval, tolerance)s."""
        paced = bool(start.tenant_scopes and start.fair_queue)
        args: list[str | int] = [int(start.reserve), start.tenant_scopes, int(paced)]
        for rate in start.rates:
            args += (rate.interval_ms, rate.tolerance_ms)
        keys = [self.keys.rate_paid(start.tenant, start.job_id, start.org), *(rate.key for rate in start.rates)]
        return [*keys, self.keys.paced(start.tenant, start.fair_queue, start.org)] if paced else keys, args

    def on_refused(self, admission: Admission) -> Refusal:
        """Parked until its next token falls due; a plain queue's job comes back at its reserved start."""
        return Refusal(self.counter, "over its rate", max(0.001, (admission.at_ms - admission.now_ms) / 1000),
                       until_ms=admission.at_ms)
