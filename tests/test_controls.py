"""Tenant controls: rate limits (GCRA), per-tenant overrides, pause/resume and backlog caps, against the real
redis-server; the fleet-wide behaviour with real `rq worker` processes.

Rate bounds are checked on start times read from Redis TIME inside the jobs (one clock for every process),
which is the contract: a start allowed every 1/rate seconds plus ``burst`` at once. Recorded starts lag the
script's decision by a few ms of worker work, so the bounds get a little slack.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import limit_jobs
import pytest
import yaml
from conftest import Fleet, wait_for, write_limit_settings
from pydantic import ValidationError
from redis import Redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, ScheduledJobRegistry

from fair_router import FairQueue, FairRouter, Settings, TenantBacklogFull, fair_job, load_settings
from fair_router.cli import main
from fair_router.config.settings import ConcurrencyConfig, SettingsError, TiersConfig
from fair_router.controls.gate import TenantGate, Verdict
from fair_router.controls.ratelimit import RateLimiter
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.core.rates import Rate, parse_rate
from fair_router.demo.redis_server import RedisServer
from fair_router.workers.limiter import ConcurrencyLimiter
from fair_router.workers.start_gate import turn_away

PREFIX = "controls_test"
KEYS = Keys(PREFIX)
FAST = {"enabled": False, "lease_ttl": "5s", "snooze": "200ms", "jitter": "300ms"}

pytestmark = pytest.mark.usefixtures("isolated_settings")


# -- helpers ---------------------------------------------------------------------------------------


def write_config(tmp_path: Path, **extra: Any) -> Path:
    return write_limit_settings(tmp_path, PREFIX, FAST, **extra)


@pytest.fixture
def fleet(fleet_of: Callable[..., Fleet]) -> Fleet:
    return fleet_of("ctl")


def starts(conn: Redis, log_key: str) -> list[float]:
    """Start times (Redis TIME) of the recorded jobs, sorted."""
    return sorted(json.loads(raw)[0] for raw in conn.lrange(log_key, 0, -1))


JITTER = 0.15
"""Seconds a job may record its start after its token was granted (a work horse forked on a loaded 2-core machine):
the first start's lateness shifts every later bound by as much. Less than one token's interval at 4/s, so one start
too early still fails."""


def assert_within_rate(times: list[float], rate: float, burst: int, slack: float = JITTER, tick: float = 0.0) -> None:
    """GCRA's bound: the i-th start (from 0) comes at least (i - burst + 1) / rate after the first; and no
    one-second window holds more than rate + burst starts, or (1 + tick) * rate + burst when starts are
    released in batches every ``tick`` seconds (rq's scheduler keeps whole seconds: the jobs whose tokens
    fall due within one second start together, and a late tick can bring two batches within one second)."""
    first = times[0]
    for i, at in enumerate(times):
        assert at - first >= (i - burst + 1) / rate - slack, (i, at - first, times)
    for at in times:
        in_window = sum(1 for other in times if at <= other < at + 1.0)
        assert in_window <= (1 + tick) * rate + burst, (at, in_window, times)


def gate(conn: Redis, clock: Callable[[], float] | None = None, tiers: TiersConfig | None = None,
         slots: bool = False, jobs: dict[str, Any] | None = None) -> TenantGate:
    book = TierBook(conn, KEYS, tiers)
    limiter = ConcurrencyLimiter(conn, KEYS, book, ConcurrencyConfig(enabled=slots), clock=clock)
    return TenantGate(limiter, RateLimiter(KEYS, Settings(jobs=jobs or {}).jobs), slots)


def a_job(conn: Redis, tenant: str = "acme", **meta: Any) -> Job:
    return Job.create(limit_jobs.mark, args=("x",), connection=conn, meta={"fair_tenant": tenant, **meta})


def admit(checks: TenantGate, tenant: str, job: Job, reserve: bool, fair_queue: str = "") -> Any:
    """One admission as the worker asks it: (Admission, lease); ``fair_queue``: the fair queue the job came from."""
    return checks.acquire(tenant, job, checks.checks(tenant, job) or [], reserve, fair_queue=fair_queue)


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# -- settings ----------------------------------------------------------------------------------------


def test_rates_parse_and_print_back() -> None:
    assert parse_rate("2/s") == Rate(2, 1) and parse_rate("2/s").interval_ms == 500
    assert parse_rate(" 90 / m ").interval_ms == 667 and str(parse_rate("90/m")) == "90/m"
    assert parse_rate("1.5/h").interval_ms == 2_400_000
    for bad in ("5/d", "0/s", "fast", "-1/s", "2", 2, None):
        with pytest.raises(ValueError, match="rate"):
            parse_rate(bad)


@pytest.mark.parametrize(("text", "where", "reason"), [
    ("tiers: {rate: {free: 5/d}}", "tiers.rate.free", "rate must be 'N/s', 'N/m' or 'N/h'"),
    ("tiers: {rate: {free: 0/s}}", "tiers.rate.free", "more than 0"),
    ("tiers: {burst: {free: 0}}", "tiers.burst.free", "greater than or equal to 1"),
    ("tiers: {max_backlog: {free: 0}}", "tiers.max_backlog.free", "greater than or equal to 1"),
    ("tiers: {rate: {gold: 2/s}}", "tiers", "unknown tier(s) 'gold'"),
    ("tiers: {max_backlog: {gold: 5}}", "tiers", "unknown tier(s) 'gold'"),
    ("jobs: {a.b: {rate: 10/x}}", "jobs['a.b'].rate", "rate must be"),
    ("jobs: {a.b: {rate: 10/s, burst: 0}}", "jobs['a.b'].burst", "greater than or equal to 1"),
    ("jobs: {a.b: {burst: 3}}", "jobs['a.b']", "burst is set without a rate"),
])
def test_bad_controls_fail_at_load_with_key_and_reason(tmp_path: Path, text: str, where: str, reason: str) -> None:
    path = tmp_path / "fair_router.yaml"
    path.write_text(text + "\n")
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    message = str(info.value)
    assert f"{path}: {where}" in message and reason in message, message


def test_good_controls_load_and_the_decorator_validates_its_rate(tmp_path: Path) -> None:
    path = tmp_path / "fair_router.yaml"
    path.write_text("tiers: {rate: {free: 2/s}, burst: {free: 3}, max_backlog: {pro: 100}}\n"
                    "jobs: {a.b: {rate: 10/m, burst: 2}}\n")
    settings = load_settings(path)
    assert settings.tiers.rate["free"] == Rate(2, 1) and settings.tiers.burst["free"] == 3
    assert settings.jobs["a.b"].rate == Rate(10, 60) and settings.tiers.max_backlog == {"pro": 100}
    with pytest.raises(ValidationError, match="rate"):
        fair_job("q", rate="ten per second")(limit_jobs.mark)
    with pytest.raises(ValidationError, match="burst"):
        fair_job("q", rate="1/s", burst=0)(limit_jobs.mark)


# -- the GCRA script (injected clock) ------------------------------------------------------------------


def test_gcra_admits_rate_plus_burst_and_keeps_one_timestamp(conn: Redis) -> None:
    clock = Clock()
    checks = gate(conn, clock, TiersConfig(rate={"free": "4/s"}, burst={"free": 3}))
    job = a_job(conn)
    verdicts = [admit(checks, "acme", job, False)[0] for _ in range(4)]
    assert [v.status for v in verdicts] == [Verdict.GRANTED] * 3 + [Verdict.RATE]
    assert verdicts[3].at_ms == round(clock.now * 1000) + 250  # the next token, a quarter second on
    clock.now += 0.249
    assert admit(checks, "acme", job, False)[0].status == Verdict.RATE
    clock.now += 0.001
    assert admit(checks, "acme", job, False)[0].status == Verdict.GRANTED
    # Another tenant has its own state; memory per (scope, tenant) is one string that expires.
    assert admit(checks, "other", job, False)[0].status == Verdict.GRANTED
    state = KEYS.rate("acme")
    assert conn.type(state) == b"string" and 0 < conn.pttl(state) <= 1000
    assert sorted(conn.keys(f"{PREFIX}:*rate*")) == sorted([state.encode(), KEYS.rate("other").encode()])


def test_a_reserved_start_is_paid_once_and_never_early(conn: Redis) -> None:
    clock = Clock()
    checks = gate(conn, clock, TiersConfig(rate={"free": "2/s"}))
    first, second, third = a_job(conn), a_job(conn), a_job(conn)
    assert admit(checks, "acme", first, True)[0].status == Verdict.GRANTED
    reserved = admit(checks, "acme", second, True)[0]
    assert reserved.status == Verdict.RESERVED and reserved.at_ms == round(clock.now * 1000) + 500
    # The third queues up behind the reservation: its own token is one interval later.
    assert admit(checks, "acme", third, True)[0].at_ms == reserved.at_ms + 500
    clock.now += 0.3  # back early: told the same time again, nothing taken
    again = admit(checks, "acme", second, True)[0]
    assert again.status == Verdict.RATE and again.at_ms == reserved.at_ms
    clock.now += 0.2  # its time: admitted without a new token, and the reservation is gone
    assert admit(checks, "acme", second, True)[0].status == Verdict.GRANTED
    assert not conn.exists(KEYS.rate_paid("acme", second.id))
    assert admit(checks, "acme", a_job(conn), False)[0].status == Verdict.RATE  # third's turn next


def test_job_function_rate_is_per_tenant_and_adds_to_the_tenant_rate(conn: Redis) -> None:
    clock = Clock()
    checks = gate(conn, clock, TiersConfig(rate={"free": "10/s"}), jobs={"app.sync": {"rate": "1/s"}})
    meta_rate = {"fair_rate": {"job_key": "app.sync", "rate": "1/s", "burst": 1}}
    assert admit(checks, "acme", a_job(conn, **meta_rate), False)[0].status == Verdict.GRANTED
    assert admit(checks, "acme", a_job(conn, **meta_rate), False)[0].status == Verdict.RATE
    assert admit(checks, "bob", a_job(conn, **meta_rate), False)[0].status == Verdict.GRANTED
    # acme's other jobs only meet its tenant rate (10/s): 100 ms on they pass, the job's 1/s does not.
    clock.now += 0.1
    assert admit(checks, "acme", a_job(conn), False)[0].status == Verdict.GRANTED
    assert admit(checks, "acme", a_job(conn, **meta_rate), False)[0].status == Verdict.RATE


def test_pause_refuses_every_start_and_the_slot_check_comes_first(conn: Redis) -> None:
    checks = gate(conn, slots=True)
    router = FairRouter(conn, prefix=PREFIX)
    running = a_job(conn)
    _, lease = admit(checks, "acme", running, False)
    assert lease is not None
    router.pause("acme")
    assert router.paused("acme")
    assert admit(checks, "acme", a_job(conn), False)[0].status == Verdict.PAUSED
    assert admit(checks, "acme", running, False)[0].status == Verdict.HELD  # a refresh is not refused
    router.resume("acme")
    assert admit(checks, "acme", a_job(conn), False)[0].status == Verdict.AT_LIMIT  # free: 1 at once


def test_a_start_refused_at_its_limit_parks_the_tenant_until_its_first_lease_expires(conn: Redis) -> None:
    """A dead worker's slot comes back when its lease expires: a start refused 45 s into a 60 s lease parks its
    tenant in the fair queue for the 15 s left, not for a whole lease TTL from the refusal."""
    clock = Clock()
    checks = gate(conn, clock, slots=True)
    held = a_job(conn)
    assert admit(checks, "acme", held, False)[0].status == Verdict.GRANTED  # its worker then dies: no release
    expiry_ms = round(clock.now * 1000) + 60_000
    clock.now += 45
    queue = FairQueue("slots", connection=conn, settings=Settings(prefix=PREFIX), clock=clock)
    job = queue.enqueue(limit_jobs.mark, "x", fair_tenant="acme")
    assert queue.pop_job_id() == job.id
    admission, lease = admit(checks, "acme", job, False, fair_queue=queue.name)
    assert (admission.status, admission.at_ms, lease) == (Verdict.AT_LIMIT, expiry_ms, None)
    assert turn_away(checks, job, queue, "acme", admission) is not None
    assert conn.zscore(queue.fair_keys.parked, "acme") == expiry_ms
    clock.now += 15
    assert queue.pop_job_id() == job.id  # the lease has expired: served again, and now admitted
    assert admit(checks, "acme", job, False)[0].status == Verdict.GRANTED


# -- overrides -----------------------------------------------------------------------------------------


def test_overrides_beat_tier_values_are_validated_and_reset(conn: Redis) -> None:
    router = FairRouter(conn, prefix=PREFIX, tiers=TiersConfig(rate={"free": "1/s"}, max_backlog={"free": 10}))
    assert (router.tenant("acme").limit, router.tenant("acme").rate) == (1, Rate(1, 1))
    profile = router.set_tenant("acme", limit=20, weight=2.5, rate="10/s", burst=4, max_backlog=50)
    assert (profile.limit, profile.weight, profile.rate, profile.burst, profile.max_backlog) == (
        20, 2.5, Rate(10, 1), 4, 50)
    assert router.set_tenant("acme", limit=3).rate == Rate(10, 1)  # other overrides stay
    with pytest.raises(ValidationError, match="rate"):
        router.set_tenant("acme", rate="10 per second")
    with pytest.raises(ValidationError, match="limit"):
        router.set_tenant("acme", limit=0)
    profile = router.set_tenant("acme", weight=3, reset=True)
    assert (profile.limit, profile.weight, profile.rate, profile.max_backlog) == (1, 3, Rate(1, 1), 10)


def test_a_weight_override_changes_the_fair_share(conn: Redis) -> None:
    FairRouter(conn, prefix=PREFIX).set_tenant("heavy", weight=3)
    queue = FairQueue("ctl", connection=conn, settings=Settings(prefix=PREFIX))
    for tenant in ("heavy", "light"):
        queue.enqueue_many([Queue.prepare_data(limit_jobs.mark, ("x",), meta={"fair_tenant": tenant})
                            for _ in range(40)])
    tenants = [Job.fetch(queue.pop_job_id() or "", connection=conn).meta["fair_tenant"] for _ in range(40)]
    assert tenants.count("heavy") == 30, tenants


def test_a_limit_override_reaches_running_workers(conn: Redis, fleet: Fleet, tmp_path: Path) -> None:
    fleet.config = write_config(tmp_path, concurrency={"enabled": True})
    record = fair_job("ctl", rules=[], router=FairRouter(conn, prefix=PREFIX), result_ttl=600)(limit_jobs.record)
    fleet.start(3)
    fleet.wait_registered(conn, 3)
    before = [record.enqueue("test:log:before", 0.3, fair_tenant="acme") for _ in range(3)]
    wait_for(lambda: conn.llen("test:log:before") == 3, 60, "acme's first jobs", fleet)
    spans = [tuple(json.loads(raw)[:2]) for raw in conn.lrange("test:log:before", 0, -1)]
    assert all(a[1] <= b[0] for a, b in zip(sorted(spans), sorted(spans)[1:], strict=False))  # free: 1 at once

    FairRouter(conn, prefix=PREFIX).set_tenant("acme", limit=3)
    time.sleep(5.5)  # the workers' TierBook cache_ttl (5 s)
    after = [record.enqueue("test:log:after", 1.0, fair_tenant="acme") for _ in range(3)]
    wait_for(lambda: conn.llen("test:log:after") == 3, 60, "acme's jobs after the override", fleet)
    spans = sorted(tuple(json.loads(raw)[:2]) for raw in conn.lrange("test:log:after", 0, -1))
    assert spans[-1][0] < spans[0][1], spans  # all three ran at once on the three workers
    wait_for(lambda: all(j.get_status() == JobStatus.FINISHED for j in before + after), 30, "finished", fleet)


# -- rate limits with real workers ---------------------------------------------------------------------


def test_a_tenant_at_4_per_second_on_a_fair_queue_with_3_workers_while_others_flow(
    conn: Redis, fleet: Fleet, tmp_path: Path
) -> None:
    tiers = {"rate": {"free": "4/s"}}
    fleet.config = write_config(tmp_path, fair_queues=["ctl"], tiers=tiers)
    queue = FairQueue("ctl", connection=conn, settings=Settings(prefix=PREFIX, tiers=TiersConfig(**tiers)))
    FairRouter(conn, prefix=PREFIX).set_tier("open", "pro")  # pro has no rate
    fleet.start(3)
    fleet.wait_registered(conn, 3)
    limited = [queue.enqueue(limit_jobs.record, "test:log:limited", 0.01, fair_tenant="slow", result_ttl=600)
               for _ in range(16)]
    free = [queue.enqueue(limit_jobs.record, "test:log:open", 0.05, fair_tenant="open", result_ttl=600)
            for _ in range(30)]
    wait_for(lambda: conn.llen("test:log:limited") == 16 and conn.llen("test:log:open") == 30, 60, "all jobs", fleet)

    slow, fast = starts(conn, "test:log:limited"), starts(conn, "test:log:open")
    assert_within_rate(slow, rate=4, burst=1)
    assert slow[-1] - slow[0] >= 15 / 4 - JITTER
    # The unlimited tenant was not held up: its 30 jobs ran while the limited one trickled.
    assert fast[-1] < slow[-1] and fast[-1] - fast[0] < slow[-1] - slow[0], (fast, slow)
    assert ScheduledJobRegistry("ctl", connection=conn).count == 0  # parked in the queue, never deferred
    wait_for(lambda: all(j.get_status() == JobStatus.FINISHED for j in limited + free), 30, "finished", fleet)
    assert FailedJobRegistry("ctl", connection=conn).count == 0


def test_a_job_rate_on_a_plain_queue_defers_each_job_to_its_own_token(
    conn: Redis, fleet: Fleet, tmp_path: Path
) -> None:
    fleet.config = write_config(tmp_path)
    record = fair_job("ctl", rules=[], router=FairRouter(conn, prefix=PREFIX), rate="4/s", burst=2,
                      result_ttl=600)(limit_jobs.record)
    fleet.start(3)
    fleet.wait_registered(conn, 3)
    jobs = [record.enqueue("test:log:plain", 0.01, fair_tenant="acme") for _ in range(10)]
    other = [record.enqueue("test:log:other", 0.01, fair_tenant="bob") for _ in range(2)]  # per tenant
    wait_for(lambda: conn.llen("test:log:plain") == 10, 60, "acme's ten jobs", fleet)
    times = starts(conn, "test:log:plain")
    assert_within_rate(times, rate=4, burst=2, tick=1.0)
    assert times[-1] - times[0] >= 8 / 4 - JITTER
    wait_for(lambda: all(j.get_status() == JobStatus.FINISHED for j in jobs + other), 30, "finished", fleet)
    assert FailedJobRegistry("ctl", connection=conn).count == 0
    assert not conn.keys(f"{PREFIX}:*paid*")  # every reservation used and dropped


# -- pause -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fair", [True, False], ids=["fair_queue", "plain_queue"])
def test_a_paused_tenant_waits_while_others_run_and_all_run_after_resume(
    conn: Redis, fleet: Fleet, tmp_path: Path, fair: bool
) -> None:
    fleet.config = write_config(tmp_path, fair_queues=["ctl"] if fair else [])
    router = FairRouter(conn, prefix=PREFIX)
    record = fair_job("ctl", rules=[], router=router, fair=fair, result_ttl=600)(limit_jobs.record)
    fleet.start(3)
    fleet.wait_registered(conn, 3)
    router.pause("acme")
    paused_at = time.monotonic()
    held = [record.enqueue("test:log:held", 0.01, fair_tenant="acme") for _ in range(6)]
    system = record.enqueue("test:log:system", 0.01, fair_tenant="acme", system=True)
    others = [record.enqueue("test:log:others", 0.05, fair_tenant=f"t{i % 3}") for i in range(12)]
    wait_for(lambda: conn.llen("test:log:others") == 12 and conn.llen("test:log:system") == 1, 30,
             "the other tenants' jobs and the system job", fleet)
    time.sleep(max(0.0, 5.0 - (time.monotonic() - paused_at)))
    assert conn.llen("test:log:held") == 0  # five seconds paused: none started
    assert all(j.get_status() in (JobStatus.QUEUED, JobStatus.SCHEDULED) for j in held)

    router.resume("acme")
    wait_for(lambda: conn.llen("test:log:held") == 6, 30, "the paused tenant's jobs after resume", fleet)
    wait_for(lambda: all(j.get_status() == JobStatus.FINISHED for j in [*held, system, *others]), 30,
             "finished", fleet)
    assert FailedJobRegistry("ctl", connection=conn).count == 0


# -- backlog caps ------------------------------------------------------------------------------------------


def capped_queue(conn: Redis, cap: int = 3) -> FairQueue:
    tiers = TiersConfig(max_backlog={"free": cap})
    return FairQueue("ctl", connection=conn, settings=Settings(prefix=PREFIX, tiers=tiers))


def datas(tenant: str, n: int) -> list[Any]:
    return [Queue.prepare_data(limit_jobs.mark, ("x",), meta={"fair_tenant": tenant}) for _ in range(n)]


def job_keys(conn: Redis) -> set[bytes]:
    return set(conn.keys("rq:job:*"))


def test_a_backlog_cap_refuses_the_enqueue_cleanly(conn: Redis) -> None:
    queue = capped_queue(conn)
    kept = [queue.enqueue(limit_jobs.mark, "x", fair_tenant="acme") for _ in range(3)]
    saved = job_keys(conn)
    with pytest.raises(TenantBacklogFull) as info:
        queue.enqueue(limit_jobs.mark, "x", fair_tenant="acme")
    assert (info.value.tenant, info.value.queue, info.value.cap) == ("acme", "ctl", 3)
    assert "'acme'" in str(info.value) and "'ctl'" in str(info.value) and "3" in str(info.value)
    assert job_keys(conn) == saved and queue.count == 3 and queue.get_job_ids() == [j.id for j in kept]
    queue.enqueue(limit_jobs.mark, "x", fair_tenant="bob")  # other tenants are not affected
    assert queue.pop_job_id() == kept[0].id  # one taken: room for one more
    queue.enqueue(limit_jobs.mark, "x", fair_tenant="acme")
    assert queue.count == 4


def test_enqueue_many_is_all_or_nothing_under_a_cap(conn: Redis) -> None:
    queue = capped_queue(conn)
    queue.enqueue_many(datas("acme", 2))
    saved, listed = job_keys(conn), queue.get_job_ids()
    with pytest.raises(TenantBacklogFull):
        queue.enqueue_many(datas("bob", 1) + datas("acme", 2))  # bob's would fit; acme's second would not
    assert job_keys(conn) == saved and queue.get_job_ids() == listed and queue.count == 2
    with conn.pipeline() as pipe:  # a pipeline the caller runs: checked before anything is queued on it
        with pytest.raises(TenantBacklogFull):
            queue.enqueue_many(datas("acme", 2), pipeline=pipe)
        assert not pipe.command_stack
    assert len(queue.enqueue_many(datas("acme", 1) + datas("bob", 3))) == 4 and queue.count == 6


def test_a_callers_pipeline_that_loses_the_race_to_the_cap_fails_loudly_on_execute(
    conn: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller's pipeline is checked before anything is queued on it, but the check is a read: when another
    enqueue fills the cap before the caller executes (here: the read is skipped), the push script refuses, and
    the caller's execute raises, naming the tenant, the cap and the job, instead of leaving the job saved but
    silently not queued. The pipeline's other commands ran (a MULTI), as with any error reply in rq's MULTI."""
    from redis.exceptions import ResponseError

    from fair_router.controls.backlog import BacklogCaps

    queue = capped_queue(conn)
    queue.enqueue_many(datas("acme", 2))
    monkeypatch.setattr(BacklogCaps, "precheck", lambda *args: None)
    with conn.pipeline() as pipe:
        late = queue.enqueue(limit_jobs.mark, "x", fair_tenant="acme", pipeline=pipe)
        queue.enqueue(limit_jobs.mark, "x", fair_tenant="acme")  # the race: fills the cap first
        with pytest.raises(ResponseError) as info:
            pipe.execute()
    message = str(info.value)
    assert "FAIRBACKLOG" in message and "tenant acme" in message and "cap of 3" in message and late.id in message
    assert late.id not in queue.get_job_ids() and queue.count == 3
    with conn.pipeline() as pipe:  # in a batch too, and nothing of the batch is queued
        queue.enqueue_many(datas("bob", 1) + datas("acme", 1), pipeline=pipe)
        with pytest.raises(ResponseError, match="FAIRBACKLOG 1 tenant acme"):
            pipe.execute()
    assert queue.count == 3


