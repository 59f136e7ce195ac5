"""Organisations' limits (``orgs: {<org>: {concurrency, rate, tier}}``, ``fair-router org set|pause|resume``),
checked at every start of their tenants' jobs in the same start call as the tenant's own, with real workers on the
real redis-server: overlaps counted from the jobs' own Redis TIME readings, never a wall time."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import limit_jobs
import pytest
from conftest import Fleet, wait_for, write_limit_settings
from redis import Redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry

from fair_router import FairQueue, FairRouter, Settings
from fair_router.config.settings import ConcurrencyConfig, SettingsError
from fair_router.controls.gate import TenantGate, Verdict
from fair_router.controls.orgs import OrgBook
from fair_router.controls.ratelimit import RateLimiter
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys, encode
from fair_router.workers.limiter import ConcurrencyLimiter

PREFIX = "orglimits_test"
KEYS = Keys(PREFIX)
QUEUE = "orgq"
FAST = {"enabled": True, "lease_ttl": "5s", "snooze": "200ms", "jitter": "300ms"}

pytestmark = pytest.mark.usefixtures("isolated_settings")


@pytest.fixture
def fleet(fleet_of: Callable[..., Fleet]) -> Fleet:
    return fleet_of(QUEUE)


def spans(conn: Redis, log_key: str) -> list[tuple[float, float]]:
    return [(start, end) for start, end, *_ in (json.loads(raw) for raw in conn.lrange(log_key, 0, -1))]


def max_concurrency(runs: list[tuple[float, float]]) -> int:
    """Most runs open at one instant (one ending exactly when another starts does not overlap)."""
    events = sorted([(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs])
    peak = now = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def enqueue(conn: Redis, fair: bool, tenant: str, org: str | None, log_key: str, seconds: float) -> Job:
    meta: dict[str, Any] = {"fair_tenant": tenant} | ({"fair_org": org} if org else {})
    if fair:
        queue = FairQueue(QUEUE, connection=conn, settings=Settings(prefix=PREFIX))
        return queue.enqueue(limit_jobs.record, log_key, seconds, fair_tenant=tenant, fair_org=org, result_ttl=600)
    return Queue(QUEUE, connection=conn).enqueue(limit_jobs.record, log_key, seconds, meta=meta, result_ttl=600)


def gate(conn: Redis, settings: Settings, clock: Callable[[], float] | None = None) -> TenantGate[ConcurrencyLimiter]:
    """The workers' start gate on our prefix, as ``build_gate`` makes it."""
    limiter = ConcurrencyLimiter(conn, KEYS, TierBook(conn, KEYS, settings.tiers), settings.concurrency, clock=clock)
    book = OrgBook(conn, KEYS, cache_ttl=0)
    limiter.org_profile = lambda org: book.profile(org, settings.orgs, settings.tiers)
    return TenantGate(limiter, RateLimiter(KEYS), slots=True)


def job(conn: Redis, tenant: str, org: str | None) -> Job:
    meta: dict[str, Any] = {"fair_tenant": tenant} | ({"fair_org": org} if org else {})
    return Job.create(limit_jobs.mark, args=("x",), connection=conn, meta=meta)


# -- keys and settings -------------------------------------------------------------------------------


def test_a_tenant_under_an_org_has_its_lease_keys_on_the_orgs_tag_and_an_org_less_one_keeps_its_own() -> None:
    assert KEYS.leases("t1") == f"{PREFIX}:{{lease:t1}}"  # unchanged: no migration for tenants without an org
    assert KEYS.leases("t1", "acme") == f"{PREFIX}:{{lease:!acme}}:t:t1"
    tag = f"{PREFIX}:{{lease:!acme}}"
    for key in (KEYS.parked_in("t1", "acme"), KEYS.rate("t1", org="acme"), KEYS.rate_paid("t1", "j", "acme"),
                KEYS.paced("t1", "q", "acme"), KEYS.org_leases("acme"), KEYS.org_parked_in("acme"),
                KEYS.org_paused("acme"), KEYS.org_rate("acme")):
        assert key.startswith(tag + ":"), key
    assert not encode("!x").startswith("!")  # an encoded tenant never begins as an org's tag does


@pytest.mark.parametrize(("orgs", "reason"), [
    ({"acme": {"concurrency": 0}}, "greater than or equal to 1"),
    ({"acme": {"rate": "lots"}}, "rate"),
    ({"acme": {"tier": "gold"}}, r"orgs\['acme'\]\.tier is 'gold', which is no tier"),
    ({"acme": {"burst": 3}}, "burst is set without a rate"),
])
def test_bad_org_limits_are_refused_with_the_key_and_value(orgs: dict[str, Any], reason: str) -> None:
    with pytest.raises((SettingsError, ValueError), match=reason):
        Settings(prefix=PREFIX, orgs=orgs)


