"""The dashboard and metrics read every shard: with two real redis-servers as ``shard_urls``, the
snapshot, ``/api/snapshot`` and ``/metrics`` show each shard queue's length as read on its own server, with
the server named; a shard server that is down is shown as down, not as an error."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from redis import Redis
from routed_jobs import echo

from fair_router import Settings, fair_job
from fair_router.dashboard.app import create_app
from fair_router.dashboard.collector import metrics_text
from fair_router.dashboard.queueread import server_label
from fair_router.dashboard.reader import SnapshotReader
from fair_router.demo.redis_server import RedisServer

JOB = {"shard.echo": {"queue": "work", "shards": {"count": 4, "per_tenant": 2}}}


@pytest.fixture
def shard_servers() -> Iterator[list[RedisServer]]:
    with RedisServer() as a, RedisServer() as b:
        yield [a, b]


def _fill(conn: Redis, redis_server: RedisServer, servers: list[RedisServer]) -> tuple[Settings, Counter[int]]:
    """Settings with the two shard servers, and 3 jobs of each of 25 tenants enqueued: jobs per shard."""
    settings = Settings(redis_url=redis_server.url, jobs=JOB, shard_urls=[s.url for s in servers])
    send = fair_job(settings=settings, job_key="shard.echo")(echo)
    jobs = [send.enqueue(f"t{n}", i, fair_tenant=f"t{n}") for i in range(3) for n in range(25)]
    per_shard = Counter(job.meta["fair_shard"] for job in jobs)
    assert len(per_shard) == 4 and sum(per_shard.values()) == 75
    assert conn.keys("rq:queue:work_shard*") == []  # nothing on redis_url
    return settings, per_shard


def test_snapshot_and_metrics_read_each_shard_on_its_server(
    conn: Redis, redis_server: RedisServer, shard_servers: list[RedisServer]
) -> None:
    settings, per_shard = _fill(conn, redis_server, shard_servers)
    labels = [server_label(s.url) for s in shard_servers]
    snap = SnapshotReader(conn, settings).snapshot()
    rows = {queue.name: queue for queue in snap.queues}
    for shard in range(4):
        row = rows[f"work_shard{shard}"]
        assert (row.jobs, row.running, row.down) == (per_shard[shard], 0, False)
        assert row.server == labels[shard % 2]
    assert [(v.server, v.shards, v.up) for v in snap.shard_servers] == [(labels[0], [0, 2], True),
                                                                         (labels[1], [1, 3], True)]

    client = create_app(settings, conn).test_client()  # Host "localhost": allowed
    body = client.get("/api/snapshot").get_json()
    shown = {q["name"]: (q["jobs"], q["server"], q["down"]) for q in body["queues"] if q["name"].startswith("work")}
    assert shown == {f"work_shard{s}": (per_shard[s], labels[s % 2], False) for s in range(4)}
    assert [server["up"] for server in body["shard_servers"]] == [True, True]

    text = client.get("/metrics").get_data(as_text=True)
    for shard in range(4):
        assert f'fair_router_queue_jobs{{queue="work_shard{shard}"}} {float(per_shard[shard])}' in text
    for label in labels:
        assert f'fair_router_shard_server_up{{server="{label}"}} 1.0' in text


def test_a_down_shard_server_is_shown_as_down(
    conn: Redis, redis_server: RedisServer, shard_servers: list[RedisServer]
) -> None:
    settings, per_shard = _fill(conn, redis_server, shard_servers)
    up, down = (server_label(s.url) for s in shard_servers)
    shard_servers[1].stop()  # shards 1 and 3

    reader = SnapshotReader(conn, settings)
    snap = reader.snapshot()
    rows = {queue.name: queue for queue in snap.queues}
    assert [(rows[f"work_shard{s}"].down, rows[f"work_shard{s}"].server) for s in range(4)] == [
        (False, up), (True, down), (False, up), (True, down)]
    assert rows["work_shard0"].jobs == per_shard[0] and rows["work_shard2"].jobs == per_shard[2]
    assert [(v.server, v.up) for v in snap.shard_servers] == [(up, True), (down, False)]
    assert snap.shard_servers[1].error

    client = create_app(settings, conn).test_client()
    response = client.get("/api/snapshot")
    assert response.status_code == 200
    assert [s["up"] for s in response.get_json()["shard_servers"]] == [True, False]
    page = client.get("/")
    assert page.status_code == 200
    text = client.get("/metrics").get_data(as_text=True)
    assert text == metrics_text(reader).decode()
    assert f'fair_router_shard_server_up{{server="{down}"}} 0.0' in text
    assert f'fair_router_queue_jobs{{queue="work_shard0"}} {float(per_shard[0])}' in text
    assert 'queue="work_shard1"' not in text and 'queue="work_shard3"' not in text  # unknown, not a false 0


def test_server_label_hides_the_password() -> None:
    assert server_label("redis://:s3cret@cache.internal:6380/2") == "cache.internal:6380/2"
    assert server_label("rediss://user:pw@h") == "h:6379/0"
    assert server_label("unix:///run/redis.sock") == "/run/redis.sock"