def test_a_tenant_override_beats_the_tier_cap_and_routed_batches_are_taken_back_whole(conn: Redis) -> None:
    router = FairRouter(conn, prefix=PREFIX, tiers=TiersConfig(max_backlog={"free": 3}))
    router.set_tenant("acme", max_backlog=5)
    mark = fair_job("ctl", rules=[], router=router, fair=True)(limit_jobs.mark)
    mark.enqueue_many([(("x",), {"fair_tenant": "acme"})] * 5)
    saved = job_keys(conn)
    with pytest.raises(TenantBacklogFull) as info:
        mark.enqueue_many([(("x",), {"fair_tenant": "bob"}), (("x",), {"fair_tenant": "acme"})])
    assert info.value.cap == 5
    with pytest.raises(TenantBacklogFull):
        mark.enqueue("x", fair_tenant="acme")
    assert job_keys(conn) == saved
    assert FairQueue("ctl", connection=conn, settings=Settings(prefix=PREFIX)).count == 5


# -- CLI ---------------------------------------------------------------------------------------------------


def test_cli_tenant_set_show_pause_resume(conn: Redis, redis_server: RedisServer, tmp_path: Path) -> None:
    from click.testing import CliRunner

    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"prefix": PREFIX, "redis_url": redis_server.url,
                                      "tiers": {"rate": {"free": "2/s"}}}))
    queue = FairQueue("ctl", connection=conn, settings=load_settings(config))
    queue.enqueue(limit_jobs.mark, "x", fair_tenant="acme")
    run = CliRunner().invoke
    result = run(main, ["tenant", "set", "acme", "--limit", "4", "--rate", "10/m", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert "limit       4 at once (override)" in result.output and "10/m, burst 1 (override)" in result.output
    result = run(main, ["tenant", "set", "acme", "--rate", "10 a minute", "--config", str(config)])
    assert result.exit_code == 2 and "rate must be" in result.output
    assert run(main, ["tenant", "pause", "acme", "--config", str(config)]).exit_code == 0
    shown = run(main, ["tenant", "show", "acme", "--config", str(config)]).output
    assert "tier free (default) (PAUSED since 20" in shown and "waiting     1 in ctl" in shown
    assert "weight      1" in shown
    assert run(main, ["tenant", "resume", "acme", "--config", str(config)]).exit_code == 0
    shown = run(main, ["tenant", "show", "bob", "--config", str(config)]).output
    assert "PAUSED" not in shown and "rate        2/s, burst 1" in shown and "none in any fair queue" in shown


def test_a_routed_batch_that_loses_the_race_to_the_cap_is_taken_back_from_every_queue(
    conn: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before a pipeline the router runs is a read; when another enqueue fills the cap between it
    and the pipeline (here: the read is skipped), the push script refuses and the router takes back every
    job of the call, in the other queue too."""
    from fair_router import Rule
    from fair_router.controls.backlog import BacklogCaps

    router = FairRouter(conn, prefix=PREFIX, tiers=TiersConfig(max_backlog={"free": 2}))
    router.set_tenant("carol", max_backlog=10)
    mark = fair_job("ctl", rules=[Rule(queue="ctl_slow", threshold=3, per="1h")], router=router,
                    fair=True)(limit_jobs.mark)
    mark.enqueue_many([(("x",), {"fair_tenant": "acme"})] * 2)  # acme: 2 waiting in ctl, at its cap
    saved = job_keys(conn)
    monkeypatch.setattr(BacklogCaps, "precheck", lambda *args: None)
    batch = [(("x",), {"fair_tenant": "carol"})] * 4 + [(("x",), {"fair_tenant": "acme"})]
    with pytest.raises(TenantBacklogFull) as info:  # carol: 3 to ctl, her fourth to ctl_slow; acme's refused
        mark.enqueue_many(batch)
    assert (info.value.tenant, info.value.queue) == ("acme", "ctl")
    assert job_keys(conn) == saved
    settings = Settings(prefix=PREFIX)
    assert FairQueue("ctl", connection=conn, settings=settings).count == 2
    assert FairQueue("ctl_slow", connection=conn, settings=settings).count == 0


def test_with_limits_off_only_a_tenant_with_a_rate_or_a_pause_is_checked(conn: Redis) -> None:
    """No controls in use: a job start costs no check at all; a pause is seen within the tier cache's life
    (here a fresh cache), a rate always."""
    plain, rated = gate(conn), gate(conn, tiers=TiersConfig(rate={"pro": "1/s"}))
    FairRouter(conn, prefix=PREFIX).set_tier("big", "pro")
    assert plain.checks("acme", a_job(conn)) is None
    assert rated.checks("acme", a_job(conn)) is None and rated.checks("big", a_job(conn)) == [
        ("controls_test:{lease:big}:rate:tenant", 1000, 0)]
    FairRouter(conn, prefix=PREFIX).pause("acme")
    assert plain.checks("acme", a_job(conn)) is None  # cached for up to 5 s
    assert gate(conn).checks("acme", a_job(conn)) == []  # a fresh lookup sees it: the script decides
