"""Limits checked at claim time: a FairQueue's pop parks a tenant at its concurrency limit, paused,
or held by its own rate, instead of handing out a job whose start acquire.lua would then refuse. Real `rq
worker` processes on the real redis-server; assertions on the limiter's counters, never on times."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import limit_jobs
import pytest
from conftest import Fleet, wait_for, write_limit_settings
from redis import Redis
from rq.job import JobStatus
from rq.registry import FailedJobRegistry

from fair_router import FairQueue, FairRouter, Settings, WeightedSimpleWorker
from fair_router.config.settings import ConcurrencyConfig, TiersConfig
from fair_router.controls.pauses import TenantPauses
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.observe.counters import COUNTERS
from fair_router.workers.limiter import ConcurrencyLimiter

PREFIX = "claims_test"
KEYS = Keys(PREFIX)
LIMITS = {"enabled": True, "lease_ttl": "30s", "snooze": "200ms", "jitter": "300ms"}

pytestmark = pytest.mark.usefixtures("isolated_settings")


@pytest.fixture
def fleet(fleet_of: Callable[..., Fleet]) -> Fleet:
    return fleet_of("flood")


def counters(conn: Redis, tier: str = "free") -> dict[str, int]:
    limiter = ConcurrencyLimiter(conn, KEYS, TierBook(conn, KEYS), ConcurrencyConfig(enabled=True))
    return limiter.counters().get(tier, dict.fromkeys(COUNTERS, 0))


def finished(conn: Redis, queue: FairQueue, jobs: list[str]) -> bool:
    return all(queue.fetch_job(job_id).get_status() == JobStatus.FINISHED for job_id in jobs)  # type: ignore[union-attr]


def test_a_one_tenant_flood_at_its_limit_is_parked_by_the_pop_not_refused_at_the_start(
    conn: Redis, fleet: Fleet, tmp_path: Path
) -> None:
    """The issue's flood: two workers, every tenant limited to one job at a time (the free tier), one tenant
    floods. Before: almost one start refused (and one park) per slot acquired. Now the pop parks the tenant
    once it holds its limit, so refusals are only the few before the workers first reported its limit."""
    fleet.config = write_limit_settings(tmp_path, PREFIX, LIMITS, fair_queues=["flood"])
    queue = FairQueue("flood", connection=conn, settings=Settings(prefix=PREFIX))
    fleet.start(2)
    fleet.wait_registered(conn, 2)
    flood = [queue.enqueue(limit_jobs.record, "test:log:flood", 0.01, fair_tenant="hog", result_ttl=600).id
             for _ in range(80)]
    others = [queue.enqueue(limit_jobs.record, "test:log:others", 0.01, fair_tenant=f"t{i}", result_ttl=600).id
              for i in range(6)]
    wait_for(lambda: conn.llen("test:log:flood") == 80 and conn.llen("test:log:others") == 6, 90, "the flood", fleet)
    wait_for(lambda: finished(conn, queue, flood + others), 30, "every job finished", fleet)
    fleet.stop_all()  # workers write their pending counters when they stop

    counts = counters(conn)
    assert counts["acquired"] == counts["released"] == 86, counts
    # At most one refusal per worker: a pop before the tenant's limit was mirrored in the queue.
    assert counts["refused"] <= 2 and counts["parked"] == counts["refused"], counts
    assert counts["refused"] / counts["acquired"] <= 0.05
    assert FailedJobRegistry("flood", connection=conn).count == 0
    # Every claim ended with its job's release: the mirror holds nothing once the queue is idle.
    assert conn.zcard(queue.fair_keys.claims) == 0 and conn.hlen(queue.fair_keys.claimed) == 0
    # The hog's limit was mirrored while it had jobs (the few refusals above); idle now, the mirror forgot it.
    assert conn.hlen(queue.fair_keys.limits) == 0


def test_a_pop_parks_a_tenant_that_reaches_its_known_limit_until_a_release(conn: Redis) -> None:
    """The mirror itself: once a release reported the tenant's limit (2), the second pop of its jobs parks it;
    pops serve other tenants meanwhile, and the next release (by job id) makes it eligible again."""
    queue = FairQueue("mirror", connection=conn, settings=Settings(prefix=PREFIX))
    jobs = [queue.enqueue(limit_jobs.record, "x", 0, fair_tenant="hog").id for _ in range(5)]
    other = queue.enqueue(limit_jobs.record, "x", 0, fair_tenant="calm").id
    assert queue.unpark("hog", limit=2) == 0  # a release reports the limit (nothing was parked)
    first, second = queue.pop_job_id(), queue.pop_job_id()
    assert {first, second} == {jobs[0], other}
    assert queue.pop_job_id() == jobs[1]  # hog's second claim: at its limit, parked by this pop
    assert conn.zscore(queue.fair_keys.parked, "hog") is not None
    assert queue.pop_job_id() is None  # only the parked tenant's jobs wait
    assert queue.unpark("hog", job_id="not-a-claim", limit=2) == 0  # no claim of this job: still at its limit
    assert queue.unpark("hog", job_id=jobs[0], limit=2) == 1  # a release: below its limit again
    assert queue.pop_job_id() == jobs[2]
    assert queue.pop_job_id() is None  # two claims again
    assert conn.hget(queue.fair_keys.claimed, "hog") == b"2"
    assert queue.unpark("hog", job_id=jobs[1], limit=0) == 1  # the limit was lifted: the mirror forgets it
    assert [queue.pop_job_id(), queue.pop_job_id()] == jobs[3:]
    assert conn.hget(queue.fair_keys.limits, "hog") is None


def test_pausing_parks_the_tenant_in_its_fair_queues_before_any_pop(conn: Redis) -> None:
    queue = FairQueue("paused", connection=conn, settings=Settings(prefix=PREFIX))
    held = [queue.enqueue(limit_jobs.record, "x", 0, fair_tenant="acme").id for _ in range(2)]
    other = queue.enqueue(limit_jobs.record, "x", 0, fair_tenant="calm").id
    pauses = TenantPauses(conn, KEYS)
    pauses.pause("acme")
    assert queue.pop_job_id() == other  # acme's turn came first (its first job is older), but it is parked
    assert queue.pop_job_id() is None
    assert pauses.resume("acme") == 1
    assert [queue.pop_job_id(), queue.pop_job_id()] == held


def test_a_burst_worker_that_leaves_held_jobs_waiting_says_so(conn: Redis, caplog: pytest.LogCaptureFixture) -> None:
    """rq's burst ends when nothing can be fetched now; jobs a pause (or limit, or rate) holds stay, and the worker
    says so instead of quitting as if the queue were empty."""
    settings = Settings(prefix=PREFIX)
    queue = FairQueue("paused", connection=conn, settings=settings)
    held = queue.enqueue(limit_jobs.record, "x", 0, fair_tenant="acme").id
    other = queue.enqueue(limit_jobs.record, "x", 0, fair_tenant="calm").id
    TenantPauses(conn, KEYS).pause("acme")
    with caplog.at_level(logging.WARNING, logger="fair_router"):
        WeightedSimpleWorker([queue], connection=conn, settings=settings).work(burst=True)
    assert queue.fetch_job(other).get_status() == JobStatus.FINISHED  # type: ignore[union-attr]
    assert queue.fetch_job(held).get_status() == JobStatus.QUEUED  # type: ignore[union-attr]
    said = [record.getMessage() for record in caplog.records if record.getMessage().startswith("burst:")]
    assert said == ["burst: jobs still wait in paused, their tenants held back by a concurrency limit, a rate or a "
                    "pause; the burst ends without them (as it does without rq's scheduled jobs). A worker without "
                    "--burst serves them when they may start"]


def test_a_tenant_held_by_its_own_rate_is_parked_until_its_next_start(
    conn: Redis, fleet: Fleet, tmp_path: Path
) -> None:
    """A tenant at 5/s on a fair queue: each admitted start parks it there until its next token, with the
    start's own writes, so pops rarely hand out a job its rate would refuse."""
    tiers = {"rate": {"free": "5/s"}}
    fleet.config = write_limit_settings(tmp_path, PREFIX, {**LIMITS, "enabled": False}, fair_queues=["flood"],
                                        tiers=tiers)
    queue = FairQueue("flood", connection=conn, settings=Settings(prefix=PREFIX, tiers=TiersConfig(**tiers)))
    fleet.start(2)
    fleet.wait_registered(conn, 2)
    jobs = [queue.enqueue(limit_jobs.record, "test:log:paced", 0.01, fair_tenant="paced", result_ttl=600).id
            for _ in range(20)]
    wait_for(lambda: conn.llen("test:log:paced") == 20, 60, "the paced tenant's jobs", fleet)
    wait_for(lambda: finished(conn, queue, jobs), 30, "every job finished", fleet)
    fleet.stop_all()
    counts = counters(conn)
    assert counts["rate_deferred"] <= 5, counts  # was about one per job: 20 starts


