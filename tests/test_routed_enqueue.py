"""A routed enqueue in one round trip (fair_router.routing.enqueue): counted with MONITOR on the real server,
the saved job compared with plain rq's, and what a failing or a NOSCRIPT enqueue leaves behind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
import routed_jobs
from conftest import command_calls, monitored, round_trips
from redis import Redis
from rq import Queue
from rq.job import Job
from test_router import FakeClock, make_job

from fair_router import FairQueue, Rule, Settings, TenantBacklogFull, fair_job
from fair_router.config.settings import TiersConfig
from fair_router.core.keys import Keys
from fair_router.fairqueue.marks import FairnessMarks


def saved(conn: Redis, job: Job) -> dict[str, bytes]:
    """The job hash without its times and meta (compared apart, minus our keys)."""
    found = {key.decode(): value for key, value in conn.hgetall(job.key).items()}
    for volatile in ("created_at", "enqueued_at", "meta"):
        found.pop(volatile, None)
    return found


def test_a_routed_enqueue_is_one_round_trip_and_saves_the_job_as_rq_does_in_the_chosen_queue(conn: Redis) -> None:
    echo = make_job(conn)
    for i in range(2):
        echo.delay("acme", i)
    with monitored(conn) as feed:
        routed = echo.delay("acme", 2)  # the third within the hour: rule 1, default_throttled
    assert round_trips(feed) == 1, feed
    assert [name for _, name in feed if name.startswith("EVAL")] == ["EVALSHA"]
    assert routed.origin == "default_throttled" and routed.meta["fair_rule"]["queue"] == "default_throttled"
    plain = Queue("default_throttled", connection=conn).enqueue(routed_jobs.echo, "acme", 2)
    assert saved(conn, routed) == saved(conn, plain)
    fetched = Job.fetch(routed.id, connection=conn)
    assert fetched.origin == "default_throttled" and fetched.meta == routed.meta
    assert Queue("default_throttled", connection=conn).get_job_ids() == [routed.id, plain.id]
    assert b"rq:queue:default_throttled" in conn.smembers("rq:queues")
    front = echo.enqueue("acme", 3, at_front=True)
    assert Queue("default_throttled", connection=conn).get_job_ids()[0] == front.id
    assert Queue("default", connection=conn).count == 2


def commands_run(conn: Redis, enqueue: Callable[[], object]) -> dict[str, int]:
    """The commands the server ran during ``enqueue()`` (INFO commandstats, a script's own included): name ->
    calls, INFO itself left out."""
    def calls() -> dict[str, int]:
        stats = cast(dict[str, Any], conn.info("commandstats"))
        return {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in stats.items()}

    before = calls()
    enqueue()
    after = calls()
    return {name: after[name] - before.get(name, 0) for name in after
            if after[name] != before.get(name, 0) and name != "info"}


def test_a_routed_enqueue_runs_rqs_commands_plus_only_the_routing_ones(conn: Redis) -> None:
    """Against plain rq's enqueue of the same job: one MULTI instead of two, rq's own job save, push and
    registration run once each, and route.lua adds only its record (ZADD, ZCARD, and a ZCOUNT where the
    window is big enough to match a rule), the routed and waiting counts, the window's expiry, and, for a job
    a rule moved, one HSET of its origin and meta. No TIME: the router's clock is injected."""
    echo = make_job(conn)
    queue = Queue("default", connection=conn)
    echo.delay("warm", 0)  # scripts loaded, rq's server version read
    queue.enqueue(routed_jobs.echo, "warm", 0)
    plain = commands_run(conn, lambda: queue.enqueue(routed_jobs.echo, "acme", 0))
    assert plain == {"multi": 2, "exec": 2, "hset": 2, "rpush": 1, "sadd": 1}
    routing = {"evalsha": 1, "zadd": 1, "zcard": 1, "hsetnx": 1, "hincrby": 2, "pexpire": 1}
    jobs: list[Job] = []
    base = commands_run(conn, lambda: jobs.append(echo.delay("acme", 0)))  # the first of the hour: base queue
    assert base == {**plain, "multi": 1, "exec": 1, **routing}
    echo.delay("acme", 1)
    moved = commands_run(conn, lambda: jobs.append(echo.delay("acme", 2)))  # the third: rule 1 (3 > 2)
    assert moved == {**plain, "multi": 1, "exec": 1, **routing, "zcount": 1, "hset": 3}
    first, third = (Job.fetch(job.id, connection=conn) for job in jobs)
    assert first.origin == "default" and first.meta["fair_rule"] is None and first.meta["fair_tenant"] == "acme"
    assert third.origin == "default_throttled" and third.meta["fair_rule"]["queue"] == "default_throttled"
    assert first.id in queue.get_job_ids()
    assert Queue("default_throttled", connection=conn).get_job_ids() == [third.id]


def test_only_the_chosen_queue_is_registered(conn: Redis) -> None:
    echo = make_job(conn)
    conn.zadd(echo.fair_job.router.keys.window(echo.job_key, "acme"), {f"old{i}": 1_700_000_000_000 for i in range(9)})
    assert echo.delay("acme", 1).origin == "default_superslow"
    assert conn.smembers("rq:queues") == {b"rq:queue:default_superslow"}


def test_an_enqueue_that_fails_before_its_transaction_leaves_no_record(conn: Redis) -> None:
    """rq's save fails client-side (a meta the serializer cannot pickle): the MULTI never goes out, so the
    enqueue is not counted in the tenant's window (two round trips recorded it before rq's save)."""
    echo = make_job(conn)
    with pytest.raises(Exception):  # noqa: B017 - pickle's own error type for a lambda varies
        echo.enqueue("acme", 1, meta={"bad": lambda: None})
    assert conn.keys("fair_router:*") == [] and conn.keys("rq:*") == []


def test_after_a_flushed_script_cache_the_enqueue_loads_the_script_and_counts_once(conn: Redis) -> None:
    echo = make_job(conn, clock=FakeClock())
    echo.delay("acme", 0)
    conn.script_flush()
    before = command_calls(conn, "evalsha")
    job = echo.delay("acme", 1)
    assert command_calls(conn, "evalsha") - before == 2  # NOSCRIPT, then the run after SCRIPT LOAD
    assert Queue("default", connection=conn).get_job_ids()[-1] == job.id
    assert Queue("default", connection=conn).count == 2
    window = echo.fair_job.router.keys.window(echo.job_key, "acme")
    assert conn.zcard(window) == 2 and conn.zscore(window, Keys.member(job.id)) is not None


def test_a_router_for_a_cluster_routes_first_in_two_round_trips(conn: Redis) -> None:
    echo = make_job(conn)
    echo.fair_job.router.one_round_trip = False
    echo.delay("acme", 0)  # the first route of a process may load the route function (one more round trip, once)
    echo.delay("warm-up", 0)
    with monitored(conn) as feed:
        job = echo.delay("acme", 1)
    assert round_trips(feed) == 2, feed
    assert Queue("default", connection=conn).get_job_ids()[-1] == job.id


# -- rules' queues are fair queues by default (throttled_queues: fair) ----------------------------------------


def fair_throttled(conn: Redis, **settings: Any) -> Any:
    return fair_job("default", rules=[Rule(queue="default_slow", threshold=2, per="1h")],
                    tenant=lambda account, item=0: account, connection=conn,
                    settings=Settings(**settings))(routed_jobs.echo)


def test_a_job_no_rule_moves_keeps_one_round_trip_and_a_throttled_one_goes_to_the_fair_queue(conn: Redis) -> None:
    echo = fair_throttled(conn)
    for i in range(3):  # scripts loaded, the fair queue built and marked: what every later call finds done
        echo.delay("warm", i)
    echo.delay("acme", 0)  # acme's tier profile read (its weight and cap in the fair queue), once
    with monitored(conn) as feed:
        second = echo.delay("acme", 1)
    assert round_trips(feed) == 1 and second.origin == "default"
    echo.delay("acme", 2)  # the third within the hour: the rule's queue, its fair push a second round trip
    with monitored(conn) as feed:
        throttled = echo.delay("acme", 3)  # expected there now
    assert round_trips(feed) == 1, feed  # rq's save, route.lua, then the fair queue's push, in one MULTI
    assert [name for _, name in feed if name in ("EVALSHA", "FCALL")] == ["EVALSHA", "FCALL"], feed  # the push: FCALL
    assert not conn.zcard(FairQueue("default_slow", connection=conn).fair_keys.inflight)
    assert throttled.origin == "default_slow" and throttled.meta["fair_rule"]["queue"] == "default_slow"
    slow = FairQueue("default_slow", connection=conn)
    assert slow.get_job_ids()[-1] == throttled.id and Job.fetch(throttled.id, connection=conn).origin == "default_slow"
    assert FairnessMarks(conn, "fair_router").read(["default_slow", "default"]) == {"default_slow": "fair_router"}
    assert Queue("default", connection=conn).count == 4 and slow.count == 3
    waiting = conn.hgetall(Keys("fair_router").waiting(echo.job_key)[0])
    assert waiting == {b"default|acme": b"2", b"default|warm": b"2"}  # the fair queue counts its own


def test_a_refused_fair_push_leaves_neither_the_job_nor_its_window_entry(conn: Redis) -> None:
    echo = fair_throttled(conn, tiers=TiersConfig(max_backlog={"free": 1}))
    for i in range(3):
        echo.delay("acme", i)  # the third goes to default_slow: the tenant's one job there
    window = Keys("fair_router").window(echo.job_key, "acme")
    with pytest.raises(TenantBacklogFull):
        echo.enqueue("acme", 3, job_id="refused")
    assert not conn.exists(Job.key_for("refused"))
    assert conn.zscore(window, Keys.member("refused")) is None  # its window entry taken back
    assert not conn.zcard(FairQueue("default_slow", connection=conn).fair_keys.inflight)
    assert FairQueue("default_slow", connection=conn).count == 1


def test_a_tenant_at_its_cap_in_the_rules_queue_still_enqueues_a_job_no_rule_moves(conn: Redis) -> None:
    """The fair push queued for the rule's queue meets the cap but the job is not going there: it is ignored."""
    echo = fair_throttled(conn, tiers=TiersConfig(max_backlog={"free": 1}))
    slow = FairQueue("default_slow", connection=conn)
    slow.enqueue(routed_jobs.echo, "beta", 0, fair_tenant="beta")  # beta's one job there: at its cap
    job = echo.delay("beta", 1)  # the first within the hour: the base queue
    assert job.origin == "default" and Queue("default", connection=conn).get_job_ids() == [job.id]
    assert slow.count == 1 and not conn.zcard(slow.fair_keys.inflight)


def test_a_refused_fair_push_in_the_second_round_trip_leaves_nothing(conn: Redis) -> None:
    """The tenant's last job went to the base queue, so its fair push follows route.lua's MULTI; refused there."""
    echo = fair_throttled(conn, tiers=TiersConfig(max_backlog={"free": 1}))
    slow = FairQueue("default_slow", connection=conn)
    slow.enqueue(routed_jobs.echo, "acme", 0, fair_tenant="acme")  # acme's one job there: at its cap
    echo.delay("acme", 0)
    echo.delay("acme", 1)
    with monitored(conn) as feed, pytest.raises(TenantBacklogFull):
        echo.enqueue("acme", 2, job_id="refused")  # the third within the hour: the rule's queue
    assert round_trips(feed) >= 2, feed
    assert not conn.exists(Job.key_for("refused")) and slow.count == 1 and not conn.zcard(slow.fair_keys.inflight)
    assert conn.zscore(Keys("fair_router").window(echo.job_key, "acme"), Keys.member("refused")) is None
