"""Why are this tenant's jobs slow? :func:`explain_tenant` reads what holds one tenant now (docs/why.md, "Per
tenant"): its pause, concurrency limit and rate, the throttle rules its windows match, its backlog caps, and its
share of the recent job starts beside its fair share in each fair queue it waits in. It only reads. It sits
with the router (a floor above the controls, the observers and the fair queues it reads)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from typing import Any

from redis import Redis
from rq import Queue

from fair_router.config.settings import Settings
from fair_router.controls.fairstate import TENANT_FIELD
from fair_router.controls.orgs import tenant_orgs
from fair_router.core.keys import Keys, encode
from fair_router.core.rules import last_match
from fair_router.core.text import as_text
from fair_router.observe.recorder import ALL, TICK_SECONDS, TICK_SLOTS
from fair_router.observe.why import _plain
from fair_router.observe.whyplace import BOUND, RATE_TICKS, tenant_controls
from fair_router.routing.router import FairRouter
from fair_router.store.scripts import PeekScript


class TenantReason(str, Enum):
    """What holds a tenant's jobs, most binding first; ``fair_share``: nothing does, its jobs wait their turn."""

    PAUSED = "paused"
    CONCURRENCY_LIMIT = "concurrency_limit"
    RATE_LIMIT = "rate_limit"
    THROTTLED = "throttled"
    BACKLOG_CAP = "backlog_cap"
    FAIR_SHARE = "fair_share"
    NOT_WAITING = "not_waiting"


@dataclass(frozen=True)
class TenantExplanation:
    """One tenant's answer: ``reasons`` (the first is the primary one), ``facts`` keyed as docs/why.md lists them."""

    tenant: str
    reasons: tuple[TenantReason, ...]
    facts: Mapping[str, Any] = field(default_factory=dict)
    unknown: tuple[str, ...] = ()

    @property
    def reason(self) -> TenantReason:
        return self.reasons[0]

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: reasons as their names, times as ISO 8601."""
        return {"tenant": self.tenant, "reason": self.reason.value, "reasons": [r.value for r in self.reasons],
                "facts": {name: _plain(value) for name, value in self.facts.items()}, "unknown": list(self.unknown)}


def explain_tenant(tenant: str | int, connection: Redis, settings: Settings | None = None) -> TenantExplanation:
    """Why ``tenant``'s jobs are slow now, read from ``connection`` (settings: prefix, tiers, throttle rules of
    ``jobs:``; else loaded as the workers load them). Never writes."""
    settings = settings if settings is not None else Settings()
    router = FairRouter(connection, prefix=settings.prefix, tiers=settings.tiers,
                        tenant_max_bytes=settings.tenant_max_bytes, orgs=settings.orgs)
    tenant = router.tenant_id(tenant)
    keys, main = router.keys, router.connection
    org = next(iter(tenant_orgs(router.rq_connection, keys, tenant).values()), None)  # one org per tenant
    profile = router.tenant(tenant, org)  # without a tier of its own: its org's
    running, waiting = router.tenant_jobs(tenant)
    seconds, micros = main.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    controls = tenant_controls(main, keys, tenant, "", org=org)  # its slots under its org's tag, and the org's
    facts: dict[str, Any] = {"tier": profile.tier, "weight": profile.weight, "waiting": waiting, "running": running}
    reasons, unknown = [], []
    if controls.paused or controls.org_paused:
        reasons.append(TenantReason.PAUSED)
        name, since = ("paused_since", controls.paused_since) if controls.paused else \
            ("org_paused_since", controls.org_paused_since)
        facts[name] = since
        if since is None:
            unknown.append("paused_since: paused by a version that recorded no pause time")
    if settings.concurrency.enabled:
        facts.update(limit=profile.limit, running_jobs=controls.running)
        org_limit = None if org is None else router.tenants.org(org, settings.orgs, settings.tiers).limit
        if org is not None:
            facts.update(org=org, org_limit=org_limit, org_running_jobs=list(controls.org_running))
        if controls.running_count >= profile.limit or (org_limit is not None
                                                       and controls.org_running_count >= org_limit):
            reasons.append(TenantReason.CONCURRENCY_LIMIT)
    if profile.rate is not None:
        facts["rate"] = f"{profile.rate}, burst {profile.burst}"
        allowed = None if controls.rate_tat_ms is None else \
            controls.rate_tat_ms - (profile.burst - 1) * profile.rate.interval_ms
        if allowed is not None and allowed > now_ms:
            facts["rate_until"] = datetime.fromtimestamp(allowed / 1000, timezone.utc)
            reasons.append(TenantReason.RATE_LIMIT)
    if matched := _rules_matched(main, keys, settings, tenant, now_ms):
        facts["rules_matched"] = matched
        reasons.append(TenantReason.THROTTLED)
    if profile.max_backlog is not None:
        facts["max_backlog"] = profile.max_backlog
        if full := [queue for queue, count in waiting.items() if count >= profile.max_backlog]:
            facts["backlog_full"] = full  # an enqueue there raises TenantBacklogFull
            reasons.append(TenantReason.BACKLOG_CAP)
    facts.update(_shares(router.rq_connection, keys, tenant, waiting))
    facts.update(_recent(main, keys, tenant, now_ms))
    raw = {queue: as_text(main.get(keys.park_cause(tenant, queue)) or b"") for queue in facts["parked_until"]}
    if causes := {queue: cause for queue, cause in raw.items() if cause in {r.value for r in TenantReason}}:
        facts["park_cause"] = causes  # recorded by the worker that parked it (it may hold no more)
    if not reasons and causes:
        reasons.append(TenantReason(sorted(causes.values())[0]))
    if not reasons:
        reasons.append(TenantReason.FAIR_SHARE if waiting else TenantReason.NOT_WAITING)
    return TenantExplanation(tenant, tuple(reasons), facts, tuple(unknown))


def _rules_matched(main: Redis, keys: Keys, settings: Settings, tenant: str, now_ms: int) -> list[dict[str, Any]]:
    """The throttle rules (settings ``jobs:``) the tenant's next enqueue of each job key would be routed by."""
    matched = []
    peek = PeekScript(main)
    for job_key, job in sorted(settings.jobs.items()):
        if not job.rules:
            continue
        counts = peek(keys.window(job_key, tenant), job.rules, str(now_ms)).run().counts
        rule = last_match(job.rules, counts)
        if rule is not None:
            count = counts[job.rules.index(rule)]
            matched.append({"job_key": job_key, "rule_text": rule.for_base(job.queue or "default").describe(),
                            "window_count": count})
    return matched


