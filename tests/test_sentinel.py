"""A Sentinel-managed primary: producers and a weighted worker on redis-py's ``Sentinel.master_for`` client,
a failover between enqueue and drain (real redis-server processes: a primary, a replica, one sentinel).

Jobs whose enqueue a replica acknowledged (``replicas_to_wait: 1``) are all on the promoted replica and
finish there; the same client objects reach the new primary after the failover.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_for
from redis import Redis
from redis.connection import SSLConnection, UnixDomainSocketConnection
from redis.sentinel import Sentinel
from rq.job import Job, JobStatus
from test_replicas import Replica

from fair_router import FairQueue, Rule, Settings, WeightedSimpleWorker, fair_job
from fair_router.demo.redis_server import RedisServer, find_redis_server, free_port
from fair_router.workers.setup import build_gate

SETTINGS = Settings(prefix="sentinel", fair_queues=["fairq"], replicas_to_wait=1, replicas_timeout="2s")


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[tuple[RedisServer, Replica, int]]:
    with RedisServer() as primary:
        replica = Replica(primary, tmp_path)
        replica.start()
        port = free_port()
        config = tmp_path / "sentinel.conf"
        config.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                          f"sentinel monitor mymaster 127.0.0.1 {primary.port} 1\n"
                          "sentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n")
        proc = subprocess.Popen([find_redis_server(), str(config), "--sentinel"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            probe = Redis(host="127.0.0.1", port=port)
            wait_for(lambda: _replica_ready(probe), 30, "the sentinel to see the replica in sync")
            yield primary, replica, port
        finally:
            proc.kill()
            proc.wait()
            replica.stop()


def _replica_ready(probe: Redis) -> bool:
    """The sentinel lists a replica that is up and linked to the primary (else a failover finds none good)."""
    found = _quietly(lambda: probe.execute_command("SENTINEL", "REPLICAS", "mymaster"))
    for entry in found if isinstance(found, list) else []:
        fields = dict(zip(entry[::2], entry[1::2], strict=True)) if isinstance(entry, list) else dict(entry)
        text = {str(k, "utf-8") if isinstance(k, bytes) else str(k): str(v, "utf-8") if isinstance(v, bytes) else str(v)
                for k, v in fields.items()}
        if text.get("flags") == "slave" and text.get("master-link-status") == "ok":
            return True
    return False


def _quietly(read: object) -> object:
    try:
        return read()  # type: ignore[operator]
    except Exception:
        return None


def test_jobs_acknowledged_by_a_replica_survive_a_sentinel_failover(
        sentinel: tuple[RedisServer, Replica, int]) -> None:
    primary, replica, port = sentinel
    client = Sentinel([("127.0.0.1", port)]).master_for("mymaster")
    assert client.info("server")["tcp_port"] == primary.port
    routed = fair_job("default", rules=[Rule(queue="default_throttled", threshold=100, per=60)], connection=client,
                      settings=SETTINGS, job_key="sentinel.job")(print)
    fair = FairQueue("fairq", connection=client, settings=SETTINGS)
    jobs = [routed.enqueue("routed", i, fair_tenant=f"t{i % 3}") for i in range(6)]
    jobs += [fair.enqueue("builtins.print", "fair", i, fair_tenant=f"t{i % 3}") for i in range(6)]

    # A sentinel answers NOGOODSLAVE while its view of the replica is not fresh yet (a loaded machine): ask again.
    sentinel_client = Redis(host="127.0.0.1", port=port)
    wait_for(lambda: _quietly(lambda: sentinel_client.execute_command("SENTINEL", "FAILOVER", "mymaster")), 30,
             "the sentinel to start a failover")
    wait_for(lambda: Sentinel([("127.0.0.1", port)]).discover_master("mymaster")[1] == replica.port, 30,
             "the replica to be promoted")
    old = primary.client()
    wait_for(lambda: old.info("replication")["role"] == "slave", 30, "the old primary to be made a replica")
    # The client's pooled connections still reach the old primary: its next write there gets READONLY, which
    # redis-py's Sentinel connection turns into a reconnect to the primary Sentinel names now.
    wait_for(lambda: _quietly(lambda: client.set("probe", 1)), 30, "the client to reach the new primary")
    assert client.info("server")["tcp_port"] == replica.port

    # After the failover the same producer objects enqueue on the new primary (no replica of its own yet).
    later = Settings(prefix="sentinel", fair_queues=["fairq"])
    jobs.append(FairQueue("fairq", connection=client, settings=later).enqueue("builtins.print", "after",
                                                                              fair_tenant="t0"))
    WeightedSimpleWorker(["default", "default_throttled", "fairq"], connection=client,
                         settings=later).work(burst=True, logging_level="WARNING")
    statuses = [Job.fetch(job.id, connection=client).get_status() for job in jobs]
    assert statuses == [JobStatus.FINISHED] * len(jobs)


@pytest.mark.parametrize("url, kind", [("unix:///run/redis.sock", UnixDomainSocketConnection),
                                       ("rediss://cache.example:6380/0", SSLConnection)])
def test_the_limiters_own_pool_keeps_the_workers_connection_class(url: str, kind: type) -> None:
    """Its pool was rebuilt from the kwargs alone: a unix socket raised TypeError, TLS connected in clear."""
    gate = build_gate(Redis.from_url(url), Settings())
    assert gate.limiter.connection.connection_pool.connection_class is kind
