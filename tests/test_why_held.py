"""Why a plain queue's job was turned away (recorded with its deferral) and since when a tenant is paused: real
workers and Redis."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import why_jobs
from click.testing import CliRunner
from redis import Redis
from rq import Queue
from rq.job import Job
from rq.registry import ScheduledJobRegistry
from test_why import slot_held_elsewhere

from fair_router import FairQueue, FairRouter, Reason, Settings, WeightedSimpleWorker, explain
from fair_router.cli import main
from fair_router.config.settings import ConcurrencyConfig
from fair_router.core.jobmeta import META_HELD
from fair_router.core.keys import Keys

PREFIX = "why_test"
KEYS = Keys(PREFIX)

pytestmark = pytest.mark.usefixtures("isolated_settings")


def settings(**extra: Any) -> Settings:
    return Settings(prefix=PREFIX, **extra)


def server_now(conn: Redis) -> datetime:
    seconds, micros = conn.time()
    return datetime.fromtimestamp(seconds + micros / 1e6, timezone.utc)


def turned_away(conn: Redis, config: Settings, tenant: str = "acme") -> Job:
    """One job of ``tenant`` on a plain queue, taken by a real weighted worker that turns its start away."""
    queue = Queue("plain", connection=conn)
    job = queue.enqueue(why_jobs.noop, meta={"fair_tenant": tenant})
    WeightedSimpleWorker([queue], connection=conn, settings=config).work(burst=True)
    job.refresh()
    assert job.get_status() == "scheduled", "the worker deferred it"
    return job


def test_a_job_turned_away_at_the_limit_reads_concurrency_limit(conn: Redis) -> None:
    config = settings(concurrency=ConcurrencyConfig(enabled=True, lease_ttl=60, snooze=120, jitter=1))
    slots, held = slot_held_elsewhere(conn, config)
    job = turned_away(conn, config)
    until = ScheduledJobRegistry("plain", connection=conn).get_scheduled_time(job)
    assert job.meta[META_HELD] == {"reason": "concurrency_limit", "until": round(until.timestamp())}
    answer = explain(job.id, connection=conn, settings=config)
    assert answer.reason == Reason.CONCURRENCY_LIMIT and answer.secondary == (), answer
    assert answer.facts["until"] == until and answer.facts["turned_away"] is True
    assert answer.estimated_start == until and answer.unknown == ()
    slots.release(held)


def test_a_job_turned_away_while_paused_reads_paused_with_its_time(conn: Redis) -> None:
    router = FairRouter(conn, prefix=PREFIX)
    before = server_now(conn)
    router.pause("acme")
    job = turned_away(conn, settings())
    answer = explain(job.id, connection=conn, settings=settings())
    assert answer.reason == Reason.PAUSED and answer.facts["turned_away"] is True, answer
    since = answer.facts["paused_since"]
    assert before - timedelta(seconds=1) <= since <= server_now(conn)
    assert answer.estimated_start is None and "paused" in answer.estimate_basis
    router.resume("acme")  # still deferred by the pause, until its time: the recorded reason, with its time
    answer = explain(job.id, connection=conn, settings=settings())
    assert answer.reason == Reason.PAUSED and answer.estimated_start == answer.facts["until"]


def test_a_job_turned_away_by_its_rate_reads_rate_limit(conn: Redis) -> None:
    FairRouter(conn, prefix=PREFIX).set_tenant("acme", rate="1/h")
    queue = Queue("plain", connection=conn)
    first = queue.enqueue(why_jobs.noop, meta={"fair_tenant": "acme"})
    second = queue.enqueue(why_jobs.noop, meta={"fair_tenant": "acme"})
    WeightedSimpleWorker([queue], connection=conn, settings=settings()).work(burst=True)
    assert first.get_status() == "finished" and second.get_status() == "scheduled"
    answer = explain(second.id, connection=conn, settings=settings())
    assert answer.reason == Reason.RATE_LIMIT, answer
    assert answer.facts["until"] > datetime.now(timezone.utc) + timedelta(minutes=50)
    assert answer.facts["reserved_start"] is not None and answer.estimated_start == answer.facts["until"]


def test_a_job_the_user_scheduled_reads_scheduled(conn: Redis) -> None:
    """A user's schedule, also of a job that was turned away before (its record names another time)."""
    queue = Queue("plain", connection=conn)
    mine = queue.enqueue_in(timedelta(minutes=5), why_jobs.noop, meta={"fair_tenant": "acme"})
    assert explain(mine.id, connection=conn, settings=settings()).reason == Reason.SCHEDULED
    config = settings(concurrency=ConcurrencyConfig(enabled=True, lease_ttl=60, snooze=120, jitter=1))
    slots, held = slot_held_elsewhere(conn, config)
    job = turned_away(conn, config)
    queue.schedule_job(job, datetime.now(timezone.utc) + timedelta(hours=2))  # the user moves it: meta kept
    answer = explain(job.id, connection=conn, settings=config)
    assert answer.reason == Reason.SCHEDULED and "turned_away" not in answer.facts, answer
    slots.release(held)


