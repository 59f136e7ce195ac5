"""Plan tiers: tier lookup, priority routing, tier settings validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import routed_jobs
from click.testing import CliRunner
from redis import Redis

from fair_router import FairRouter, Rule, SettingsError, fair_job, load_settings
from fair_router.cli import main
from fair_router.config.settings import TiersConfig
from fair_router.controls.tiers import TierBook
from fair_router.demo.redis_server import RedisServer


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def analysis(conn: Redis, **options: object):  # type: ignore[no-untyped-def]
    return fair_job("analysis", tier_routing=True, tenant=lambda account, item=0: account,
                    router=FairRouter(conn), **options)(routed_jobs.echo)


def test_tier_routing_table_for_every_tier_and_system_jobs(conn: Redis) -> None:
    job = analysis(conn)
    for tenant, tier in [("f", "free"), ("p", "pro"), ("pp", "pro_plus"), ("e", "enterprise")]:
        job.fair_job.router.set_tier(tenant, tier)
    expected = {"f": "analysis_default", "p": "analysis_priority", "pp": "analysis_priority",
                "e": "analysis_priority", "unknown": "analysis_default"}
    for tenant, queue in expected.items():
        assert job.delay(tenant, 1).origin == queue, tenant
    system = job.enqueue("p", 2, system=True)
    assert system.origin == "analysis_scheduled" and system.meta["fair_system"] is True
    assert job.enqueue(None, 3).origin == "analysis_scheduled"  # no tenant: a system job
    assert job.enqueue_many([(("e", 1), {}), (("f", 2), {}), ((None, 3), {})])[0].origin == "analysis_priority"


def test_rules_follow_the_tier_base_queue(conn: Redis) -> None:
    job = analysis(conn, rules=[Rule(queue="{queue}_throttled", threshold=1, per="1h")])
    job.fair_job.router.set_tier("p", "pro")
    assert [job.delay("p", i).origin for i in range(2)] == ["analysis_priority", "analysis_priority_throttled"]
    assert [job.delay("f", i).origin for i in range(2)] == ["analysis_default", "analysis_default_throttled"]
    jobs = job.enqueue_many([(("f", 5), {}), (("p", 6), {})])
    assert [j.origin for j in jobs] == ["analysis_default_throttled", "analysis_priority_throttled"]


def test_tier_changes_take_effect_after_the_cache_ttl(conn: Redis, tmp_path: Path,
                                                      redis_server: RedisServer) -> None:
    ticks = Ticks()
    router = FairRouter(conn)
    book = TierBook(conn, router.keys, TiersConfig(), cache_ttl=5, clock=ticks)
    assert book.tier("acme") == "free"
    config = tmp_path / "c.yaml"
    config.write_text(f"redis_url: {redis_server.url}\n")
    result = CliRunner().invoke(main, ["tier", "set", "acme", "enterprise", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert book.tier("acme") == "free"  # cached
    ticks.now = 5.1
    assert book.tier("acme") == "enterprise"
    assert book.queue_class("acme") == "priority" and book.limit("enterprise") == 5
    result = CliRunner().invoke(main, ["tier", "get", "acme", "--config", str(config)])
    assert "acme: enterprise (queue class priority, 5 at once)" in result.output
    result = CliRunner().invoke(main, ["tier", "set", "acme", "platinum", "--config", str(config)])
    assert result.exit_code == 2 and "unknown tier 'platinum'" in result.output


def test_resolver_callable_wins_over_redis(conn: Redis, tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("tiers: {resolver: 'tier_resolvers:by_name'}\n")
    settings = load_settings(config)
    router = FairRouter(conn, tiers=settings.tiers)
    router.set_tier("ent-1", "free")  # ignored: the resolver decides
    assert router.get_tier("ent-1") == "enterprise"
    assert router.get_tier("pro-9") == "pro"
    assert router.get_tier("someone") == "free"


def test_adr_defaults() -> None:
    tiers = TiersConfig()
    assert tiers.concurrency == {"free": 1, "pro": 3, "pro_plus": 3, "enterprise": 5}
    assert tiers.priority == ["pro", "pro_plus", "enterprise"] and tiers.default == "free"
    assert tiers.limit("no-such-tier") == 1


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("tiers: {concurrency: {free: -1, pro: 3, pro_plus: 3, enterprise: 5}}", "tiers.concurrency.free"),
        ("tiers: {concurrency: {free: 0, pro: 3, pro_plus: 3, enterprise: 5}}", "tiers.concurrency.free"),
        ("tiers: {priority: [pro, gold]}", "unknown tier(s) 'gold'"),
        ("tiers: {default: bronze}", "unknown tier(s) 'bronze'"),
        ("tiers: {resolver: 'no_such_module_x:fn'}", "cannot import 'no_such_module_x'"),
        ("tiers: {resolver: 'tier_resolvers:missing'}", "has no callable 'missing'"),
        ("tiers: {resolver: 'not-a-path'}", "package.module:function"),
        ("tiers: {weights: {free: 0}}", "tiers.weights.free"),
        ("concurrency: {lease_ttl: 0s}", "concurrency.lease_ttl"),
        ("concurrency: {enabled: maybe}", "concurrency.enabled"),
        ("concurrency: {snooze: -30s}", "concurrency.snooze"),
    ],
)
def test_bad_tier_settings_fail_at_load(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text + "\n")
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    assert where in str(info.value) and str(path) in str(info.value)


def test_concurrency_settings_from_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FAIR_ROUTER_CONCURRENCY__ENABLED", "true")
    monkeypatch.setenv("FAIR_ROUTER_CONCURRENCY__LEASE_TTL", "90s")
    monkeypatch.setenv("FAIR_ROUTER_TIERS__CONCURRENCY", '{"free": 2, "pro": 4, "pro_plus": 4, "enterprise": 8}')
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    assert settings.concurrency.enabled and settings.concurrency.lease_ttl == 90
    assert settings.tiers.limit("enterprise") == 8


def test_queue_names_are_validated() -> None:
    with pytest.raises(ValueError, match="queue"):
        Rule(queue="bad:name", threshold=1, per="1h")
    assert Rule(queue="{queue}_slow", threshold=1, per="1h").for_base("analysis_priority").queue == (
        "analysis_priority_slow")
