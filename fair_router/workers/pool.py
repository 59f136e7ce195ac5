"""Run a fixed number of rq worker processes per queue group, and keep them running: ``fair-router pool``.
Signals, stopping and restarts: docs/internals.md ("Worker pool")."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

DEFAULT_WORKER_CLASS = "fair_router.WeightedWorker"
RQ_REPEAT_WINDOW = 1.1
"""rq ignores a second stop signal that comes less than 1 s after the first: wait at least this long."""


class Child(NamedTuple):
    """A running worker process of the pool."""

    group: str
    pid: int
    scheduler: bool


@dataclass
class _Slot:
    """One place in the allocation: the worker process filling it now, and its restart state."""

    group: str
    queues: tuple[str, ...]
    scheduler: bool
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    quick_deaths: int = 0
    restart_at: float = 0.0


class WorkerPool:
    """Supervise ``allocation[group]`` rq workers per queue group (``"a"`` or ``"a,b"``): ``run()`` (main thread
    only), or its steps ``start()``, ``check()``, ``stop()``; ``env`` is added to the children's environment."""

    def __init__(self, allocation: Mapping[str, int], url: str, *, worker_class: str = DEFAULT_WORKER_CLASS,
                 logging_level: str = "INFO", with_scheduler: bool = False, grace: float = 30.0,
                 kill_after: float = 5.0, backoff: float = 0.5, max_backoff: float = 30.0, stable_after: float = 10.0,
                 poll_interval: float = 0.1, python: str = sys.executable, env: Mapping[str, str] | None = None,
                 paths: Sequence[str] = (), urls: Mapping[str, str] | None = None, cluster: bool = False) -> None:
        """``cluster``: the URL is a seed node of a Redis Cluster (``redis_cluster``): each child's rq CLI builds
        its connection with :class:`fair_router.store.cluster.RqSlotRedis` (rq's slot owner, followed)."""
        if not allocation:
            raise ValueError("empty allocation: give at least one queue group and its number of workers")
        self.url, self.cluster, self.worker_class, self.logging_level = url, cluster, worker_class, logging_level
        self.paths = [str(Path(entry).resolve()) for entry in paths]  # each child imports from them (rq's --path)
        self.grace, self.kill_after, self.poll_interval, self.python = grace, kill_after, poll_interval, python
        self.backoff, self.max_backoff, self.stable_after = backoff, max_backoff, stable_after
        self.env = dict(env or {})
        self.urls = dict(urls or {})  # group -> its own Redis (a shard's, with shard_urls), else `url`
        self.allocation: dict[str, int] = {}
        self.starts = 0  # worker processes started so far, restarts included
        self.log = logging.getLogger("fair_router.workers.pool")
        self._slots: list[_Slot] = []
        self._stop_requests: list[int] = []
        for group, count in allocation.items():
            queues = tuple(name.strip() for name in group.split(","))
            if not all(queues) or count < 1:
                raise ValueError(f"pool entry {group!r}: {count!r} needs queue names and at least 1 worker")
            self.allocation[group] = count
            for _ in range(count):
                # rq's scheduler in one worker per Redis server (each shard server schedules its own jobs)
                scheduling = {self.urls.get(slot.group, url) for slot in self._slots if slot.scheduler}
                scheduler = with_scheduler and self.urls.get(group, url) not in scheduling
                self._slots.append(_Slot(group, queues, scheduler=scheduler))

    # -- the whole life of the pool -------------------------------------------------------------

    def run(self) -> int:
        """Start all workers, keep them running until SIGINT/SIGTERM/SIGHUP, then stop them all; exit status 0
        when every worker stopped by itself, 1 when some had to be killed."""
        stop_signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {sig: signal.signal(sig, lambda signum, _: self._stop_requests.append(signum))
                    for sig in stop_signals}
        clean = False
        try:
            self.start()
            while not self._stop_requests:
                time.sleep(self.poll_interval)
                self.check()
        finally:
            received = self._stop_requests[0] if self._stop_requests else signal.SIGTERM
            # rq stops alike on SIGINT and SIGTERM; SIGHUP (terminal gone) would kill it outright
            clean = self.stop(signal.SIGINT if received == signal.SIGINT else signal.SIGTERM)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return 0 if clean else 1

    # -- steps ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Start a worker in every empty slot."""
        for slot in self._slots:
            if slot.process is None:
                self._spawn(slot)

    def check(self) -> None:
        """One supervision step: reap workers that exited and restart those whose backoff is over."""
        now = time.monotonic()
        for slot in self._slots:
            if slot.process is not None and slot.process.poll() is not None:
                self._schedule_restart(slot, now)
            if slot.process is None and now >= slot.restart_at:
                self._spawn(slot)

    def stop(self, sig: int = signal.SIGTERM) -> bool:
        """Stop every worker: warm shutdown, then cold, then SIGKILL (docs/internals.md, "Worker pool"); True
        when no worker had to be SIGKILLed."""
        self.log.info("stopping %d worker(s) with %s", len(self._running()), signal.Signals(sig).name)
        self._signal_running(sig)
        self._wait(max(self.grace, RQ_REPEAT_WINDOW))
        if self._running():
            self.log.warning("%d workers still busy after warm shutdown: cold shutdown", len(self._running()))
            self._signal_running(sig)
            self._wait(self.kill_after)
        stragglers = self._running()
        for slot, process in stragglers:
            self._kill(slot.group, process)
        for slot in self._slots:
            slot.process = None
        return not stragglers

    def children(self) -> list[Child]:
        """The worker processes running now."""
        return [Child(slot.group, process.pid, slot.scheduler) for slot, process in self._running()]

    def describe(self) -> str:
        """The allocation as a table, for printing at start."""
        total = sum(self.allocation.values())
        width = max(len("queue group"), *(len(group) for group in self.allocation))
        lines = [f"fair-router pool: {total} worker{'s' * (total != 1)} of {self.worker_class} "
                 f"on {redact_url(self.url)}", f"  {'queue group'.ljust(width)}  workers"]
        for group, count in self.allocation.items():
            scheduler = any(slot.scheduler and slot.group == group for slot in self._slots)
            lines.append(f"  {group.ljust(width)}  {count:>7}{'  (one runs the scheduler)' * scheduler}")
        return "\n".join(lines)

    # -- helpers --------------------------------------------------------------------------------

    def command(self, queues: tuple[str, ...], scheduler: bool) -> list[str]:
        """The rq command line of one worker (the Redis URL goes in its environment)."""
        args = [self.python, "-m", "rq.cli", "worker", "--worker-class", self.worker_class,
                "--logging_level", self.logging_level, *(arg for entry in self.paths for arg in ("--path", entry))]
        if self.cluster:
            args += ["--connection-class", "fair_router.store.cluster.RqSlotRedis"]
        return [*args, *(["--with-scheduler"] if scheduler else []), *queues]

    def _spawn(self, slot: _Slot) -> None:
        env = {**os.environ, **self.env, "RQ_REDIS_URL": self.urls.get(slot.group, self.url)}
        slot.process = subprocess.Popen(self.command(slot.queues, slot.scheduler), env=env, start_new_session=True)
        slot.started_at = time.monotonic()
        self.starts += 1
        self.log.info("started worker pid %d on %s", slot.process.pid, slot.group)

    def _schedule_restart(self, slot: _Slot, now: float) -> None:
        assert slot.process is not None
        uptime = now - slot.started_at
        slot.quick_deaths = 0 if uptime >= self.stable_after else slot.quick_deaths + 1
        delay = self.restart_delay(slot.quick_deaths)
        self.log.warning("worker pid %d on %s %s after %.1f s; restarting in %.1f s", slot.process.pid,
                         slot.group, _describe_exit(slot.process.returncode), uptime, delay)
        slot.process = None
        slot.restart_at = now + delay

    def restart_delay(self, quick_deaths: int) -> float:
        """Seconds before a restart after ``quick_deaths`` deaths in a row within ``stable_after``."""
        return 0.0 if quick_deaths < 1 else min(self.max_backoff, self.backoff * 2 ** (quick_deaths - 1))

    def _running(self) -> list[tuple[_Slot, subprocess.Popen[bytes]]]:
        """Slots whose worker runs now, with that worker (exited ones are reaped on the way)."""
        return [(slot, slot.process) for slot in self._slots
                if slot.process is not None and slot.process.poll() is None]

    def _signal_running(self, sig: int) -> None:
        for _slot, process in self._running():
            process.send_signal(sig)

    def _wait(self, seconds: float) -> None:
        """Wait until no worker runs, ``seconds`` pass, or another stop signal arrives."""
        deadline = time.monotonic() + seconds
        requests = len(self._stop_requests)
        while self._running() and time.monotonic() < deadline and len(self._stop_requests) == requests:
            time.sleep(self.poll_interval)

    def _kill(self, group: str, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL a worker, its process group (pgid = pid: own session) and all its descendants."""
        pid = process.pid
        descendants = _descendants(pid)
        self.log.warning("worker pid %d on %s did not stop: SIGKILL", pid, group)
        process.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        for child in descendants:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        process.wait()


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _descendants(pid: int) -> list[int]:
    """All descendants of ``pid``, from ``/proc`` (empty where there is none, e.g. macOS)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # "pid (comm) state ppid ..."
        except (OSError, IndexError):
            continue  # exited meanwhile
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found.extend(children)
        todo.extend(children)
    return found


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, for printing (the whole URL hidden when it cannot be parsed)."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.netloc.rsplit("@", 1)[1]
        return urlunsplit(parts._replace(netloc=f"{parts.username or ''}:***@{host}"))
    except ValueError:
        return "(an unparsable URL)"