def test_an_orgs_limits_come_from_its_override_else_settings_else_its_tier(conn: Redis) -> None:
    settings = Settings(prefix=PREFIX, orgs={"acme": {"concurrency": 4, "tier": "pro"}, "solo": {"tier": "pro"}},
                        tiers={"rate": {"pro": "10/s"}}, concurrency=ConcurrencyConfig(**FAST))
    router = FairRouter(conn, prefix=PREFIX).tenants
    acme, solo = router.org("acme", settings.orgs, settings.tiers), router.org("solo", settings.orgs, settings.tiers)
    assert (acme.limit, acme.limit_source, str(acme.rate), acme.rate_source) == (4, "settings", "10/s", "tier pro")
    assert (solo.limit, solo.limit_source) == (3, "tier pro")  # tiers.concurrency.pro
    router.set_org("acme", concurrency=2, rate="100/m")
    acme = router.org("acme", settings.orgs, settings.tiers)
    assert (acme.limit, acme.limit_source, str(acme.rate), acme.rate_source) == (2, "override", "100/m", "override")
    assert router.org("none").limit is None


# -- the start call: both limits, one slot -------------------------------------------------------------


def test_an_org_at_its_limit_refuses_its_tenants_starts_and_a_release_frees_it(conn: Redis) -> None:
    settings = Settings(prefix=PREFIX, orgs={"acme": {"concurrency": 2}}, concurrency=ConcurrencyConfig(**FAST))
    checks = gate(conn, settings)
    first, second, third = job(conn, "t1", "acme"), job(conn, "t2", "acme"), job(conn, "t3", "acme")
    a1, lease1 = checks.acquire("t1", first, [], reserve=False)
    a2, _ = checks.acquire("t2", second, [], reserve=False)
    a3, lease3 = checks.acquire("t3", third, [], reserve=False, fair_queue="rq:queue:orgq")
    assert (a1.status, a2.status, a3.status, lease3) == (Verdict.GRANTED, Verdict.GRANTED, Verdict.ORG_LIMIT, None)
    assert checks.acquire("solo", job(conn, "solo", None), [], reserve=False)[0].status == Verdict.GRANTED
    assert conn.zcard(KEYS.org_leases("acme")) == 2 and conn.zcard(KEYS.leases("t1", "acme")) == 1
    assert checks.acquire("t1", first, [], reserve=False)[0].status == Verdict.HELD  # a refresh holds both
    assert lease1 is not None and lease1.org == "acme"
    woken: list[list[tuple[str, str]]] = []
    checks.limiter.wake_org = lambda parks, pipe, org: woken.append(parks)
    checks.limiter.release(lease1, wake=lambda names, pipe: None)
    assert woken == [[("t3", "rq:queue:orgq")]]  # the park the org's limit made, taken by its release
    assert conn.zcard(KEYS.org_leases("acme")) == 1
    assert checks.acquire("t3", third, [], reserve=False)[0].status == Verdict.GRANTED


def test_a_dead_workers_org_slot_comes_back_when_its_lease_expires_or_recovery_reclaims_it(conn: Redis) -> None:
    """A job whose worker died keeps its org slot no longer than its lease (5 s here): the next start after that
    drops it and counts it reclaimed; crash recovery's reclaim frees both slots at once."""
    now = [1_000_000.0]
    settings = Settings(prefix=PREFIX, orgs={"acme": {"concurrency": 1}}, concurrency=ConcurrencyConfig(**FAST))
    checks = gate(conn, settings, clock=lambda: now[0])
    dead, waiting = job(conn, "t1", "acme"), job(conn, "t2", "acme")
    assert checks.acquire("t1", dead, [], reserve=False)[0].status == Verdict.GRANTED
    assert checks.acquire("t2", waiting, [], reserve=False)[0].status == Verdict.ORG_LIMIT
    now[0] += 5.001
    admitted, lease = checks.acquire("t2", waiting, [], reserve=False)
    assert (admitted.status, admitted.reclaimed) == (Verdict.GRANTED, 1)  # the dead job's org lease
    assert lease is not None
    assert checks.limiter.reclaim("t2", waiting.id, org="acme")
    assert conn.zcard(KEYS.org_leases("acme")) == conn.zcard(KEYS.leases("t2", "acme")) == 0


