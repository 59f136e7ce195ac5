"""The weighted workers' leaner loop (fair_router.rq_internals.worker) against the real redis-server: what rq's
heartbeat is for still holds, and the repeats between jobs are gone."""

from __future__ import annotations

import time

import pytest
from conftest import command_calls
from redis import Redis
from rq import Queue, SimpleWorker
from rq.registry import FinishedJobRegistry
from rq.worker import BaseWorker
from worker_jobs import noop

from fair_router import Settings, WeightedSimpleWorker, WeightedWorker
from fair_router.config.settings import ConcurrencyConfig, ObserveConfig
from fair_router.core.jobmeta import META_TENANT
from fair_router.core.keys import Keys
from fair_router.rq_internals import worker as rq_worker

pytestmark = pytest.mark.usefixtures("isolated_settings")


def worker(conn: Redis, queue: Queue, cls: type[BaseWorker] = WeightedSimpleWorker) -> BaseWorker:
    built = cls([queue], connection=conn, weights={queue.name: 1})
    built.register_birth()
    return built


@pytest.mark.parametrize("cls", [WeightedSimpleWorker, WeightedWorker])
def test_after_a_job_the_worker_key_gets_its_idle_ttl_back(conn: Redis, cls: type[BaseWorker]) -> None:
    """Preparing a job heartbeats with the job's TTL (timeout + 60), in the work horse for the forking
    worker: the next plain heartbeat must not be skipped as a repeat, or a worker idle for longer than
    that would vanish from `rq info`."""
    queue = Queue("ttl", connection=conn)
    queue.enqueue(noop, job_timeout=30)
    w = worker(conn, queue, cls)
    w.heartbeat()  # a recent beat with the idle TTL, as rq's loop leaves one before each job
    result = w.dequeue_job_and_maintain_ttl(timeout=None)
    assert result is not None
    w.execute_job(*result)
    assert conn.ttl(w.key) <= 30 + 60  # the job's heartbeat TTL, set while it ran
    w.heartbeat()  # what rq's loop does after each job
    assert conn.ttl(w.key) > 30 + 60
    assert conn.ttl(w.key) >= w.worker_ttl + 60 - 2
    assert conn.hget(w.key, "state") == b"idle"
    assert FinishedJobRegistry("ttl", connection=conn).count == 1


def test_a_repeated_heartbeat_is_one_round_trip_and_skipped_within_the_repeat_window(
    conn: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rq_worker, "HEARTBEAT_REPEAT", 0.2)
    w = worker(conn, Queue("beat", connection=conn))
    w.heartbeat()
    first = conn.hget(w.key, "last_heartbeat")
    hsets = command_calls(conn, "hset")
    w.heartbeat()
    w.heartbeat()
    assert command_calls(conn, "hset") == hsets  # skipped: one with the same TTL was just sent
    assert conn.hget(w.key, "last_heartbeat") == first
    w.heartbeat(timeout=w.worker_ttl + 600)  # a longer TTL is never skipped
    assert command_calls(conn, "hset") == hsets + 1
    assert conn.ttl(w.key) > w.worker_ttl + 60
    time.sleep(0.25)
    w.heartbeat()  # past the window: sent again
    assert command_calls(conn, "hset") == hsets + 2
    assert conn.hget(w.key, "last_heartbeat") != first


def test_writing_the_state_the_worker_is_in_is_skipped(conn: Redis) -> None:
    w = worker(conn, Queue("state", connection=conn))
    w.set_state("idle")
    hsets = command_calls(conn, "hset")
    w.set_state("idle")
    assert command_calls(conn, "hset") == hsets
    w.set_state("busy")
    assert conn.hget(w.key, "state") == b"busy"
    assert command_calls(conn, "hset") == hsets + 1


def test_the_weighted_worker_sends_fewer_commands_per_job_than_rq(conn: Redis) -> None:
    """Same jobs, rq's SimpleWorker against ours on plain queues: every job runs, ours sends at least
    four commands fewer per job (two heartbeats of HSET + EXPIRE, one state write). The start record
    (fair_router.observe, its own test in test_observe.py) is off here: this is the bookkeeping alone."""
    jobs = 20
    per_job = {}
    unrecorded = Settings(observe=ObserveConfig(record=False))
    for name, cls in (("plain", SimpleWorker), ("weighted", WeightedSimpleWorker)):
        queue = Queue(name, connection=conn)
        queue.enqueue_many([Queue.prepare_data(noop, result_ttl=600) for _ in range(jobs)])
        extra = {"weights": {name: 1}, "settings": unrecorded} if cls is WeightedSimpleWorker else {}
        w = cls([queue], connection=conn, **extra)
        before = command_calls(conn)
        w.work(burst=True, logging_level="WARNING")
        per_job[name] = (command_calls(conn) - before) / jobs
        assert FinishedJobRegistry(name, connection=conn).count == jobs
    assert per_job["weighted"] <= per_job["plain"] - 4, per_job


def test_a_limited_job_sends_the_after_job_heartbeat_with_its_release(conn: Redis) -> None:
    """With concurrency limits on, the heartbeat rq sends after each job rides the slot's release: the
    worker gets its idle TTL back at once, and rq's own heartbeat that follows is a repeat."""
    settings = Settings(prefix="bookkeeping", concurrency=ConcurrencyConfig(enabled=True, lease_ttl=5))
    queue = Queue("limited_beat", connection=conn)
    queue.enqueue(noop, job_timeout=30, meta={META_TENANT: "acme"})
    w = WeightedSimpleWorker([queue], connection=conn, weights={queue.name: 1}, settings=settings)
    w.register_birth()
    result = w.dequeue_job_and_maintain_ttl(timeout=None)
    assert result is not None
    w.execute_job(*result)
    assert conn.zcard(Keys("bookkeeping").leases("acme")) == 0  # the slot is back
    assert conn.ttl(w.key) > 30 + 60  # the idle TTL, sent with the release
    hsets = command_calls(conn, "hset")
    w.heartbeat()  # what rq's loop does next
    assert command_calls(conn, "hset") == hsets
    assert FinishedJobRegistry("limited_beat", connection=conn).count == 1
