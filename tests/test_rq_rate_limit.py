"""rq 3.0's ``RateLimit`` beside fair-router: a rate-limited job takes rq's own enqueue path (rq admits it with
a script of its own, a plain push onto the queue's list), keeps its tenant, and on a FairQueue joins its
tenant's FIFO at pop time, so fair order holds across admission. Real Redis, real rq workers."""

from __future__ import annotations

from typing import cast

import fair_jobs
import pytest
from redis import Redis
from rq import Queue, SimpleWorker
from rq.job import JobStatus
from rq.rate_limit import RateLimit, RateLimitRegistry

from fair_router import FairQueue, FairRouter, Settings, WeightedSimpleWorker, fair_job

PREFIX = "rl"

pytestmark = pytest.mark.usefixtures("isolated_settings")


def order(conn: Redis) -> list[str]:
    return [entry.decode() for entry in cast(list[bytes], conn.lrange(fair_jobs.LOG, 0, -1))]


def command_calls(conn: Redis, *names: str) -> int:
    stats = cast(dict[str, dict[str, int]], conn.info("commandstats"))
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in names)


def test_rate_limited_jobs_admitted_by_rq_are_served_in_fair_order_on_a_fair_queue(conn: Redis) -> None:
    queue = FairQueue("default", connection=conn, settings=Settings(prefix=PREFIX))
    limit = RateLimit("exports", 100)  # admits all at once: ten plain pushes of A ahead of B's jobs
    for n in range(10):
        job = queue.enqueue(fair_jobs.log, "A", n, fair_tenant="A", rate_limit=limit)
        assert job.get_status() == JobStatus.QUEUED and job.meta["fair_tenant"] == "A"
    for n in range(2):
        queue.enqueue(fair_jobs.log, "B", n, fair_tenant="B")
    WeightedSimpleWorker([queue], connection=conn, settings=Settings(prefix=PREFIX)).work(burst=True)
    ran = order(conn)
    assert sorted(ran) == sorted([f"A:{n}" for n in range(10)] + ["B:0", "B:1"])
    # fair share between the two tenants once A's entries joined its FIFO: B is not served after A's ten
    assert ran.index("B:1") <= 4, ran
    assert [entry for entry in ran if entry.startswith("A")] == [f"A:{n}" for n in range(10)]  # A's own order
    assert queue.count == 0 and queue.get_job_ids() == []


def test_a_plain_queue_serves_rate_limited_jobs_in_rqs_order_and_rq_releases_their_slots(conn: Redis) -> None:
    queue = Queue("plain", connection=conn)
    for n in range(4):
        queue.enqueue(fair_jobs.log, "A", n, rate_limit=RateLimit("one-at-a-time", 1))
    registry = RateLimitRegistry("one-at-a-time", connection=conn)
    assert registry.get_rate_limited_job_count() == 3 and queue.count == 1  # one admitted, three held by rq
    WeightedSimpleWorker([queue], connection=conn).work(burst=True)
    # rq admits held jobs oldest first by whole-second timestamps (ties: by job id), so only A:0 is sure first
    assert order(conn)[0] == "A:0" and sorted(order(conn)) == ["A:0", "A:1", "A:2", "A:3"]
    assert registry.get_rate_limited_job_count() == 0


def test_routed_rate_limited_enqueue_takes_rqs_path_and_keeps_its_tenant(conn: Redis) -> None:
    router = FairRouter(conn, prefix=PREFIX)
    limit = RateLimit("reports", 1)

    @fair_job("reports", tenant=lambda tenant, n: tenant, router=router)
    def report(tenant: str, n: int) -> None:
        fair_jobs.log(tenant, n)

    first = report.enqueue("acme", 1, rate_limit=limit)
    second = report.enqueue("acme", 2, rate_limit=limit)
    assert first.get_status() == JobStatus.QUEUED
    assert second.get_status() == JobStatus.RATE_LIMITED  # held by rq until the first one's slot frees
    assert second.meta["fair_tenant"] == "acme"
    limited = fair_job("reports", tenant=lambda tenant, n: tenant, router=router, rate_limit=limit)(fair_jobs.log)
    with pytest.raises(TypeError, match="rate_limit= is not supported in a batch"):
        limited.enqueue_many([(("acme", 3), {})])
    assert limited.delay("acme", 5).get_status() == JobStatus.RATE_LIMITED  # the decorator's default applies
    with pytest.raises(ValueError, match="cannot be enqueued with a pipeline"):  # rq's own refusal
        report.enqueue("acme", 4, rate_limit=limit, pipeline=conn.pipeline())


def test_adoption_costs_one_script_call_per_rate_limited_job(conn: Redis) -> None:
    """What adoption adds, counted by the server: one fair push (EVALSHA) per rate-limited job popped (the pops
    are FCALLs on Redis 7, EVALSHAs before: every script call counts)."""
    settings = Settings(prefix=PREFIX)
    queue = FairQueue("default", connection=conn, settings=settings)
    for n in range(20):
        queue.enqueue(fair_jobs.log, "A", n, fair_tenant="A")
    conn.config_resetstat()
    SimpleWorker([queue], connection=conn, queue_class=FairQueue).work(burst=True)
    plain_scripts = command_calls(conn, "evalsha", "eval", "fcall")
    conn.delete(fair_jobs.LOG)
    for n in range(20):
        queue.enqueue(fair_jobs.log, "A", n, fair_tenant="A", rate_limit=RateLimit("wide", 1000))
    conn.config_resetstat()
    SimpleWorker([queue], connection=conn, queue_class=FairQueue).work(burst=True)
    limited_scripts = command_calls(conn, "evalsha", "eval", "fcall")
    assert len(order(conn)) == 20
    # per job: rq's own slot release script, our adoption push and the pop made again
    extra = (limited_scripts - plain_scripts) / 20
    assert 2.5 <= extra <= 3.5, (plain_scripts, limited_scripts)
