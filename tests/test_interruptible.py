"""Interruptible iteration with in-process weighted workers (WeightedSimpleWorker) on the real
redis-server: turns, the end of a turn not being a success, retries, warm shutdown, plain queues, backlog
caps, and the decorator's validation. The subprocess workers' scenarios are in test_interruptible_fleet.py."""

from __future__ import annotations

import time
from typing import Any

import iteration_jobs as jobs
import pytest
from redis import Redis
from rq import Callback, Queue, Retry
from rq.job import Job, JobStatus

from fair_router import FairQueue, FairRouter, Settings, SettingsError, WeightedSimpleWorker, fair_job, interruptible
from fair_router.config.settings import TiersConfig
from fair_router.core.keys import Keys
from fair_router.iteration.turns import HOST
from fair_router.workers.recovery import Recovery

PREFIX = "it_test"

pytestmark = pytest.mark.usefixtures("isolated_settings")


def settings(**extra: Any) -> Settings:
    return Settings(prefix=PREFIX, **extra)


def logged(conn: Redis, job: Job) -> list[int]:
    return [int(raw.split()[0]) for raw in conn.lrange(jobs.items_key(job.id), 0, -1)]


def work(conn: Redis, queue: Queue, settings_: Settings | None = None, **kwargs: Any) -> WeightedSimpleWorker:
    worker = WeightedSimpleWorker([queue], connection=conn, settings=settings_ or settings())
    worker.work(burst=True, logging_level="WARNING", **kwargs)
    return worker


def test_the_issue_example_composes_under_fair_job_and_runs_in_turns(conn: Redis) -> None:
    queue = FairQueue("imports", connection=conn, settings=settings())
    router = FairRouter(conn, prefix=PREFIX)
    imports = fair_job("imports", rules=[], router=router, fair=True, result_ttl=600,
                       tenant=lambda account_id, *a, **k: account_id)(jobs.import_items)
    big = imports.delay("acme", 30, 0.02)
    assert big.meta["fair_tenant"] == "acme" and big.origin == "imports"
    work(conn, queue)
    big.refresh()
    assert big.get_status() == JobStatus.FINISHED
    assert big.return_value() == "imported 30"
    assert logged(conn, big) == list(range(30))  # each item exactly once, in order
    assert big.meta["fair_turns"] >= 3  # 30 x 20 ms in turns of 0.3 s
    assert big.meta["fair_items"] == 30 and big.meta["fair_cursor"] == 30
    assert not HOST.active  # the worker is done with it


def test_a_turn_is_not_a_success_no_callback_no_dependents_until_the_generator_returns(conn: Redis) -> None:
    queue = Queue("plain", connection=conn)
    big = queue.enqueue(jobs.every_item_a_turn, "acme", 5, 0.005, on_success=Callback(jobs.note_success),
                        result_ttl=600)
    after = queue.enqueue(jobs.small, "dependent", depends_on=big)
    worker = WeightedSimpleWorker([queue], connection=conn, settings=settings())
    worker.work(burst=True, max_jobs=2, logging_level="WARNING")  # two turns
    big.refresh()
    assert big.get_status() == JobStatus.QUEUED  # between turns: queued again, not FINISHED
    assert big.meta["fair_turns"] == 2 and big.meta["fair_cursor"] == 2
    assert big.latest_result() is None and conn.get(f"test:success:{big.id}") is None
    assert after.get_status() == JobStatus.DEFERRED and not conn.lrange(jobs.SMALL_STARTS, 0, -1)
    assert big.id in queue.get_job_ids() and not queue.started_job_registry.get_job_ids()
    worker.work(burst=True, logging_level="WARNING")
    big.refresh()
    assert big.get_status() == JobStatus.FINISHED and big.return_value() == "imported 5"
    # the fifth checkpoint ended a turn too: the sixth found the generator done at once
    assert big.meta["fair_turns"] == 6 and logged(conn, big) == list(range(5))
    assert conn.get(f"test:success:{big.id}") == b"1"  # the callback ran once, at the very end
    assert after.get_status() == JobStatus.FINISHED  # the dependent ran after it


def test_on_a_plain_queue_a_turn_goes_to_the_back_of_the_queue(conn: Redis) -> None:
    queue = Queue("plain", connection=conn)
    big = queue.enqueue(jobs.every_item_a_turn, "acme", 3, 0.005)
    queue.enqueue(jobs.small, "s1")
    queue.enqueue(jobs.small, "s2")
    work(conn, queue)
    starts = [raw.decode().split() for raw in conn.lrange(jobs.SMALL_STARTS, 0, -1)]
    items = [raw.decode().split() for raw in conn.lrange(jobs.items_key(big.id), 0, -1)]
    timeline = sorted([(float(t), f"item {i}") for i, t in items] + [(float(t), name) for name, t in starts])
    assert [what for _, what in timeline] == ["item 0", "s1", "s2", "item 1", "item 2"]


