"""Fleet-wide per-tenant concurrency limits, against the real redis-server and real `rq worker` processes.

Timing notes (rq 2.12): a snoozed job waits in the ScheduledJobRegistry, whose scores are whole seconds
(truncated), and the scheduler that runs inside a `--with-scheduler` worker polls every second
(``RQScheduler(interval=1)``). So a snoozed job is back in its queue about 0-1.5 s after its snooze,
whatever the sub-second snooze/jitter settings; deadlines below allow for many such round trips.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import limit_jobs
import pytest
from conftest import Fleet, wait_for, write_limit_settings
from redis import Redis
from rq import Queue, Retry
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, FinishedJobRegistry, StartedJobRegistry

from fair_router import FairJobFunction, FairRouter, Settings, WeightedSimpleWorker, fair_job
from fair_router.config.settings import ConcurrencyConfig
from fair_router.controls.concurrency import Lease
from fair_router.controls.fairstate import FairUnparkScript
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.fairqueue.queue import FairQueue
from fair_router.observe.counters import COUNTERS
from fair_router.workers.limiter import ConcurrencyLimiter

PREFIX = "limits_test"
QUEUE = "limited"
KEYS = Keys(PREFIX)
FAST = {"enabled": True, "lease_ttl": "5s", "snooze": "200ms", "jitter": "300ms"}


# -- helpers ---------------------------------------------------------------------------------------


pytestmark = pytest.mark.usefixtures("isolated_settings")


def write_config(tmp_path: Path, **extra: Any) -> Path:
    """A settings file for the worker subprocesses: limits on, fast leases and snoozes, our prefix."""
    return write_limit_settings(tmp_path, PREFIX, FAST, **extra)


@pytest.fixture
def fleet(fleet_of: Callable[..., Fleet]) -> Fleet:
    return fleet_of(QUEUE)


def job_of(conn: Redis, func: Callable[..., Any]) -> FairJobFunction[Any, Any]:
    """``func`` as a fair job on QUEUE under our prefix (tenant given per call with ``fair_tenant=``)."""
    return fair_job(QUEUE, rules=[], router=FairRouter(conn, prefix=PREFIX), result_ttl=600)(func)


def limiter(conn: Redis, clock: Callable[[], float] | None = None, **config: Any) -> ConcurrencyLimiter:
    """A limiter on our prefix, as the workers build it (default tiers: free 1, pro 3)."""
    settings = ConcurrencyConfig(enabled=True, **config)
    return ConcurrencyLimiter(conn, KEYS, TierBook(conn, KEYS), settings, clock=clock)


def counters(conn: Redis, tier: str) -> dict[str, int]:
    return limiter(conn).counters().get(tier, dict.fromkeys(COUNTERS, 0))


def acquire_when_free(slots: ConcurrencyLimiter, tenant: str, job_id: str, timeout: float) -> Lease:
    """Retry ``acquire`` every 50 ms until it grants a slot; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (lease := slots.acquire(tenant, job_id)) is None:
        assert time.monotonic() < deadline, f"{tenant} had no free slot within {timeout} s"
        time.sleep(0.05)
    return lease


def intervals(conn: Redis, log_key: str) -> list[tuple[float, float]]:
    return [(start, end) for start, end, *_ in (json.loads(raw) for raw in conn.lrange(log_key, 0, -1))]


