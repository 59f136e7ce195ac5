"""`fair-router pool` and WorkerPool: real rq worker processes on a real Redis, inspected through /proc."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
from redis import Redis
from rq import Queue, Worker

import fair_router
from fair_router.demo.redis_server import RedisServer
from fair_router.workers.pool import WorkerPool, redact_url

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="inspects processes via /proc")

FAIR_ROUTER = Path(sys.executable).parent / "fair-router"
# The pool's default class once fair_router exports it; plain rq.Worker until then (the pool does not care).
WORKER_CLASS = "fair_router.WeightedWorker" if hasattr(fair_router, "WeightedWorker") else "rq.Worker"

T = TypeVar("T")


# -- processes, seen through /proc ----------------------------------------------------------------

def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, ...; None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def children_of(pid: int) -> list[int]:
    found = []
    for path in Path("/proc").glob("[0-9]*/stat"):
        stat = _stat(int(path.parent.name))
        if stat is not None and stat[0] != "Z" and int(stat[1]) == pid:
            found.append(int(path.parent.name))
    return sorted(found)


def descendants_of(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        children = children_of(todo.pop())
        found += children
        todo += children
    return found


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(pair.split("=", 1) for pair in pairs if "=" in pair)


def wait_for(condition: Callable[[], T], what: str, timeout: float = 15.0) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def pool_workers(conn: Redis, parent: int) -> dict[int, tuple[str, ...]]:
    """pid -> queue names of the live rq workers, children of ``parent``, that fetch jobs.

    Fetching (state idle or busy), not merely registered: rq registers a worker in Redis before it
    installs its SIGINT/SIGTERM handlers, and the tests below rely on those.
    """
    found = {}
    for worker in Worker.all(connection=conn):
        pid = worker.pid
        stat = _stat(pid) if pid else None
        listening = worker.get_state() in ("idle", "busy")
        if pid and listening and stat is not None and stat[0] != "Z" and int(stat[1]) == parent:
            found[pid] = tuple(worker.queue_names())
    return found


def workers_ready(conn: Redis, parent: int, count: int) -> Callable[[], dict[int, tuple[str, ...]]]:
    def ready() -> dict[int, tuple[str, ...]]:
        workers = pool_workers(conn, parent)
        return workers if len(workers) == count else {}

    return ready


# -- `fair-router pool` as a subprocess -------------------------------------------------------------

@dataclass
class PoolProcess:
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def run_pool(tmp_path: Path, redis_server: RedisServer) -> Iterator[Callable[..., PoolProcess]]:
    """Start `fair-router pool` with a config file and/or FAIR_ROUTER_POOL; stopped (hard) at teardown."""
    started: list[PoolProcess] = []

    def run(config: str | None = None, *args: str, pool_env: str | None = None) -> PoolProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIR_ROUTER_", "RQ_"))}
        if pool_env is not None:
            env["FAIR_ROUTER_POOL"] = pool_env
        command = [str(FAIR_ROUTER), "pool", "--url", redis_server.url, "--worker-class", WORKER_CLASS, *args]
        if config is not None:
            (tmp_path / "fair_router_test.yaml").write_text(config)
            command += ["--config", str(tmp_path / "fair_router_test.yaml")]
        log = tmp_path / f"pool{len(started)}.log"
        with log.open("wb") as out:  # a file, not a pipe: nobody would drain a pipe and the workers would block
            process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
        started.append(PoolProcess(process, log))
        return started[-1]

    yield run
    for pool in started:  # a failed test must not leak processes into the next one
        family = descendants_of(pool.pid)
        if pool.process.poll() is None:
            pool.process.send_signal(signal.SIGTERM)
            try:
                pool.process.wait(10)
            except subprocess.TimeoutExpired:
                pool.process.kill()
                pool.process.wait()
        for pid in family:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


CONFIG = """
pool:
  a: 2
  "b, c": 1
