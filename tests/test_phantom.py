"""No phantom records: an enqueue that fails after routing recorded it leaves nothing behind, neither in its
tenant's window nor in the routed counters, a FairQueue's state or its backlog counts.

Two real failures on a real redis-server: Redis at ``maxmemory`` (noeviction) refusing rq's enqueue
MULTI after route.lua's write went through, and the producer's connection killed (``CLIENT KILL`` from a
second connection) just as rq's enqueue MULTI is about to be sent.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import command_calls
from redis import Redis
from redis.backoff import NoBackoff
from redis.client import Pipeline
from redis.connection import Connection
from redis.exceptions import ResponseError
from redis.retry import Retry
from rq import Queue
from rq.job import Job

from fair_router import FairQueue, FairRouter, RedisUnavailable, Rule
from fair_router.core.keys import Keys
from fair_router.demo.redis_server import RedisServer
from fair_router.fairqueue.scripts import tenant_waiting
from fair_router.routing.router import Route

ROUTE = Route("phantom.job", "default", (Rule(queue="default_throttled", threshold=5000, per=3600),))
"""One rule whose threshold the test never reaches: the window keeps every entry (no trimming at the cap)."""
TENANTS = [f"t{i}" for i in range(4)]


def windows(conn: Redis) -> dict[str, int]:
    keys = Keys("fair_router")
    return {tenant: int(conn.zcard(keys.window(ROUTE.job_key, tenant))) for tenant in TENANTS}


def routed_total(conn: Redis) -> int:
    return sum(int(v) for v in conn.hvals(Keys("fair_router").routed(ROUTE.job_key)))


def queued(conn: Redis, fair: bool) -> int:
    name = "default"
    return len(FairQueue(name, connection=conn)) if fair else len(Queue(name, connection=conn))


@pytest.fixture
def private_redis() -> Iterator[RedisServer]:
    """A server of its own: the test changes its maxmemory."""
    with RedisServer() as server:
        yield server


@pytest.mark.parametrize("fair", [False, True], ids=["plain", "fair"])
def test_enqueues_refused_at_maxmemory_leave_no_window_entries(private_redis: RedisServer, fair: bool) -> None:
    conn = private_redis.client()
    router = FairRouter(conn)
    payload = os.urandom(15_000).hex()  # 30 KB that rq's zlib cannot shrink: route.lua fits where the job does not
    router.enqueue(ROUTE, Queue.parse_args("routed_jobs.echo", "warm-up", payload), "warm-up", fair=fair)
    used = int(conn.info("memory")["used_memory"])
    conn.config_set("maxmemory-policy", "noeviction")
    conn.config_set("maxmemory", used + 600_000)

    accepted: Counter[str] = Counter()
    refused = 0
    for n in range(400):
        tenant = TENANTS[n % len(TENANTS)]
        try:
            router.enqueue(ROUTE, Queue.parse_args("routed_jobs.echo", tenant, payload), tenant, fair=fair)
        except ResponseError as exc:
            assert "maxmemory" in str(exc) or "OOM" in str(exc), exc
            refused += 1
            if refused >= 40:
                break
        else:
            accepted[tenant] += 1
    conn.config_set("maxmemory", 0)

    assert refused >= 40 and sum(accepted.values()) > 0, (refused, accepted)
    # A fair enqueue is routed, then enqueued: its refused enqueues' entries were taken back. A plain one goes
    # in one MULTI with its record (routing.enqueue): refused whole, nothing to take back.
    assert (command_calls(conn, "zrem") > 0) == fair
    assert windows(conn) == {tenant: accepted[tenant] for tenant in TENANTS}
    assert routed_total(conn) == sum(accepted.values()) + 1  # + the warm-up job
    assert queued(conn, fair) == sum(accepted.values()) + 1
    if fair:
        state = FairQueue("default", connection=conn).fair_keys.state
        assert sum(tenant_waiting(conn.hgetall(state)).values()) == sum(accepted.values()) + 1


class KillingPipeline(Pipeline):
    """rq's enqueue MULTI, with the connection it is about to go out on killed by the server first
    (``CLIENT KILL ID`` sent by another client), as a network drop between routing and enqueueing."""

    killer: Redis
    kills: list[int]
    kill_times: int

    def _execute_transaction(self, connection: Connection, commands: Any, raise_on_error: bool) -> Any:
        if len(self.kills) < self.kill_times:
            connection.send_command("CLIENT", "ID")
            client_id = int(connection.read_response())
            assert self.killer.client_kill_filter(_id=client_id) == 1
            self.kills.append(client_id)
        return super()._execute_transaction(connection, commands, raise_on_error)


class DroppingRedis(Redis):
    """A client whose transactions (rq's enqueue MULTI) lose their connection ``kill_times`` times."""

    def __init__(self, *args: Any, killer: Redis, kill_times: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.killer, self.kill_times, self.kills = killer, kill_times, []

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        pipe = KillingPipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)
        pipe.killer, pipe.kills, pipe.kill_times = self.killer, self.kills, self.kill_times if transaction else 0
        return pipe


def dropping(server: RedisServer, killer: Redis, retries: int) -> DroppingRedis:
    """A producer client whose first enqueue MULTI loses its connection, retrying ``retries`` times."""
    return DroppingRedis(host="127.0.0.1", port=server.port, killer=killer, kill_times=1,
                         retry=Retry(NoBackoff(), retries))


@pytest.mark.parametrize("fair", [False, True], ids=["plain", "fair"])
def test_connection_killed_between_routing_and_enqueue_leaves_no_entry(conn: Redis, redis_server: RedisServer,
                                                                       fair: bool) -> None:
    """Without retries the enqueue fails with one error naming Redis, and its window entry is taken back."""
    producer = dropping(redis_server, conn, retries=0)
    router = FairRouter(producer)
    with pytest.raises(RedisUnavailable, match=f"Redis at 127.0.0.1:{redis_server.port}/0 is unavailable"):
        router.enqueue(ROUTE, Queue.parse_args("routed_jobs.echo", "t0"), "t0", fair=fair)
    assert producer.kills, "the connection was never killed"
    assert windows(conn) == dict.fromkeys(TENANTS, 0)
    assert routed_total(conn) == 0 and queued(conn, fair) == 0
    assert not conn.keys(Job.key_for("*"))


@pytest.mark.parametrize("fair", [False, True], ids=["plain", "fair"])
def test_batch_with_connection_killed_leaves_no_entry(conn: Redis, redis_server: RedisServer, fair: bool) -> None:
    producer = dropping(redis_server, conn, retries=0)
    router = FairRouter(producer)
    calls = [(Queue.parse_args("routed_jobs.echo", tenant, n), tenant) for n, tenant in enumerate(TENANTS * 3)]
    with pytest.raises(RedisUnavailable):
        router.enqueue_many(ROUTE, calls, fair=fair)
    assert windows(conn) == dict.fromkeys(TENANTS, 0)
    assert routed_total(conn) == 0 and queued(conn, fair) == 0


def test_connection_killed_then_retried_counts_the_job_once(conn: Redis, redis_server: RedisServer) -> None:
    """With redis-py's retries the MULTI goes out again on a new connection: the job is queued, and its
    window entry, counted once, stays."""
    producer = dropping(redis_server, conn, retries=2)
    router = FairRouter(producer)
    job = router.enqueue(ROUTE, Queue.parse_args("routed_jobs.echo", "t1"), "t1")
    assert producer.kills
    assert windows(conn) == {**dict.fromkeys(TENANTS, 0), "t1": 1}
    assert Queue("default", connection=conn).job_ids == [job.id]
