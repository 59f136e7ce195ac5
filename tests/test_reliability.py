"""Reliability under crashes: real `rq worker` processes SIGKILLed again and again mid-job, and the
redis-server itself SIGKILLed and restarted (append-only file, synced on every write) in the middle of
the run, on a fair and a plain queue with concurrency limits on.

What must hold at the end: every job ran at least once, or sits in the FailedJobRegistry with its reason
(a job can run out of retries when its workers keep dying); both queues are empty; nothing is left
started, staged or scheduled; and no tenant slot is still held once the lease TTL has passed.

The fleet: three chaos workers (two forking WeightedWorkers, one WeightedSimpleWorker) that are killed
and replaced, as a supervisor would, and one steady WeightedWorker that also runs rq's scheduler (jobs
refused by the limit on the plain queue are snoozed through it). We never kill the steady one: rq's
scheduler lock outlives a dead scheduler by 61 s, which would only make the run longer. It can still
quit by itself when Redis goes away in the middle of a job (rq's worker does), and is then replaced like
the others; its successor's scheduler takes over once the old locks lapse (the weighted workers retry
at their recovery checks, where rq waits for its 10-minute maintenance). That wait is most of the
run's 85-95 s when it happens.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import recovery_jobs
import redis
import yaml
from conftest import Fleet
from redis import Redis
from rq import Queue, Retry
from rq.executions import WORKER_EXECUTIONS_KEY_TEMPLATE
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, ScheduledJobRegistry, StartedJobRegistry

from fair_router import FairQueue, FairRouter
from fair_router.core.keys import Keys
from fair_router.demo.redis_server import RedisServer

PREFIX = "chaos"
FAIR, PLAIN = "chaos_fair", "chaos_plain"
KEYS = Keys(PREFIX)
LEASE_TTL = 3.0
TENANTS = {"free-a": "free", "free-b": "free", "pro-a": "pro", "pro-b": "pro"}
JOBS_PER_QUEUE = 30
KILL_EVERY = 1.5  # seconds between two kills of a busy chaos worker
MAX_KILLS = 20
CRASH_REDIS_AFTER = 8.0  # seconds into the run
RUN_LIMIT = 150.0  # seconds for every job to end, or the test fails (typically 85-95: see the docstring)
CHAOS_CLASSES = ("fair_router.WeightedWorker", "fair_router.WeightedWorker", "fair_router.WeightedSimpleWorker")

pytestmark = pytest.mark.usefixtures("isolated_settings")


@pytest.fixture
def crashable_redis() -> Iterator[RedisServer]:
    """A redis-server of this test's own (it gets killed), persisting every write to its append-only file."""
    with RedisServer(appendonly=True) as server:
        yield server


class Chaos:
    """The fleet and its supervisor: kills a busy chaos worker (its whole session, as a lost machine) and
    starts a replacement of the same class; also replaces any worker that exited by itself."""

    def __init__(self, fleet: Fleet, conn: Redis) -> None:
        self.fleet, self.conn = fleet, conn
        self.chaos: dict[str, tuple[subprocess.Popen[bytes], str]] = {}  # worker name -> (process, class)
        self.steady: subprocess.Popen[bytes] | None = None
        self.kills = 0
        self.exits = 0  # workers that quit by themselves (rq quits on an unexpected error, e.g. Redis gone)
        self._born = 0

    def spawn(self, worker_class: str) -> None:
        name = f"chaos-{self._born}"
        self._born += 1
        (proc,) = self.fleet.start(worker_class=worker_class, scheduler=False, args=["--name", name])
        self.chaos[name] = (proc, worker_class)

    def spawn_steady(self) -> None:
        (self.steady,) = self.fleet.start(scheduler=True, args=["--name", f"steady-{self._born}"])
        self._born += 1

    def replace_exited(self) -> None:
        for name, (proc, worker_class) in list(self.chaos.items()):
            if proc.poll() is not None:
                del self.chaos[name]
                self.exits += 1
                self.spawn(worker_class)
        if self.steady is not None and self.steady.poll() is not None:
            self.exits += 1
            self.spawn_steady()

    def kill_a_busy_worker(self, rng: random.Random) -> bool:
        """SIGKILL one chaos worker that is running a job (if any) and replace it; True if one was killed."""
        busy = [name for name in sorted(self.chaos) if self.conn.scard(WORKER_EXECUTIONS_KEY_TEMPLATE.format(name))]
        if not busy:
            return False
        name = rng.choice(busy)
        proc, worker_class = self.chaos.pop(name)
        self.fleet.kill(proc)
        self.kills += 1
        self.spawn(worker_class)
        return True


def all_ended(conn: Redis, jobs: list[Job]) -> bool:
    """Every job finished or failed (False while Redis is unreachable)."""
    try:
        with conn.pipeline(transaction=False) as pipe:
            for job in jobs:
                pipe.hget(job.key, "status")
            statuses = pipe.execute()
    except redis.exceptions.ConnectionError:
        return False
    return all(raw in (b"finished", b"failed") for raw in statuses)