def test_a_tenant_that_moves_into_an_org_keeps_its_running_job_and_counts_afresh_there(conn: Redis) -> None:
    """The documented move: a job that took its slot without an org releases it there (nothing lost, no
    migration); the tenant's jobs under the org count under the org's tag; an org-less start sends no org
    control at all."""
    settings = Settings(prefix=PREFIX, orgs={"acme": {"concurrency": 5}}, concurrency=ConcurrencyConfig(**FAST))
    checks = gate(conn, settings)
    before, after = job(conn, "t1", None), job(conn, "t1", "acme")
    call = checks._call(checks.start("t1", before))
    assert b"start_org_slot" not in b"".join(str(arg).encode() for arg in call.args)
    old, old_lease = checks.acquire("t1", before, [], reserve=False)
    new, new_lease = checks.acquire("t1", after, [], reserve=False)  # free tier, limit 1: counted apart
    assert (old.status, new.status) == (Verdict.GRANTED, Verdict.GRANTED)
    assert old_lease is not None and new_lease is not None and (old_lease.org, new_lease.org) == (None, "acme")
    checks.limiter.release(old_lease)
    checks.limiter.release(new_lease)
    assert conn.exists(KEYS.leases("t1")) == conn.zcard(KEYS.leases("t1", "acme")) == 0
    assert conn.zcard(KEYS.org_leases("acme")) == 0


# -- with real workers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fair", [True, False], ids=["fair_queue", "plain_queue"])
def test_an_org_with_concurrency_2_never_runs_more_than_2_across_3_workers(
    conn: Redis, fleet: Fleet, tmp_path: Path, fair: bool
) -> None:
    """Three tenants of org acme (each on pro, limit 3: their own limits never bind) and three workers: at most
    two of acme's jobs run at once; a tenant without an org runs beside them; every job finishes, none fails."""
    fleet.config = write_limit_settings(tmp_path, PREFIX, FAST, fair_queues=[QUEUE] if fair else [],
                                        orgs={"acme": {"concurrency": 2}})
    router = FairRouter(conn, prefix=PREFIX)
    for tenant in ("t1", "t2", "t3"):
        router.set_tier(tenant, "pro")
    fleet.start(3)
    fleet.wait_registered(conn, 3)
    jobs = [enqueue(conn, fair, f"t{1 + i % 3}", "acme", "test:log:acme", 0.4) for i in range(12)]
    solo = [enqueue(conn, fair, "solo", None, "test:log:solo", 0.1) for _ in range(3)]
    wait_for(lambda: conn.llen("test:log:acme") == 12 and conn.llen("test:log:solo") == 3, 90, "every job", fleet)
    assert max_concurrency(spans(conn, "test:log:acme")) == 2  # the org's limit, not the three workers, binds
    assert sorted(json.loads(raw)[2] for raw in conn.lrange("test:log:acme", 0, -1)) == sorted(j.id for j in jobs)
    wait_for(lambda: all(j.get_status() == JobStatus.FINISHED for j in jobs + solo), 30, "finished", fleet)
    assert FailedJobRegistry(QUEUE, connection=conn).count == 0
    wait_for(lambda: conn.zcard(KEYS.org_leases("acme")) == 0, 10, "the org's leases released", fleet)


def test_an_orgs_rate_is_one_more_scope_of_its_tenants_starts(conn: Redis) -> None:
    """One token a second for the org: a second tenant's start in the same second is refused (its next token
    when), a reserved start (plain queue) takes the org's token too; a tenant without an org is not held."""
    settings = Settings(prefix=PREFIX, orgs={"acme": {"rate": "1/s"}}, concurrency=ConcurrencyConfig(**FAST))
    checks = gate(conn, settings)
    first, second = job(conn, "t1", "acme"), job(conn, "t2", "acme")
    scopes = checks.checks("t1", first)
    assert scopes is not None and [scope.key for scope in scopes] == [KEYS.org_rate("acme")]
    assert checks.acquire("t1", first, scopes, reserve=False)[0].status == Verdict.GRANTED
    refused, _ = checks.acquire("t2", second, checks.checks("t2", second) or [], reserve=False)
    assert refused.status == Verdict.RATE and 0 < refused.at_ms - refused.now_ms <= 1000
    reserved, _ = checks.acquire("t2", second, checks.checks("t2", second) or [], reserve=True)
    assert reserved.status == Verdict.RESERVED and conn.exists(KEYS.rate_paid("t2", second.id, "acme"))
    solo = job(conn, "solo", None)
    assert checks.acquire("solo", solo, checks.checks("solo", solo) or [], reserve=False)[0].admitted


