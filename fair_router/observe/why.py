"""Why is my job waiting? :func:`explain` reads one job's state and answers with one primary :class:`Reason` from a
closed set, the facts behind it, secondary reasons and an estimated start with its basis (docs/why.md). It only
reads: rq's job hash and registries, one read-only script on the queue's slot (``lua/why_place.lua``), the tenant's
controls and the observers' record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Any

from pydantic import ValidationError
from redis import Redis
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import JOB_ID_PATTERN, Job, JobStatus
from rq.rate_limit import RateLimitRegistry
from rq.registry import ScheduledJobRegistry

from fair_router.config.settings import Settings
from fair_router.core.jobmeta import META_HELD, META_RULE
from fair_router.core.keys import Keys
from fair_router.core.rules import Rule
from fair_router.core.tenancy import InvalidTenant, stored_org, usable_tenant
from fair_router.observe.whyplace import (
    BOUND,
    SCAN,
    FairPlace,
    PlainPlace,
    TenantControls,
    WhyPlaceScript,
    tenant_controls,
    throughput,
)
from fair_router.store.cluster import pair_of
from fair_router.store.scripts import PeekScript

TURNS, ITEMS = "fair_turns", "fair_items"
"""``job.meta`` keys of an interruptible job's turns started and checkpoints passed (fair_router.iteration.turns'
TURNS and ITEMS: a sideways import)."""
DEPENDENCIES_SHOWN = 50
"""Dependencies of a deferred job read and listed."""


class Reason(str, Enum):
    """Why a job is where it is: the closed set of primary (and secondary) reasons (docs/why.md)."""

    RUNNING = "running"
    NEXT = "next"
    BEHIND = "behind"
    CONCURRENCY_LIMIT = "concurrency_limit"
    RATE_LIMIT = "rate_limit"
    PAUSED = "paused"
    THROTTLED = "throttled"
    SCHEDULED = "scheduled"
    DEFERRED = "deferred"
    RETRY_WAIT = "retry_wait"
    RQ_RATE_LIMITED = "rq_rate_limited"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"
    CANCELED = "canceled"
    NOT_FOUND = "not_found"


APPROXIMATE = {
    "fifo_bound": f"over {BOUND} places ahead in its tenant's FIFO: jobs that left it are counted too",
    "not_active": "its tenant is parked or idle: its place once it returns is a guess",
    "tenant_bound": f"over {BOUND} tenants may be served before it: the first {BOUND} counted",
}
"""The causes lua/why_place.lua gives for an approximate place, as the ``approximate`` fact says them."""
HELD_REASONS = ("concurrency_limit", "paused", "rate_limit")
"""The reasons a turned-away, deferred job records (``META_HELD``)."""
ENDED = {JobStatus.FINISHED: Reason.FINISHED, JobStatus.FAILED: Reason.FAILED, JobStatus.STOPPED: Reason.STOPPED,
         JobStatus.CANCELED: Reason.CANCELED}


@dataclass(frozen=True)
class Explanation:
    """One job's answer. ``facts``: what the reasons rest on, keyed as docs/why.md lists per reason;
    ``estimated_start``: None when there is none, ``estimate_basis`` says how it was made or why there is none;
    ``unknown``: facts that would belong here but are not recorded."""

    job_id: str
    reason: Reason
    facts: Mapping[str, Any] = field(default_factory=dict)
    secondary: tuple[Reason, ...] = ()
    estimated_start: datetime | None = None
    estimate_basis: str = ""
    unknown: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: reasons as their names, times as ISO 8601."""
        return {"job_id": self.job_id, "reason": self.reason.value, "secondary": [r.value for r in self.secondary],
                "facts": {name: _plain(value) for name, value in self.facts.items()},
                "estimated_start": _plain(self.estimated_start), "estimate_basis": self.estimate_basis,
                "unknown": list(self.unknown)}


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


def explain(job_id: str, connection: Redis, settings: Settings | None = None) -> Explanation:
    """Why job ``job_id`` waits (or what became of it), read from ``connection`` and, with ``settings.shard_urls``,
    each shard's Redis where the job is not found there. On a Redis Cluster ``connection`` is either client of the
    pair (the ``RedisCluster`` or the one to rq's slot owner): one read-only script on the queue's slot, the
    tenant's controls on the tenant's slot, the observers' record on ``{obs}``. Never writes."""
    settings = settings if settings is not None else Settings()
    if JOB_ID_PATTERN.fullmatch(job_id) is None:  # rq refuses such an id (Job.fetch raises): no job can have it
        return Explanation(job_id, Reason.NOT_FOUND, {"servers_asked": 0},
                           estimate_basis="not a job id rq accepts (letters, digits, _ and - only): no job has it")
    pair = pair_of(connection)  # on a Redis Cluster: rq's keys (and the fair queue's) on rq's slot owner, ours spread
    if (found := _look(job_id, pair.rq, pair.state, settings)) is not None:
        return found
    for url in dict.fromkeys(settings.shard_urls):
        shard = Redis.from_url(url)
        try:
            if (found := _look(job_id, shard, connection, settings)) is not None:
                return found
        finally:
            shard.close()
    return Explanation(job_id, Reason.NOT_FOUND, {"servers_asked": 1 + len(dict.fromkeys(settings.shard_urls))},
                       estimate_basis="no such job (never enqueued, or expired after its result_ttl)")