def max_concurrency(spans: list[tuple[float, float]]) -> int:
    """Most intervals open at one instant; an interval ending exactly when another starts does not overlap."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])  # -1 sorts first
    peak = open_now = 0
    for _, step in events:
        open_now += step
        peak = max(peak, open_now)
    return peak


def wait_blocked(conn: Redis, n: int, fleet: Fleet) -> None:
    """Until ``n`` clients wait in a blocking fetch at one instant: the workers' start-up is over, and jobs enqueued
    next are handed to them at once (a worker still starting would leave the others' jobs to run one by one)."""
    wait_for(lambda: sum("b" in client["flags"] for client in conn.client_list()) >= n, 30,
             f"{n} workers waiting for jobs", fleet)


def status(conn: Redis, job_id: str) -> JobStatus:
    return Job.fetch(job_id, connection=conn).get_status()


# -- the overlap detector itself -------------------------------------------------------------------


def test_max_concurrency_detects_overlaps() -> None:
    assert max_concurrency([]) == 0
    assert max_concurrency([(0, 1), (1, 2), (2, 3)]) == 1  # back to back: never two at once
    assert max_concurrency([(0, 2), (1.999, 3)]) == 2
    assert max_concurrency([(0, 10), (1, 2), (3, 4), (1.5, 3.5)]) == 3
    assert max_concurrency([(5, 6), (0, 1), (0.5, 5.5)]) == 2  # input order does not matter


# -- 1. limits hold across worker processes --------------------------------------------------------


def test_limits_hold_across_worker_processes(conn: Redis, fleet: Fleet, tmp_path: Path) -> None:
    fleet.config = write_config(tmp_path)
    record = job_of(conn, limit_jobs.record)
    fleet.start(3)
    fleet.wait_registered(conn, 3)
    wait_blocked(conn, 3, fleet)  # registered is not yet fetching: a slow start-up would make no contention

    # free tier, limit 1: six jobs of one tenant over three workers run one at a time.
    free = [record.enqueue("test:log:free", 0.3, fair_tenant="acme") for _ in range(6)]
    wait_for(lambda: conn.llen("test:log:free") == 6, 60, "the six free-tier jobs", fleet)
    assert max_concurrency(intervals(conn, "test:log:free")) == 1
    assert sorted(json.loads(raw)[2] for raw in conn.lrange("test:log:free", 0, -1)) == sorted(j.id for j in free)

    # pro tier, limit 3, with a fourth worker so that the limit (not the worker count) is what binds.
    FairRouter(conn, prefix=PREFIX).set_tier("bigco", "pro")
    fleet.start(1)
    fleet.wait_registered(conn, 4)
    wait_blocked(conn, 4, fleet)
    pro = [record.enqueue("test:log:pro", 0.5, fair_tenant="bigco") for _ in range(9)]
    wait_for(lambda: conn.llen("test:log:pro") == 9, 60, "the nine pro-tier jobs", fleet)
    assert 1 < max_concurrency(intervals(conn, "test:log:pro")) <= 3

    wait_for(lambda: all(status(conn, j.id) == JobStatus.FINISHED for j in free + pro), 30, "jobs to finish", fleet)
    fleet.stop_all()  # workers write their pending counters when they stop
    assert FailedJobRegistry(QUEUE, connection=conn).count == 0
    assert conn.exists(KEYS.leases("acme"), KEYS.leases("bigco")) == 0
    free_counts, pro_counts = counters(conn, "free"), counters(conn, "pro")
    assert free_counts["acquired"] == free_counts["released"] == 6, free_counts
    assert pro_counts["acquired"] == pro_counts["released"] == 9, pro_counts
    assert free_counts["snoozed"] > 0  # three workers, limit one: the others were turned away
    assert free_counts["reclaimed"] == pro_counts["reclaimed"] == 0  # refreshed leases never expired


# -- 2. the slot comes back however the job ends ---------------------------------------------------


def test_slot_released_when_the_job_raises(conn: Redis) -> None:
    settings = Settings(prefix=PREFIX, concurrency=ConcurrencyConfig(enabled=True, lease_ttl=5))
    failing = job_of(conn, limit_jobs.boom).enqueue(fair_tenant="acme")
    fine = job_of(conn, limit_jobs.mark).enqueue("test:fine", fair_tenant="acme")
    WeightedSimpleWorker([QUEUE], connection=conn, settings=settings).work(burst=True)

    assert status(conn, failing.id) == JobStatus.FAILED
    assert status(conn, fine.id) == JobStatus.FINISHED
    assert conn.zcard(KEYS.leases("acme")) == 0
    counts = counters(conn, "free")
    assert counts["acquired"] == counts["released"] == 2, counts
    assert counts["snoozed"] == counts["reclaimed"] == 0


def test_slot_released_when_the_job_times_out_or_its_horse_is_killed(
    conn: Redis, fleet: Fleet, tmp_path: Path
) -> None:
    fleet.config = write_config(tmp_path)
    timed_out = job_of(conn, limit_jobs.sleep_for).enqueue(30, fair_tenant="acme", job_timeout=1)
    killed = job_of(conn, limit_jobs.kill_own_horse).enqueue(fair_tenant="acme")
    (worker,) = fleet.start(scheduler=False, burst=True)  # forking WeightedWorker: jobs run in work horses
    assert fleet.wait_exit(worker) == 0

    failed = FailedJobRegistry(QUEUE, connection=conn)
    assert set(failed.get_job_ids()) == {timed_out.id, killed.id}
    assert "JobTimeoutException" in (Job.fetch(timed_out.id, connection=conn).exc_info or "")
    assert "Work-horse terminated unexpectedly" in (Job.fetch(killed.id, connection=conn).exc_info or "")
    assert conn.zcard(KEYS.leases("acme")) == 0
    counts = counters(conn, "free")
    assert counts["acquired"] == counts["released"] == 2, counts


# -- 3. a SIGKILLed worker's slot comes back by itself ---------------------------------------------


def test_sigkilled_worker_slot_is_reclaimed_and_the_job_reruns(conn: Redis, fleet: Fleet, tmp_path: Path) -> None:
    fleet.config = write_config(tmp_path, concurrency={"lease_ttl": "1s"})
    job = job_of(conn, limit_jobs.slow_first_run).enqueue(30, fair_tenant="acme", retry=Retry(max=1))
    (doomed,) = fleet.start(scheduler=False)
    wait_for(lambda: conn.llen(f"test:pids:{job.id}") == 1, 30, "the first run to start", fleet)
    raw_pid = conn.lindex(f"test:pids:{job.id}", 0)
    assert raw_pid is not None
    horse = int(raw_pid)
    assert horse > 1 and horse != doomed.pid  # the forking worker runs the job in a separate work horse

    # The machine dies: worker and work horse at once, no cleanup of any kind.
    doomed.kill()
    doomed.wait()
    with suppress(ProcessLookupError):
        os.kill(horse, signal.SIGKILL)
    expiry_ms = conn.zscore(KEYS.leases("acme"), job.id)
    assert expiry_ms is not None, "the running job held no slot"

    # Until its lease expires the dead job still holds the tenant's only slot (checked at a fixed instant)...
    assert limiter(conn, clock=lambda: (expiry_ms - 1) / 1000, lease_ttl=1).acquire("acme", "probe") is None
    # ...and after it, the next acquire takes the slot back, without anyone releasing it.
    probe = limiter(conn, lease_ttl=1)
    lease = acquire_when_free(probe, "acme", "probe", 10)
    assert conn.zscore(KEYS.leases("acme"), job.id) is None
    probe.release(lease)
    probe.flush()
    assert counters(conn, "free")["reclaimed"] >= 1

    # rq's abandoned-job handling: the job's started-registry entry expires and it is retried.
    started = StartedJobRegistry(queue=Queue(QUEUE, connection=conn))
    assert job.id in started.get_job_ids()
    started.cleanup(timestamp=time.time() + 10**6)
    assert status(conn, job.id) == JobStatus.QUEUED

    (rescuer,) = fleet.start(scheduler=False, burst=True)
    assert fleet.wait_exit(rescuer) == 0
    assert status(conn, job.id) == JobStatus.FINISHED
    assert conn.get(f"test:runs:{job.id}") == b"2"
    assert FailedJobRegistry(QUEUE, connection=conn).count == 0
    assert conn.exists(KEYS.leases("acme")) == 0
    counts = counters(conn, "free")
    assert counts["reclaimed"] >= 1 and counts["released"] >= 2, counts  # the probe's and the rerun's


# -- 4. snoozed jobs come back, with jitter, and all run -------------------------------------------


def test_snoozed_jobs_come_back_and_run(conn: Redis, fleet: Fleet, tmp_path: Path) -> None:
    fleet.config = write_config(tmp_path)
    blocker = limiter(conn, lease_ttl=60)
    held = blocker.acquire("acme", "blocker")  # the tenant's only slot, taken by someone else
    assert held is not None
    record = job_of(conn, limit_jobs.record)
    jobs = [record.enqueue("test:log:snoozed", 0.1, fair_tenant="acme") for _ in range(4)]
    fleet.start(2)

    # Every attempt is turned away while the slot is held: at least one snooze per job.
    wait_for(lambda: counters(conn, "free")["snoozed"] >= 4, 30, "four snoozes", fleet)
    assert conn.llen("test:log:snoozed") == 0
    assert FailedJobRegistry(QUEUE, connection=conn).count == 0
    blocker.release(held)

    wait_for(lambda: conn.llen("test:log:snoozed") == 4, 60, "the snoozed jobs to run", fleet)
    wait_for(lambda: all(status(conn, j.id) == JobStatus.FINISHED for j in jobs), 10, "jobs to finish", fleet)
    assert max_concurrency(intervals(conn, "test:log:snoozed")) == 1
    assert FailedJobRegistry(QUEUE, connection=conn).count == 0
    assert set(FinishedJobRegistry(QUEUE, connection=conn).get_job_ids()) == {j.id for j in jobs}
    fleet.stop_all()
    blocker.flush()
    counts = counters(conn, "free")
    assert counts["snoozed"] >= 4
    assert counts["acquired"] == counts["released"] == 5, counts  # four jobs and the blocker
    assert conn.exists(KEYS.leases("acme")) == 0


def snooze_delays(conn: Redis, jitter: float, n: int = 6) -> list[tuple[float, float]]:
    """Snooze ``n`` real jobs with the workers' limiter; each delay (``when`` minus now) lies in the
    returned (low, high) bracket, low/high measured just after/before the call."""
    snoozer = ConcurrencyLimiter(conn, KEYS, TierBook(conn, KEYS), ConcurrencyConfig(snooze=0.2, jitter=jitter),
                                 rng=random.Random(2024))
    queue = Queue(f"jitter{round(jitter * 1000)}", connection=conn)
    brackets = []
    for i in range(n):
        queue.enqueue(limit_jobs.mark, f"test:never:{i}", meta={"fair_tenant": "acme"})
        fetched = Queue.dequeue_any([queue], None, connection=conn)  # as a worker fetches it
        assert fetched is not None
        job = fetched[0]
        before = datetime.now(timezone.utc)
        when = snoozer.snooze(job, queue, "free")
        after = datetime.now(timezone.utc)
        brackets.append(((when - after).total_seconds(), (when - before).total_seconds()))
        # Rescheduled to its own queue (a whole-second score: rq truncates), not failed.
        assert queue.scheduled_job_registry.get_expiration_time(job) == when.replace(microsecond=0)
        assert job.get_status(refresh=True) == JobStatus.SCHEDULED
    assert queue.count == 0 and conn.llen(queue.intermediate_queue_key) == 0
    assert FailedJobRegistry(queue=queue).count == 0
    return brackets


def test_snooze_delay_is_snooze_plus_uniform_jitter(conn: Redis) -> None:
    jittered = snooze_delays(conn, jitter=0.3)
    assert all(high >= 0.2 and low <= 0.5 for low, high in jittered)
    # Two snoozes whose delays differ by more than 50 ms, however long the calls themselves took.
    assert max(low for low, _ in jittered) - min(high for _, high in jittered) > 0.05
    # Control: with the smallest jitter settings allow (1 ms), the delays all lie within 1 ms of each other.
    plain = snooze_delays(conn, jitter=0.001)
    assert max(low for low, _ in plain) - min(high for _, high in plain) <= 0.001
    assert counters(conn, "free")["snoozed"] == 12


# -- 5. system jobs bypass limits ------------------------------------------------------------------


def test_system_jobs_bypass_the_limit(conn: Redis) -> None:
    held = limiter(conn, lease_ttl=60).acquire("acme", "someone-else")
    assert held is not None  # acme (free, limit 1) is at its limit
    marker = job_of(conn, limit_jobs.mark)
    system = marker.enqueue("test:system", fair_tenant="acme", system=True)
    tenant = marker.enqueue("test:tenant", fair_tenant="acme")
    assert system.meta["fair_system"] is True and system.meta["fair_tenant"] == "acme"

    settings = Settings(prefix=PREFIX, concurrency=ConcurrencyConfig(**FAST))
    WeightedSimpleWorker([QUEUE], connection=conn, settings=settings).work(burst=True)

    assert conn.get("test:system") == b"1" and status(conn, system.id) == JobStatus.FINISHED
    # Control: the same tenant's ordinary job was snoozed, not run and not failed.
    assert conn.get("test:tenant") is None and status(conn, tenant.id) == JobStatus.SCHEDULED
    assert tenant.id in Queue(QUEUE, connection=conn).scheduled_job_registry.get_job_ids()
    assert FailedJobRegistry(QUEUE, connection=conn).count == 0
    assert conn.zrange(KEYS.leases("acme"), 0, -1) == [b"someone-else"]
    counts = counters(conn, "free")
    assert counts["snoozed"] == 1 and counts["acquired"] == 0, counts  # the held lease's count is still pending


# -- 6. acquire and release are idempotent by job id -----------------------------------------------


def test_acquire_and_release_are_idempotent_by_job_id(conn: Redis) -> None:
    FairRouter(conn, prefix=PREFIX).set_tier("bigco", "pro")  # limit 3
    slots = limiter(conn)
    first = [slots.acquire("bigco", "j1") for _ in range(3)]
    assert all(lease is not None for lease in first)
    assert conn.zcard(KEYS.leases("bigco")) == 1  # one slot, however often it is taken
    j2, j3 = slots.acquire("bigco", "j2"), slots.acquire("bigco", "j3")
    assert j2 is not None and j3 is not None
    assert slots.acquire("bigco", "j4") is None  # 3 of 3 held: j1 counted once
    assert first[0] is not None
    slots.release(first[0])
    slots.release(first[0])
    slots.flush()
    assert conn.zrange(KEYS.leases("bigco"), 0, -1) == [b"j2", b"j3"]
    # j4's refusal is counted (a refused job is snoozed or, in a fair queue, parked)
    assert counters(conn, "pro") == {**dict.fromkeys(COUNTERS, 0), "acquired": 3, "refused": 1, "released": 1}
    slots.release(j2)
    slots.release(j3)
    slots.flush()
    assert counters(conn, "pro") == {**dict.fromkeys(COUNTERS, 0), "acquired": 3, "refused": 1, "released": 3}
    assert conn.exists(KEYS.leases("bigco")) == 0


def test_expired_lease_is_reclaimed_and_counted(conn: Redis) -> None:
    # A tenant's only lease, never refreshed nor released (its worker died): once it expires the next
    # acquire takes the slot and counts the reclaim, even though nothing else kept the lease set alive.
    dead = limiter(conn, lease_ttl=0.2)
    assert dead.acquire("acme", "dead-job") is not None
    taker = limiter(conn, lease_ttl=5)
    assert taker.acquire("acme", "next-job") is None
    taker.release(acquire_when_free(taker, "acme", "next-job", 5))
    taker.flush()
    counts = counters(conn, "free")
    assert counts.pop("refused") >= 1  # every try while the dead lease still held the slot
    assert counts == {**dict.fromkeys(set(COUNTERS) - {"refused"}, 0), "acquired": 1, "released": 1, "reclaimed": 1}
    assert conn.exists(KEYS.leases("acme")) == 0


def test_the_stopping_flush_waits_for_counts_another_flush_has_in_flight(conn: Redis) -> None:
    # The lease refresher's flush takes the pending counts from the tally, then sends them. A worker that stops
    # meanwhile flushes too and exits: its flush must not return before those counts are written, or they are lost.
    slots = limiter(conn)
    slots.tally.add("free", "snoozed")  # not batched: due at once
    in_flight = threading.Thread(target=slots.flush, kwargs={"due": True,
                                                             "also": lambda pipe: pipe.blpop("test:never", 1)})
    in_flight.start()  # its round trip (BLPOP first, the counts after it) waits a second in Redis
    wait_for(lambda: any(client.get("cmd") == "blpop" for client in conn.client_list()), 10, "the BLPOP in flight")
    slots.flush()  # the stopping worker's
    assert counters(conn, "free")["snoozed"] == 1  # written by the time the stopping flush returned
    in_flight.join()


# -- a shutdown while the worker is taking a slot --------------------------------------------------


def test_sigterm_while_taking_a_slot_finishes_the_job(conn: Redis, fleet: Fleet, tmp_path: Path) -> None:
    # The tier resolver sends SIGTERM to the worker while it looks the tier up inside execute_job, i.e.
    # after the job left its queue and before it is started. The warm shutdown must let the job run.
    fleet.config = write_config(tmp_path, tiers={"resolver": "limit_jobs:sigterm_own_worker"})
    job = job_of(conn, limit_jobs.mark).enqueue("test:ran", fair_tenant="doomed")
    (worker,) = fleet.start(scheduler=False)
    assert fleet.wait_exit(worker) == 0  # the SIGTERM stops it after this job
    assert conn.get("test:ran") == b"1", fleet.logs()
    assert status(conn, job.id) == JobStatus.FINISHED
    assert conn.exists(KEYS.leases("doomed")) == 0


# -- 7. acquire riding in another pipeline -----------------------------------------------------------


def test_acquire_in_a_pipeline_runs_with_its_commands_and_survives_a_script_flush(conn: Redis) -> None:
    slots = limiter(conn)
    with conn.pipeline(transaction=False) as pipe:
        pipe.set("test:before", 1)
        assert slots.acquire("acme", "j1", pipeline=pipe) is not None
    assert conn.get("test:before") == b"1"
    conn.script_flush()  # e.g. a Redis restart: EVALSHA answers NOSCRIPT
    with conn.pipeline(transaction=False) as pipe:
        pipe.set("test:after", 1)
        assert slots.acquire("acme", "j1", pipeline=pipe) is not None  # already held: kept
        assert conn.get("test:after") == b"1"
    with conn.pipeline(transaction=False) as pipe:
        assert slots.acquire("acme", "j2", pipeline=pipe) is None  # free tier: one slot
    assert conn.zrange(KEYS.leases("acme"), 0, -1) == [b"j1"]


@pytest.mark.parametrize("lost", ["scripts", "the unpark's library"])
def test_a_release_and_its_unpark_survive_redis_losing_their_scripts_the_rest_sent_once(conn: Redis,
                                                                                        lost: str) -> None:
    slots, fair = limiter(conn), FairQueue("flushed", connection=conn)
    fair.enqueue("os.getpid", fair_tenant="acme")  # a tenant with a job waiting can be parked
    for round_ in (1, 2, 3):
        lease = slots.acquire("acme", f"j{round_}")
        assert lease is not None
        fair.hold("acme", int(time.time() * 1000) + 60_000)
        assert conn.zcard(fair.fair_keys.parked) == 1
        if lost == "scripts":  # e.g. a Redis restart: the release's EVALSHA answers NOSCRIPT
            conn.script_flush()
        elif round_ == 2:  # the unpark's FCALL (as loaded in round 1) finds no function; round 3 loads it again
            conn.function_delete(FairUnparkScript(conn).function or "")

        def also(pipe: Any) -> None:
            pipe.incr("test:also")
            fair.unpark("acme", pipeline=pipe, ours=True)

        slots.release(lease, also=also)
        assert conn.zcard(KEYS.leases("acme")) == 0
        assert conn.zcard(fair.fair_keys.parked) == 0  # the unpark ran, once loaded again
        assert conn.get("test:also") == str(round_).encode()  # the pipeline's other commands were not sent twice
