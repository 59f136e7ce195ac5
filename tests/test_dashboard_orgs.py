"""Organisations on the dashboard: its JSON API and ``/metrics`` name each tenant's org, show the orgs with their
tenants and the two-level fair shares, and bound the org labels as the tenants' are (the top N, the rest as
``_other``). Real Redis, the dashboard's Flask app through its test client."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis
from rq import Queue
from worker_jobs import noop

from fair_router import FairQueue, Settings
from fair_router.config.settings import ObserveConfig
from fair_router.dashboard.app import create_app

PREFIX = "dash_orgs"
JOBS = {("a0", "A"): 6, ("a1", "A"): 5, ("a2", "A"): 4, ("b0", "B"): 3, ("c0", "C"): 1, ("solo", None): 2}


@pytest.fixture
def deployment(conn: Redis, isolated_settings: None) -> Settings:
    """Org A with three tenants, B and C with one each (C weighs 2), a tenant without org; top_tenants=2 shows
    tenants a0 and a1 and orgs A and B, C summed under _other."""
    settings = Settings(prefix=PREFIX, fair_queues=["fq"], queues={"fq": 1}, observe=ObserveConfig(top_tenants=2),
                        orgs={"C": {"weight": 2}})
    queue = FairQueue("fq", connection=conn, settings=settings)
    queue.enqueue_many([Queue.prepare_data(noop, meta={"fair_tenant": tenant} | ({"fair_org": org} if org else {}),
                                           result_ttl=60)
                        for (tenant, org), n in JOBS.items() for _ in range(n)])
    return settings


def test_the_json_api_names_each_tenants_org_and_lists_the_orgs_with_their_tenants(
    conn: Redis, deployment: Settings
) -> None:
    data = create_app(deployment, conn).test_client().get("/api/snapshot").get_json()
    rows = {row["tenant"]: row for row in data["tenants"]}
    assert list(rows) == ["a0", "a1"] and {row["org"] for row in rows.values()} == {"A"}
    # top level: A, B (1 each), C (2), solo (1) -> A's share 1/5, split over its three tenants by weight
    assert rows["a0"]["org_share"] == pytest.approx(1 / 5)
    assert rows["a0"]["fair_share"] == pytest.approx(1 / 15)
    orgs = {org["org"]: org for org in data["orgs"]}
    assert list(orgs) == ["A", "B"]  # top 2 by jobs waiting
    assert orgs["A"]["tenants"] == ["a0", "a1"] and orgs["A"]["tenants_waiting"] == 3
    assert orgs["A"]["waiting"] == {"fq": 15} and orgs["A"]["waiting_total"] == 15
    assert orgs["B"]["weight"] == 1 and orgs["B"]["fair_share"] == pytest.approx(1 / 5)
    other = data["other_orgs"]
    assert other["org"] == "_other" and other["waiting"] == {"fq": 1} and other["fair_share"] == pytest.approx(2 / 5)


def metric_samples(conn: Redis, settings: Settings) -> dict[str, Any]:
    text = create_app(settings, conn).test_client().get("/metrics").get_data(as_text=True)
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def test_metrics_name_the_org_of_each_top_tenant_with_bounded_org_labels(conn: Redis, deployment: Settings) -> None:
    found = metric_samples(conn, deployment)
    assert {(s.labels["tenant"], s.labels["org"]) for s in found["fair_router_tenant_org"]} == {("a0", "A"),
                                                                                               ("a1", "A")}
    waiting = {s.labels["org"]: s.value for s in found["fair_router_org_waiting"]}
    assert waiting == {"A": 15, "B": 3, "_other": 1}  # top 2 orgs, the rest summed: no label per org past N
    assert sum(s.value for s in found["fair_router_tenant_waiting"]) == sum(JOBS.values())
    tenants = {s.labels["org"]: s.value for s in found["fair_router_org_tenants_waiting"]}
    assert tenants == {"A": 3, "B": 1, "_other": 1}
    shares = {s.labels["org"]: s.value for s in found["fair_router_org_fair_share"]}
    assert shares == pytest.approx({"A": 0.2, "B": 0.2, "_other": 0.4})


def test_without_orgs_there_are_no_org_figures(conn: Redis, isolated_settings: None) -> None:
    settings = Settings(prefix=PREFIX, fair_queues=["fq"], queues={"fq": 1})
    FairQueue("fq", connection=conn, settings=settings).enqueue(noop, fair_tenant="t")
    data = create_app(settings, conn).test_client().get("/api/snapshot").get_json()
    assert data["orgs"] == [] and data["other_orgs"] is None and data["tenants"][0]["org"] is None
    assert "fair_router_org_waiting" not in metric_samples(conn, settings)


def test_a_tenants_running_jobs_under_its_org_count_in_its_row(conn: Redis, isolated_settings: None) -> None:
    """With limits on, a tenant's slots for its jobs under an org are under the org's tag: its row counts them."""
    from fair_router.config.settings import ConcurrencyConfig
    from fair_router.controls.tiers import TierBook
    from fair_router.core.keys import Keys
    from fair_router.workers.limiter import ConcurrencyLimiter

    settings = Settings(prefix=PREFIX, fair_queues=["fq"], queues={"fq": 1},
                        concurrency=ConcurrencyConfig(enabled=True, lease_ttl=60))
    queue = FairQueue("fq", connection=conn, settings=settings)
    queue.enqueue(noop, fair_tenant="a0", fair_org="A")
    queue.enqueue(noop, fair_tenant="b0", fair_org="B")
    keys = Keys(PREFIX)
    slots = ConcurrencyLimiter(conn, keys, TierBook(conn, keys), settings.concurrency)
    assert slots.acquire("a0", "running-elsewhere", org="A") is not None
    data = create_app(settings, conn).test_client().get("/api/snapshot").get_json()
    rows = {row["tenant"]: row for row in data["tenants"]}
    assert rows["a0"]["running"] == 1 and rows["b0"]["running"] == 0, rows
