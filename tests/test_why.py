"""``fair_router.explain`` / ``fair-router why``: every reason constructed with real Redis and real rq workers, its
facts checked, and the explanation shown to change nothing in Redis."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import fair_jobs
import iteration_jobs
import pytest
import why_jobs
from click.testing import CliRunner
from conftest import Fleet, wait_for, write_settings
from redis import Redis
from rq import Queue, RateLimit, Retry, SimpleWorker
from rq.command import send_stop_job_command
from rq.job import Job, JobStatus

from fair_router import FairQueue, FairRouter, Reason, Rule, Settings, WeightedSimpleWorker, explain, fair_job
from fair_router.cli import main
from fair_router.config.settings import ConcurrencyConfig
from fair_router.controls.gate import Lease
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.demo.redis_server import RedisServer
from fair_router.iteration.turns import ITEMS, TURNS
from fair_router.observe.recorder import ALL, TICK_SLOTS
from fair_router.observe.why import ITEMS as WHY_ITEMS
from fair_router.observe.why import TURNS as WHY_TURNS
from fair_router.observe.whyplace import throughput
from fair_router.workers.limiter import ConcurrencyLimiter

PREFIX = "why_test"
KEYS = Keys(PREFIX)


def slot_held_elsewhere(conn: Redis, config: Settings, tenant: str = "acme",
                        org: str | None = None) -> tuple[ConcurrencyLimiter, Lease]:
    """``tenant``'s one slot (the default tier's limit is 1; under ``org``'s tag with ``org``) taken by a job running
    elsewhere, so a worker's next start of its jobs is refused; release it with the limiter returned."""
    slots = ConcurrencyLimiter(conn, Keys(config.prefix), TierBook(conn, Keys(config.prefix)), config.concurrency)
    held = slots.acquire(tenant, "elsewhere", org=org)
    assert held is not None
    return slots, held

pytestmark = pytest.mark.usefixtures("isolated_settings")


def settings(**extra: Any) -> Settings:
    return Settings(prefix=PREFIX, **extra)


def fair(conn: Redis, name: str = "default", **extra: Any) -> FairQueue:
    return FairQueue(name, connection=conn, settings=settings(**extra))


def fill(queue: Queue, tenant: str, n: int) -> list[Job]:
    datas = [Queue.prepare_data(why_jobs.noop, meta={"fair_tenant": tenant}, result_ttl=600) for _ in range(n)]
    jobs: list[Job] = queue.enqueue_many(datas)
    return jobs


def test_an_unknown_id_is_not_found(conn: Redis) -> None:
    answer = explain("no-such-job", connection=conn, settings=settings())
    assert answer.reason == Reason.NOT_FOUND and answer.estimated_start is None
    assert answer.facts["servers_asked"] == 1
    refused = explain("<b>x", connection=conn, settings=settings())  # rq's Job.fetch raises on such an id
    assert refused.reason == Reason.NOT_FOUND and refused.facts["servers_asked"] == 0


def test_a_job_on_a_shard_server_is_found_there(conn: Redis, redis_server: RedisServer) -> None:
    with RedisServer() as shard:
        job = Queue("plain", connection=shard.client()).enqueue(why_jobs.noop)
        answer = explain(job.id, connection=conn, settings=settings(shard_urls=[shard.url]))
        assert answer.reason == Reason.NEXT and answer.facts["jobs_ahead"] == 0
    missing = explain("nope", connection=conn, settings=settings(shard_urls=[redis_server.url] * 2))
    assert missing.facts["servers_asked"] == 2


def test_finished_and_failed_jobs_after_a_real_worker(conn: Redis) -> None:
    queue = Queue("plain", connection=conn)
    done, failed = queue.enqueue(why_jobs.noop), queue.enqueue(why_jobs.boom)
    SimpleWorker([queue], connection=conn).work(burst=True)
    answer = explain(done.id, connection=conn, settings=settings())
    assert answer.reason == Reason.FINISHED and answer.facts["ended_at"] is not None
    answer = explain(failed.id, connection=conn, settings=settings())
    assert answer.reason == Reason.FAILED and answer.facts["error"] == "RuntimeError: boom: the last line"