def _shares(rq: Redis, keys: Keys, tenant: str, waiting: dict[str, int]) -> dict[str, Any]:
    """Per fair queue it waits in: its weight over the weights of the tenants served there now (the active ones,
    the first BOUND, and itself), what the stride schedule gives it while every one of them has work; and until
    when it is parked there."""
    shares: dict[str, float] = {}
    actives: dict[str, int] = {}
    parked: dict[str, datetime] = {}
    mine = TENANT_FIELD + encode(tenant)
    for queue in waiting:
        fq = keys.fair_queue(Queue(queue, connection=rq).key)
        if (until := rq.zscore(fq.parked, encode(tenant))) is not None:  # pops skip it there until then
            parked[queue] = datetime.fromtimestamp(until / 1000, timezone.utc)
        active = [as_text(name) for name in rq.zrange(fq.active, 0, BOUND - 1)]
        others = [TENANT_FIELD + name for name in active if TENANT_FIELD + name != mine]
        records = rq.hmget(fq.state, [mine, *others])
        weights = [float(as_text(record).split("|")[2]) for record in records if record is not None]
        if records[0] is not None and sum(weights) > 0:
            shares[queue] = round(weights[0] / sum(weights), 4)
            actives[queue] = len(active)
    return {"fair_share": shares, "active_tenants": actives, "parked_until": parked}


def _recent(main: Redis, keys: Keys, tenant: str, now_ms: int) -> dict[str, Any]:
    """Its job starts and every tenant's over the current tick and the RATE_TICKS before it (the observers'
    records, every queue), and its share of them."""
    tick = now_ms // 1000 // TICK_SECONDS
    wanted = [tick - back for back in range(RATE_TICKS + 1)]
    fields = [f"t{held % TICK_SLOTS}" for held in wanted] + [f"n{held % TICK_SLOTS}" for held in wanted]
    with main.pipeline(transaction=False) as pipe:
        pipe.hmget(keys.observe_record(encode(tenant)), fields)
        pipe.hmget(keys.observe_record(ALL), fields)
        counted = [sum(int(count or 0) for when, count, expected in zip(values[:len(wanted)], values[len(wanted):],
                                                                         wanted, strict=True)
                       if when is not None and int(when) == expected) for values in pipe.execute()]
    starts, every = counted
    return {"recent_starts": starts, "recent_starts_all": every, "recent_seconds": (RATE_TICKS + 1) * TICK_SECONDS,
            "share": round(starts / every, 4) if every else None}
