"""FairRouter and @fair_job against a real redis-server and real rq workers."""

from __future__ import annotations

import multiprocessing
from datetime import datetime, timedelta, timezone
from uuid import uuid4

import pytest
import routed_jobs
from conftest import command_calls
from redis import Redis
from redis.crc import key_slot
from rq import Queue, Retry, SimpleWorker
from rq.job import JobStatus
from rq.registry import ScheduledJobRegistry
from rq.scheduler import RQScheduler

from fair_router import FairRouter, Rule, fair_job
from fair_router.router import Route


class FakeClock:
    """An injectable clock (epoch seconds) the test moves by hand."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


DAY_HOUR = [Rule(queue="semislow", threshold=1, per="1d"), Rule(queue="supaslow", threshold=1, per="1h")]


def test_sidekiq_fair_tenant_timeline(conn: Redis) -> None:
    """The gem's example: 1/day then 1/hour; the tenant moves supaslow -> semislow -> default."""
    clock = FakeClock()
    router = FairRouter(conn, clock=clock)
    route = lambda tenant, job_id: router.route("app.Job", tenant, job_id, "default", DAY_HOUR)  # noqa: E731
    assert route("greedy", "j1") == "default"       # 1 today, 1 this hour: nothing exceeded
    assert route("greedy", "j2") == "supaslow"      # 2 today and 2 this hour: last match wins
    assert route("other", "o1") == "default"        # other tenants untouched
    clock.advance(2 * 3600)
    assert route("greedy", "j3") == "semislow"      # 3 today, 1 this hour
    assert route("other", "o2") == "semislow"       # 2 today for "other" too, 1 this hour
    clock.advance(2 * 86400)
    assert route("greedy", "j4") == "default"       # yesterday's enqueues left both windows
    assert route("small", "s1") == "default"


def test_last_matching_rule_wins_in_listed_order(conn: Redis) -> None:
    router = FairRouter(conn, clock=FakeClock())
    loose_then_strict = [Rule(queue="slow", threshold=2, per="1h"), Rule(queue="slower", threshold=4, per="1h")]
    picks = [router.route("k", "t", f"j{i}", "base", loose_then_strict) for i in range(6)]
    assert picks == ["base", "base", "slow", "slow", "slower", "slower"]
    # The same rules listed the other way round: the later (looser) one wins once both match.
    router2 = FairRouter(conn, prefix="other", clock=FakeClock())
    reversed_rules = list(reversed(loose_then_strict))
    picks = [router2.route("k", "t", f"j{i}", "base", reversed_rules) for i in range(6)]
    assert picks == ["base", "base", "slow", "slow", "slow", "slow"]


def test_window_boundary_is_exclusive(conn: Redis) -> None:
    clock = FakeClock()
    router = FairRouter(conn, clock=clock)
    rules = [Rule(queue="slow", threshold=1, per="10s")]
    assert router.route("k", "t", "a", "base", rules) == "base"
    clock.advance(9.999)
    assert router.route("k", "t", "b", "base", rules) == "slow"
    clock.advance(0.001)  # "a" is now exactly 10 s old: out of the window
    assert router.route("k", "t", "c", "base", rules) == "slow"  # b and c
    clock.advance(10)
    assert router.route("k", "t", "d", "base", rules) == "base"


def test_same_job_id_counts_once(conn: Redis) -> None:
    router = FairRouter(conn, clock=FakeClock())
    rules = [Rule(queue="slow", threshold=1, per="1h")]
    assert [router.route("k", "t", "same", "base", rules) for _ in range(5)] == ["base"] * 5
    assert conn.zcard(router.keys.window("k", "t")) == 1
    assert router.route("k", "t", "new", "base", rules) == "slow"