def _look(job_id: str, server: Redis, main: Redis, settings: Settings) -> Explanation | None:
    try:
        job = Job.fetch(job_id, connection=server)
    except NoSuchJobError:
        return None
    return Explainer(job, main, settings).explain()


class Explainer:
    """The reasoning over one fetched job: ``job.connection`` holds it and its queue, ``main`` the tenant's
    controls, the router's windows and the observers' record (one server unless sharded)."""

    def __init__(self, job: Job, main: Redis, settings: Settings) -> None:
        self.job, self.main, self.settings = job, main, settings
        self.keys = Keys(settings.prefix)
        self.tenant = usable_tenant(job.meta, settings.tenant_max_bytes, warn=False)
        try:
            self.org = stored_org(job.meta, settings.tenant_max_bytes)
        except InvalidTenant:
            self.org = None
        self.facts: dict[str, Any] = {"queue": job.origin, "tenant": self.tenant, "status": None}
        self.unknown: list[str] = []

    def done(self, reason: Reason, secondary: list[Reason] | None = None, at: datetime | None = None,
             basis: str = "") -> Explanation:
        return Explanation(self.job.id, reason, self.facts, tuple(secondary or ()), at, basis, tuple(self.unknown))

    def explain(self) -> Explanation:
        status = self.job.get_status(refresh=False)
        self.facts["status"] = None if status is None else JobStatus(status).value
        if status in ENDED:
            self.facts.update(ended_at=self.job.ended_at, enqueued_at=self.job.enqueued_at)
            if status == JobStatus.FAILED:
                result = self.job.latest_result()
                self.facts["error"] = _last_line(result.exc_string if result is not None else None)
            return self.done(ENDED[status], basis="it will not start again (unless requeued)")
        if status == JobStatus.STARTED:
            self.facts.update(worker=self.job.worker_name, started_at=self.job.started_at)
            self.turns()
            return self.done(Reason.RUNNING, basis="it has started")
        if status == JobStatus.SCHEDULED:
            return self.scheduled()
        if status == JobStatus.DEFERRED:
            return self.deferred()
        if status == JobStatus.RATE_LIMITED:
            return self.rq_rate_limited()
        return self.waiting()

    def turns(self) -> None:
        """An interruptible job's ``turn`` (turns started: the current one while it runs) and ``items``."""
        turns, items = self.job.meta.get(TURNS), self.job.meta.get(ITEMS)
        self.facts["turn"] = turns if isinstance(turns, int) else None
        if isinstance(items, int):
            self.facts["items"] = items

    # -- not on a queue's list ------------------------------------------------------------------------

    def scheduled(self) -> Explanation:
        registry = ScheduledJobRegistry(self.job.origin, connection=self.job.connection)  # type: ignore[no-untyped-call]
        try:
            until: datetime | None = registry.get_scheduled_time(self.job)
        except NoSuchJobError:
            until = None
        self.facts["until"] = until
        basis = "its scheduled time (rq's ScheduledJobRegistry): a scheduler enqueues it then"
        if self.job.retries_left is not None and self.job.ended_at is not None:  # it ran, failed, and waits to retry
            self.facts.update(retries_left=self.job.retries_left, last_run_ended_at=self.job.ended_at)
            return self.done(Reason.RETRY_WAIT, at=until, basis=basis)
        held = self.job.meta.get(META_HELD)
        if self.tenant is None:
            return self.done(Reason.SCHEDULED, at=until, basis=basis)
        controls = tenant_controls(self.main, self.keys, self.tenant, self.job.id, org=self.org)
        if not isinstance(held, dict) or held.get("reason") not in HELD_REASONS or until is None \
                or held.get("until") != round(until.timestamp()):  # the user's, or a record of an earlier deferral
            if controls.reserved_ms is not None:  # deferred by a rate (before reasons were recorded)
                held = {"reason": Reason.RATE_LIMIT.value}
            elif controls.paused or controls.org_paused:
                return self.done(Reason.SCHEDULED, [Reason.PAUSED], None, f"{self.paused_since(controls)}: it "
                                 "starts once resumed, at its scheduled time at the earliest")
            else:
                return self.done(Reason.SCHEDULED, at=until, basis=basis)
        reason = Reason(held["reason"])  # a worker turned its start away and deferred it to this time
        self.facts["turned_away"] = True
        if reason == Reason.RATE_LIMIT:
            self.facts["reserved_start"] = None if controls.reserved_ms is None else _at(controls.reserved_ms)
        if controls.paused or controls.org_paused:
            return self.done(reason, [] if reason == Reason.PAUSED else [Reason.PAUSED], None,
                             f"{self.paused_since(controls)}: it starts once resumed, at its deferred time at the "
                             "earliest")
        return self.done(reason, at=until, basis="the time its start was deferred to (rq's ScheduledJobRegistry): a "
                         "scheduler enqueues it then; its tenant's controls are checked again at its start")

    def paused_since(self, controls: TenantControls) -> str:
        """The pause's facts (the tenant's, else its org's); the words of the estimate's block."""
        if controls.paused:
            self.facts["paused_since"] = controls.paused_since
        if controls.org_paused:
            self.facts.update(org_paused=True, org_paused_since=controls.org_paused_since)
        if (controls.paused_since if controls.paused else controls.org_paused_since) is None:
            self.unknown.append("paused_since: paused by a version that recorded no pause time")
        return "its tenant is paused" if controls.paused else "its organisation is paused"

    def org_limit(self, controls: TenantControls) -> int | None:
        """The job's org's concurrency limit as ``org show`` gives it: its override, its settings, its tier's."""
        if controls.org_limit_override is not None or self.org not in self.settings.orgs:
            return controls.org_limit_override
        return self.settings.orgs[self.org].configured_limit(self.settings.tiers)[0]

    def deferred(self) -> Explanation:
        ids = self.job.dependency_ids[:DEPENDENCIES_SHOWN]
        jobs = Job.fetch_many(ids, connection=self.job.connection)
        self.facts["dependencies"] = {job_id: (None if job is None else JobStatus(job.get_status(refresh=False)).value)
                                      for job_id, job in zip(ids, jobs, strict=True)}
        self.facts["dependencies_count"] = len(self.job.dependency_ids)
        return self.done(Reason.DEFERRED, basis="it is enqueued when its dependencies have finished")

    def rq_rate_limited(self) -> Explanation:
        key = self.job.rate_limit_key or ""
        registry = RateLimitRegistry(key, connection=self.job.connection)
        self.facts.update(rate_limit_key=key, concurrency=registry.concurrency,
                          allowed=self.job.connection.zcard(registry.allowed_key),
                          held=self.job.connection.zcard(registry.rate_limited_key))
        return self.done(Reason.RQ_RATE_LIMITED, basis="rq enqueues it when a job of its rate limit key ends")

    # -- waiting on a queue --------------------------------------------------------------------------

    def waiting(self) -> Explanation:
        fair_keys = self.keys.fair_queue(Queue(self.job.origin, connection=self.job.connection).key)
        place = WhyPlaceScript(self.job.connection)(fair_keys, self.job.id).run()
        now_ms = place.now_ms
        reasons: list[Reason] = []
        blocked = ""
        if isinstance(self.job.meta.get(META_RULE), dict):
            reasons.append(Reason.THROTTLED)
            self.throttled(now_ms)
        controls = None if self.tenant is None else tenant_controls(self.main, self.keys, self.tenant, self.job.id,
                                                                    self.job.origin, self.org)
        if TURNS in self.job.meta:  # an interruptible job between turns
            self.turns()
        if isinstance(place, FairPlace):
            position = self.fair_place(place)
            if controls is not None:
                blocked = self.controls(place, controls, reasons)
        elif place.index < 0 and place.listed < SCAN:  # queued, yet not on its list: a worker took it
            self.facts.update(starting=True, worker=None, started_at=None)
            return self.done(Reason.RUNNING, basis="a worker has taken it off its queue and is starting it")
        else:
            position = self.plain_place(place)
            if controls is not None and (controls.paused or controls.org_paused):
                reasons.append(Reason.PAUSED)
                blocked = f"{self.paused_since(controls)}: it starts once resumed"
        reasons.append(position)
        at, basis = self.estimate(now_ms, blocked)
        return self.done(reasons[0], reasons[1:], at, basis)

    def fair_place(self, place: FairPlace) -> Reason:
        """The place lua/why_place.lua read (two levels: among the top-level entries, and in its org's tenants)."""
        if self.org is not None:
            self.facts["org"] = self.org
        approximate = [APPROXIMATE[cause] for cause in place.approximate]
        if self.settings.fair_charge == "runtime":
            approximate.append("the queue charges run time: each job ahead is counted as one step")
        self.facts.update(fair=True, tenant_state=place.where, fifo_ahead=place.fifo_ahead, weight=place.weight,
                          tenant_waiting=place.waiting, tenants_before=place.tenants_before,
                          jobs_ahead=place.jobs_ahead, tied=place.tied, exact=not approximate,
                          active_tenants=place.active_tenants, listed=place.listed)
        if approximate:
            self.facts["approximate"] = "; ".join(approximate)
        return Reason.NEXT if place.jobs_ahead == 0 and place.where == "active" else Reason.BEHIND

    def plain_place(self, place: PlainPlace) -> Reason:
        ahead = place.index if place.index >= 0 else place.listed
        self.facts.update(fair=False, jobs_ahead=ahead, exact=place.index >= 0, listed=place.listed)
        if place.index < 0:
            self.facts["approximate"] = f"not within the first {SCAN} entries of the list: its length counted"
        return Reason.NEXT if place.index == 0 else Reason.BEHIND

    def controls(self, place: FairPlace, controls: TenantControls, reasons: list[Reason]) -> str:
        """The tenant's controls that hold it in a fair queue, appended to ``reasons``; what blocks the estimate."""
        now = place.now_ms
        if place.parked_until_ms is not None:
            self.facts["parked_until"] = _at(place.parked_until_ms)
        blocked = ""
        if controls.paused or controls.org_paused:
            reasons.append(Reason.PAUSED)
            blocked = f"{self.paused_since(controls)}: it starts once resumed"
        limit = place.limit
        if limit is not None and max(place.claimed, controls.running_count) >= limit:
            self.facts.update(limit=limit, running=controls.running, running_count=controls.running_count)
            reasons.append(Reason.CONCURRENCY_LIMIT)
            blocked = blocked or f"its tenant runs {controls.running_count} of {limit}: it waits for one to end"
        org_limit = self.org_limit(controls)
        if org_limit is not None and controls.org_running_count >= org_limit:  # the org's slots: the start checks both
            self.facts.update(org_limit=org_limit, org_running=list(controls.org_running),
                              org_running_count=controls.org_running_count)
            if Reason.CONCURRENCY_LIMIT not in reasons:
                reasons.append(Reason.CONCURRENCY_LIMIT)
            blocked = blocked or (f"its organisation runs {controls.org_running_count} of {org_limit}: it waits for "
                                  "one to end")
        paced = place.paced_until_ms is not None and place.paced_until_ms > now
        over = controls.rate_tat_ms is not None and controls.rate_tat_ms > now
        if place.where == "parked" and (paced or over) and Reason.PAUSED not in reasons \
                and Reason.CONCURRENCY_LIMIT not in reasons:
            self.facts["rate_until"] = self.facts.get("parked_until")
            reasons.append(Reason.RATE_LIMIT)
        elif place.where == "parked" and len(reasons) == int(Reason.THROTTLED in reasons):
            if controls.park_cause in HELD_REASONS:  # parked by it, which holds no more: it waits for the park's end
                self.facts["park_cause"] = controls.park_cause
                reasons.append(Reason(controls.park_cause))
            else:
                self.unknown.append("park cause: this park's cause was not recorded (by an older version, or expired)")
        return blocked

    def throttled(self, now_ms: int) -> None:
        raw = self.job.meta.get(META_RULE)
        try:
            rule: Rule | None = Rule.model_validate(raw)
        except ValidationError:
            rule = None
        self.facts.update(rule=raw, rule_text=None if rule is None else rule.describe(),
                          queue_weight=self.settings.weight(self.job.origin), window_count=None)
        if rule is not None and self.tenant is not None and self.job.func_name:
            window = self.keys.window(self.job.func_name, self.tenant)
            count = PeekScript(self.main)(window, [rule], str(now_ms)).run().counts[0]
            self.facts.update(window_count=count, window_capped=count > rule.threshold)  # capped: a floor

    def estimate(self, now_ms: int, blocked: str) -> tuple[datetime | None, str]:
        if blocked:
            return None, blocked
        rate = throughput(self.main, self.keys, now_ms, self.settings.observe.flush_interval / 2)
        if rate.starts == 0:
            return None, ("no job start recorded in the last minute (observe.record off, or no worker started "
                          "one): no throughput to estimate from")
        ahead = int(self.facts.get("jobs_ahead") or 0)
        at = _at(now_ms) + timedelta(seconds=(ahead + 1) / rate.per_second)
        if self.facts.get("tenant_state") == "parked" and self.facts.get("parked_until") is not None:
            at = max(at, self.facts["parked_until"])  # pops skip it until then (the rate's time for a rate)
        decoded = "" if self.tenant is None else f" (tenant {self.tenant})"
        return at, (f"{ahead} jobs ahead of it in serving order{decoded} / {rate.per_second:.3g} starts/s "
                    f"({rate.starts} starts of every queue in the last {rate.seconds} s, the observers' record); "
                    "jobs enqueued later by tenants served before it are not counted")


def _last_line(text: str | None) -> str | None:
    return None if not text else text.strip().splitlines()[-1]