def test_rq_rate_limit_and_canceled(conn: Redis) -> None:
    queue = Queue("plain", connection=conn)
    allowed, held = (queue.enqueue(why_jobs.noop, rate_limit=RateLimit("reports", 1)) for _ in range(2))
    assert explain(allowed.id, connection=conn, settings=settings()).reason == Reason.NEXT
    answer = explain(held.id, connection=conn, settings=settings())
    assert answer.reason == Reason.RQ_RATE_LIMITED
    assert (answer.facts["rate_limit_key"], answer.facts["concurrency"], answer.facts["allowed"]) == ("reports", 1, 1)
    other = queue.enqueue(why_jobs.noop)
    other.cancel()
    assert explain(other.id, connection=conn, settings=settings()).reason == Reason.CANCELED


def test_a_job_stopped_on_a_real_forking_worker(conn: Redis, fleet_of: Any, tmp_path: Any) -> None:
    fleet: Fleet = fleet_of("plain")
    fleet.config = write_settings(tmp_path, {"prefix": PREFIX})
    fleet.start(1, scheduler=False)
    fleet.wait_registered(conn, 1)
    job = Queue("plain", connection=conn).enqueue(why_jobs.linger, result_ttl=600)
    wait_for(lambda: job.get_status(refresh=True) == JobStatus.STARTED, 30, "the job to start", fleet)
    send_stop_job_command(conn, job.id)
    wait_for(lambda: job.get_status(refresh=True) == JobStatus.STOPPED, 30, "the job to stop", fleet)
    answer = explain(job.id, connection=conn, settings=settings())
    assert answer.reason == Reason.STOPPED and answer.estimated_start is None


def test_a_running_job_names_its_worker(conn: Redis) -> None:
    queue = fair(conn)
    job = queue.enqueue(why_jobs.explain_myself, fair_tenant="acme")
    worker = WeightedSimpleWorker([queue], connection=conn, settings=settings())
    worker.work(burst=True)
    answer = json.loads(conn.get(why_jobs.ANSWER) or b"{}")
    assert answer["reason"] == "running" and answer["facts"]["worker"] == worker.name
    assert answer["facts"]["started_at"] and answer["facts"]["tenant"] == "acme" and answer["estimated_start"] is None
    assert job.get_status() == "finished"
    assert WHY_TURNS == TURNS  # the interruptible turn's meta key, named twice (observe cannot import iteration)


def test_places_in_a_fair_queue_match_its_serving_order(conn: Redis) -> None:
    """Every waiting job's jobs_ahead is its index in the serving order the queue lists (a replay of the pops),
    after pops that left the tenants at different passes and a tenant with a weight of its own."""
    router = FairRouter(conn, prefix=PREFIX)
    router.set_tenant("heavy", weight=3)
    queue = fair(conn)
    jobs = []
    for tenant, n in [("heavy", 30), ("a", 5), ("b", 12), ("c", 1)]:
        jobs += fill(queue, tenant, n)
    for _ in range(9):
        queue.pop_job_id()
    jobs += fill(queue, "d", 4) + fill(queue, "a", 3)
    order = queue.get_job_ids()
    assert len(order) == len(jobs) - 9
    exact = 0
    for expected, job_id in enumerate(order):
        answer = explain(job_id, connection=conn, settings=settings())
        assert answer.facts["exact"], answer.facts
        # tied: other tenants' jobs at its pass, served before or after it as the list's head has it
        ahead, tied = answer.facts["jobs_ahead"], answer.facts["tied"]
        assert ahead - tied <= expected <= ahead + tied, (job_id, expected, answer.facts)
        exact += tied == 0
        if expected == 0:
            assert answer.reason == Reason.NEXT
    assert exact >= len(order) // 3
    last = explain(order[-1], connection=conn, settings=settings())
    assert last.facts["tenants_before"] >= 1 and last.facts["fifo_ahead"] >= 0


def test_a_plain_queue_position_is_its_index_on_the_list(conn: Redis) -> None:
    queue = Queue("plain", connection=conn)
    jobs = [queue.enqueue(why_jobs.noop, meta={"fair_tenant": "t"}) for _ in range(5)]
    first = explain(jobs[0].id, connection=conn, settings=settings())
    assert first.reason == Reason.NEXT and first.facts["fair"] is False and first.facts["jobs_ahead"] == 0
    fourth = explain(jobs[3].id, connection=conn, settings=settings())
    assert fourth.reason == Reason.BEHIND and fourth.facts["jobs_ahead"] == 3 and fourth.facts["listed"] == 5
    fair_queue = fair(conn, "fairq")
    taken = fill(fair_queue, "t", 2)[0]
    assert fair_queue.pop_job_id() == taken.id  # popped, not yet started: still queued for rq
    answer = explain(taken.id, connection=conn, settings=settings())
    assert answer.reason == Reason.RUNNING and answer.facts["starting"] is True


