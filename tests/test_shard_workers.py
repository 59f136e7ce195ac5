"""Workers per shard: `fair-router worker --shard I` and the pool's per-shard groups."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from conftest import write_settings
from redis import Redis
from routed_jobs import echo
from rq import Queue

from fair_router import Settings, fair_job, shards_of
from fair_router.cli import main
from fair_router.workers.pool import WorkerPool
from fair_router.workers.shard_pool import pool_allocation, shard_queues
from fair_router.workers.weighted import WeightedWorker

JOBS = {
    "app.sync": {"queue": "sync", "shards": {"count": 4, "per_tenant": 2},
                 "rules": [{"queue": "{queue}_throttled", "threshold": 10, "per": "1m"}]},
    "app.mail": {"queue": "mail", "shards": {"count": 2, "per_tenant": 1}},
    "app.plain": {"queue": "plain"},
}


def test_shard_queues_are_every_sharded_familys_member() -> None:
    settings = Settings(jobs=JOBS)
    assert shard_queues(settings, 1) == ["sync_shard1", "sync_throttled_shard1", "mail_shard1"]
    assert shard_queues(settings, 3) == ["sync_shard3", "sync_throttled_shard3"]  # mail has 2 shards
    assert shard_queues(settings, 3, ["other"]) == ["other_shard3"]


def test_pool_deals_sharded_groups_per_shard() -> None:
    settings = Settings(jobs=JOBS, pool={"sync,sync_throttled": 2, "plain": 1, "mail": 3},
                        shard_urls=["redis://a:6379/0", "redis://b:6379/0"])
    allocation, urls = pool_allocation(settings)
    assert allocation == {
        **{f"sync_shard{i},sync_throttled_shard{i}": 2 for i in range(4)},
        "plain": 1, "mail_shard0": 3, "mail_shard1": 3,
    }
    assert urls["sync_shard2,sync_throttled_shard2"] == "redis://a:6379/0"
    assert urls["sync_shard3,sync_throttled_shard3"] == "redis://b:6379/0"
    assert "plain" not in urls
    # rq's scheduler runs in one worker per Redis server: the plain queue's, and each shard server's
    pool = WorkerPool(allocation, "redis://main:6379/0", urls=urls, with_scheduler=True)
    scheduling = {urls.get(child_group, pool.url) for child_group in
                  [slot.group for slot in pool._slots if slot.scheduler]}
    assert scheduling == {"redis://main:6379/0", "redis://a:6379/0", "redis://b:6379/0"}
    assert sum(slot.scheduler for slot in pool._slots) == 3


def test_shard_queue_of_a_fair_family_is_fair_and_weighted_as_its_family(conn: Redis) -> None:
    settings = Settings(jobs=JOBS, fair_queues=["sync"], queues={"sync": 3, "mail": 1, "sync_throttled": 1, "plain": 1})
    assert settings.is_fair("sync_shard2") and not settings.is_fair("mail_shard0")
    assert settings.weight("sync_shard2") == 3
    worker = WeightedWorker(["sync_shard2", "mail_shard0"], connection=conn, settings=settings)
    assert [type(queue).__name__ for queue in worker.queues] == ["FairQueue", "Queue"]
    assert [weight for _, weight in worker.fetch_weights or []] == [3, 1]


def test_worker_shard_option_drains_that_shard_only(conn: Redis, redis_server, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                    isolated_settings: None) -> None:
    config = write_settings(tmp_path, {"redis_url": redis_server.url, "jobs": {
        "shard.echo": {"queue": "work", "shards": {"count": 3, "per_tenant": 1}}}})
    send = fair_job(connection=conn, settings=Settings(jobs={"shard.echo": {"queue": "work", "shards": {
        "count": 3, "per_tenant": 1}}}), job_key="shard.echo")(echo)
    tenants = [f"t{n}" for n in range(12)]
    jobs = {tenant: send.enqueue(tenant, fair_tenant=tenant) for tenant in tenants}
    result = CliRunner().invoke(main, ["worker", "--config", str(config), "--shard", "1", "--burst",
                                       "--without-scheduler"])
    assert result.exit_code == 0, result.output
    for tenant, job in jobs.items():
        done = job.get_status(refresh=True) == "finished"
        assert done == (shards_of(tenant, 3, 1) == (1,)), tenant
    assert Queue("work_shard1", connection=conn).count == 0


def test_worker_shard_without_sharded_jobs_is_an_error(tmp_path: Path, isolated_settings: None) -> None:
    config = write_settings(tmp_path, {"jobs": {}})
    result = CliRunner().invoke(main, ["worker", "--config", str(config), "--shard", "0", "--burst"])
    assert result.exit_code == 2
    assert "no queues for shard 0" in result.output
