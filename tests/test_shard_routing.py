"""Sharded routing: the least loaded of the tenant's shards, chosen in route.lua, composed with the
throttle rules, for plain and fair queues, from the decorator or the settings."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import command_calls
from redis import Redis
from routed_jobs import echo, fail_twice
from rq import Queue, Retry, SimpleWorker

from fair_router import FairQueue, FairRouter, Rule, Settings, Shards, fair_job, shards_of

SHARDS = Shards(count=8, per_tenant=2)


def job_on(conn: Redis, shards: Shards = SHARDS, **options: object):  # type: ignore[no-untyped-def]
    return fair_job(connection=conn, settings=Settings(), shards=shards, job_key="shard.echo", **options)(echo)


def test_goes_to_the_least_loaded_of_its_shards(conn: Redis) -> None:
    low, high = shards_of("acme", 8, 2)
    for i in range(3):  # shard `low` already has work waiting
        Queue(f"default_shard{low}", connection=conn).enqueue(echo, "x", i)
    job = job_on(conn).enqueue("acme", fair_tenant="acme")
    assert job.origin == f"default_shard{high}"
    assert job.meta["fair_shard"] == high
    assert Queue(f"default_shard{high}", connection=conn).get_job_ids() == [job.id]


def test_a_batch_counts_its_own_jobs(conn: Redis) -> None:
    """Ten jobs of one tenant in one enqueue_many: five on each of its two shards."""
    jobs = job_on(conn).enqueue_many([(("acme", i), {"fair_tenant": "acme"}) for i in range(10)])
    by_queue = Counter(job.origin for job in jobs)
    assert by_queue == {f"default_shard{shard}": 5 for shard in shards_of("acme", 8, 2)}


def test_one_after_another_alternate(conn: Redis) -> None:
    send = job_on(conn)
    origins = [send.enqueue("acme", i, fair_tenant="acme").origin for i in range(6)]
    first, second = (f"default_shard{shard}" for shard in shards_of("acme", 8, 2))
    assert Counter(origins) == {first: 3, second: 3}


def test_one_script_call_per_enqueue(conn: Redis) -> None:
    send = job_on(conn)
    send.enqueue("acme", fair_tenant="acme")  # loads the script
    before = command_calls(conn, "evalsha", "eval", "fcall", "llen")
    for i in range(5):
        send.enqueue("acme", i, fair_tenant="acme")
    # One route call each (FCALL, EVALSHA on Redis < 7), whose LLENs of the two candidate shards (counted by
    # Redis too) are the load read: no round trip of its own.
    calls = command_calls(conn, "evalsha", "eval", "fcall", "llen") - before
    assert calls == 5 * (1 + 2)


def test_a_tenant_only_ever_uses_its_shards(conn: Redis) -> None:
    send = job_on(conn)
    for n in range(30):
        tenant = f"t{n}"
        job = send.enqueue(tenant, fair_tenant=tenant)
        assert job.meta["fair_shard"] in shards_of(tenant, 8, 2)


def test_throttle_rule_picks_the_family_the_shard_the_member(conn: Redis) -> None:
    rules = [Rule(queue="{queue}_throttled", threshold=2, per="1h")]
    send = job_on(conn, rules=rules)
    origins = [send.enqueue("acme", i, fair_tenant="acme").origin for i in range(6)]
    dealt = shards_of("acme", 8, 2)
    assert all(origin.startswith("default_shard") for origin in origins[:2])
    assert {origin for origin in origins[2:]} <= {f"default_throttled_shard{shard}" for shard in dealt}
    # The throttled family's members are measured on their own: its four jobs are spread two and two.
    assert Counter(origins[2:]) == {f"default_throttled_shard{shard}": 2 for shard in dealt}
    routed = FairRouter(conn).connection.hgetall("fair_router:{shard.echo}:routed")
    assert routed == {b"default": b"2", b"default_throttled": b"4"}


def test_a_fair_queue_can_be_sharded(conn: Redis) -> None:
    send = job_on(conn, fair=True)
    jobs = [send.enqueue(tenant, fair_tenant=tenant) for tenant in ("a", "b", "a", "c")]
    for job in jobs:
        queue = FairQueue(job.origin, connection=conn, settings=Settings())
        assert job.id in queue.get_job_ids()
        assert job.meta["fair_shard"] in shards_of(job.meta["fair_tenant"], 8, 2)


def test_settings_shard_a_job_key(conn: Redis) -> None:
    settings = Settings(jobs={"shard.echo": {"queue": "work", "shards": {"count": 4, "per_tenant": 1}}})
    send = fair_job(connection=conn, settings=settings, job_key="shard.echo")(echo)
    job = send.enqueue("acme", fair_tenant="acme")
    assert job.origin == f"work_shard{shards_of('acme', 4, 1)[0]}"


def test_bad_shards_setting_is_named() -> None:
    with pytest.raises(ValueError, match="per_tenant \\(5\\) cannot exceed count \\(4\\)"):
        Settings(jobs={"k": {"shards": {"count": 4, "per_tenant": 5}}})


def test_without_tenant_and_system_jobs_still_go_to_a_shard(conn: Redis) -> None:
    send = job_on(conn, rules=[Rule(queue="slow", threshold=1, per="1h")])
    untenanted = send.enqueue("acme")
    assert untenanted.meta["fair_shard"] in shards_of("", 8, 2)
    system = send.enqueue("acme", fair_tenant="acme", system=True)
    assert system.origin.startswith("default_shard")  # never throttled, but sharded
    assert send.enqueue("acme", fair_tenant="acme", queue="elsewhere").origin == "elsewhere"


def test_retries_return_to_the_shard(conn: Redis) -> None:
    send = fair_job(connection=conn, settings=Settings(), shards=SHARDS, job_key="shard.fail",
                    retry=Retry(max=2))(fail_twice)
    job = send.enqueue("acme", fair_tenant="acme")
    worker = SimpleWorker([job.origin], connection=conn)
    worker.work(burst=True)
    job.refresh()
    assert job.get_status() == "finished"
    assert job.origin.startswith("default_shard")
    assert conn.get(f"test:runs:{job.id}") == b"3"
