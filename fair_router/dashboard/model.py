"""What the views show: one :class:`Snapshot` of queues, the busiest tenants and the counters, rendered by the page, its
JSON, ``/metrics`` and ``fair-router demo``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fair_router.observe.buckets import Histogram

OTHER_LABEL = "_other"
"""How the tenants outside the top N are named (metric label, dashboard row)."""


@dataclass
class WaitFigures:
    """Starts within a window and their estimated wait percentiles (seconds; None without starts)."""

    starts: int = 0
    p50: float | None = None
    p95: float | None = None

    @classmethod
    def of(cls, histogram: Histogram) -> WaitFigures:
        return cls(histogram.count, histogram.quantile(0.50), histogram.quantile(0.95))


@dataclass
class QueueView:
    """One rq queue: its fetch weight, its jobs now, and for a fair queue its tenants."""

    name: str
    weight: float | str  # a number, or "strict"
    jobs: int  # waiting: the length of rq's list
    running: int  # live entries of rq's StartedJobRegistry
    fair: bool
    tenants_waiting: int = 0  # fair queues: tenants with jobs waiting
    tenants_parked: int = 0  # fair queues: tenants at their concurrency limit, skipped by pops
    server: str = ""  # the shard server it lives on (``host:port/db``); "" for redis_url
    down: bool = False  # its shard server did not answer: the figures above are not known
    stale_pops: int = 0  # fair queues: jobs taken off rq's list behind the fair pop (fairqueue.stale)
    plain_pops: int = 0  # of those, found run by a worker that is not fair-router's (a plain `rq worker`)
    approximate: bool = False  # its tenants' counts were not reconciled with rq's list (more waits than the bound)


@dataclass
class ShardServerView:
    """One shard server (``shard_urls``): the shards it holds and whether it answered this snapshot."""

    server: str  # host:port/db, without the password
    shards: list[int]
    up: bool
    error: str | None = None  # why it is taken for down


@dataclass
class TenantView:
    """One tenant row (or ``_other``, the rest summed; or everyone)."""

    tenant: str  # as shown
    key: str  # as encoded in keys; "" for the summed rows
    tier: str | None = None
    waiting: dict[str, int] = field(default_factory=dict)  # queue -> jobs waiting (fair queues, routed plain ones)
    running: int | None = None  # concurrency slots held (None: limits off, so not known per tenant)
    limit: int | None = None  # its tier's concurrency limit (None: limits off)
    rule: str | None = None  # the throttle rule its next job would meet (job keys configured in settings)
    parked: list[str] = field(default_factory=list)  # fair queues where it is parked now
    paused: bool = False  # paused (FairRouter.pause): none of its jobs start until it is resumed
    wait_5m: WaitFigures = field(default_factory=WaitFigures)
    wait_60m: WaitFigures = field(default_factory=WaitFigures)
    share_5m: float | None = None  # its share of all starts over the last 5 minutes
    fair_share: float | None = None  # weight / sum of weights of the tenants waiting in fair queues now (None: alone);
    # with orgs, two levels: its org's share x weight / sum of weights of its org's tenants waiting
    org: str | None = None  # its organisation (fair_org) as shown, from its record in a fair queue it waits in
    org_share: float | None = None  # its org's fair share (org weight / sum of the top-level weights waiting)
    alone: bool = False  # the only tenant waiting in every queue it waits in: it has the queue to itself
    series: list[tuple[float, float]] = field(default_factory=list)  # (tick start, mean wait s), ~10 minutes
    histogram: Histogram = field(default_factory=Histogram)  # cumulative waits (Prometheus)

    @property
    def waiting_total(self) -> int:
        return sum(self.waiting.values())


@dataclass
class OrgView:
    """One organisation with tenants waiting in fair queues (or ``_other``, the orgs past the top N summed)."""

    org: str  # as shown
    key: str  # as encoded in keys; "" for the summed row
    weight: float | None = None  # its org weight (None: the summed row)
    tenants: list[str] = field(default_factory=list)  # its tenants waiting, as shown, most jobs first (at most N)
    tenants_waiting: int = 0  # how many of its tenants have jobs waiting
    waiting: dict[str, int] = field(default_factory=dict)  # queue -> its jobs waiting
    parked: int = 0  # its tenants parked in some fair queue
    fair_share: float | None = None  # weight / sum of the top-level weights waiting (orgs and tenants without org)

    @property
    def waiting_total(self) -> int:
        return sum(self.waiting.values())


@dataclass
class RunningIteration:
    """An interruptible job running now, as of its last saved checkpoint."""

    job_id: str
    queue: str
    tenant: str | None
    func: str
    cursor: str  # repr of its last saved cursor, shortened
    turns: int  # turns started, this one included
    items: int  # checkpoints passed over all turns


@dataclass
class Snapshot:
    """Everything the views show, read at one moment (``at``, epoch seconds)."""

    at: float
    top_n: int
    limits_enabled: bool
    queues: list[QueueView]
    tenants: list[TenantView]  # the top N by jobs waiting and running (then by recent starts)
    other: TenantView  # every other tenant, summed
    everyone: TenantView  # all tenants together
    routed: dict[tuple[str, str], int]  # (job key, target queue) -> jobs routed there
    limit_counters: dict[str, dict[str, int]]  # tier -> every counter of limits.COUNTERS
    events: dict[tuple[str, str], int]  # (event, queue) -> count: recovered, abandoned
    tick_seconds: int = 10
    capped_starts_5m: int = 0  # starts of tenants past observe.tenants_per_minute (recorded as #other)
    iterations: list[RunningIteration] = field(default_factory=list)  # interruptible jobs running now
    shard_servers: list[ShardServerView] = field(default_factory=list)  # shard_urls' servers, when set
    tiers_named: bool = True  # False: the settings name no tiers, every tenant has the built-in default
    orgs: list[OrgView] = field(default_factory=list)  # the top N orgs by jobs waiting (none: no org waits)
    other_orgs: OrgView | None = None  # every other org, summed (None: no more than N)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the dashboard's ``api/snapshot``)."""
        return {
            **{name: getattr(self, name)
               for name in ("at", "top_n", "limits_enabled", "tick_seconds", "capped_starts_5m", "tiers_named")},
            "queues": [vars(queue) for queue in self.queues],
            "tenants": [_tenant_json(row) for row in self.tenants],
            "other": _tenant_json(self.other),
            "everyone": _tenant_json(self.everyone),
            "routed": [{"job": job, "queue": queue, "jobs": n} for (job, queue), n in sorted(self.routed.items())],
            "limits": [{"tier": tier, **counts} for tier, counts in sorted(self.limit_counters.items())],
            "events": [{"event": event, "queue": queue, "count": n}
                       for (event, queue), n in sorted(self.events.items())],
            "iterations": [vars(iteration) for iteration in self.iterations],
            "shard_servers": [vars(server) for server in self.shard_servers],
            "orgs": [_org_json(org) for org in self.orgs],
            "other_orgs": None if self.other_orgs is None else _org_json(self.other_orgs),
        }


def _org_json(org: OrgView) -> dict[str, Any]:
    return {**vars(org), "waiting_total": org.waiting_total}


def _tenant_json(row: TenantView) -> dict[str, Any]:
    data = {name: value for name, value in vars(row).items() if name not in ("histogram", "series")}
    data["wait_5m"], data["wait_60m"] = vars(row.wait_5m), vars(row.wait_60m)
    data["waiting_total"] = row.waiting_total
    data["series"] = [[t, wait] for t, wait in row.series]
    return data