def server_ms(conn: Redis) -> int:
    seconds, micros = conn.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_jobs_survive_workers_killed_mid_job_and_a_redis_crash(crashable_redis: RedisServer, tmp_path: Path) -> None:
    conn = crashable_redis.client()
    rng = random.Random(12)
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    config = tmp_path / "fair_router.yaml"
    config.write_text(yaml.safe_dump({
        "prefix": PREFIX,
        "fair_queues": [FAIR],
        "tiers": {"concurrency": {"free": 1, "pro": 2}, "priority": ["pro"]},
        "concurrency": {"enabled": True, "lease_ttl": f"{LEASE_TTL:g}s", "snooze": "1s", "jitter": "1s"},
        "recovery": {"abandon_after": "3s"},
    }), encoding="utf-8")
    router = FairRouter(conn, prefix=PREFIX)
    for tenant, tier in TENANTS.items():
        router.set_tier(tenant, tier)

    fair = FairQueue(FAIR, connection=conn, prefix=PREFIX)
    plain = Queue(PLAIN, connection=conn)
    jobs: list[Job] = []
    for i in range(JOBS_PER_QUEUE * 2):
        tenant = rng.choice(sorted(TENANTS))
        seconds = rng.uniform(0.2, 1.0)
        options: dict[str, Any] = {"result_ttl": 3600, "failure_ttl": 3600}
        if i % 10:  # one job in ten has no retry: killed once, it must end in the FailedJobRegistry
            options["retry"] = Retry(max=3)
        if i % 2:
            jobs.append(fair.enqueue(recovery_jobs.chaos_job, str(runs_dir), seconds, fair_tenant=tenant, **options))
        else:
            jobs.append(plain.enqueue(recovery_jobs.chaos_job, str(runs_dir), seconds,
                                      meta={"fair_tenant": tenant}, **options))

    fleet = Fleet(crashable_redis.url, tmp_path, queues=[FAIR, PLAIN])
    fleet.config = config
    chaos = Chaos(fleet, conn)
    try:
        chaos.spawn_steady()
        for worker_class in CHAOS_CLASSES:
            chaos.spawn(worker_class)

        began = time.monotonic()
        crashed_redis = False
        while not all_ended(conn, jobs):
            elapsed = time.monotonic() - began
            assert elapsed < RUN_LIMIT, summary(conn, jobs, runs_dir, chaos, fleet)
            time.sleep(KILL_EVERY)
            chaos.replace_exited()
            if not crashed_redis and elapsed >= CRASH_REDIS_AFTER:
                crashable_redis.crash()  # no shutdown, no final save: only the append-only file survives
                time.sleep(1.0)
                crashable_redis.start()
                crashed_redis = True
            elif chaos.kills < MAX_KILLS:
                chaos.kill_a_busy_worker(rng)
        run_time = time.monotonic() - began

        time.sleep(LEASE_TTL + 0.5)  # the contract for slots: none held once the lease TTL has passed
        print(f"\n[reliability] {summary(conn, jobs, runs_dir, chaos, fleet, brief=True)}; "
              f"all jobs ended {run_time:.1f} s into the run")

        ran = runs_per_job(runs_dir)
        for job in jobs:
            job.refresh()
            if job.get_status(refresh=False) == JobStatus.FINISHED:
                assert ran.get(job.id, 0) >= 1, f"job {job.id} finished without a recorded run"
            else:
                assert job.get_status(refresh=False) == JobStatus.FAILED, (job.id, job.get_status(refresh=False))
                assert job.id in FailedJobRegistry(job.origin, connection=conn).get_job_ids(), job.id
                assert job.exc_info, f"failed job {job.id} has no reason"
        assert crashed_redis and chaos.kills >= 5, "the chaos did not happen"
        assert any(count > 1 for count in ran.values()), "no killed job was ever run again"

        assert len(plain) == 0 and plain.get_job_ids() == []
        assert fair.count == 0 and len(fair) == 0 and fair.get_job_ids() == []
        for name in (FAIR, PLAIN):
            started = StartedJobRegistry(name, connection=conn)
            assert started.get_job_ids(cleanup=False) == [], name
            assert conn.zcard(KEYS.abandoned(started.key)) == 0, name
            assert ScheduledJobRegistry(name, connection=conn).get_job_ids() == [], name
        now = server_ms(conn)
        held = {tenant: conn.zrangebyscore(KEYS.leases(tenant), now, "+inf") for tenant in TENANTS}
        assert all(not members for members in held.values()), held
    finally:
        fleet.stop_all()
        conn.close()


def runs_per_job(runs_dir: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in runs_dir.iterdir():
        job_id = path.name.split(".", 1)[0]
        counts[job_id] = counts.get(job_id, 0) + 1
    return counts


def summary(conn: Redis, jobs: list[Job], runs_dir: Path, chaos: Chaos, fleet: Fleet, brief: bool = False) -> str:
    """Where the jobs are: for the report, and for the failure message (with the workers' logs)."""
    ran = runs_per_job(runs_dir)
    statuses: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for job in jobs:
        try:
            fetched = Job.fetch(job.id, connection=conn)
            key = fetched.get_status(refresh=False).value
            if fetched.exc_info:
                reason = fetched.exc_info.strip().splitlines()[-1][:80]
                reasons[reason] = reasons.get(reason, 0) + 1
        except Exception as exc:  # Redis down, or the job gone: say so rather than fail here
            key = type(exc).__name__
        statuses[key] = statuses.get(key, 0) + 1
    reran = sum(count > 1 for count in ran.values())
    text = (f"{len(jobs)} jobs {statuses} (failure reasons {reasons}), {reran} ran more than once (most: "
            f"{max(ran.values(), default=0)}), {chaos.kills} workers killed mid-job, {chaos.exits} quit by themselves")
    if brief:
        return text
    return f"{text}\n--- worker logs ---\n{fleet.logs()}"
