"""``fair_router.explain_tenant`` / ``fair-router tenant why``: what holds a tenant's jobs, with real workers and
Redis."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import why_jobs
from click.testing import CliRunner
from redis import Redis
from rq.job import Job
from test_why import slot_held_elsewhere, snapshot

from fair_router import (
    FairQueue,
    FairRouter,
    Rule,
    Settings,
    TenantBacklogFull,
    TenantReason,
    WeightedSimpleWorker,
    explain_tenant,
    fair_job,
)
from fair_router.cli import main
from fair_router.config.settings import ConcurrencyConfig
from fair_router.core.keys import Keys

PREFIX = "why_test"
KEYS = Keys(PREFIX)

pytestmark = pytest.mark.usefixtures("isolated_settings")


def settings(**extra: Any) -> Settings:
    return Settings(prefix=PREFIX, **extra)


def fill(queue: FairQueue, tenant: str, n: int) -> list[Job]:
    return [queue.enqueue(why_jobs.noop, fair_tenant=tenant) for _ in range(n)]


def test_a_tenant_nothing_holds_gets_its_fair_share(conn: Redis) -> None:
    router = FairRouter(conn, prefix=PREFIX)
    router.set_tenant("big", weight=3)
    config = settings(fair_queues=["default"])
    queue = FairQueue("default", connection=conn, settings=config)
    fill(queue, "small", 6)
    fill(queue, "big", 6)
    WeightedSimpleWorker([queue], connection=conn, settings=config).work(burst=True, max_jobs=4)
    small = explain_tenant("small", conn, config)
    assert small.reasons == (TenantReason.FAIR_SHARE,), small
    assert small.facts["fair_share"] == {"default": 0.25} and small.facts["active_tenants"] == {"default": 2}
    assert explain_tenant("big", conn, config).facts["fair_share"] == {"default": 0.75}
    # the observers recorded the worker's 4 starts (flushed as it stopped): the share the tenant got
    assert small.facts["recent_starts_all"] == 4 and small.facts["share"] == small.facts["recent_starts"] / 4
    assert explain_tenant("nobody", conn, config).reasons == (TenantReason.NOT_WAITING,)


def test_a_paused_tenant_and_its_time(conn: Redis) -> None:
    config = settings(fair_queues=["default"])
    fill(FairQueue("default", connection=conn, settings=config), "acme", 2)
    FairRouter(conn, prefix=PREFIX).pause("acme")
    answer = explain_tenant("acme", conn, config)
    assert answer.reason == TenantReason.PAUSED and answer.facts["waiting"] == {"default": 2}
    assert answer.facts["paused_since"] <= datetime.now(timezone.utc) + timedelta(seconds=1)
    assert answer.as_dict()["facts"]["paused_since"].startswith("20")


def test_a_tenant_at_its_limit_names_its_running_jobs(conn: Redis) -> None:
    config = settings(concurrency=ConcurrencyConfig(enabled=True, lease_ttl=60), fair_queues=["default"])
    slots, held = slot_held_elsewhere(conn, config)
    queue = FairQueue("default", connection=conn, settings=config)
    fill(queue, "acme", 1)
    WeightedSimpleWorker([queue], connection=conn, settings=config).work(burst=True)
    answer = explain_tenant("acme", conn, config)
    assert answer.reasons == (TenantReason.CONCURRENCY_LIMIT,), answer
    assert answer.facts["limit"] == 1 and answer.facts["running_jobs"] == ["elsewhere"]
    assert answer.facts["park_cause"] == {"default": "concurrency_limit"}
    assert answer.facts["parked_until"]["default"] > datetime.now(timezone.utc)
    slots.release(held)  # no wake here: the park outlives its cause, which it still names
    answer = explain_tenant("acme", conn, config)
    assert answer.reasons == (TenantReason.CONCURRENCY_LIMIT,) and answer.facts["running_jobs"] == [], answer
    queue.unpark("acme")
    conn.delete(KEYS.park_cause("acme", "default"))
    assert explain_tenant("acme", conn, config).reason == TenantReason.FAIR_SHARE


def test_a_tenant_over_its_rate(conn: Redis) -> None:
    config = settings(fair_queues=["default"])
    FairRouter(conn, prefix=PREFIX).set_tenant("acme", rate="1/m")
    queue = FairQueue("default", connection=conn, settings=config)
    first, second = fill(queue, "acme", 2)
    WeightedSimpleWorker([queue], connection=conn, settings=config).work(burst=True)
    assert first.get_status() == "finished" and second.get_status() == "queued"
    answer = explain_tenant("acme", conn, config)
    assert answer.reason == TenantReason.RATE_LIMIT, answer
    assert answer.facts["rate_until"] > datetime.now(timezone.utc) + timedelta(seconds=30)


def test_throttle_rules_matched_and_a_full_backlog(conn: Redis) -> None:
    rule = Rule(queue="slow", threshold=1, per="1h")
    config = settings(queues={"default": 1, "slow": 0.25}, fair_queues=["default", "slow"],
                      jobs={"why_jobs.noop": {"queue": "default", "rules": [rule]}})
    router = FairRouter(conn, prefix=PREFIX)
    router.set_tenant("greedy", max_backlog=2)
    job = fair_job(router=router, settings=config)(why_jobs.noop)
    assert explain_tenant("greedy", conn, config).reason == TenantReason.NOT_WAITING
    jobs = [job.enqueue(fair_tenant="greedy") for _ in range(3)]
    assert [j.origin for j in jobs] == ["default", "slow", "slow"]
    with pytest.raises(TenantBacklogFull):
        job.enqueue(fair_tenant="greedy")
    answer = explain_tenant("greedy", conn, config)
    assert answer.reasons == (TenantReason.THROTTLED, TenantReason.BACKLOG_CAP), answer
    (matched,) = answer.facts["rules_matched"]  # the window's count is a floor (it keeps threshold + 1 entries)
    assert matched["job_key"] == "why_jobs.noop" and matched["rule_text"] == rule.describe()
    assert matched["window_count"] >= rule.threshold
    assert answer.facts["backlog_full"] == ["slow"] and answer.facts["max_backlog"] == 2


def test_the_tenant_why_command(conn: Redis, redis_server: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("FAIR_ROUTER_REDIS_URL", redis_server.url)
    monkeypatch.setenv("FAIR_ROUTER_PREFIX", PREFIX)
    monkeypatch.setenv("FAIR_ROUTER_FAIR_QUEUES", '["default"]')
    fill(FairQueue("default", connection=conn, settings=settings(fair_queues=["default"])), "acme", 1)
    FairRouter(conn, prefix=PREFIX).pause("acme")
    out = CliRunner().invoke(main, ["tenant", "why", "acme"])
    assert out.exit_code == 0, out.output
    assert out.output.startswith("tenant 'acme': paused") and "paused_since:" in out.output
    out = CliRunner().invoke(main, ["tenant", "why", "acme", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["reasons"] == ["paused"]


def test_explaining_a_tenant_changes_nothing_in_redis(conn: Redis) -> None:
    rule = Rule(queue="slow", threshold=1, per="1h")
    config = settings(queues={"default": 1, "slow": 0.25}, fair_queues=["default", "slow"],
                      concurrency=ConcurrencyConfig(enabled=True), jobs={"why_jobs.noop": {"rules": [rule]}})
    router = FairRouter(conn, prefix=PREFIX)
    router.set_tenant("acme", rate="1/m", max_backlog=5)
    job = fair_job(router=router, settings=config)(why_jobs.noop)
    for _ in range(3):
        job.enqueue(fair_tenant="acme")
    router.pause("acme")
    explain_tenant("acme", conn, config)  # its scripts loaded (SCRIPT LOAD changes only the script cache)
    before = snapshot(conn)
    answer = explain_tenant("acme", conn, config)
    assert snapshot(conn) == before
    assert answer.reasons == (TenantReason.PAUSED, TenantReason.THROTTLED), answer


def test_a_tenant_in_an_org_at_the_orgs_limit_or_paused_with_it(conn: Redis) -> None:
    """A tenant waiting under an org: the org's slots (its running job held elsewhere) hold it at concurrency_limit
    though the tenant runs nothing, and ``org pause`` reads paused with the org's pause time."""
    config = settings(concurrency=ConcurrencyConfig(enabled=True, lease_ttl=60), fair_queues=["default"],
                      orgs={"A": {"concurrency": 1}})
    conn.zadd(KEYS.org_leases("A"), {"elsewhere": 2**41})  # the org's one slot, held by a job of another tenant
    queue = FairQueue("default", connection=conn, settings=config)
    queue.enqueue(why_jobs.noop, fair_tenant="a1", fair_org="A")
    answer = explain_tenant("a1", conn, config)
    assert answer.reasons == (TenantReason.CONCURRENCY_LIMIT,), answer
    assert answer.facts["org"] == "A" and answer.facts["org_limit"] == 1, answer.facts
    assert answer.facts["org_running_jobs"] == ["elsewhere"] and answer.facts["running_jobs"] == []
    conn.delete(KEYS.org_leases("A"))
    assert explain_tenant("a1", conn, config).reason == TenantReason.FAIR_SHARE
    router = FairRouter(conn, prefix=PREFIX)
    router.tenants.pause_org("A")
    answer = explain_tenant("a1", conn, config)
    assert answer.reason == TenantReason.PAUSED and answer.facts["org_paused_since"] is not None, answer.facts
    router.tenants.resume_org("A")
