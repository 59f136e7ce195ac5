"""Shards on several Redis primaries: with two real redis-servers as shard_urls each job lies on
its shard's server and per-shard workers drain both, 0 jobs lost; a shard server that is down is routed
around, and a tenant whose every shard is down gets a clear error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Fleet, wait_for, write_settings
from redis import Redis
from routed_jobs import echo
from rq import Queue
from rq.job import Job

from fair_router import Settings, fair_job, shards_of
from fair_router.demo.redis_server import RedisServer
from fair_router.routing.placement import ShardsUnavailable

JOB = {"shard.echo": {"queue": "work", "shards": {"count": 4, "per_tenant": 2}}}


@pytest.fixture
def shard_servers() -> Iterator[list[RedisServer]]:
    with RedisServer() as a, RedisServer() as b:
        yield [a, b]


def test_each_job_on_its_shards_server_and_per_shard_workers_drain_both(
    conn: Redis, redis_server: RedisServer, shard_servers: list[RedisServer], tmp_path: Path
) -> None:
    urls = [server.url for server in shard_servers]
    settings = Settings(redis_url=redis_server.url, jobs=JOB, shard_urls=urls)
    send = fair_job(settings=settings, job_key="shard.echo")(echo)
    tenants = [f"t{n}" for n in range(40)]
    jobs = [send.enqueue(tenant, i, fair_tenant=tenant) for i in range(3) for tenant in tenants]
    jobs += send.enqueue_many([((tenant, 9), {"fair_tenant": tenant}) for tenant in tenants])
    servers = [server.client() for server in shard_servers]
    for job in jobs:
        shard = job.meta["fair_shard"]
        assert shard in shards_of(job.meta["fair_tenant"], 4, 2)
        assert job.origin == f"work_shard{shard}"
        home, other = servers[shard % 2], servers[1 - shard % 2]
        assert job.id.encode() in home.lrange(f"rq:queue:work_shard{shard}", 0, -1)
        assert not other.exists(f"rq:job:{job.id}")
        assert not conn.exists(f"rq:job:{job.id}")  # nothing of the job on redis_url
    assert conn.keys("fair_router:*") == []  # no rules: no window either

    config = write_settings(tmp_path, {"redis_url": redis_server.url, "jobs": JOB, "shard_urls": urls})
    fleets = []
    try:
        for shard in range(4):
            fleet = Fleet(urls[shard % 2], tmp_path / f"shard{shard}", queues=[f"work_shard{shard}"])
            (tmp_path / f"shard{shard}").mkdir()
            fleet.config = config
            fleet.start(burst=True, scheduler=False)
            fleets.append(fleet)

        def finished() -> bool:
            return all(Job.fetch(job.id, connection=servers[job.meta["fair_shard"] % 2]).get_status() == "finished"
                       for job in jobs)

        wait_for(finished, 60, "every job finished")
    finally:
        for fleet in fleets:
            fleet.stop_all()
    assert len(jobs) == 160
    assert sum(Queue(f"work_shard{shard}", connection=servers[shard % 2]).count for shard in range(4)) == 0


def test_a_down_shard_server_is_routed_around(redis_server: RedisServer, shard_servers: list[RedisServer]) -> None:
    a, b = shard_servers
    settings = Settings(redis_url=redis_server.url, jobs=JOB, shard_urls=[a.url, b.url])
    send = fair_job(settings=settings, job_key="shard.echo")(echo)
    tenants = [f"t{n}" for n in range(30)]
    b.stop()  # shards 1 and 3 are down
    mixed = [t for t in tenants if {s % 2 for s in shards_of(t, 4, 2)} == {0, 1}]
    only_b = [t for t in tenants if all(s % 2 == 1 for s in shards_of(t, 4, 2))]
    assert mixed and only_b
    for tenant in mixed:
        job = send.enqueue(tenant, fair_tenant=tenant)
        assert job.meta["fair_shard"] % 2 == 0
        assert a.client().exists(f"rq:job:{job.id}")
    for tenant in only_b:
        with pytest.raises(ShardsUnavailable, match=f"tenant '{tenant}'.*every one of its shards"):
            send.enqueue(tenant, fair_tenant=tenant)