def test_in_a_fair_queue_a_turn_goes_behind_the_other_tenants(conn: Redis) -> None:
    queue = FairQueue("imports", connection=conn, settings=settings())
    big = queue.enqueue(jobs.every_item_a_turn, "big", 3, 0.005, fair_tenant="big")
    work(conn, queue, max_jobs=1)  # its first turn
    for tenant in ("a", "b"):  # tenants that arrive while it runs
        queue.enqueue(jobs.small, tenant, fair_tenant=tenant)
    work(conn, queue)
    starts = [raw.decode().split() for raw in conn.lrange(jobs.SMALL_STARTS, 0, -1)]
    items = [raw.decode().split() for raw in conn.lrange(jobs.items_key(big.id), 0, -1)]
    timeline = sorted([(float(t), f"item {i}") for i, t in items] + [(float(t), name) for name, t in starts])
    assert [what for _, what in timeline] == ["item 0", "a", "b", "item 1", "item 2"]
    assert big.get_status() == JobStatus.FINISHED


def test_a_turn_is_not_a_new_enqueue_for_backlog_caps(conn: Redis) -> None:
    capped = settings(tiers=TiersConfig(max_backlog={"free": 1}))
    queue = FairQueue("imports", connection=conn, settings=capped)
    big = queue.enqueue(jobs.every_item_a_turn, "acme", 3, 0.005, fair_tenant="acme")
    worker = WeightedSimpleWorker([queue], connection=conn, settings=capped)
    worker.work(burst=True, max_jobs=1, logging_level="WARNING")  # turn 1; big waits again (1 of 1)
    assert big.get_status() == JobStatus.QUEUED
    worker.work(burst=True, logging_level="WARNING")
    assert big.get_status() == JobStatus.FINISHED and logged(conn, big) == [0, 1, 2]


def test_a_failed_turn_is_retried_from_the_saved_cursor(conn: Redis) -> None:
    queue = FairQueue("imports", connection=conn, settings=settings())
    big = queue.enqueue(jobs.every_item_a_turn, "acme", 6, 0.005, fail_at=3, fair_tenant="acme", retry=Retry(max=1))
    work(conn, queue)
    big.refresh()
    assert big.get_status() == JobStatus.FINISHED
    assert logged(conn, big) == list(range(6))  # item 3 failed once, then ran from cursor 3; none twice


def test_a_failure_without_retry_fails_the_job_as_rq_would(conn: Redis) -> None:
    queue = FairQueue("imports", connection=conn, settings=settings())
    big = queue.enqueue(jobs.every_item_a_turn, "acme", 6, 0.005, fail_at=3, fair_tenant="acme")
    work(conn, queue)
    assert big.get_status() == JobStatus.FAILED
    assert big.id in queue.failed_job_registry.get_job_ids()
    assert logged(conn, big) == [0, 1, 2]


def test_warm_shutdown_of_an_in_process_worker_stops_the_job_at_its_next_checkpoint(conn: Redis) -> None:
    queue = FairQueue("imports", connection=conn, settings=settings())
    big = queue.enqueue(jobs.one_long_turn, "acme", 20, 0.0, term_at=4, fair_tenant="acme")
    worker = work(conn, queue)  # SIGTERM to this process at item 4: a warm shutdown
    assert worker.get_state() != "busy"
    big.refresh()
    assert big.get_status() == JobStatus.QUEUED
    assert big.meta["fair_cursor"] == 5 and logged(conn, big) == [0, 1, 2, 3, 4]
    big.meta["fair_cursor"] = 5  # the next run must not send SIGTERM again: resume with term_at past the end
    big.kwargs["term_at"] = None
    big.save()
    work(conn, queue)
    assert big.get_status() == JobStatus.FINISHED and logged(conn, big) == list(range(20))


def test_outside_a_weighted_worker_the_generator_runs_to_its_end(conn: Redis) -> None:
    queue = Queue("sync", connection=conn, is_async=False)
    job = queue.enqueue(jobs.every_item_a_turn, "acme", 4, 0.005)
    assert job.return_value() == "imported 4" and logged(conn, job) == [0, 1, 2, 3]


@pytest.mark.parametrize(("kwargs", "named"), [({"slice": "soon"}, "slice"), ({"slice": 0}, "slice"),
                                                ({"save_every": 0}, "save_every")])
