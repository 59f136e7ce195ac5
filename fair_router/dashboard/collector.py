"""Prometheus exposition: a collector that reads one snapshot at scrape time (no state kept); tenants beyond the
top N summed under ``_other`` (docs/observability.md)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily as Counter
from prometheus_client.core import GaugeMetricFamily as Gauge
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from fair_router.dashboard.model import OTHER_LABEL, Snapshot
from fair_router.dashboard.reader import SnapshotReader
from fair_router.observe.events import EVENTS

LIMIT_EVENTS = ("acquired", "refused", "released", "reclaimed")
EVENT_HELP = {
    "recovered": "Fair jobs popped but never started (their worker died before the start), given back, by queue.",
    "abandoned": "Started jobs whose worker stopped heartbeating for recovery.abandon_after, handed back "
                 "(retried, else failed as abandoned), by queue.",
}


class FairRouterCollector(Collector):
    """Collects every ``fair_router_*`` metric from one snapshot per scrape."""

    def __init__(self, reader: SnapshotReader) -> None:
        self.reader = reader

    def describe(self) -> list[Metric]:
        """Nothing up front: registering must not read Redis."""
        return []

    def collect(self) -> Iterator[Metric]:
        yield from metric_families(self.reader.snapshot())


def _family(kind: type[Gauge | Counter], name: str, text: str, labels: list[str],
            samples: Iterable[tuple[list[str], float]]) -> Metric:
    family = kind(name, text, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family


def metric_families(snap: Snapshot) -> Iterator[Metric]:
    """The metric families of one snapshot (see the metrics table in docs/observability.md)."""
    up = [queue for queue in snap.queues if not queue.down]  # a shard server that did not answer: no false 0
    yield _family(Gauge, "fair_router_queue_jobs", "Jobs waiting in the queue (rq's list).", ["queue"],
                  (([queue.name], queue.jobs) for queue in up))
    yield _family(Gauge, "fair_router_queue_running", "Jobs of the queue running now (rq's StartedJobRegistry).",
                  ["queue"], (([queue.name], queue.running) for queue in up))
    yield _family(Gauge, "fair_router_queue_plain_pops", "Jobs of the fair queue found taken by a worker that is not "
                  "fair-router's (a plain rq worker; a lower bound).", ["queue"],
                  (([queue.name], queue.plain_pops) for queue in snap.queues if queue.fair))
    yield _family(Gauge, "fair_router_queue_counts_approximate", "1 when the queue's per-tenant waiting counts were "
                  "not reconciled with rq's list this scrape (more entries than the bound): they may include jobs rq "
                  "removed and miss jobs rq requeued.", ["queue"], (([queue.name], int(queue.approximate))
                                                                     for queue in up))
    if snap.shard_servers:
        yield _family(Gauge, "fair_router_shard_server_up", "1 when the shard server (shard_urls) answered this "
                      "scrape, 0 when it did not (its queues then have no samples).", ["server"],
                      (([server.server], int(server.up)) for server in snap.shard_servers))

    rows = [*snap.tenants, snap.other]
    routed_into = {queue for _, queue in snap.routed}
    yield _family(Gauge, "fair_router_tenant_waiting", "Jobs of the tenant waiting in a fair queue or a routed plain "
                  f"one (top N tenants, the rest as tenant=\"{OTHER_LABEL}\").", ["queue", "tenant"],
                  (([queue.name, row.tenant], row.waiting.get(queue.name, 0)) for queue in snap.queues
                   if queue.fair or queue.name in routed_into or any(queue.name in row.waiting for row in rows)
                   for row in rows))
    yield _family(Gauge, "fair_router_tenant_paused", "1 while the tenant is paused (FairRouter.pause; top N "
                  "tenants).", ["tenant"], (([row.tenant], int(row.paused)) for row in snap.tenants))
    if snap.limits_enabled:
        yield _family(Gauge, "fair_router_tenant_running", "Concurrency slots the tenant holds: its jobs running "
                      "now.", ["tenant", "tier"], (([row.tenant, row.tier or ""], row.running or 0) for row in rows))
        yield _family(Gauge, "fair_router_tenant_limit", "The tenant's concurrency limit (its tier's).", ["tenant"],
                      (([row.tenant], row.limit) for row in rows if row.limit is not None))
    yield from org_families(snap)
    yield _family(Counter, "fair_router_routed", "Jobs routed, by job key and target queue (a rule's queue, or the "
                  "base queue when no rule matched).", ["job_key", "rule_queue"],
                  (([job, target], count) for (job, target), count in sorted(snap.routed.items())))

    wait = HistogramMetricFamily("fair_router_job_wait_seconds", "Wait of started jobs (start minus enqueue), "
                                 "by tenant.", labels=["tenant"])
    for row in rows:
        wait.add_metric([row.tenant], row.histogram.prometheus_buckets(), row.histogram.total_us / 1e6)
    yield wait

    tiers = sorted(snap.limit_counters.items())
    for name, text in JOB_COUNTERS.items():
        yield _family(Counter, f"fair_router_jobs_{name}", text, ["tier"],
                      (([tier], counts.get(name, 0)) for tier, counts in tiers))
    yield _family(Counter, "fair_router_limit_events", "Concurrency slot events, by tier (refused: a start refused at "
                  "the tenant's limit).", ["tier", "event"],
                  (([tier, event], counts.get(event, 0)) for tier, counts in tiers for event in LIMIT_EVENTS))
    for event in EVENTS:
        family = _family(Counter, f"fair_router_jobs_{event}", EVENT_HELP[event], ["queue"],
                         (([queue], count) for (name, queue), count in sorted(snap.events.items()) if name == event))
        if family.samples:
            yield family


def org_families(snap: Snapshot) -> Iterator[Metric]:
    """The org metrics (none while no org waits): the top N orgs by jobs waiting, the rest as org="_other", and the
    org of each top N tenant that has one: as bounded as the tenants' labels."""
    if not snap.orgs:
        return
    rows = [*snap.orgs, *([snap.other_orgs] if snap.other_orgs is not None else [])]
    fair = [queue.name for queue in snap.queues if queue.fair]
    yield _family(Gauge, "fair_router_org_waiting", "Jobs of the organisation's tenants waiting in a fair queue (top "
                  f"N orgs by jobs waiting, the rest as org=\"{OTHER_LABEL}\").", ["queue", "org"],
                  (([queue, row.org], row.waiting.get(queue, 0)) for queue in fair for row in rows))
    yield _family(Gauge, "fair_router_org_tenants_waiting", "The organisation's tenants with jobs waiting in fair "
                  "queues.", ["org"], (([row.org], row.tenants_waiting) for row in rows))
    yield _family(Gauge, "fair_router_org_parked", "The organisation's tenants parked (limit, pause or rate) in a fair "
                  "queue.", ["org"], (([row.org], row.parked) for row in rows))
    yield _family(Gauge, "fair_router_org_fair_share", "The organisation's fair share: its weight / the sum of the "
                  "top-level weights waiting (orgs, and tenants without org).", ["org"],
                  (([row.org], row.fair_share) for row in rows if row.fair_share is not None))
    yield _family(Gauge, "fair_router_org_weight", "The organisation's weight (top N orgs).", ["org"],
                  (([row.org], row.weight) for row in snap.orgs if row.weight is not None))
    yield _family(Gauge, "fair_router_tenant_org", "1 for each top N tenant of an organisation, naming it (join on "
                  "tenant).", ["tenant", "org"], (([row.tenant, row.org], 1) for row in snap.tenants if row.org))


JOB_COUNTERS = {
    "snoozed": "Job starts refused (tenant at its concurrency limit, or paused) on a plain queue, rescheduled "
               "after the snooze.",
    "parked": "Job starts refused (limit, pause or rate) in a fair queue: the job put back, its tenant parked.",
    "rate_deferred": "Job starts refused by a tenant's rate limit (parked in a fair queue, or deferred to the "
                     "reserved start time on a plain queue).",
    "paused": "Job starts refused because the tenant was paused (parked or snoozed until resumed).",
}
"""Per-tier job counters (``limits.COUNTERS``) exposed as ``fair_router_jobs_<name>_total{tier}``."""


def metrics_text(reader: SnapshotReader) -> bytes:
    """The Prometheus text exposition of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(FairRouterCollector(reader))
    return generate_latest(registry)