def test_an_org_rate_holds_across_its_tenants_and_3_workers(conn: Redis, fleet: Fleet, tmp_path: Path) -> None:
    """Org acme at 4/s over three tenants and three workers (limits off: the rate alone makes the call): its
    starts keep GCRA's bound (at most rate + burst in any second, the i-th at least i / rate after the first);
    every job finishes, parked in the fair queue, never failed."""
    fleet.config = write_limit_settings(tmp_path, PREFIX, {**FAST, "enabled": False}, fair_queues=[QUEUE],
                                        orgs={"acme": {"rate": "4/s"}})
    fleet.start(3)
    fleet.wait_registered(conn, 3)
    jobs = [enqueue(conn, True, f"t{1 + i % 3}", "acme", "test:log:rate", 0.01) for i in range(12)]
    wait_for(lambda: conn.llen("test:log:rate") == 12, 60, "acme's twelve jobs", fleet)
    times = sorted(start for start, _ in spans(conn, "test:log:rate"))
    for i, at in enumerate(times):
        assert at - times[0] >= i / 4 - 0.15, (i, times)
    assert max(sum(1 for other in times if at <= other < at + 1.0) for at in times) <= 5, times
    wait_for(lambda: all(j.get_status() == JobStatus.FINISHED for j in jobs), 30, "finished", fleet)
    assert FailedJobRegistry(QUEUE, connection=conn).count == 0


@pytest.mark.parametrize("fair", [True, False], ids=["fair_queue", "plain_queue"])
def test_a_paused_org_holds_every_tenant_and_resume_lets_them_all_run(
    conn: Redis, fleet: Fleet, tmp_path: Path, fair: bool
) -> None:
    fleet.config = write_limit_settings(tmp_path, PREFIX, FAST, fair_queues=[QUEUE] if fair else [])
    router = FairRouter(conn, prefix=PREFIX)
    fleet.start(2)
    fleet.wait_registered(conn, 2)
    router.tenants.pause_org("acme")
    assert router.tenants.org_paused_since("acme") is not None
    held = [enqueue(conn, fair, f"t{1 + i % 3}", "acme", "test:log:held", 0.01) for i in range(6)]
    others = [enqueue(conn, fair, f"o{i % 2}", "other", "test:log:others", 0.01) for i in range(6)]
    wait_for(lambda: conn.llen("test:log:others") == 6, 30, "the other org's jobs", fleet)
    wait_for(lambda: conn.hget(KEYS.limit_stats(), "free:paused") is not None, 30, "a refused start", fleet)
    assert conn.llen("test:log:held") == 0  # refused while paused: none started
    assert all(j.get_status() in (JobStatus.QUEUED, JobStatus.SCHEDULED) for j in held)
    router.tenants.resume_org("acme")
    wait_for(lambda: conn.llen("test:log:held") == 6, 30, "the paused org's jobs after resume", fleet)
    wait_for(lambda: all(j.get_status() == JobStatus.FINISHED for j in held + others), 30, "finished", fleet)
    assert FailedJobRegistry(QUEUE, connection=conn).count == 0


def test_cli_org_set_show_pause_resume(conn: Redis, redis_server: Any, tmp_path: Path) -> None:
    """``org set --concurrency/--rate`` overrides the settings (shown with their sources), a bad value is refused
    with exit 2, ``org pause`` sets the flag (shown with its time) and ``org resume`` drops it."""
    from click.testing import CliRunner

    from fair_router.cli import main

    config = tmp_path / "c.yaml"
    config.write_text(f"prefix: {PREFIX}\nredis_url: {redis_server.url}\n"
                      "orgs:\n  A: {concurrency: 4, tier: pro}\n")
    run = CliRunner().invoke
    shown = run(main, ["org", "show", "A", "--config", str(config)])
    assert shown.exit_code == 0, shown.output
    assert "concurrency 4 (settings orgs:)" in shown.output and "tier        pro" in shown.output, shown.output
    assert "rate        none" in shown.output and "paused      no" in shown.output, shown.output
    done = run(main, ["org", "set", "A", "--concurrency", "2", "--rate", "100/m", "--config", str(config)])
    assert done.exit_code == 0, done.output
    assert "concurrency 2 (override)" in done.output and "rate        100/m (burst 1) (override)" in done.output
    assert run(main, ["org", "set", "A", "--concurrency", "0", "--config", str(config)]).exit_code == 2
    assert run(main, ["org", "set", "A", "--rate", "fast", "--config", str(config)]).exit_code == 2
    paused = run(main, ["org", "pause", "A", "--config", str(config)])
    assert paused.exit_code == 0 and "paused      since " in paused.output, paused.output
    assert conn.exists(KEYS.org_paused("A"))
    resumed = run(main, ["org", "resume", "A", "--config", str(config)])
    assert "paused      no" in resumed.output and not conn.exists(KEYS.org_paused("A")), resumed.output
    reset = run(main, ["org", "set", "A", "--reset", "--config", str(config)]).output
    assert "concurrency 4 (settings orgs:)" in reset, reset


