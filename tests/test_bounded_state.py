"""State bounded by the tenants active, not by every tenant ever seen: thousands of tenants come and go
through a FairQueue with the tenant controls on (the free tier's concurrency limit, a tier rate, runtime
charging, start records), drained by a real in-process WeightedSimpleWorker on the real redis-server; what
they leave in keys without a TTL is counted (bench/churn.py, also bench/bounded_state.py)."""

from __future__ import annotations

import fair_jobs
import pytest
from redis import Redis

from bench.churn import PREFIX, QUEUE, run
from fair_router import FairQueue, Settings
from fair_router.config.settings import Charge, ConcurrencyConfig
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.observe.counters import COUNTERS
from fair_router.workers.limiter import ConcurrencyLimiter

pytestmark = pytest.mark.usefixtures("isolated_settings")

TENANTS = 2000


def test_tenants_that_came_and_went_leave_almost_nothing_without_a_ttl(conn: Redis) -> None:
    result = run(conn, tenants=TENANTS, jobs=2, wave=250, charge="runtime", rate="100/s")
    fair = Keys(PREFIX).fair_queue(f"rq:queue:{QUEUE}")
    # While a wave's tenants were active, their limits, paces, means and kept passes were there (the count
    # below is of something that existed)...
    assert result.midway.get(fair.limits, 0) >= 100, result.midway
    assert result.midway.get(fair.runtimes, 0) >= 50, result.midway
    # ...and the controls ran: every start took and gave back its slot.
    limiter = ConcurrencyLimiter(conn, Keys(PREFIX), TierBook(conn, Keys(PREFIX)), ConcurrencyConfig(enabled=True))
    counts = limiter.counters().get("free", dict.fromkeys(COUNTERS, 0))
    assert counts["acquired"] == counts["released"] == 2 * TENANTS, counts
    # Once they went: at most 5 % of N entries naming a tenant in keys without a TTL (3.5 x N before).
    assert result.entries <= 0.05 * TENANTS, result.per_key
    print(f"\n{result.entries} entries left without a TTL; used_memory {result.memory_before / 1e6:.2f} MB "
          f"before, {result.memory_after / 1e6:.2f} MB after")


def fair_queue(conn: Redis, name: str, charge: Charge = "jobs") -> FairQueue:
    return FairQueue(name, connection=conn, settings=Settings(prefix=PREFIX, fair_charge=charge))


def now_ms(conn: Redis) -> int:
    seconds, micros = conn.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_limit_stays_while_the_tenant_has_jobs_claims_or_a_park_and_goes_at_its_last_release(conn: Redis) -> None:
    queue = fair_queue(conn, "limited")
    jobs = [queue.enqueue(fair_jobs.log, "hog", i, fair_tenant="hog").id for i in range(2)]
    assert queue.unpark("hog", limit=1) == 0  # a release reports the limit while jobs wait: learnt
    assert conn.hget(queue.fair_keys.limits, "hog") == b"1"
    assert queue.pop_job_id() == jobs[0]  # claimed, at its limit: parked
    assert queue.unpark("hog", job_id=jobs[0], limit=1) == 1  # released: a job still waits, the limit stays
    assert conn.hget(queue.fair_keys.limits, "hog") == b"1"
    assert queue.pop_job_id() == jobs[1]  # its last job, claimed: nothing waits, but it runs (and is parked)
    assert conn.hget(queue.fair_keys.limits, "hog") == b"1"
    assert queue.unpark("hog", job_id=jobs[1], limit=1) == 0  # its last claim ends: nothing left of it here
    assert conn.hgetall(queue.fair_keys.limits) == {}
    assert conn.zcard(queue.fair_keys.parked) == 0 and conn.hlen(queue.fair_keys.claimed) == 0


def test_a_pace_goes_with_a_start_report_of_a_tenant_with_nothing_here(conn: Redis) -> None:
    queue = fair_queue(conn, "paced")
    job = queue.enqueue(fair_jobs.log, "p", 0, fair_tenant="p").id
    assert queue.hold("p", now_ms(conn) + 50, paced=True) == 1  # a start report while a job waits: paced
    assert conn.hexists(queue.fair_keys.limits, "p|r")
    queue.unpark("p")  # its park ends
    assert queue.pop_job_id() == job  # taken and parked (paced) until its start reports
    assert conn.zscore(queue.fair_keys.parked, "p") is not None
    assert queue.unpark("p") == 0  # the park ends with nothing waiting: its pace goes
    assert conn.hgetall(queue.fair_keys.limits) == {}
    assert queue.hold("p", now_ms(conn) + 50, paced=True) == 0  # a late report of that start: not kept either
    assert conn.hgetall(queue.fair_keys.limits) == {}


def test_kept_passes_expire_while_no_tenant_is_active_and_persist_when_one_is(conn: Redis) -> None:
    queue = fair_queue(conn, "kept")
    for tenant in ("a", "b"):
        queue.enqueue(fair_jobs.log, tenant, 0, fair_tenant=tenant)
    queue.pop_job_id()
    assert conn.pttl(queue.fair_keys.kept) == -1  # a went idle while b is active: a's pass is kept for good
    queue.pop_job_id()
    assert 0 < conn.pttl(queue.fair_keys.kept) <= 60_000  # nobody active: the kept passes expire together
    assert conn.zcard(queue.fair_keys.kept) == 2
    queue.enqueue(fair_jobs.log, "a", 1, fair_tenant="a")  # a returns (at its kept pass): no expiry any more
    assert conn.pttl(queue.fair_keys.kept) == -1 and conn.zcard(queue.fair_keys.kept) == 1


def test_a_tenants_runtime_mean_goes_with_its_last_settled_job(conn: Redis) -> None:
    queue = fair_queue(conn, "means", charge="runtime")
    jobs = [queue.enqueue(fair_jobs.log, "t", i, fair_tenant="t").id for i in range(2)]
    assert queue.pop_job_id() == jobs[0] and queue.settle(jobs[0], 0.5) == 1
    assert float(conn.hget(queue.fair_keys.runtimes, "t|fair_jobs.log") or 0) == 0.5  # a job waits: kept
    assert queue.pop_job_id() == jobs[1] and queue.settle(jobs[1], 0.5) == 1
    means = conn.hgetall(queue.fair_keys.runtimes)
    assert b"t|fair_jobs.log" not in means and float(means[b"*|fair_jobs.log"]) == 0.5  # the function's stays
