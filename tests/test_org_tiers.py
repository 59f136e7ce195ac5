"""An organisation's tier for its tenants without one of their own (tier routing, their tier's limits), resolved
in TierBook and cached as a tenant's profile; and a tenant's own pause mirrored under its org's tag, read by the start
of its jobs under the org at once. Real Redis, real workers."""

from __future__ import annotations

from typing import Any

import limit_jobs
import pytest
import routed_jobs
from click.testing import CliRunner
from conftest import command_calls
from redis import Redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.scheduler import RQScheduler
from test_routed_enqueue import commands_run

from fair_router import FairQueue, FairRouter, Settings, fair_job
from fair_router.cli import main
from fair_router.config.settings import ConcurrencyConfig
from fair_router.controls.gate import TenantGate, Verdict
from fair_router.controls.orgs import OrgBook
from fair_router.controls.pauses import TenantPauses
from fair_router.controls.ratelimit import RateLimiter
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.routing.placement import Route
from fair_router.workers.limiter import ConcurrencyLimiter
from fair_router.workers.weighted import WeightedSimpleWorker

PREFIX = "orgtiers_test"
KEYS = Keys(PREFIX)
FAST = {"enabled": True, "lease_ttl": "5s", "snooze": "200ms", "jitter": "300ms"}
SETTINGS = Settings(prefix=PREFIX, orgs={"acme": {"tier": "pro"}, "plain": {"weight": 2}},
                    concurrency=ConcurrencyConfig(**FAST))

pytestmark = pytest.mark.usefixtures("isolated_settings")


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def router(conn: Redis) -> FairRouter:
    return FairRouter(conn, prefix=PREFIX, tiers=SETTINGS.tiers, orgs=SETTINGS.orgs)


def gate(conn: Redis) -> TenantGate[ConcurrencyLimiter]:
    """The workers' start gate on our prefix and settings, as ``build_gate`` makes it."""
    limiter = ConcurrencyLimiter(conn, KEYS, TierBook(conn, KEYS, SETTINGS.tiers, orgs=SETTINGS.orgs),
                                 SETTINGS.concurrency)
    orgs = OrgBook(conn, KEYS)
    limiter.org_profile = lambda org: orgs.profile(org, SETTINGS.orgs, SETTINGS.tiers)
    return TenantGate(limiter, RateLimiter(KEYS), slots=True)


def analysis(conn: Redis, routing: FairRouter, **options: Any):  # type: ignore[no-untyped-def]
    return fair_job("analysis", tier_routing=True, tenant=lambda account, item=0: account, router=routing,
                    settings=SETTINGS, **options)(routed_jobs.echo)


# -- which tier --------------------------------------------------------------------------------------


def test_a_tenant_without_a_tier_takes_its_orgs_and_its_own_tier_wins(conn: Redis) -> None:
    book = TierBook(conn, KEYS, SETTINGS.tiers, orgs=SETTINGS.orgs)
    acme = book.profile("t1", "acme")
    assert (acme.tier, acme.tier_source, acme.limit) == ("pro", "org acme", 3)  # tiers.concurrency.pro
    assert book.profile("t1", "acme") is acme  # built once per tenant, org and tier while cached
    assert (book.profile("t1").tier, book.profile("t1").tier_source) == ("free", "default")  # without its org
    assert book.profile("t1", "plain").tier_source == "default"  # an org without a tier
    router(conn).set_tier("t2", "free")
    own = TierBook(conn, KEYS, SETTINGS.tiers, orgs=SETTINGS.orgs).profile("t2", "acme")
    assert (own.tier, own.tier_source, own.limit) == ("free", "own", 1)
    router(conn).tenants.set_org("plain", tier="enterprise")  # org set --tier
    assert TierBook(conn, KEYS, SETTINGS.tiers, orgs=SETTINGS.orgs).profile("t1", "plain").tier == "enterprise"
    with pytest.raises(ValueError, match="unknown tier 'gold'"):
        router(conn).tenants.set_org("plain", tier="gold")


def test_the_worker_gate_gives_a_tenant_its_orgs_tier_limit(conn: Redis) -> None:
    checks = gate(conn)
    under = Job.create(limit_jobs.mark, args=("x",), connection=conn, meta={"fair_tenant": "t1", "fair_org": "acme"})
    alone = Job.create(limit_jobs.mark, args=("x",), connection=conn, meta={"fair_tenant": "t1"})
    assert (checks.start("t1", under).profile.limit, checks.start("t1", alone).profile.limit) == (3, 1)


# -- tier routing ---------------------------------------------------------------------------------------