def test_the_estimate_uses_the_recorded_throughput(conn: Redis) -> None:
    queue = fair(conn)
    fill(queue, "early", 6)
    WeightedSimpleWorker([queue], connection=conn, settings=settings()).work(burst=True)  # records six starts
    waiting = fill(queue, "late", 4)
    answer = explain(waiting[0].id, connection=conn, settings=settings())
    assert answer.reason == Reason.NEXT and answer.estimated_start is not None
    assert "6 starts of every queue" in answer.estimate_basis and answer.estimated_start > datetime.now(timezone.utc)
    fourth = explain(waiting[3].id, connection=conn, settings=settings())
    assert fourth.facts["jobs_ahead"] == 3 and fourth.estimated_start is not None
    assert fourth.estimated_start > answer.estimated_start
    conn.delete(*conn.keys(KEYS.observe_pattern()))
    none = explain(waiting[0].id, connection=conn, settings=settings())
    assert none.estimated_start is None and "no job start recorded" in none.estimate_basis


def test_the_throughput_is_measured_from_where_the_starts_began(conn: Redis) -> None:
    """The oldest tick with starts (none in the tick before it) is counted from its first admission in the record's
    "recent" set; without one, from its end once 3 s or more follow it, else from its start; recorded starts lag
    by ``lag``."""
    tick = 170_000_000  # ticks of 10 s
    record = KEYS.observe_record(ALL)
    conn.hset(record, mapping={f"t{tick % TICK_SLOTS}": tick, f"n{tick % TICK_SLOTS}": 50,
                               f"t{(tick + 1) % TICK_SLOTS}": tick + 1, f"n{(tick + 1) % TICK_SLOTS}": 10})
    now_ms = (tick + 1) * 10_000 + 1_200
    assert throughput(conn, KEYS, now_ms).seconds == 11  # 1.2 s after the oldest tick: from its start
    assert throughput(conn, KEYS, now_ms + 2_000).seconds == 3  # 3.2 s after it: from its end, its starts left out
    assert throughput(conn, KEYS, now_ms + 2_000).starts == 10
    conn.zadd(KEYS.observe_recent(), {"acme": tick * 10_000 + 6_000, "late": now_ms})
    rate = throughput(conn, KEYS, now_ms, lag=0.2)
    assert (rate.starts, rate.seconds) == (60, 5) and rate.per_second == pytest.approx(60 / 5.0)
    conn.hset(record, mapping={f"t{(tick - 1) % TICK_SLOTS}": tick - 1, f"n{(tick - 1) % TICK_SLOTS}": 5})
    assert throughput(conn, KEYS, now_ms).seconds == 11  # starts in the tick before: the admission is not their start


def test_a_paused_tenant(conn: Redis) -> None:
    queue = fair(conn)
    jobs = fill(queue, "acme", 2) + fill(queue, "other", 1)
    FairRouter(conn, prefix=PREFIX).pause("acme")
    answer = explain(jobs[1].id, connection=conn, settings=settings())
    assert answer.reason == Reason.PAUSED and Reason.BEHIND in answer.secondary
    assert answer.facts["tenant_state"] == "parked" and answer.facts["parked_until"] > datetime.now(timezone.utc)
    assert answer.estimated_start is None and "paused" in answer.estimate_basis
    assert answer.facts["paused_since"] <= datetime.now(timezone.utc) and answer.unknown == ()
    plain = Queue("plain", connection=conn).enqueue(why_jobs.noop, meta={"fair_tenant": "acme"})
    assert explain(plain.id, connection=conn, settings=settings()).reason == Reason.PAUSED