def test_a_raised_limit_ends_a_park_at_the_old_one_in_every_fair_queue(conn: Redis) -> None:
    """Tenants parked at their limit (1, free) get a higher one (pro: 3): the fair queues that mirror their limit
    learn it and serve them again, without waiting for a release: at once, or for a paused tenant at its resume
    (it stays parked meanwhile). A queue that never heard of a tenant's limit (limits off) learns none."""
    queue = FairQueue("relimit", connection=conn, settings=Settings(prefix=PREFIX))
    hog = [queue.enqueue(limit_jobs.record, "x", 0, fair_tenant="hog").id for _ in range(2)]
    held = [queue.enqueue(limit_jobs.record, "x", 0, fair_tenant="held").id for _ in range(2)]
    calm = queue.enqueue(limit_jobs.record, "x", 0, fair_tenant="calm").id
    for tenant in ("hog", "held"):
        assert queue.unpark(tenant, limit=1) == 0  # a worker reported its limit
    popped = [queue.pop_job_id() for _ in range(4)]
    assert set(popped[:3]) == {hog[0], held[0], calm} and popped[3] is None  # both parked at 1
    router = FairRouter(conn, prefix=PREFIX)
    router.pause("held")
    router.set_tier("hog", "pro")
    router.set_tier("held", "pro")
    assert conn.hget(queue.fair_keys.limits, "hog") == b"3"
    assert [queue.pop_job_id(), queue.pop_job_id()] == [hog[1], None]  # held: paused, still parked
    router.resume("held")
    assert conn.hget(queue.fair_keys.limits, "held") == b"3"
    assert queue.pop_job_id() == held[1]
    router.set_tenant("calm", limit=5)
    assert conn.hget(queue.fair_keys.limits, "calm") is None