def test_tier_routing_by_the_orgs_tier_via_enqueue_and_delay(conn: Redis) -> None:
    routing = router(conn)
    route = Route("analysis", "analysis", ())
    call = Queue.parse_args(routed_jobs.echo, "t1", 1)
    under = routing.enqueue(routing.tier_route(route, "t1", org="acme"), call, "t1", fair_org="acme")
    assert under.origin == "analysis_priority" and under.meta["fair_org"] == "acme"
    assert routing.enqueue(routing.tier_route(route, "t1"), call, "t1").origin == "analysis_default"
    job = analysis(conn, routing, org=lambda account, item=0: "acme")
    assert job.delay("t1", 1).origin == "analysis_priority"
    assert job.enqueue("t1", 2, fair_org="plain").origin == "analysis_default"  # an org without a tier
    routing.set_tier("t2", "free")
    assert job.delay("t2", 1).origin == "analysis_default"  # its own tier wins over its org's
    batch = job.enqueue_many([(("t1", 3), {}), (("t2", 4), {})])
    assert [queued.origin for queued in batch] == ["analysis_priority", "analysis_default"]


def test_an_org_tier_change_is_picked_up_within_the_cache_ttl(conn: Redis) -> None:
    ticks = Ticks()
    routing = router(conn)
    routing.tiers = TierBook(conn, KEYS, SETTINGS.tiers, cache_ttl=5, clock=ticks, orgs=SETTINGS.orgs)
    job = analysis(conn, routing, org=lambda account, item=0: "acme")
    assert job.delay("t1", 1).origin == "analysis_priority"
    router(conn).tenants.set_org("acme", tier="free")  # another process: noted as "!acme"
    ticks.now = 4.9
    assert job.delay("t1", 2).origin == "analysis_priority"  # cached until the next poll
    ticks.now = 5.0
    assert job.delay("t1", 3).origin == "analysis_default"
    router(conn).tenants.set_org("acme", reset=True)  # back to orgs.acme.tier
    ticks.now = 10.0
    assert job.delay("t1", 4).origin == "analysis_priority"


def test_a_routed_enqueue_with_an_org_sends_no_more_commands_in_steady_state(conn: Redis) -> None:
    """The org's tier is read once with the tenant's profile (one pipeline), then cached: a routed enqueue under an
    org runs the same commands as one without (route.lua, rq's MULTI), no lookup."""
    routing = router(conn)
    routing.tiers = TierBook(conn, KEYS, SETTINGS.tiers, cache_ttl=3600, orgs=SETTINGS.orgs)
    job = analysis(conn, routing)
    before = command_calls(conn)
    assert job.enqueue("cold", 0, fair_org="acme").origin == "analysis_priority"  # first: tenant and org read
    cold = command_calls(conn) - before
    job.delay("solo", 0)
    with_org = commands_run(conn, lambda: job.enqueue("cold", 1, fair_org="acme"))
    without = commands_run(conn, lambda: job.delay("solo", 1))
    assert with_org == without, (with_org, without)
    print(f"commands: cold enqueue with an org {cold}, steady {sum(with_org.values())} (without org "
          f"{sum(without.values())})")


def test_cli_org_set_tier_and_the_tiers_source_in_org_and_tenant_show(conn: Redis, redis_server: Any,
                                                                      tmp_path: Any) -> None:
    config = tmp_path / "fair_router.yaml"
    config.write_text(f"redis_url: {redis_server.url}\nprefix: {PREFIX}\nfair_queues: [orgfq]\n"
                      "orgs:\n  acme: {tier: pro}\n")
    runner = CliRunner()
    shown = runner.invoke(main, ["org", "show", "acme", "--config", str(config)])
    assert "tier        pro (settings orgs:)" in shown.output, shown.output
    FairQueue("orgfq", connection=conn, settings=Settings(prefix=PREFIX)).enqueue(
        routed_jobs.echo, "t1", 1, fair_tenant="t1", fair_org="acme")
    tenant = runner.invoke(main, ["tenant", "show", "t1", "--config", str(config)])
    assert "tenant 't1': tier pro (org acme's)" in tenant.output, tenant.output
    changed = runner.invoke(main, ["org", "set", "acme", "--tier", "enterprise", "--config", str(config)])
    assert "tier        enterprise (override)" in changed.output, changed.output
    bad = runner.invoke(main, ["org", "set", "acme", "--tier", "gold", "--config", str(config)])
    assert bad.exit_code == 2 and "unknown tier 'gold'" in bad.output, bad.output


# -- a tenant's pause under its org ------------------------------------------------------------------------