def test_a_tenant_at_its_concurrency_limit(conn: Redis) -> None:
    """A real worker's start is refused at the limit (the one slot is held elsewhere): the tenant parks."""
    config = settings(concurrency=ConcurrencyConfig(enabled=True, lease_ttl=60), fair_queues=["default"])
    slots, held = slot_held_elsewhere(conn, config)
    queue = FairQueue("default", connection=conn, settings=config)
    job = queue.enqueue(why_jobs.noop, fair_tenant="acme")
    WeightedSimpleWorker([queue], connection=conn, settings=config).work(burst=True)
    assert job.get_status() == "queued"
    answer = explain(job.id, connection=conn, settings=config)
    assert answer.reason == Reason.CONCURRENCY_LIMIT, answer
    assert answer.facts["limit"] == 1 and answer.facts["running"] == ["elsewhere"]
    assert answer.estimated_start is None and "1 of 1" in answer.estimate_basis
    slots.release(held)


def test_a_tenant_over_its_rate(conn: Redis) -> None:
    config = settings(fair_queues=["default"])
    FairRouter(conn, prefix=PREFIX).set_tenant("acme", rate="1/m")
    queue = FairQueue("default", connection=conn, settings=config)
    first, second = fill(queue, "acme", 2)
    WeightedSimpleWorker([queue], connection=conn, settings=config).work(burst=True)
    assert first.get_status() == "finished" and second.get_status() == "queued"
    answer = explain(second.id, connection=conn, settings=config)
    assert answer.reason == Reason.RATE_LIMIT, answer
    until = answer.facts["rate_until"]
    assert datetime.now(timezone.utc) + timedelta(seconds=30) < until


def test_a_throttled_job_names_its_rule_and_window(conn: Redis) -> None:
    config = settings(queues={"default": 1, "slow": 0.25})
    rule = Rule(queue="slow", threshold=1, per="1h")
    job = fair_job("default", rules=[rule], router=FairRouter(conn, prefix=PREFIX), settings=config)(why_jobs.noop)
    jobs = [job.enqueue(fair_tenant="greedy") for _ in range(3)]
    assert [j.origin for j in jobs] == ["default", "slow", "slow"]
    answer = explain(jobs[2].id, connection=conn, settings=config)
    assert answer.reason == Reason.THROTTLED and answer.secondary == (Reason.BEHIND,)
    assert answer.facts["rule_text"] == rule.describe() and answer.facts["queue_weight"] == 0.25
    # a window keeps the largest threshold + 1 newest enqueues: enough to decide the rule, a floor beyond
    assert answer.facts["window_count"] == 2 and answer.facts["window_capped"] and answer.facts["jobs_ahead"] == 1
    assert explain(jobs[0].id, connection=conn, settings=config).reason == Reason.NEXT


def test_scheduled_deferred_and_retry_wait(conn: Redis) -> None:
    queue = Queue("plain", connection=conn)
    later = queue.enqueue_in(timedelta(minutes=5), why_jobs.noop)
    answer = explain(later.id, connection=conn, settings=settings())
    assert answer.reason == Reason.SCHEDULED and answer.estimated_start == answer.facts["until"]
    assert answer.facts["until"] > datetime.now(timezone.utc) + timedelta(minutes=4)
    first = queue.enqueue(why_jobs.noop)
    child = queue.enqueue(why_jobs.noop, depends_on=first)
    answer = explain(child.id, connection=conn, settings=settings())
    assert answer.reason == Reason.DEFERRED and answer.facts["dependencies"] == {first.id: "queued"}
    retried = Queue("retry", connection=conn).enqueue(fair_jobs.fail_once, "test:why:runs",
                                                      retry=Retry(max=2, interval=600))
    SimpleWorker(["retry"], connection=conn).work(burst=True)
    answer = explain(retried.id, connection=conn, settings=settings())
    assert answer.reason == Reason.RETRY_WAIT and answer.facts["retries_left"] == 1
    assert answer.facts["last_run_ended_at"] is not None and answer.estimated_start == answer.facts["until"]


def snapshot(conn: Redis) -> dict[bytes, tuple[bytes | None, bool]]:
    """Every key's serialized value, and whether it has an expiry."""
    return {key: (conn.dump(key), conn.pttl(key) >= 0) for key in conn.scan_iter(count=1000)}