def test_bad_arguments_are_refused_naming_them(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        interruptible(**kwargs)


# -- crash recovery: resumed from the saved cursor, up to interruptible.max_resumes ---------------------


def started_and_abandoned(conn: Redis, queue: Queue, meta: dict[str, Any]) -> Job:
    """An interruptible job as a worker killed mid-turn leaves it: started (its execution in the
    StartedJobRegistry), its cursor saved, and nobody left to finish it."""
    queue.enqueue(jobs.batched_saves, "acme", 10, 0.0, meta={"fair_tenant": "acme", **meta})
    worker = WeightedSimpleWorker([queue], connection=conn, settings=settings())
    result = worker.dequeue_job_and_maintain_ttl(None)
    assert result is not None
    job, _ = result
    worker.prepare_execution(job)
    job.set_status(JobStatus.STARTED)
    conn.delete(Keys(PREFIX).recovery_turn(queue.key))  # the worker took the queue's recovery turn: lapsed
    return job


@pytest.mark.parametrize("fair", [False, True], ids=["plain", "fair"])
def test_an_abandoned_interruptible_job_is_queued_again_from_its_cursor(conn: Redis, fair: bool) -> None:
    queue = FairQueue("imports", connection=conn, settings=settings()) if fair else Queue("imports", connection=conn)
    job = started_and_abandoned(conn, queue, {"fair_cursor": 5, "fair_turns": 1, "fair_items": 5})
    check = Recovery(conn, Keys(PREFIX), 3.0, clock=lambda: time.time() + 4, max_resumes=2)
    assert check.run([queue]) == [job.id]
    job.refresh()
    assert job.get_status() == JobStatus.QUEUED and job.meta["fair_resumes"] == 1
    assert queue.get_job_ids() == [job.id] and not queue.started_job_registry.get_job_ids()
    work(conn, queue)
    assert job.get_status() == JobStatus.FINISHED and logged(conn, job) == list(range(5, 10))


def test_past_max_resumes_an_abandoned_interruptible_job_is_handed_back_as_rq_would(conn: Redis) -> None:
    queue = Queue("imports", connection=conn)
    job = started_and_abandoned(conn, queue, {"fair_cursor": 5, "fair_resumes": 2})
    check = Recovery(conn, Keys(PREFIX), 3.0, clock=lambda: time.time() + 4, max_resumes=2)
    assert check.run([queue]) == [job.id]
    assert job.get_status() == JobStatus.FAILED
    assert "AbandonedJobError" in (Job.fetch(job.id, connection=conn).exc_info or "")


def test_max_resumes_and_count_turns_settings() -> None:
    assert settings().interruptible.max_resumes == 5 and settings().interruptible.count_turns is False
    with pytest.raises(ValueError, match="max_resumes"):
        settings(interruptible={"max_resumes": -1})


@pytest.mark.parametrize("count_turns", [False, True])
def test_rate_limits_count_later_turns_only_with_count_turns(conn: Redis, count_turns: bool) -> None:
    limited = settings(tiers=TiersConfig(rate={"free": "1/m"}), interruptible={"count_turns": count_turns})
    queue = FairQueue("imports", connection=conn, settings=limited)
    big = queue.enqueue(jobs.every_item_a_turn, "acme", 3, 0.005, fair_tenant="acme")
    work(conn, queue, limited)
    if count_turns:  # its second turn is a second start within the minute: held (parked), not run
        assert big.get_status() == JobStatus.QUEUED and logged(conn, big) == [0]
    else:
        assert big.get_status() == JobStatus.FINISHED and logged(conn, big) == [0, 1, 2]


def test_each_turn_takes_and_releases_a_concurrency_slot(conn: Redis) -> None:
    limited = settings(concurrency={"enabled": True})
    queue = FairQueue("imports", connection=conn, settings=limited)
    big = queue.enqueue(jobs.every_item_a_turn, "acme", 3, 0.005, fair_tenant="acme")
    worker = WeightedSimpleWorker([queue], connection=conn, settings=limited)
    worker.work(burst=True, max_jobs=1, logging_level="WARNING")
    assert big.get_status() == JobStatus.QUEUED
    assert conn.zcard(Keys(PREFIX).leases("acme")) == 0  # released with the turn's end
    worker.work(burst=True, logging_level="WARNING")
    assert big.get_status() == JobStatus.FINISHED
    assert conn.zcard(Keys(PREFIX).leases("acme")) == 0
    big.refresh()
    acquired = conn.hget(Keys(PREFIX).limit_stats(), "free:acquired")  # counted as the worker stopped
    assert acquired is not None and int(acquired) == big.meta["fair_turns"]  # one slot per turn
