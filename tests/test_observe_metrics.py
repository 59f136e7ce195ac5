"""``/metrics`` parsed by prometheus-client's own parser, and the dashboard's routes (Flask's test client, real
Redis, jobs run by a real in-process rq worker)."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis
from rq import Queue
from worker_jobs import noop

from fair_router import FairQueue, Rule, Settings, WeightedSimpleWorker, fair_job
from fair_router.config.settings import ConcurrencyConfig, ObserveConfig
from fair_router.dashboard.app import create_app, create_blueprint
from fair_router.dashboard.reader import SnapshotReader
from fair_router.routing.router import FairRouter

PREFIX = "metrics"


@pytest.fixture
def deployment(conn: Redis, isolated_settings: None) -> Settings:
    """A fair queue with 5 tenants' jobs, 12 of them run by a real worker (limits on), 8 left waiting; a
    routed job function with one rule."""
    settings = Settings(prefix=PREFIX, fair_queues=["fq"], queues={"fq": 2, "routed": 1},
                        concurrency=ConcurrencyConfig(enabled=True), observe=ObserveConfig(top_tenants=2))
    queue = FairQueue("fq", connection=conn, settings=settings)
    counts = {"big": 8, "mid": 6, "t1": 2, "t2": 2, "t3": 2}
    queue.enqueue_many([Queue.prepare_data(noop, meta={"fair_tenant": tenant}, result_ttl=60)
                        for tenant, n in counts.items() for _ in range(n)])
    worker = WeightedSimpleWorker([queue], connection=conn, settings=settings)
    worker.work(burst=True, max_jobs=12, logging_level="WARNING")
    router = FairRouter(conn, prefix=PREFIX)
    task = fair_job("routed", rules=[Rule(queue="routed_slow", threshold=1, per="1h")],
                    tenant=lambda account: account, router=router, job_key="app.routed")(noop)
    task.enqueue_many([(("acme",), {}) for _ in range(3)])
    return settings


def families(conn: Redis, settings: Settings) -> dict[str, Any]:
    response = create_app(settings, conn).test_client().get("/metrics")
    assert response.status_code == 200 and response.mimetype == "text/plain"
    return {family.name: family for family in text_string_to_metric_families(response.get_data(as_text=True))}


def test_metrics_parse_with_prometheus_clients_parser(conn: Redis, deployment: Settings) -> None:
    found = families(conn, deployment)
    for name in ("fair_router_queue_jobs", "fair_router_tenant_waiting", "fair_router_tenant_running",
                 "fair_router_tenant_limit", "fair_router_routed", "fair_router_job_wait_seconds",
                 "fair_router_jobs_snoozed", "fair_router_jobs_parked", "fair_router_jobs_rate_deferred",
                 "fair_router_jobs_paused", "fair_router_tenant_paused", "fair_router_limit_events"):
        assert name in found, sorted(found)
    queue_jobs = {s.labels["queue"]: s.value for s in found["fair_router_queue_jobs"].samples}
    assert queue_jobs["fq"] == 8 and queue_jobs["routed"] == 1 and queue_jobs["routed_slow"] == 2

    waiting = found["fair_router_tenant_waiting"].samples
    tenants = {s.labels["tenant"] for s in waiting}
    assert len(tenants) == 3 and "_other" in tenants  # top 2 by waiting + running, the rest summed
    assert sum(s.value for s in waiting if s.labels["queue"] == "fq") == 8  # every waiting job, once

    routed = {(s.labels["job_key"], s.labels["rule_queue"]): s.value for s in found["fair_router_routed"].samples
              if s.name == "fair_router_routed_total"}
    assert routed == {("app.routed", "routed"): 1, ("app.routed", "routed_slow"): 2}

    wait = found["fair_router_job_wait_seconds"]
    assert wait.type == "histogram"
    counts = {s.labels["tenant"]: s.value for s in wait.samples if s.name.endswith("_count")}
    assert set(counts) == tenants and sum(counts.values()) == 12  # every started job, once
    for tenant in tenants:
        buckets = [s for s in wait.samples if s.name.endswith("_bucket") and s.labels["tenant"] == tenant]
        values = [s.value for s in buckets]
        assert values == sorted(values) and buckets[-1].labels["le"] == "+Inf" and values[-1] == counts[tenant]

    running = found["fair_router_tenant_running"].samples
    assert {s.labels["tenant"] for s in running} == tenants and all(s.value == 0 for s in running)  # all done
    assert {s.labels["tier"] for s in running if s.labels["tenant"] != "_other"} == {"free"}
    assert all(s.value == 1 for s in found["fair_router_tenant_limit"].samples)  # the free tier's limit


def test_the_dashboard_serves_its_page_data_and_assets_and_nothing_that_writes(
    conn: Redis, deployment: Settings
) -> None:
    app = create_app(deployment, conn)
    client = app.test_client()
    page = client.get("/")
    assert page.status_code == 200 and b'id="tenants"' in page.data and b"dashboard.js" in page.data
    assert b"http://" not in page.data.replace(b'xmlns="http://www.w3.org', b"")  # nothing from another site
    data = client.get("/api/snapshot").get_json()
    assert [row["tenant"] for row in data["tenants"]] == ["big", "mid"] and data["other"]["tenant"] == "_other"
    assert client.get("/assets/dashboard.js").status_code == 200
    assert client.get("/assets/dashboard.css").status_code == 200
    methods = {method for rule in app.url_map.iter_rules() for method in rule.methods or ()}
    assert methods <= {"GET", "HEAD", "OPTIONS"}  # read-only
    assert client.post("/").status_code == 405


def test_the_blueprint_mounts_under_a_prefix_in_another_app(conn: Redis, deployment: Settings) -> None:
    host = Flask("host")
    host.register_blueprint(create_blueprint(SnapshotReader(conn, deployment)), url_prefix="/fair")
    client = host.test_client()
    page = client.get("/fair/")
    assert page.status_code == 200
    assert b"/fair/assets/dashboard.js" in page.data and b'data-api="/fair/api/snapshot"' in page.data
    assert client.get("/fair/metrics").status_code == 200
    assert client.get("/fair/assets/dashboard.js").status_code == 200


def test_tenant_actions_need_the_flag_and_the_token(conn: Redis, deployment: Settings) -> None:
    router = FairRouter(conn, prefix=PREFIX)
    body = {"tenant": "big"}
    read_only = create_app(deployment, conn).test_client()
    assert read_only.post("/api/tenant/pause", json=body, headers={"Authorization": "Bearer x"}).status_code == 404
    assert b"data-actions" not in read_only.get("/").data and not router.paused("big")
    with pytest.raises(ValueError, match="at least 16 characters"):
        create_app(deployment, conn, actions_token="short")

    token = "s3cret-token-for-tests"
    client = create_app(deployment, conn, actions_token=token).test_client()
    assert b'data-actions="/api/tenant"' in client.get("/").data
    for headers in ({}, {"Authorization": "Bearer wrong-token-of-some-length"}, {"Authorization": token}):
        assert client.post("/api/tenant/pause", json=body, headers=headers).status_code == 403
    assert not router.paused("big")
    auth = {"Authorization": f"Bearer {token}"}
    assert client.post("/api/tenant/pause", json={"tenant": ""}, headers=auth).status_code == 400
    assert client.post("/api/tenant/delete", json=body, headers=auth).status_code == 404
    paused = client.post("/api/tenant/pause", json=body, headers=auth)
    assert paused.status_code == 200 and paused.get_json() == {"tenant": "big", "paused": True}
    assert router.paused("big")
    rows = {row["tenant"]: row for row in client.get("/api/snapshot").get_json()["tenants"]}
    assert rows["big"]["paused"] is True
    assert client.post("/api/tenant/resume", json=body, headers=auth).get_json() == {"tenant": "big", "paused": False}
    assert not router.paused("big")