def test_pause_keeps_its_first_time_and_tenant_show_prints_it(conn: Redis, redis_server: Any,
                                                              monkeypatch: Any) -> None:
    router = FairRouter(conn, prefix=PREFIX)
    assert router.tenants.paused_since("acme") is None
    before = server_now(conn)
    router.pause("acme")
    since = router.tenants.paused_since("acme")
    assert since is not None and before - timedelta(seconds=1) <= since <= server_now(conn)
    assert conn.exists(KEYS.paused("acme")) and router.paused("acme")
    conn.set(KEYS.paused("acme"), int(since.timestamp() * 1000) - 60_000)  # as if paused a minute ago
    router.pause("acme")  # paused again: since the first pause
    assert router.tenants.paused_since("acme") == since - timedelta(minutes=1)
    router.resume("acme")
    assert router.tenants.paused_since("acme") is None and not router.paused("acme")
    conn.set(KEYS.paused("acme"), 1)  # a flag written by an older version: paused, its time unknown
    assert router.paused("acme") and router.tenants.paused_since("acme") is None
    router.pause("acme")
    assert router.tenants.paused_since("acme") is None
    router.resume("acme")
    router.pause("acme")
    monkeypatch.setenv("FAIR_ROUTER_REDIS_URL", redis_server.url)
    monkeypatch.setenv("FAIR_ROUTER_PREFIX", PREFIX)
    out = CliRunner().invoke(main, ["tenant", "show", "acme"])
    assert out.exit_code == 0, out.output
    assert "(PAUSED since 20" in out.output


def test_the_record_rides_the_job_save_of_the_deferral(conn: Redis) -> None:
    """No command of its own: the only command naming the record is the job hash's save rq's scheduling makes."""
    config = settings(concurrency=ConcurrencyConfig(enabled=True, lease_ttl=60, snooze=120, jitter=1))
    slots, held = slot_held_elsewhere(conn, config)
    lines: list[str] = []
    ready, stop = threading.Event(), "why-held-monitor-stop"

    def listen() -> None:
        with conn.monitor() as monitor:
            ready.set()
            for entry in monitor.listen():
                if entry["command"] == f"ECHO {stop}":
                    return
                lines.append(entry["command"])

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        job = turned_away(conn, config)
    finally:
        conn.echo(stop)
        thread.join(30)
    naming = [line for line in lines if META_HELD in line]
    assert len(naming) == 1 and naming[0].startswith(f"HSET {job.key} "), naming
    slots.release(held)