"""


def test_pool_runs_the_configured_number_of_workers_per_queue_group(
    run_pool: Callable[..., PoolProcess], conn: Redis, redis_server: RedisServer
) -> None:
    pool = run_pool(CONFIG, "--with-scheduler", "--grace", "2")
    workers = wait_for(workers_ready(conn, pool.pid, 3), "3 registered workers")

    assert Counter(workers.values()) == {("a",): 2, ("b", "c"): 1}
    assert children_of(pool.pid) == sorted(workers)  # the workers, and nothing else
    for pid in workers:
        stat = _stat(pid)
        assert stat is not None and int(stat[2]) == pid  # a process group of its own
        assert "--url" not in cmdline(pid) and environ(pid)["RQ_REDIS_URL"] == redis_server.url
        assert environ(pid)["FAIR_ROUTER_CONFIG"].endswith("fair_router_test.yaml")
    assert sum("--with-scheduler" in cmdline(pid) for pid in workers) == 1
    wait_for(lambda: "b,c" in pool.output(), "the allocation table")
    output = pool.output()
    assert "3 workers of " + WORKER_CLASS in output
    assert any(line.split() == ["a", "2", "(one", "runs", "the", "scheduler)"] for line in output.splitlines())
    assert any(line.split() == ["b,c", "1"] for line in output.splitlines())


def test_a_killed_worker_is_replaced(run_pool: Callable[..., PoolProcess], conn: Redis) -> None:
    pool = run_pool(None, pool_env='{"a": 2}')
    before = wait_for(workers_ready(conn, pool.pid, 2), "2 registered workers")
    victim = min(before)

    os.kill(victim, signal.SIGKILL)

    def replaced() -> dict[int, tuple[str, ...]]:
        workers = pool_workers(conn, pool.pid)
        return workers if len(workers) == 2 and victim not in workers else {}

    after = wait_for(replaced, "a replacement worker")
    assert set(after.values()) == {("a",)}
    assert len(set(after) - set(before)) == 1
    assert _stat(victim) is None  # reaped by the pool, not left a zombie
    assert children_of(pool.pid) == sorted(after)
    assert pool.process.poll() is None


def test_sigterm_stops_every_worker_and_work_horse(run_pool: Callable[..., PoolProcess], conn: Redis) -> None:
    pool = run_pool(None, "--grace", "1.5", pool_env='{"a": 1, "b": 1}')
    workers = wait_for(workers_ready(conn, pool.pid, 2), "2 registered workers")
    busy = next(pid for pid, queues in workers.items() if queues == ("a",))
    Queue("a", connection=conn).enqueue(time.sleep, 60)  # outlasts the grace: needs the cold shutdown
    horse = wait_for(lambda: children_of(busy), "the work horse running the job")[0]
    family = descendants_of(pool.pid)
    assert set(family) == {*workers, horse}

    started = time.monotonic()
    pool.process.send_signal(signal.SIGTERM)
    assert pool.process.wait(15) == 0  # 0: warm then cold shutdown sufficed, nothing had to be SIGKILLed
    assert time.monotonic() - started < 10

    assert [pid for pid in family if alive(pid)] == []
    assert "stopping 2 worker(s) with SIGTERM" in pool.output()
    assert "cold shutdown" in pool.output()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_sigint_and_sighup_stop_the_pool_too(
    run_pool: Callable[..., PoolProcess], conn: Redis, sig: signal.Signals
) -> None:
    pool = run_pool(None, pool_env='{"a": 1}')
    (worker,) = wait_for(workers_ready(conn, pool.pid, 1), "a registered worker")

    pool.process.send_signal(sig)

    assert pool.process.wait(15) == 0
    assert not alive(worker)
    forwarded = "SIGINT" if sig == signal.SIGINT else "SIGTERM"  # rq has no SIGHUP handler
    assert f"stopping 1 worker(s) with {forwarded}" in pool.output()


def test_empty_pool_is_a_clear_error(tmp_path: Path, redis_server: RedisServer) -> None:
    config = tmp_path / "empty.yaml"
    config.write_text("pool: {}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIR_ROUTER_")}
    result = subprocess.run([str(FAIR_ROUTER), "pool", "--config", str(config), "--url", redis_server.url],
                            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "`pool:` is empty" in result.stderr and "FAIR_ROUTER_POOL" in result.stderr


# -- WorkerPool in-process ----------------------------------------------------------------------------

def test_a_worker_that_ignores_stop_signals_is_killed_after_the_grace(
    redis_server: RedisServer, conn: Redis
) -> None:
    pool = WorkerPool({"a": 1}, redis_server.url, worker_class=WORKER_CLASS, grace=0.5, kill_after=0.5)
    try:
        pool.start()
        (pid,) = wait_for(workers_ready(conn, os.getpid(), 1), "a registered worker")
        os.kill(pid, signal.SIGSTOP)  # a hung worker: SIGINT/SIGTERM stay pending, only SIGKILL acts
        started = time.monotonic()
        assert pool.stop() is False
        assert time.monotonic() - started < 5
        assert not alive(pid)
        assert pool.children() == []
    finally:
        pool.stop()


def test_a_crash_looping_worker_is_restarted_with_growing_backoff(redis_server: RedisServer) -> None:
    pool = WorkerPool({"a": 1}, redis_server.url, worker_class="fair_router.NoSuchWorker",
                      backoff=0.3, max_backoff=10, stable_after=30, poll_interval=0.02)
    starts: list[float] = []
    try:
        pool.start()
        starts.append(time.monotonic())
        deadline = time.monotonic() + 20
        while len(starts) < 4 and time.monotonic() < deadline:
            before = pool.starts
            pool.check()
            if pool.starts > before:
                starts.append(time.monotonic())
            time.sleep(0.02)
    finally:
        pool.stop()
    assert len(starts) == 4, "the crashing worker was not restarted"
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    # each gap is the worker's life (it crashes at import) plus the backoff: 0.3 s, then 0.6 s, then 1.2 s
    assert gaps[0] >= 0.3 and gaps[1] >= 0.6 and gaps[2] >= 1.2, gaps


def test_restart_delay_doubles_up_to_the_cap_and_is_zero_after_a_stable_run() -> None:
    pool = WorkerPool({"a": 1}, "redis://localhost", backoff=0.5, max_backoff=3)
    assert [pool.restart_delay(n) for n in range(6)] == [0.0, 0.5, 1.0, 2.0, 3.0, 3.0]


def test_allocation_is_validated_and_one_worker_runs_the_scheduler() -> None:
    with pytest.raises(ValueError, match="empty allocation"):
        WorkerPool({}, "redis://localhost")
    with pytest.raises(ValueError, match="at least 1 worker"):
        WorkerPool({"a": 0}, "redis://localhost")
    pool = WorkerPool({"a": 2, "b,c": 3}, "redis://localhost", with_scheduler=True)
    assert pool.command(("b", "c"), scheduler=False)[-2:] == ["b", "c"]
    assert "--with-scheduler" in pool.command(("a",), scheduler=True)
    assert "scheduler" in next(line for line in pool.describe().splitlines() if line.split()[0] == "a")
    assert "scheduler" not in next(line for line in pool.describe().splitlines() if line.split()[0] == "b,c")


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url("redis://user:s3cret@host:6379/0") == "redis://user:***@host:6379/0"
    assert redact_url("redis://:s3cret@host/1") == "redis://:***@host/1"
    assert redact_url("redis://host:6379/0") == "redis://host:6379/0"
