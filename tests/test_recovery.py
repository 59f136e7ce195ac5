"""Bounded crash recovery (``recovery.abandon_after``), against the real redis-server and real `rq worker`
processes started with the unchanged rq CLI.

The bound under test is the contract: a job whose worker died is handed back (retried, else failed as
abandoned) within ``abandon_after`` plus a few seconds, here 3 s + a generous 12 s for a shared 2-core
machine. rq alone takes at least the job's heartbeat TTL (61 s with these workers, 90 s with rq's
defaults) and then waits for some worker's maintenance pass (every 10 minutes, 15 with its lock left
held), so each bound below fails without this feature.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import recovery_jobs
import yaml
from conftest import Fleet, command_calls, session_pids, wait_for, write_settings
from redis import Redis
from rq import Queue, Retry
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, StartedJobRegistry

from fair_router import FairQueue, Settings, SettingsError, WeightedSimpleWorker, load_settings
from fair_router.config.settings import ConcurrencyConfig, RecoveryConfig
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.rq_internals.worker import revive_scheduler
from fair_router.store.scripts import AbandonScript
from fair_router.workers.limiter import ConcurrencyLimiter
from fair_router.workers.recovery import Recovery

PREFIX = "recovery_test"
QUEUE = "work"
KEYS = Keys(PREFIX)
ABANDON = 3.0
BOUND = ABANDON + 12.0
"""Seconds from the kill within which the job must be handed back: abandon_after plus generous slack."""

pytestmark = pytest.mark.usefixtures("isolated_settings")


# -- helpers ---------------------------------------------------------------------------------------


def write_config(tmp_path: Path, **extra: Any) -> Path:
    """Settings for the worker subprocesses: our prefix and a short abandon_after, plus ``extra``."""
    return write_settings(tmp_path, {"prefix": PREFIX, "recovery": {"abandon_after": f"{ABANDON:g}s"}, **extra})


@pytest.fixture
def fleet(fleet_of: Callable[..., Fleet]) -> Fleet:
    return fleet_of(QUEUE)


def server_time(conn: Redis) -> float:
    seconds, micros = conn.time()
    return float(seconds) + micros / 1_000_000


def starts(conn: Redis, job: Job) -> list[tuple[float, int]]:
    """(server time, pid) of each run of a recovery_jobs job, in order."""
    return [tuple(json.loads(raw)) for raw in conn.lrange(f"test:starts:{job.id}", 0, -1)]  # type: ignore[misc]


def status(conn: Redis, job: Job) -> JobStatus:
    return Job.fetch(job.id, connection=conn).get_status(refresh=True)


def the_queue(conn: Redis, fair: bool) -> Queue:
    return FairQueue(QUEUE, connection=conn, prefix=PREFIX) if fair else Queue(QUEUE, connection=conn)


def enqueue(queue: Queue, func: Any, *args: Any, tenant: str, **options: Any) -> Job:
    """``func(*args)`` on ``queue`` for ``tenant`` (as its fair tenant on a FairQueue, in meta otherwise)."""
    if isinstance(queue, FairQueue):
        return queue.enqueue(func, *args, fair_tenant=tenant, result_ttl=600, **options)
    return queue.enqueue(func, *args, meta={"fair_tenant": tenant}, result_ttl=600, **options)


def killed_mid_job(conn: Redis, fleet: Fleet, jobs: list[Job]) -> float:
    """Wait until every job of ``jobs`` runs, then SIGKILL their workers (worker and horse at once, as a
    lost machine); returns the server time right after the kill."""
    wait_for(lambda: all(len(starts(conn, job)) == 1 for job in jobs), 30, "the jobs to start", fleet)
    victims = {fleet.running(starts(conn, job)[0][1]).pid: fleet.running(starts(conn, job)[0][1]) for job in jobs}
    assert len(victims) == len(jobs), "each job should run on a worker of its own"
    for proc in victims.values():
        fleet.kill(proc)
    return server_time(conn)


def report(label: str, seconds: float) -> None:
    """Print a measured recovery time (``pytest -s`` shows them; docs/recovery.md quotes them)."""
    print(f"\n[recovery] {label}: {seconds:.2f} s after the kill (bound {BOUND:g} s)")


# -- settings --------------------------------------------------------------------------------------


def test_abandon_after_defaults_to_a_minute_and_reads_every_duration_form(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().recovery.abandon_after == 60.0
    assert RecoveryConfig(abandon_after="90s").abandon_after == 90.0
    assert RecoveryConfig(abandon_after=timedelta(minutes=2)).abandon_after == 120.0
    monkeypatch.setenv("FAIR_ROUTER_RECOVERY__ABANDON_AFTER", "5m")
    assert load_settings().recovery.abandon_after == 300.0


@pytest.mark.parametrize(("value", "reason"), [
    ("2s", "must be at least 3s"), ("0", "at least 1ms"), ("-5", "invalid duration"), ("soon", "invalid duration"),
])
def test_invalid_abandon_after_is_reported_with_key_and_value(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str, reason: str
) -> None:
    path = tmp_path / "fair_router.yaml"
    path.write_text(yaml.safe_dump({"recovery": {"abandon_after": value}}), encoding="utf-8")
    with pytest.raises(SettingsError) as raised:
        load_settings(path)
    message = str(raised.value)
    assert str(path) in message and "recovery.abandon_after" in message and reason in message, message


# -- one check, in process (the clock is injected where a heartbeat must look old) ----------------


def started_by_a_worker_that_died(conn: Redis, queue: Queue, **options: Any) -> Job:
    """A job as a worker leaves it when killed right after starting it: dequeued, its execution in the
    StartedJobRegistry (rq's own prepare_execution), and nobody left to finish it."""
    enqueue(queue, recovery_jobs.long_job, 1, tenant="acme", **options)
    worker = WeightedSimpleWorker([queue], connection=conn, settings=Settings(prefix=PREFIX))
    result = worker.dequeue_job_and_maintain_ttl(None)
    assert result is not None
    job, _ = result
    worker.prepare_execution(job)
    job.set_status(JobStatus.STARTED)
    return job


def recovery(conn: Redis, clock_skip: float = 0.0) -> Recovery:
    """A worker's share of recovery, its clock ``clock_skip`` seconds ahead of now."""
    return Recovery(conn, KEYS, ABANDON, clock=(lambda: time.time() + clock_skip) if clock_skip else None)


def check_now(conn: Redis, queue: Queue, clock_skip: float = 0.0, **options: Any) -> list[str]:
    """One check of ``queue`` an interval after the last one (whose turn has lapsed)."""
    conn.delete(KEYS.recovery_turn(queue.key))
    return recovery(conn, clock_skip).run([queue], **options)


def test_a_job_without_heartbeat_for_abandon_after_is_retried_as_rq_would(conn: Redis) -> None:
    queue = Queue(QUEUE, connection=conn)
    job = started_by_a_worker_that_died(conn, queue, retry=Retry(max=1))
    assert check_now(conn, queue) == []  # its heartbeat is fresh: alive as far as anyone can tell
    assert check_now(conn, queue, ABANDON + 1) == [job.id]
    assert status(conn, job) == JobStatus.QUEUED
    assert queue.get_job_ids() == [job.id]
    assert Job.fetch(job.id, connection=conn).retries_left == 0
    assert StartedJobRegistry(queue=queue).get_job_ids(cleanup=False) == []
    assert conn.zcard(KEYS.abandoned(StartedJobRegistry(queue=queue).key)) == 0
    assert conn.get(KEYS.abandoned_total(StartedJobRegistry(queue=queue).key)) == b"1"


def test_a_job_without_retries_left_goes_to_failed_with_abandoned_job_error(conn: Redis) -> None:
    queue = FairQueue(QUEUE, connection=conn, prefix=PREFIX)
    job = started_by_a_worker_that_died(conn, queue)
    assert check_now(conn, queue, ABANDON + 1) == [job.id]
    assert status(conn, job) == JobStatus.FAILED
    assert FailedJobRegistry(queue=queue).get_job_ids() == [job.id]
    assert "AbandonedJobError" in (Job.fetch(job.id, connection=conn).exc_info or "")
    assert queue.count == 0 and queue.get_job_ids() == []


def test_one_worker_per_interval_checks_a_queue_and_rq_maintenance_lock_does_not_matter(conn: Redis) -> None:
    queue = Queue(QUEUE, connection=conn)
    conn.set(queue.registry_cleaning_key, 1, ex=899)  # rq's maintenance lock, as a worker killed mid-pass leaves it
    job = started_by_a_worker_that_died(conn, queue, retry=Retry(max=1))
    conn.delete(KEYS.recovery_turn(queue.key))  # lapsed since the worker took it as it started
    check = recovery(conn)
    assert check.run([queue]) == []  # takes the queue's turn: nothing is abandoned yet
    assert 0 < conn.pttl(KEYS.recovery_turn(queue.key)) <= check.every * 1000
    conn.set(KEYS.recovery_turn(queue.key), 1, px=60_000)  # another worker's turn (made long: no race here)
    assert recovery(conn, clock_skip=ABANDON + 1).run([queue]) == []  # so this one skips the queue
    conn.delete(KEYS.recovery_turn(queue.key))  # the turn lapses
    assert recovery(conn, clock_skip=ABANDON + 1).run([queue]) == [job.id]
    assert conn.ttl(queue.registry_cleaning_key) > 0  # never touched rq's lock


def test_an_entry_is_moved_only_if_no_heartbeat_rewrote_it_since_it_was_read(conn: Redis) -> None:
    queue = Queue(QUEUE, connection=conn)
    job = started_by_a_worker_that_died(conn, queue)
    registry = StartedJobRegistry(queue=queue)
    ((member, score),) = conn.zrange(registry.key, 0, -1, withscores=True)
    staging, total = KEYS.abandoned(registry.key), KEYS.abandoned_total(registry.key)
    move = AbandonScript(conn)
    assert move(registry.key, staging, total, [(member.decode(), score - 1)]).run() == []  # a heartbeat landed: stays
    assert conn.zcard(registry.key) == 1 and conn.zcard(staging) == 0 and conn.get(total) is None
    assert move(registry.key, staging, total, [(member.decode(), score)]).run() == [member.decode()]
    assert conn.zcard(registry.key) == 0 and conn.zscore(staging, member) == 0
    assert conn.get(total) == b"1"  # counted by the move itself

    # A check that died after moving it: the next one hands the staged entry back, as rq would.
    assert check_now(conn, queue) == [job.id]
    assert status(conn, job) == JobStatus.FAILED and conn.zcard(staging) == 0


def test_the_abandoned_jobs_slot_is_freed_and_counted_as_reclaimed(conn: Redis) -> None:
    settings = Settings(prefix=PREFIX, concurrency=ConcurrencyConfig(enabled=True, lease_ttl=600))
    slots = ConcurrencyLimiter(conn, KEYS, TierBook(conn, KEYS, settings.tiers), settings.concurrency)
    queue = Queue(QUEUE, connection=conn)
    job = started_by_a_worker_that_died(conn, queue)
    assert slots.acquire("acme", job.id) is not None  # held for 10 minutes, as the dead worker left it
    assert slots.acquire("acme", "another") is None  # free tier: one at a time
    freed = check_now(conn, queue, ABANDON + 1, on_abandoned=lambda abandoned: slots.reclaim("acme", abandoned.id))
    assert freed == [job.id]
    assert slots.acquire("acme", "another") is not None
    slots.flush()
    assert conn.hget(KEYS.limit_stats(), "free:reclaimed") == b"1"


def test_a_fair_job_handed_back_is_queued_once(conn: Redis) -> None:
    """The dead worker popped the job from the fair queue before it started it: recover() must not put
    it back a second time once it is queued again for its retry."""
    queue = FairQueue(QUEUE, connection=conn, prefix=PREFIX)
    job = started_by_a_worker_that_died(conn, queue, retry=Retry(max=2))
    assert check_now(conn, queue, ABANDON + 1) == [job.id]
    time.sleep(ABANDON + 0.2)  # recover() compares the pop time with the real clock
    for _ in range(2):  # later checks, long after the pop
        assert check_now(conn, queue, ABANDON + 120) == []
    assert queue.count == 1 and queue.get_job_ids() == [job.id]


@pytest.mark.parametrize("fair", [False, True], ids=["plain", "fair"])
def test_a_job_whose_worker_died_before_it_started_is_queued_again_not_dropped(conn: Redis, fair: bool) -> None:
    """rq 3.0's cleanup hands back only STARTED jobs: one whose worker died after writing its execution but
    before its horse marked it started never ran, and goes back to the front of its queue, retries intact."""
    queue = FairQueue(QUEUE, connection=conn, prefix=PREFIX) if fair else Queue(QUEUE, connection=conn)
    job = started_by_a_worker_that_died(conn, queue, retry=Retry(max=1))
    job.set_status(JobStatus.QUEUED)  # as prepare_execution leaves it: the horse never got to STARTED
    enqueue(queue, recovery_jobs.long_job, 2, tenant="acme")
    check_now(conn, queue, ABANDON + 1)
    assert status(conn, job) == JobStatus.QUEUED
    assert queue.get_job_ids()[0] == job.id and queue.count == 2
    assert Job.fetch(job.id, connection=conn).retries_left == 1  # it never ran: no retry spent
    assert StartedJobRegistry(queue=queue).get_job_ids(cleanup=False) == []
    assert conn.zcard(KEYS.abandoned(StartedJobRegistry(queue=queue).key)) == 0


# -- real workers, killed mid-job -----------------------------------------------------------------


@pytest.mark.parametrize("rq_lock_held", [False, True], ids=["rq-lock-free", "rq-lock-held"])
@pytest.mark.parametrize("fair", [False, True], ids=["plain", "fair"])
def test_dead_workers_jobs_are_handed_back_within_the_bound_while_the_others_idle(
    conn: Redis, fleet: Fleet, tmp_path: Path, fair: bool, rq_lock_held: bool
) -> None:
    fleet.config = write_config(tmp_path, fair_queues=[QUEUE] if fair else [])
    fleet.start(3, scheduler=False)
    fleet.wait_registered(conn, 3)
    queue = the_queue(conn, fair)
    retried = enqueue(queue, recovery_jobs.slow_first_run, 600, tenant="acme", retry=Retry(max=1))
    failed = enqueue(queue, recovery_jobs.slow_first_run, 600, tenant="bigco")
    if rq_lock_held:  # taken as a worker killed during rq's maintenance pass took it: it stays for 899 s
        wait_for(lambda: conn.set(queue.registry_cleaning_key, 1, nx=True, ex=899), 30, "rq's lock to be free")

    killed_at = killed_mid_job(conn, fleet, [retried, failed])  # the third worker sits idle in its fetch
    failed_registry = FailedJobRegistry(queue=queue)
    wait_for(lambda: len(starts(conn, retried)) == 2 and failed.id in failed_registry.get_job_ids(),
             BOUND, "the dead workers' jobs to be handed back", fleet)
    seen_failed = server_time(conn)
    rerun = starts(conn, retried)[1][0] - killed_at
    assert rerun <= BOUND
    report(f"{'fair' if fair else 'plain'} queue, rq lock {'held' if rq_lock_held else 'free'}: rerun started", rerun)
    report(f"{'fair' if fair else 'plain'} queue, rq lock {'held' if rq_lock_held else 'free'}: failed seen",
           seen_failed - killed_at)

    wait_for(lambda: status(conn, retried) == JobStatus.FINISHED, 10, "the rerun to finish", fleet)
    assert "AbandonedJobError" in (Job.fetch(failed.id, connection=conn).exc_info or "")
    assert status(conn, failed) == JobStatus.FAILED
    assert len(starts(conn, failed)) == 1
    assert StartedJobRegistry(queue=queue).get_job_ids(cleanup=False) == []
    assert len(queue) == 0
    if rq_lock_held:
        assert conn.ttl(queue.registry_cleaning_key) > 0  # still held: rq's maintenance did none of it


def test_a_dead_weighted_simple_workers_job_is_retried_within_the_bound(
    conn: Redis, fleet: Fleet, tmp_path: Path
) -> None:
    fleet.config = write_config(tmp_path)
    fleet.start(2, worker_class="fair_router.WeightedSimpleWorker", scheduler=False)
    fleet.wait_registered(conn, 2)
    job = enqueue(Queue(QUEUE, connection=conn), recovery_jobs.slow_first_run, 600, tenant="acme",
                  retry=Retry(max=1))
    killed_at = killed_mid_job(conn, fleet, [job])  # the job runs inside the worker process: both die
    wait_for(lambda: len(starts(conn, job)) == 2, BOUND, "the job to run again", fleet)
    rerun = starts(conn, job)[1][0] - killed_at
    assert rerun <= BOUND
    report("WeightedSimpleWorker, plain queue: rerun started", rerun)
    wait_for(lambda: status(conn, job) == JobStatus.FINISHED, 10, "the rerun to finish", fleet)


def test_live_jobs_longer_than_abandon_after_are_left_alone(conn: Redis, fleet: Fleet, tmp_path: Path) -> None:
    """Both workers heartbeat a running job every abandon_after / 3: rq's SimpleWorker would send none at
    all, rq's forking Worker one every 30 s."""
    fleet.config = write_config(tmp_path)
    fleet.start(1, queue="forking", scheduler=False)
    fleet.start(1, worker_class="fair_router.WeightedSimpleWorker", queue="simple", scheduler=False)
    fleet.wait_registered(conn, 2)
    jobs = [enqueue(Queue(name, connection=conn), recovery_jobs.long_job, 4 * ABANDON, tenant="acme",
                    retry=Retry(max=3)) for name in ("forking", "simple")]
    wait_for(lambda: all(len(starts(conn, job)) == 1 for job in jobs), 30, "the jobs to start", fleet)
    fleet.queues = ["forking", "simple"]
    fleet.start(2, scheduler=False)  # idle workers on both queues, checking them all along
    wait_for(lambda: all(status(conn, job) == JobStatus.FINISHED for job in jobs), 4 * ABANDON + 30,
             "the jobs to finish", fleet)
    assert [len(starts(conn, job)) for job in jobs] == [1, 1]
    assert [FailedJobRegistry(name, connection=conn).count for name in ("forking", "simple")] == [0, 0]


def test_the_dead_jobs_slot_is_free_within_the_bound(conn: Redis, fleet: Fleet, tmp_path: Path) -> None:
    """A lease far longer than abandon_after: only the hand-back can free the slot in time, and it also
    unparks the tenant in the fair queue, where its next job waits."""
    fleet.config = write_config(tmp_path, fair_queues=[QUEUE], concurrency={"enabled": True, "lease_ttl": "10m"})
    fleet.start(2, scheduler=False)
    fleet.wait_registered(conn, 2)
    queue = FairQueue(QUEUE, connection=conn, prefix=PREFIX)
    first = enqueue(queue, recovery_jobs.slow_first_run, 600, tenant="acme")  # free tier: one at a time
    killed_at = killed_mid_job(conn, fleet, [first])
    assert conn.zscore(KEYS.leases("acme"), first.id) is not None
    second = enqueue(queue, recovery_jobs.slow_first_run, 0, tenant="acme")
    wait_for(lambda: len(starts(conn, second)) == 1, BOUND, "the tenant's next job to get the slot", fleet)
    report("slot of a dead job (lease_ttl 10m), next job of the tenant started", starts(conn, second)[0][0] - killed_at)
    assert starts(conn, second)[0][0] - killed_at <= BOUND
    assert status(conn, first) == JobStatus.FAILED
    wait_for(lambda: conn.zcard(KEYS.leases("acme")) == 0, 10, "the slot to be released", fleet)


def test_idle_workers_read_each_queue_at_most_once_per_interval(conn: Redis, fleet: Fleet, tmp_path: Path) -> None:
    """The cost side: however many workers, a queue's StartedJobRegistry is read once per check interval
    (here abandon_after 8 s: every 2 s), by whichever worker takes the queue's turn."""
    abandon = 8.0
    fleet.config = tmp_path / "fair_router.yaml"
    fleet.config.write_text(yaml.safe_dump({"prefix": PREFIX, "recovery": {"abandon_after": f"{abandon:g}s"}}))
    fleet.queues = ["one", "two"]
    fleet.start(4, scheduler=False)
    fleet.wait_registered(conn, 4)
    time.sleep(1)
    before, start = command_calls(conn, "zrange"), time.monotonic()
    time.sleep(8)
    reads, window = command_calls(conn, "zrange") - before, time.monotonic() - start
    every = Recovery(conn, KEYS, abandon).every
    assert 2 <= reads <= 2 * (window // every + 1), (reads, window)  # 2 queues; 4 workers would read 4x as often


def test_a_dead_scheduler_process_is_restarted_within_a_check(conn: Redis, fleet: Fleet, tmp_path: Path) -> None:
    """rq's scheduler process exits when Redis stays away past redis-py's retries (a Redis restart), and rq
    starts it again only in the worker's next maintenance, 10 minutes later."""
    fleet.config = write_config(tmp_path)
    (worker,) = fleet.start(scheduler=True)
    wait_for(lambda: conn.exists(f"rq:scheduler-lock:{QUEUE}") and len(session_pids(worker.pid)) == 2, 30,
             "the worker's scheduler to start", fleet)
    (scheduler,) = [pid for pid in session_pids(worker.pid) if pid != worker.pid]
    os.kill(scheduler, signal.SIGKILL)
    job = Queue(QUEUE, connection=conn).enqueue_in(timedelta(seconds=1), recovery_jobs.long_job, 0, result_ttl=600)
    wait_for(lambda: status(conn, job) == JobStatus.FINISHED, BOUND, "the scheduled job to run", fleet)
    assert "its scheduler process died; restarting it" in fleet.logs()


def test_a_warm_shutdown_does_not_start_the_scheduler_it_stopped_again(conn: Redis, fleet: Fleet,
                                                                         tmp_path: Path) -> None:
    """A SIGTERM stops rq's scheduler at once while the running job finishes: the recovery checks meanwhile must
    not take that for a death and start another scheduler process in a worker that is on its way out."""
    fleet.config = write_config(tmp_path)
    (worker,) = fleet.start(scheduler=True)
    wait_for(lambda: conn.exists(f"rq:scheduler-lock:{QUEUE}"), 30, "the worker's scheduler to start", fleet)
    job = Queue(QUEUE, connection=conn).enqueue(recovery_jobs.long_job, 4, result_ttl=600)
    wait_for(lambda: conn.llen(f"test:starts:{job.id}") == 1, 30, "the job to start", fleet)
    worker.send_signal(signal.SIGTERM)
    assert fleet.wait_exit(worker) == 0
    assert status(conn, job) == JobStatus.FINISHED  # the warm shutdown let it finish, through several checks
    logs = fleet.logs()
    assert logs.count(f"Scheduler for {QUEUE} started") == 1, logs
    assert "restarting it" not in logs


def test_a_burst_workers_scheduler_is_never_revived_as_a_process(conn: Redis) -> None:
    """In burst mode rq runs the scheduler once, in the worker, and keeps its object without a process: a
    recovery check must not start one (it would outlive the burst, and the worker's stop would wait on it)."""
    worker = WeightedSimpleWorker([QUEUE], connection=conn, settings=Settings(prefix=PREFIX))
    worker.work(burst=True, with_scheduler=True)
    assert worker.scheduler is not None and worker.scheduler._process is None
    revive_scheduler(worker)
    assert worker.scheduler._process is None