def test_a_fair_queue_park_keeps_its_cause_while_it_lasts(conn: Redis) -> None:
    """A park that outlives its cause (the slot freed with no unpark here) still names it, until the park ends."""
    config = settings(concurrency=ConcurrencyConfig(enabled=True, lease_ttl=60), fair_queues=["default"])
    slots, held = slot_held_elsewhere(conn, config)
    queue = FairQueue("default", connection=conn, settings=config)
    job = queue.enqueue(why_jobs.noop, fair_tenant="acme")
    WeightedSimpleWorker([queue], connection=conn, settings=config).work(burst=True)
    cause = KEYS.park_cause("acme", "default")
    assert conn.get(cause) == b"concurrency_limit" and 0 < conn.pttl(cause) <= 60_000
    slots.release(held)  # no wake: the tenant stays parked in the queue until its park ends
    answer = explain(job.id, connection=conn, settings=config)
    assert answer.reason == Reason.CONCURRENCY_LIMIT and answer.facts["park_cause"] == "concurrency_limit", answer
    assert answer.facts["tenant_state"] == "parked" and answer.unknown == ()
    assert answer.estimated_start is None or answer.estimated_start >= answer.facts["parked_until"]
    conn.delete(cause)  # a park whose cause was not recorded: its place, and the cause listed as unknown
    answer = explain(job.id, connection=conn, settings=config)
    assert answer.reason in (Reason.NEXT, Reason.BEHIND) and answer.unknown[0].startswith("park cause"), answer



def test_a_paused_tenants_job_taken_by_a_worker_reads_paused(conn: Redis) -> None:
    """Paused while it had nothing waiting (no park then), its jobs enqueued after: a real weighted worker takes one,
    its start is refused and the tenant parked there, the cause noted; every waiting job reads ``paused`` with the
    pause's time."""
    config = settings(fair_queues=["default"])
    FairRouter(conn, prefix=PREFIX).pause("acme")
    since = server_now(conn)
    queue = FairQueue("default", connection=conn, settings=config)
    jobs = [queue.enqueue(why_jobs.noop, fair_tenant="acme") for _ in range(3)]
    WeightedSimpleWorker([queue], connection=conn, settings=config).work(burst=True)
    assert [job.get_status() for job in jobs] == ["queued"] * 3
    assert conn.get(KEYS.park_cause("acme", "default")) == b"paused"
    for job in jobs:
        answer = explain(job.id, connection=conn, settings=config)
        assert answer.reason == Reason.PAUSED and answer.unknown == (), answer
        assert abs((answer.facts["paused_since"] - since).total_seconds()) < 5
        assert answer.facts["tenant_state"] == "parked" and answer.estimated_start is None


def test_a_pause_s_own_park_records_its_cause(conn: Redis) -> None:
    """A pause parks its tenant at once where its jobs wait (fair_hold), noting the cause there as a refused start
    does: while paused its jobs read ``paused`` with the pause's time; a park that outlives the pause (a resume
    that missed the queue: the flag gone, the park left) still reads ``paused``, its cause recorded, not unknown."""
    config = settings(fair_queues=["default", "other"])
    queue = FairQueue("default", connection=conn, settings=config)
    FairQueue("other", connection=conn, settings=config).enqueue(why_jobs.noop, fair_tenant="someone")
    jobs = [queue.enqueue(why_jobs.noop, fair_tenant="acme") for _ in range(2)]
    FairRouter(conn, prefix=PREFIX).pause("acme")
    cause = KEYS.park_cause("acme", "default")
    assert conn.get(cause) == b"paused" and 0 < conn.pttl(cause) <= 60_000
    assert not conn.exists(KEYS.park_cause("acme", "other"))  # nothing of acme waits there: no park, no cause
    answer = explain(jobs[1].id, connection=conn, settings=config)
    assert answer.reason == Reason.PAUSED and answer.facts["paused_since"] is not None and answer.unknown == ()
    conn.delete(KEYS.paused("acme"))  # the pause ends, its park stays
    answer = explain(jobs[1].id, connection=conn, settings=config)
    assert answer.reason == Reason.PAUSED and answer.facts["park_cause"] == "paused", answer
    assert answer.unknown == () and answer.facts["tenant_state"] == "parked"
    assert answer.estimated_start is None or answer.estimated_start >= answer.facts["parked_until"]
