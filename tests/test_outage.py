"""A standalone Redis restart in the middle of a flood (5 s down, append-only file synced on every write):
real ``rq worker -w fair_router.WeightedWorker`` and ``fair-router worker`` processes ride it out.

0 acknowledged jobs lost (every enqueue that returned a job ends finished), 0 failed (no job failed as
abandoned or otherwise), 0 worker exits (the same processes, by PID, alive and registered at the end).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TESTS, Fleet, kill_session, terminate, wait_for, write_settings
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from rq import Queue, Worker
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry

from fair_router import FairRouter, Rule, load_settings
from fair_router.demo.redis_server import RedisServer, free_port
from fair_router.routing.router import Route
from fair_router.store.outage import GraceRetry, OutageWatch, ride_outages

QUEUES = ["default", "default_throttled", "fair", "fair_throttled"]
ROUTES = [Route("outage.nap", "default", (Rule(queue="default_throttled", threshold=1, per=10),)),
          Route("outage.nap_fair", "fair", (Rule(queue="fair_throttled", threshold=1, per=10),))]
"""Routed jobs into plain queues, and routed jobs into FairQueues; each (route, tenant) window gets one job in
ten of the flood, so a rule any busier (it was 3 per 2 s) sent nothing to the throttled queues when a loaded
machine slowed the flood: past the first job, each tenant's jobs go to the throttled queue."""
TENANTS = [f"t{i}" for i in range(5)]
DOWN = 5.0


@pytest.fixture
def aof_redis() -> Iterator[RedisServer]:
    with RedisServer(appendonly=True) as server:
        yield server


class Flood:
    """Routed jobs (plain queues) and fair jobs (a FairQueue) from several tenants, from a thread; only
    the jobs whose enqueue returned count as acknowledged."""

    def __init__(self, url: str) -> None:
        self.router = FairRouter(Redis.from_url(url))
        self.acknowledged: list[Job] = []
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            tenant = TENANTS[n % len(TENANTS)]
            try:
                fair = n % 2
                job = self.router.enqueue(ROUTES[fair], Queue.parse_args("outage_jobs.nap", tenant, n), tenant,
                                          fair=bool(fair))
            except RedisError:
                self.refused += 1
            else:
                self.acknowledged.append(job)
            n += 1
            time.sleep(0.05)


def start_fair_router_worker(fleet: Fleet, url: str) -> subprocess.Popen[bytes]:
    """``fair-router worker`` on the fleet's queues, in a session of its own, tracked by the fleet."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIR_ROUTER_")}
    env["FAIR_ROUTER_CONFIG"] = str(fleet.config)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    log = (fleet.log_dir / f"worker-{len(fleet.procs)}.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "fair_router.cli", "worker", "--url", url,
                             "--without-scheduler", *QUEUES],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    fleet.procs.append(proc)
    return proc


def test_workers_ride_out_a_redis_restart(aof_redis: RedisServer, tmp_path: Path) -> None:
    conn = aof_redis.client()
    fleet = Fleet(aof_redis.url, tmp_path, QUEUES)
    fleet.config = write_settings(tmp_path, {
        "fair_queues": ["fair", "fair_throttled"],
        "recovery": {"abandon_after": "3s"},  # as eager as allowed: an outage must still hand nothing back
        "redis_outage_grace": "30s",
    })
    flood = Flood(aof_redis.url)
    try:
        fleet.start(2, scheduler=False)
        start_fair_router_worker(fleet, aof_redis.url)
        fleet.wait_registered(conn, 3)
        pids = {proc.pid for proc in fleet.procs}
        assert {worker.pid for worker in Worker.all(connection=conn)} == pids

        flood.start()
        wait_for(lambda: len(flood.acknowledged) >= 40, 30, "the flood to start", fleet)
        busy = sum(1 for worker in Worker.all(connection=conn) if worker.get_state() == "busy")
        aof_redis.crash()
        time.sleep(DOWN)
        aof_redis.start()
        time.sleep(2.0)
        flood.stop()
        acknowledged = list(flood.acknowledged)

        def ended() -> bool:
            statuses = Job.fetch_many([job.id for job in acknowledged], connection=conn)
            return all(job is not None and job.get_status(refresh=False) in (JobStatus.FINISHED, JobStatus.FAILED)
                       for job in statuses)

        wait_for(ended, 45, f"{len(acknowledged)} acknowledged jobs to end", fleet)

        jobs = Job.fetch_many([job.id for job in acknowledged], connection=conn)
        statuses = {job.id: job.get_status(refresh=False) for job in jobs if job is not None}
        assert len(statuses) == len(acknowledged), "acknowledged jobs lost"
        failed = {job_id for job_id, status in statuses.items() if status != JobStatus.FINISHED}
        assert not failed, (failed, fleet.logs())
        assert all(FailedJobRegistry(name, connection=conn).count == 0 for name in QUEUES)
        assert {job.origin for job in jobs if job is not None} == set(QUEUES)
        assert busy >= 1, "no job was running when Redis went away"
        print(f"\n[outage] {len(acknowledged)} jobs acknowledged ({flood.refused} enqueues refused while Redis "
              f"was down), {busy} running at the crash; all finished, no worker exited")

        exited = [(proc.pid, proc.returncode) for proc in fleet.procs if proc.poll() is not None]
        assert not exited, (exited, fleet.logs())
        assert {worker.pid for worker in Worker.all(connection=conn)} == pids, fleet.logs()
    finally:
        flood.stop()
        for proc in fleet.procs:
            terminate(proc, grace=10)
            kill_session(proc.pid)


def test_a_client_with_the_grace_waits_for_a_restarted_redis(aof_redis: RedisServer,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The same client object, its pool and a pipeline reach the server again once it is back; the retries
    note the outage; a grace too short gives up with redis-py's ConnectionError."""
    monkeypatch.setenv("FAIR_ROUTER_REDIS_OUTAGE_GRACE", "20s")
    grace = load_settings().redis_outage_grace
    assert grace == 20.0
    client = ride_outages(Redis.from_url(aof_redis.url), grace)
    client.set("before", 1)
    watch = OutageWatch()
    client.set_retry(GraceRetry(grace, watch))
    aof_redis.crash()
    threading.Timer(1.5, aof_redis.start).start()
    with client.pipeline() as pipe:  # a MULTI that meets the dead server: sent again whole
        pipe.incr("during").incr("during")
        assert pipe.execute() == [1, 2]
    assert client.get("before") == b"1"
    assert watch.seconds_since() is not None

    impatient = ride_outages(Redis(host="127.0.0.1", port=free_port()), grace=0.3)
    with pytest.raises(RedisConnectionError):
        impatient.ping()