def test_a_paused_tenants_org_job_does_not_start_at_once_and_starts_after_resume(conn: Redis) -> None:
    """The worker's tier cache still says "not paused" (it polls only every hour here): the start reads the pause's
    mirror under the org's tag, written by pause under the org the tenant's jobs wait under, so the job waits
    from the pause on, not a cache period later; resume clears the mirror."""
    settings = Settings(prefix=PREFIX, concurrency=ConcurrencyConfig(**FAST))
    routing = FairRouter(conn, prefix=PREFIX)
    FairQueue("orgfq", connection=conn, settings=settings).enqueue(
        limit_jobs.record, "test:log:fair", 0, fair_tenant="t1", fair_org="acme")  # the tenant's org, recorded
    plain = Queue("orgplain", connection=conn)
    meta = {"fair_tenant": "t1", "fair_org": "acme"}
    worker = WeightedSimpleWorker([plain], connection=conn, settings=settings)
    worker.gate.limiter.tiers.cache_ttl = 3600  # the cache sees no change during the test
    plain.enqueue(limit_jobs.record, "test:log", 0, meta=meta)
    worker.work(burst=True)
    assert conn.llen("test:log") == 1  # ran: the worker's cache has t1 unpaused
    routing.pause("t1")
    assert conn.exists(KEYS.paused("t1", "acme")) and conn.smembers(KEYS.paused_orgs("t1")) == {b"acme"}
    held = plain.enqueue(limit_jobs.record, "test:log", 0, meta=meta)
    worker.work(burst=True)
    assert conn.llen("test:log") == 1 and held.get_status() == JobStatus.SCHEDULED  # refused, snoozed
    assert conn.hget(KEYS.limit_stats(), "free:paused") == b"1"
    routing.resume("t1")
    assert not conn.exists(KEYS.paused("t1", "acme"), KEYS.paused_orgs("t1"))
    scheduler = RQScheduler([plain], connection=conn)
    scheduler.acquire_locks()
    for _ in range(100):
        scheduler.enqueue_scheduled_jobs()
        worker.work(burst=True)
        if conn.llen("test:log") == 2:
            break
        conn.blpop(["test:never"], timeout=0.1)  # wait for the snooze without sleeping in the test
    scheduler.release_locks()
    assert conn.llen("test:log") == 2 and held.get_status() == JobStatus.FINISHED


@pytest.mark.cluster
def test_the_pause_mirror_is_read_on_the_orgs_slot_on_a_cluster(redis_cluster: Any) -> None:
    """On a real Redis Cluster the start of a job under an org reads the tenant's pause mirror in its one call on
    the org's slot (no CROSSSLOT), while the tier cache still says "not paused"; resume's deletes cross slots."""
    from redis import RedisCluster
    state = RedisCluster.from_url(redis_cluster.seed_url)
    state.flushall(target_nodes=RedisCluster.PRIMARIES)  # type: ignore[no-untyped-call]
    checks = gate(state)
    local = Redis()  # only for Job objects (never written)
    first = Job.create(limit_jobs.mark, args=("x",), connection=local, meta={"fair_tenant": "t1", "fair_org": "acme"})
    checks.limiter.tiers.cache_ttl = 3600
    admitted, lease = checks.acquire("t1", first, checks.checks("t1", first) or [], reserve=False)
    assert admitted.admitted and lease is not None
    checks.limiter.release(lease)
    state.set(KEYS.paused("t1"), 1)  # as pause writes them: the flag, its org recorded, the mirror
    state.sadd(KEYS.paused_orgs("t1"), "acme")
    state.set(KEYS.paused("t1", "acme"), 1)
    assert checks.acquire("t1", first, checks.checks("t1", first) or [], reserve=False)[0].status == Verdict.PAUSED
    TenantPauses(state, KEYS).resume("t1")  # rq's queues on the cluster as they are (none here)
    assert not state.exists(KEYS.paused("t1", "acme")) and not state.exists(KEYS.paused_orgs("t1"))
    assert checks.acquire("t1", first, checks.checks("t1", first) or [], reserve=False)[0].admitted


def test_tenant_why_gives_a_tenant_its_orgs_tier_and_limit(conn: Redis) -> None:
    from fair_router.routing.tenant_why import explain_tenant

    FairQueue("orgfq", connection=conn, settings=SETTINGS).enqueue(
        routed_jobs.echo, "t1", 1, fair_tenant="t1", fair_org="acme")
    facts = explain_tenant("t1", conn, SETTINGS).facts
    assert (facts["tier"], facts["limit"], facts["org"]) == ("pro", 3, "acme"), facts