READS = {"HGETALL", "HGET", "HMGET", "HEXISTS", "EXISTS", "ZRANGE", "ZRANGEBYSCORE", "ZCARD", "ZCOUNT", "ZSCORE",
         "GET", "LLEN", "LPOS", "TIME", "EVALSHA", "MULTI", "EXEC", "HELLO", "CLIENT", "ECHO"}
"""What explaining may send: reads, and the script call, MULTI and handshake that carry them."""


@contextmanager
def every_command(conn: Redis) -> Iterator[set[str]]:
    """The names of every command the server runs meanwhile, those scripts run included (MONITOR)."""
    feed: set[str] = set()
    ready, stop = threading.Event(), "why-monitor-stop"

    def listen() -> None:
        with conn.monitor() as monitor:
            ready.set()
            for entry in monitor.listen():
                if entry["command"] == f"ECHO {stop}":
                    return
                feed.add(entry["command"].split(" ", 1)[0].upper())

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield feed
    finally:
        conn.echo(stop)
        thread.join(30)


def test_explaining_changes_nothing_in_redis(conn: Redis) -> None:
    config = settings(queues={"default": 1, "slow": 0.5}, concurrency=ConcurrencyConfig(enabled=True))
    queue = FairQueue("default", connection=conn, settings=config)
    ids = [j.id for j in fill(queue, "a", 3) + fill(queue, "b", 2)]
    queue.pop_job_id()
    FairRouter(conn, prefix=PREFIX).pause("b")
    rule = Rule(queue="slow", threshold=1, per="1h")
    routed = fair_job("default", rules=[rule], router=FairRouter(conn, prefix=PREFIX), settings=config)(why_jobs.noop)
    ids += [routed.enqueue(fair_tenant="c").id for _ in range(2)]
    ids += [Queue("plain", connection=conn).enqueue_in(timedelta(minutes=1), why_jobs.noop).id, "missing"]
    for job_id in ids:  # every script loaded once (SCRIPT LOAD changes only the script cache)
        explain(job_id, connection=conn, settings=config)
    before = snapshot(conn)
    with every_command(conn) as feed:
        answers = [explain(job_id, connection=conn, settings=config) for job_id in ids]
    assert snapshot(conn) == before
    assert {"LPOS", "HMGET", "ZRANGEBYSCORE"} <= feed, feed  # the script's own commands are seen too
    assert feed <= READS, feed - READS
    assert {a.reason for a in answers} >= {Reason.BEHIND, Reason.PAUSED, Reason.THROTTLED, Reason.SCHEDULED,
                                            Reason.NOT_FOUND}


def test_the_why_command_prints_the_reason_and_json(conn: Redis, redis_server: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("FAIR_ROUTER_REDIS_URL", redis_server.url)
    monkeypatch.setenv("FAIR_ROUTER_PREFIX", PREFIX)
    job = Queue("plain", connection=conn).enqueue(why_jobs.noop)
    text = CliRunner().invoke(main, ["why", job.id])
    assert text.exit_code == 0, text.output
    assert "next" in text.output and job.id in text.output
    raw = CliRunner().invoke(main, ["why", job.id, "--json"])
    assert raw.exit_code == 0 and json.loads(raw.output)["reason"] == "next"
    missing = CliRunner().invoke(main, ["why", "nope"])
    assert missing.exit_code == 1 and "not_found" in missing.output


def test_an_interruptible_job_between_turns_and_in_its_turn(conn: Redis) -> None:
    queue = fair(conn, "imports")
    big = queue.enqueue(iteration_jobs.every_item_a_turn, "big", 3, 0.005, fair_tenant="big")
    WeightedSimpleWorker([queue], connection=conn, settings=settings()).work(burst=True, max_jobs=1)  # turn 1
    assert big.get_status() == "queued"
    answer = explain(big.id, connection=conn, settings=settings())
    assert answer.reason == Reason.NEXT and answer.facts["turn"] == 1 and answer.facts["items"] == 1, answer
    assert WHY_ITEMS == ITEMS
    job = queue.enqueue(why_jobs.explain_my_turn, fair_tenant="acme")
    WeightedSimpleWorker([queue], connection=conn, settings=settings()).work(burst=True)
    answer = json.loads(conn.get(why_jobs.ANSWER) or b"{}")
    assert answer["reason"] == "running" and answer["facts"]["turn"] == 1 and answer["facts"]["items"] == 1, answer
    assert job.get_status() == "finished"
