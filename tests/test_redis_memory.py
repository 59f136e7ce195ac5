"""Redis' settings are checked, and a worker that cannot go on exits non-zero (real redis-server processes).

- ``maxmemory-policy``: a server started with ``--maxmemory-policy allkeys-lru`` makes ``fair-router check
  --ping`` exit 2 naming the policy and the fix (on ``redis_url``, on a shard server of ``shard_urls``), and
  every kind of weighted worker log one warning line as it starts; ``noeviction`` passes silently; a user
  denied ``INFO`` gets "unknown", as a warning.
- Redis unreachable past ``redis_outage_grace`` (2 s here): ``rq worker -w fair_router.WeightedWorker`` and
  ``fair-router worker`` exit 1 naming the cause; a work horse running a job is killed with its worker.
- Redis out of memory (``noeviction`` at ``maxmemory``): on a write the worker cannot skip (rq's writes at a
  job's end), the worker exits 1 naming OOM and the fix, and the job is not lost (crash recovery hands it back
  once memory is freed); on the writes that can wait (the lease release pipeline and the counters), the
  refused commands are sent again until memory is freed, each applied once, or raised past the grace with the
  slot already given back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TESTS, Fleet, session_pids, wait_for, write_settings
from redis import Redis
from redis.exceptions import OutOfMemoryError
from rq import Queue, Retry, Worker
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry

from fair_router.config.settings import ConcurrencyConfig
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.demo.redis_server import RedisServer
from fair_router.store.oom import execute_riding_oom
from fair_router.store.outage import ride_outages
from fair_router.store.serverconf import PolicyReading, policy_readings
from fair_router.workers.limiter import ConcurrencyLimiter

BIN = Path(sys.executable).parent
WARNING = "maxmemory-policy is allkeys-lru"
FIX = "set `maxmemory-policy noeviction`"


@pytest.fixture(scope="module")
def lru_server() -> Iterator[RedisServer]:
    with RedisServer(args=["--maxmemory-policy", "allkeys-lru"]) as server:
        yield server


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIR_ROUTER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    return {**env, **extra}


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# -- maxmemory-policy -----------------------------------------------------------------------------------------


def test_readings_name_each_server_once(lru_server: RedisServer, redis_server: RedisServer) -> None:
    lru, safe = lru_server.client(), redis_server.client()
    readings = policy_readings([lru, safe, Redis.from_url(lru_server.url)])
    assert [(reading.server, reading.policy) for reading in readings] == [
        (f"127.0.0.1:{lru_server.port}/0", "allkeys-lru"), (f"127.0.0.1:{redis_server.port}/0", "noeviction")]
    assert readings[0].evicts and not readings[0].safe and readings[1].safe and not readings[1].evicts
    assert FIX in readings[0].describe() and "maxmemory 0 now" in readings[0].describe()


def test_check_ping_fails_on_an_evicting_policy_and_passes_on_noeviction(
    lru_server: RedisServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    check = [str(BIN / "fair-router"), "check", "--ping"]
    done = run(check, tmp_path, clean_env(FAIR_ROUTER_REDIS_URL=lru_server.url))
    assert done.returncode == 2, done.stderr
    assert (f"error: maxmemory-policy: Redis at 127.0.0.1:{lru_server.port}/0: {WARNING}" in done.stderr
            and FIX in done.stderr), done.stderr

    done = run(check, tmp_path, clean_env(FAIR_ROUTER_REDIS_URL=redis_server.url))
    assert done.returncode == 0, done.stderr
    assert "maxmemory-policy noeviction on 1 server(s)" in done.stdout
    assert "maxmemory-policy" not in done.stderr

    # every shard server of shard_urls is read too
    done = run(check, tmp_path, clean_env(FAIR_ROUTER_REDIS_URL=redis_server.url,
                                          FAIR_ROUTER_SHARD_URLS=json.dumps([redis_server.url, lru_server.url])))
    assert done.returncode == 2, done.stderr
    assert f"Redis at 127.0.0.1:{lru_server.port}/0: {WARNING}" in done.stderr
    assert f"127.0.0.1:{redis_server.port}" not in done.stderr


def test_a_policy_info_does_not_give_is_unknown_not_passed(redis_server: RedisServer, conn: Redis,
                                                           tmp_path: Path) -> None:
    conn.acl_setuser("no-info", enabled=True, passwords=["+secret"], keys=["*"], channels=["*"],
                     commands=["+@all", "-info"])
    try:
        url = redis_server.url.replace("redis://", "redis://no-info:secret@")
        reading = policy_readings([Redis.from_url(url)])[0]
        assert reading.policy is None and reading.why.startswith("INFO memory refused")
        done = run([str(BIN / "fair-router"), "check", "--ping"], tmp_path, clean_env(FAIR_ROUTER_REDIS_URL=url))
        assert done.returncode == 0, done.stderr
        assert "warning: maxmemory-policy:" in done.stderr and "maxmemory-policy unknown (INFO memory refused" \
            in done.stderr
        assert "settings OK, with 1 warning(s) above" in done.stdout
    finally:
        conn.acl_deluser("no-info")


@pytest.mark.parametrize("command", ["rq-weighted", "rq-simple", "fair-router"])
def test_every_weighted_worker_warns_at_start_on_an_evicting_policy(
    command: str, lru_server: RedisServer, redis_server: RedisServer, tmp_path: Path
) -> None:
    def start(url: str) -> str:
        args = {"rq-weighted": [sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedWorker",
                                "--url", url, "--burst", "default"],
                "rq-simple": [sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedSimpleWorker",
                              "--url", url, "--burst", "default"],
                "fair-router": [str(BIN / "fair-router"), "worker", "--url", url, "--burst", "default"]}[command]
        done = run(args, tmp_path, clean_env(FAIR_ROUTER_REDIS_URL=url))
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    lines = [line for line in start(lru_server.url).splitlines() if "maxmemory-policy" in line]
    assert len(lines) == 1, lines
    assert f"Redis at 127.0.0.1:{lru_server.port}/0: {WARNING}" in lines[0] and FIX in lines[0]
    assert "maxmemory-policy" not in start(redis_server.url)


# -- Redis unreachable past the grace -------------------------------------------------------------------------


def test_workers_exit_1_when_redis_stays_away_past_the_grace(tmp_path: Path) -> None:
    """A WeightedWorker whose work horse runs a job, an idle WeightedSimpleWorker and an idle `fair-router
    worker`: all exit 1 once Redis has been away for longer than redis_outage_grace, naming the cause; the work
    horse goes with its worker."""
    with RedisServer() as server:
        conn = server.client()
        fleet = Fleet(server.url, tmp_path, ["default"])
        fleet.config = write_settings(tmp_path, {"redis_outage_grace": "2s"})
        try:
            fleet.start(1, scheduler=False)  # a forking WeightedWorker: it takes the job
            fleet.wait_registered(conn, 1)
            job = Queue("default", connection=conn).enqueue("outage_jobs.nap", "t", 0, 120)
            wait_for(lambda: job.get_status() == JobStatus.STARTED, 30, "the job to start", fleet)
            fleet.start(1, scheduler=False, worker_class="fair_router.WeightedSimpleWorker")
            log = (tmp_path / f"worker-{len(fleet.procs)}.log").open("wb")
            fleet.procs.append(subprocess.Popen(
                [str(BIN / "fair-router"), "worker", "--url", server.url, "--without-scheduler", "default"],
                env=clean_env(FAIR_ROUTER_CONFIG=str(fleet.config)), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True))
            log.close()
            fleet.wait_registered(conn, 3)
            busy = fleet.running(next(worker.pid for worker in Worker.all(connection=conn)
                                      if worker.get_current_job_id() == job.id))
            horses = [pid for pid in session_pids(busy.pid, alive=True) if pid != busy.pid]
            assert horses, "no work horse runs the job"
            server.crash()
            for proc in fleet.procs:
                assert fleet.wait_exit(proc, 90) == 1, fleet.logs()
            logs = fleet.logs()
            assert logs.count("unreachable past redis_outage_grace (2 s") == 3, logs
            assert not set(horses) & set(session_pids(busy.pid, alive=True)), "the work horse outlived its worker"
        finally:
            fleet.stop_all()


# -- Redis out of memory --------------------------------------------------------------------------------------


def fill(conn: Redis) -> None:
    """Put the server past maxmemory under noeviction: every write that may grow memory is refused."""
    conn.set("filler", "x" * 2_000_000)
    conn.config_set("maxmemory", str(int(conn.info("memory")["used_memory"]) // 2))


def free(conn: Redis) -> None:
    conn.config_set("maxmemory", "0")
    conn.delete("filler")


def test_a_worker_exits_1_on_oom_at_a_job_end_and_the_job_is_handed_back(tmp_path: Path) -> None:
    """rq's writes at a job's end cannot be skipped: refused for memory, the worker exits 1 naming OOM and the
    fix (the running job's heartbeats ride the refusals meanwhile); its job stays in rq's StartedJobRegistry, and
    once memory is freed crash recovery hands it back (as rq would: retried, it has a Retry) and another worker
    finishes it."""
    with RedisServer(args=["--maxmemory-policy", "noeviction"]) as server:
        conn = server.client()
        fleet = Fleet(server.url, tmp_path, ["default"])
        fleet.config = write_settings(tmp_path, {"redis_outage_grace": "2s", "recovery": {"abandon_after": "3s"}})
        try:
            first = fleet.start(1, scheduler=False)[0]
            fleet.wait_registered(conn, 1)
            job = Queue("default", connection=conn).enqueue("outage_jobs.nap", "t", 1, 2.0, retry=Retry(max=1))
            wait_for(lambda: job.get_status() == JobStatus.STARTED, 30, "the job to start", fleet)
            fill(conn)
            assert fleet.wait_exit(first, 60) == 1, fleet.logs()
            logs = fleet.logs()
            assert "is out of memory (OOM: maxmemory reached under noeviction)" in logs, logs
            assert "raise `maxmemory`" in logs and "exiting with status 1" in logs
            assert job.id in StartedJobRegistry("default", connection=conn).get_job_ids(cleanup=False)
            free(conn)
            fleet.start(1, scheduler=False)
            wait_for(lambda: job.get_status() == JobStatus.FINISHED, 60, "the job to be handed back and finish",
                     fleet)
            assert Job.fetch(job.id, connection=conn).return_value() == "t:1"
        finally:
            fleet.stop_all()


def limiter_on(url: str, grace: float) -> ConcurrencyLimiter:
    client = ride_outages(Redis.from_url(url), grace)
    keys = Keys("oom")
    config = ConcurrencyConfig(enabled=True)
    return ConcurrencyLimiter(client, keys, TierBook(client, keys, None), config)


def test_the_lease_release_rides_an_oom_until_memory_is_freed_each_write_applied_once(
    redis_server: RedisServer, conn: Redis
) -> None:
    conn.config_set("maxmemory-policy", "noeviction")
    limiter = limiter_on(redis_server.url, grace=60)
    lease = limiter.acquire("acme", "job-1")
    assert lease is not None
    fill(conn)
    try:
        with pytest.raises(OutOfMemoryError):
            conn.hset("probe", "a", 1)  # the server refuses writes now
        freed = threading.Timer(1.0, free, args=(conn,))
        freed.start()
        limiter.release(lease, also=lambda pipe: pipe.hincrby("after-job", "writes", 1).hset("beat", "at", 1))
        freed.join()
    finally:
        free(conn)
    assert conn.zcard(Keys("oom").leases("acme")) == 0
    assert conn.hget("after-job", "writes") == b"1" and conn.hget("beat", "at") == b"1"
    limiter.flush()
    counts = limiter.counters()
    assert sum(tier.get("released", 0) for tier in counts.values()) == 1, counts


def test_past_the_grace_the_release_raises_with_the_slot_given_back(redis_server: RedisServer, conn: Redis) -> None:
    conn.config_set("maxmemory-policy", "noeviction")
    limiter = limiter_on(redis_server.url, grace=1.0)
    lease = limiter.acquire("acme", "job-2")
    assert lease is not None
    fill(conn)
    try:
        with pytest.raises(OutOfMemoryError):
            limiter.release(lease, also=lambda pipe: pipe.hincrby("after-job", "writes", 1))
        assert conn.zcard(Keys("oom").leases("acme")) == 0  # ZREM frees memory: Redis takes it
        assert conn.hget("after-job", "writes") is None
    finally:
        free(conn)


def test_reading_is_one_info_per_server(redis_server: RedisServer, conn: Redis) -> None:
    before = int(conn.info("commandstats").get("cmdstat_info", {}).get("calls", 0))
    assert policy_readings([conn, conn]) == [PolicyReading(f"127.0.0.1:{redis_server.port}/0", "noeviction", 0)]
    after = int(conn.info("commandstats")["cmdstat_info"]["calls"])
    assert after - before == 2  # the reading's INFO memory, and this test's own INFO commandstats


def oom_refusals(conn: Redis) -> int:
    """How many commands the server refused for memory so far (INFO errorstats, Redis >= 6.2)."""
    return int(conn.info("errorstats").get("errorstat_OOM", {}).get("count", 0))


def test_a_worker_rides_an_oom_at_a_job_start_and_runs_the_job_once_memory_is_freed(tmp_path: Path) -> None:
    """rq's job-start MULTI (refused whole) is sent again until memory is freed, within the grace: the job that
    was taken from its queue runs, the worker stays up."""
    with RedisServer(args=["--maxmemory-policy", "noeviction"]) as server:
        conn = server.client()
        fleet = Fleet(server.url, tmp_path, ["default"])
        fleet.config = write_settings(tmp_path, {"redis_outage_grace": "60s"})
        try:
            worker = fleet.start(1, scheduler=False)[0]
            fleet.wait_registered(conn, 1)  # and started: its first fetch is under way
            wait_for(lambda: [w.get_state() for w in Worker.all(connection=conn)] == ["idle"], 30, "an idle worker",
                     fleet)
            job = Queue("staging", connection=conn).enqueue("outage_jobs.nap", "t", 2, 0.1)
            fill(conn)
            before = oom_refusals(conn)
            # the job reaches the worker's queue at maxmemory: RENAME grows nothing, so Redis serves it
            conn.rename(Queue("staging", connection=conn).key, Queue("default", connection=conn).key)
            wait_for(lambda: Queue("default", connection=conn).count == 0, 30, "the worker to take the job", fleet)
            wait_for(lambda: oom_refusals(conn) > before + 2, 60, "the worker's writes to be refused", fleet)
            assert job.get_status() == JobStatus.QUEUED  # taken from its queue, not started
            free(conn)
            wait_for(lambda: job.get_status() == JobStatus.FINISHED, 60, "the job to finish", fleet)
            assert Job.fetch(job.id, connection=conn).return_value() == "t:2"
            assert worker.poll() is None, fleet.logs()
            assert "exiting with status" not in fleet.logs()
        finally:
            fleet.stop_all()


def test_a_transaction_rides_an_oom_whole(redis_server: RedisServer, conn: Redis) -> None:
    client = ride_outages(Redis.from_url(redis_server.url), 60)
    fill(conn)
    try:
        with client.pipeline() as pipe:
            pipe.hset("tx", "a", 1).incr("tx-count")
            threading.Timer(1.0, free, args=(conn,)).start()
            assert execute_riding_oom(pipe, client) == [1, 1]
        fill(conn)
        with client.pipeline() as pipe:
            pipe.hset("tx", "b", 1).incr("tx-count")
            with pytest.raises(OutOfMemoryError):
                execute_riding_oom(pipe, client, grace=0.5)
    finally:
        free(conn)
    assert conn.hgetall("tx") == {b"a": b"1"} and conn.get("tx-count") == b"1"