def test_server_time_is_used_without_a_clock(conn: Redis) -> None:
    router = FairRouter(conn)
    rules = [Rule(queue="slow", threshold=1, per="1h")]
    router.route("k", "t", "a", "base", rules)
    (_, score), = conn.zrange(router.keys.window("k", "t"), 0, -1, withscores=True)
    seconds, micros = conn.time()
    assert abs(score - (seconds * 1000 + micros // 1000)) < 5_000


def test_bounded_memory_after_10k_enqueues(conn: Redis) -> None:
    router = FairRouter(conn)
    rules = [Rule(queue="slow", threshold=100, per="1d"), Rule(queue="slower", threshold=10, per="1m")]
    job = Route("k", "base", tuple(rules))
    for start in range(0, 10_000, 1_000):
        router.decide(job, [("greedy", str(uuid4())) for i in range(start, start + 1_000)])
    key = router.keys.window("k", "greedy")
    assert conn.zcard(key) == 101
    assert 0 < conn.pttl(key) <= 86_400_000
    assert conn.memory_usage(key) <= 4096
    # Still exact: 101 kept entries decide every rule.
    assert router.route("k", "greedy", "one-more", "base", rules) == "slower"


def test_key_expires_after_longest_window(conn: Redis) -> None:
    router = FairRouter(conn)
    router.route("k", "t", "a", "base", [Rule(queue="s", threshold=5, per="250ms")])
    key = router.keys.window("k", "t")
    assert 0 < conn.pttl(key) <= 250


HOSTILE = ["a:b", "a}b", "{a}", "}{", "a b", "ünïcödé-☃", "x" * 10_240, "x" * 10_239 + "y", "%41", "A", "#abc", ""]


def test_hostile_tenant_ids_get_safe_distinct_keys(conn: Redis) -> None:
    router = FairRouter(conn, clock=FakeClock())
    tenants = [t for t in HOSTILE if t]
    keys = [router.keys.window("weird{job}:key", t) for t in tenants]
    assert len(set(keys)) == len(keys)
    tag = keys[0][keys[0].index("{") : keys[0].index("}") + 1]
    for key in keys:
        assert len(key) < 250
        assert key.count("{") == 1 and key.count("}") == 1 and tag in key
        assert key_slot(key.encode()) == key_slot(keys[0].encode())
    rules = [Rule(queue="slow", threshold=1, per="1h")]
    for tenant in tenants:  # each tenant has its own window: the first enqueue of each is unthrottled
        assert router.route("weird{job}:key", tenant, "j1", "base", rules) == "base"
    for tenant in tenants:
        assert router.route("weird{job}:key", tenant, "j2", "base", rules) == "slow"


def _race(url: str, worker: int, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    router = FairRouter(Redis.from_url(url))
    rules = [Rule(queue="slow", threshold=50, per="1h")]
    results.put([router.route("k", "hot", f"w{worker}-{i}", "base", rules) for i in range(100)])


def test_eight_processes_racing_on_one_tenant_get_exact_counts(conn: Redis, redis_server) -> None:  # type: ignore[no-untyped-def]
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(redis_server.url, n, results)) for n in range(8)]
    for proc in procs:
        proc.start()
    picks = [pick for _ in procs for pick in results.get(timeout=60)]
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    assert len(picks) == 800
    assert picks.count("base") == 50 and picks.count("slow") == 750


# -- @fair_job --------------------------------------------------------------------------------


def make_job(conn: Redis, clock: FakeClock | None = None, **options: object):  # type: ignore[no-untyped-def]
    router = FairRouter(conn, clock=clock or FakeClock())
    return fair_job(
        "default",
        rules=[Rule(queue="default_throttled", threshold=2, per="1h"),
               Rule(queue="default_superslow", threshold=4, per="1h")],
        tenant=lambda account, item=0: account,
        router=router,
        **options,
    )(routed_jobs.echo)


def test_delay_routes_and_records_meta(conn: Redis) -> None:
    echo = make_job(conn)
    jobs = [echo.delay("acme", i) for i in range(6)]
    assert [j.origin for j in jobs] == ["default"] * 2 + ["default_throttled"] * 2 + ["default_superslow"] * 2
    assert jobs[0].meta == {"fair_tenant": "acme", "fair_rule": None}
    assert jobs[3].meta["fair_rule"] == {"queue": "default_throttled", "threshold": 2, "per": 3600.0}
    assert echo.delay("small", 1).origin == "default"
    assert Queue("default_superslow", connection=conn).job_ids == [jobs[4].id, jobs[5].id]
    assert echo("direct", 7) == 7  # still an ordinary function
    assert echo.job_key == "routed_jobs.echo"


def test_explicit_tenant_wins_and_explicit_queue_is_recorded_not_rerouted(conn: Redis) -> None:
    echo = make_job(conn)
    for i in range(2):
        echo.enqueue("acme", i, fair_tenant="big")
    assert echo.enqueue("acme", 9).origin == "default"  # acme's own window is still empty
    job = echo.enqueue("acme", 3, fair_tenant="big", queue="other")
    assert job.origin == "other" and job.meta["fair_rule"] is None and job.meta["fair_tenant"] == "big"
    assert conn.zcard(echo.router.keys.window(echo.job_key, "big")) == 3  # the explicit one was recorded
    assert echo.enqueue("x", 4, fair_tenant="big").origin == "default_throttled"
    assert echo.enqueue("x", 5, fair_tenant="big").origin == "default_superslow"  # 5th only if it counted


def test_rq_options_pass_through(conn: Redis) -> None:
    echo = make_job(conn, job_timeout=77, result_ttl=12)
    job = echo.delay("acme", 1)
    assert job.timeout == 77 and job.result_ttl == 12
    job = echo.enqueue("acme", 2, job_timeout=5, job_id="custom-id", meta={"mine": 1})
    assert job.id == "custom-id" and job.timeout == 5 and job.meta["mine"] == 1
    window = echo.router.keys.window(echo.job_key, "acme")
    assert conn.zscore(window, echo.router.keys.member("custom-id")) is not None


def test_no_tenant_goes_to_base_queue_with_a_rate_limited_warning(conn: Redis,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    router = FairRouter(conn, clock=FakeClock())

    def broken(*args: object) -> str:
        raise KeyError("no account")

    echo = fair_job("default", rules=[Rule(queue="slow", threshold=1, per="1h")], tenant=broken,
                    router=router)(routed_jobs.echo)
    with caplog.at_level("WARNING", logger="fair_router"):
        jobs = [echo.delay("acme", i) for i in range(5)]
    assert {j.origin for j in jobs} == {"default"}
    assert jobs[0].meta["fair_tenant"] is None
    assert len([r for r in caplog.records if "tenant callable raised" in r.message]) == 1
    assert conn.keys("fair_router:*") == []


def test_enqueue_many_routes_the_batch_in_one_call(conn: Redis) -> None:
    echo = make_job(conn)
    calls_before = command_calls(conn, "evalsha", "eval")
    items = [(("acme", i), {}) for i in range(6)] + [(("small", 0), {}), (("x", 1), {"fair_tenant": "acme"})]
    jobs = echo.enqueue_many(items)
    assert command_calls(conn, "evalsha", "eval") - calls_before == 1
    assert [j.args for j in jobs] == [("acme", i) for i in range(6)] + [("small", 0), ("x", 1)]
    assert [j.origin for j in jobs] == (["default"] * 2 + ["default_throttled"] * 2 + ["default_superslow"] * 2
                                        + ["default", "default_superslow"])
    assert Queue("default_superslow", connection=conn).count == 3


def test_scheduled_jobs_are_counted_when_scheduled_and_not_again_when_moved(conn: Redis) -> None:
    echo = make_job(conn)
    for i in range(2):
        echo.delay("acme", i)
    past = datetime.now(timezone.utc) - timedelta(seconds=1)
    job = echo.enqueue_at(past, "acme", 2)
    later = echo.enqueue_in(timedelta(hours=1), "acme", 3)
    assert job.origin == "default_throttled" and later.origin == "default_throttled"
    assert job.get_status() == JobStatus.SCHEDULED
    assert job.id in ScheduledJobRegistry(queue=Queue("default_throttled", connection=conn))
    window = echo.router.keys.window(echo.job_key, "acme")
    assert conn.zcard(window) == 4
    scheduler = RQScheduler([Queue("default_throttled", connection=conn)], connection=conn)
    scheduler.acquire_locks()
    scheduler.enqueue_scheduled_jobs()
    scheduler.release_locks()
    assert Queue("default_throttled", connection=conn).job_ids == [job.id]
    assert conn.zcard(window) == 4


def test_retry_returns_to_origin_and_is_not_counted_again(conn: Redis) -> None:
    router = FairRouter(conn, clock=FakeClock())
    flaky = fair_job("default", rules=[Rule(queue="slow", threshold=1, per="1h")],
                     tenant=lambda account, item=0: account, router=router)(routed_jobs.fail_twice)
    flaky.delay("acme", 1)
    job = flaky.enqueue("acme", 2, retry=Retry(max=2))
    assert job.origin == "slow"
    queues = [Queue(name, connection=conn) for name in ("default", "slow")]
    SimpleWorker(queues, connection=conn).work(burst=True)
    job.refresh()
    assert job.get_status() == JobStatus.FINISHED
    assert conn.get(f"test:runs:{job.id}") == b"3"  # failed twice, retried twice, then ran
    assert job.origin == "slow"
    assert conn.zcard(router.keys.window(flaky.job_key, "acme")) == 2
    assert conn.zrange(router.keys.window(flaky.job_key, "acme"), 0, -1) != []


def test_rules_and_queue_come_from_settings_by_dotted_path(conn: Redis, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from fair_router import load_settings

    config = tmp_path / "fair_router.yaml"
    config.write_text(
        "prefix: fromfile\njobs:\n  routed_jobs.echo:\n    queue: base\n"
        "    rules: [{queue: slowq, threshold: 1, per: 1h}]\n"
    )
    settings = load_settings(config)
    echo = fair_job(tenant=lambda account, item=0: account, connection=conn, settings=settings)(routed_jobs.echo)
    assert [echo.delay("t", i).origin for i in range(2)] == ["base", "slowq"]
    assert conn.keys("fromfile:*") != []