@pytest.mark.cluster
def test_a_start_under_an_org_is_one_slot_on_a_cluster(redis_cluster: Any) -> None:
    """On a real Redis Cluster every call of an org's job start (tenant slot, org slot, org pause, rates, a
    paused tenant's cached flag) and its release is on the org's slot: no CROSSSLOT, and the limits hold."""
    from redis import RedisCluster

    state = RedisCluster.from_url(redis_cluster.seed_url)
    state.flushall(target_nodes=RedisCluster.PRIMARIES)  # type: ignore[no-untyped-call]
    settings = Settings(prefix=PREFIX, orgs={"acme": {"concurrency": 1, "rate": "100/s", "burst": 10}},
                        concurrency=ConcurrencyConfig(**FAST), tiers={"rate": {"free": "100/s"}})
    checks = gate(state, settings)
    local = Redis()  # only for Job objects (never written)
    first, second = job(local, "t1", "acme"), job(local, "t2", "acme")
    admitted, lease = checks.acquire("t1", first, checks.checks("t1", first) or [], reserve=False)
    refused, _ = checks.acquire("t2", second, checks.checks("t2", second) or [], reserve=True)
    assert (admitted.status, refused.status) == (Verdict.GRANTED, Verdict.ORG_LIMIT)
    assert lease is not None
    checks.limiter.release(lease)
    assert state.zcard(KEYS.org_leases("acme")) == 0
    state.set(KEYS.paused("t2"), 1)  # the tenant's own flag, on its own slot: its org's call reads the cache's view
    checks.limiter.tiers.forget("t2")
    assert checks.acquire("t2", second, checks.checks("t2", second) or [], reserve=False)[0].status == Verdict.PAUSED


def test_an_org_concurrency_with_limits_off_is_warned_not_silently_ignored() -> None:
    from fair_router.config.settings import SettingsWarning

    with pytest.warns(SettingsWarning, match=r"orgs\['acme'\]\.concurrency is set but concurrency\.enabled is false"):
        Settings(prefix=PREFIX, orgs={"acme": {"concurrency": 2}})


def test_pops_skip_an_org_at_its_limit_while_other_orgs_jobs_flow(conn: Redis, fleet: Fleet, tmp_path: Path) -> None:
    """Org acme (concurrency 1) with 5 tenants of 2 jobs each (on pro: their own limits never bind), org other with
    one tenant, 2 workers on a FairQueue: once the workers reported acme's limit (its first refusal or release),
    a pop that takes acme to its limit parks acme's entry in the fair queue, so pops hand out none of its other
    jobs while its one runs (no herd of refused starts: one refusal at most, the one that reports the limit) and
    other's jobs flow; all finish, none fails, acme never runs two at once."""
    fleet.config = write_limit_settings(tmp_path, PREFIX, FAST, fair_queues=[QUEUE], orgs={"acme": {"concurrency": 1}})
    router = FairRouter(conn, prefix=PREFIX)
    for tenant in ("t0", "t1", "t2", "t3", "t4", "solo"):
        router.set_tier(tenant, "pro")
    fleet.start(2)
    fleet.wait_registered(conn, 2)
    jobs = [enqueue(conn, True, f"t{i % 5}", "acme", "test:log:acme", 0.3) for i in range(10)]
    others = [enqueue(conn, True, "solo", "other", "test:log:other", 0.05) for _ in range(6)]
    wait_for(lambda: conn.llen("test:log:acme") == 10 and conn.llen("test:log:other") == 6, 90, "every job", fleet)
    assert max_concurrency(spans(conn, "test:log:acme")) == 1
    wait_for(lambda: all(j.get_status() == JobStatus.FINISHED for j in jobs + others), 30, "finished", fleet)
    assert FailedJobRegistry(QUEUE, connection=conn).count == 0
    refused = int(conn.hget(KEYS.limit_stats(), "pro:refused") or 0)
    assert refused <= 1, refused  # without the org's claims here: about one per acme job started while one ran
