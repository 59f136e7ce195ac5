"""charge="runtime" with organisations (docs/fair-queue.md, "Organisations"): a pop charges the org's pass and the
tenant's pass in its org by the job's estimated run time, and the settlement replaces the estimate with the real
cost at both levels, so that orgs share worker time, and an org's tenants share its time. Real redis-server; the
shares come from settled durations (pop + settle) and from the worker's recorded time per job (a real worker),
never from a wall-time assertion. Every job declares the same cost, which the pops charge: what they cost more is
charged by the settlement alone."""

from __future__ import annotations

import time
from collections import Counter
from typing import cast

import fair_jobs
import pytest
from redis import Redis
from rq.job import Job
from test_fair_charge import pop_settle

from fair_router import FairQueue, Settings
from fair_router.demo.metrics import jain, worker_time_shares
from fair_router.demo.timed import TimedWorker, read_spans

pytestmark = pytest.mark.usefixtures("isolated_settings")

PREFIX = "fq_org_charge"


def queue(conn: Redis, name: str = "org_charged") -> FairQueue:
    return FairQueue(name, connection=conn, settings=Settings(prefix=PREFIX, fair_charge="runtime"))


def fill(q: FairQueue, tenant: str, org: str, n: int, ms: float = 0) -> None:
    """``n`` jobs of ``tenant`` in ``org`` sleeping ``ms``, each declaring a cost of 10 ms: the pop charges that
    (the queue does not trust declared costs), so only the settlement makes a longer job cost more."""
    meta = {"fair_tenant": tenant, "fair_org": org, "fair_cost": 0.01}
    q.enqueue_many([FairQueue.prepare_data(fair_jobs.sleep_ms, (ms,), meta=meta, result_ttl=600) for _ in range(n)])


def org_passes(q: FairQueue) -> dict[str, float]:
    active = cast(list[tuple[bytes, float]], q.connection.zrange(q.fair_keys.active, 0, -1, withscores=True))
    return {member.decode(): score for member, score in active}


def entry_pass(q: FairQueue, entry: str) -> float:
    """The pass of a top-level entry, active or kept."""
    score = q.connection.zscore(q.fair_keys.active, entry)
    if score is None:
        score = q.connection.zscore(q.fair_keys.kept, entry)
    assert score is not None, entry
    return float(score)


def test_an_org_whose_jobs_run_4x_longer_gets_a_quarter_of_the_starts(conn: Redis) -> None:
    """Equal org weights, two tenants each: A's jobs settle at 40 ms, B's at 10 ms. Once the run times are learnt
    A starts one job per four of B's, and both orgs get the same time."""
    q = queue(conn)
    for tenant, org in (("a0", "A"), ("a1", "A"), ("b0", "B"), ("b1", "B")):
        fill(q, tenant, org, 150)
    seconds = {"a0": 0.04, "a1": 0.04, "b0": 0.01, "b1": 0.01}
    served = [pop_settle(q, seconds) for _ in range(220)]
    late = Counter(served[8:])
    a, b = late["a0"] + late["a1"], late["b0"] + late["b1"]
    assert a / b == pytest.approx(0.25, abs=0.04), late
    assert abs(late["a0"] - late["a1"]) <= 2 and abs(late["b0"] - late["b1"]) <= 2, late  # even inside each org
    assert jain([a * 0.04, b * 0.01]) >= 0.99, late
    passes = org_passes(q)
    assert set(passes) == {"!A", "!B"}  # the orgs are the top-level entries; their passes stay within a step
    assert abs(passes["!A"] - passes["!B"]) <= 0.04 + 1e-9, passes


def test_inside_an_org_a_tenant_of_4x_longer_jobs_gets_a_quarter_of_its_orgs_starts(conn: Redis) -> None:
    """Org O has a tenant of 40 ms jobs and one of 10 ms jobs, org P one tenant of 10 ms jobs: O and P share the
    time equally, and inside O the long-jobs tenant starts one job per four of the short one's."""
    q = queue(conn)
    fill(q, "long", "O", 100)
    fill(q, "short", "O", 200)
    fill(q, "p", "P", 300)
    seconds = {"long": 0.04, "short": 0.01, "p": 0.01}
    served = [pop_settle(q, seconds) for _ in range(270)]
    late = Counter(served[20:])
    assert late["long"] / late["short"] == pytest.approx(0.25, abs=0.05), late
    o_time, p_time = late["long"] * 0.04 + late["short"] * 0.01, late["p"] * 0.01
    assert jain([o_time, p_time]) >= 0.99, late


def test_an_idle_org_is_settled_at_its_kept_pass(conn: Redis) -> None:
    """A job of an org whose last job was taken is settled against the org's kept pass (its entry '!<org>'), not
    against a pass of its tenant, which has none outside its org."""
    q = queue(conn)
    fill(q, "x", "X", 1)
    fill(q, "y", "Y", 3)
    job_id = q.pop_job_id()
    assert job_id is not None and Job.fetch(job_id, connection=conn).meta["fair_org"] == "X"
    kept_before = conn.zscore(q.fair_keys.kept, "!X")
    assert kept_before is not None  # X left the schedule keeping its pass
    assert q.settle(job_id, 2.0) == 1
    assert conn.zscore(q.fair_keys.kept, "!X") == pytest.approx(kept_before + 2.0 - 0.01)  # less the cost it declared
    assert conn.zscore(q.fair_keys.kept, "x") is None and conn.zscore(q.fair_keys.active, "x") is None


def test_real_workers_give_an_org_of_4x_longer_jobs_a_share_of_starts_by_its_time(conn: Redis) -> None:
    """A real worker, org A's jobs sleep 40 ms, org B's 10 ms, equal weights: the orgs get the same worker time
    (the worker's own time per job, recorded: rq's bookkeeping included), so A starts fewer jobs, in the inverse
    ratio of the recorded mean times (about 1/4; a little more as the bookkeeping is the same for both)."""
    q = queue(conn, "org_real")
    fill(q, "a", "A", 200, ms=40)
    fill(q, "b", "B", 400, ms=10)
    read_spans(conn)  # none left from an earlier run
    worker = TimedWorker([q], connection=conn, settings=Settings(prefix=PREFIX, fair_charge="runtime"))
    worker.work(burst=True, max_jobs=240, logging_level="WARNING")
    spent, _ = read_spans(conn)
    assert len(spent) == 240
    late = spent[8:]
    starts = Counter(t.tenant for t in late)
    mean = {tenant: sum(t.ended - t.started for t in late if t.tenant == tenant) / starts[tenant] for tenant in "ab"}
    assert starts["a"] / starts["b"] == pytest.approx(mean["b"] / mean["a"], rel=0.3), (starts, mean)
    assert starts["a"] / starts["b"] < 0.5, starts
    shares = worker_time_shares(spent)
    assert jain([shares["a"], shares["b"]]) >= 0.95, shares


def test_a_park_refunds_an_orgs_pass_what_the_pop_charged(conn: Redis) -> None:
    """A popped job of an org tenant put back (its tenant parked) gives its org back the estimate the pop charged
    (/ the org's weight), its charged entry goes and its declared cost is kept for its next pop."""
    q = queue(conn)
    fill(q, "x", "X", 3)
    fill(q, "y", "X", 3)
    before = org_passes(q)["!X"]
    job_id = q.pop_job_id()
    assert job_id is not None and org_passes(q)["!X"] == pytest.approx(before + 0.01)
    assert conn.hget(q.fair_keys.charged, job_id).startswith(b"!X|1.0|")  # type: ignore[union-attr]
    tenant = cast(str, Job.fetch(job_id, connection=conn).meta["fair_tenant"])
    q.park(Job.fetch(job_id, connection=conn), tenant, 60)
    assert org_passes(q)["!X"] == pytest.approx(before)
    assert conn.hlen(q.fair_keys.charged) == 0 and conn.hlen(q.fair_keys.costs) == 6


def test_a_job_whose_worker_died_charges_its_org_the_time_up_to_recovery(conn: Redis) -> None:
    """Popped and never started (its worker died): recovery charges the org the time from the pop until then (an
    injected clock: 5 s), and the job comes back under its org; settling a started job with no measured time
    charges the same way."""
    now = [0.0]
    q = FairQueue("org_lost", connection=conn, settings=Settings(prefix=PREFIX, fair_charge="runtime"),
                  clock=lambda: now[0])
    fill(q, "x", "X", 2)
    fill(q, "y", "Y", 2)
    now[0] = time.time()  # the pop after the enqueues (recovery reads a job enqueued after its pop as requeued)
    lost = q.pop_job_id()
    assert lost is not None and Job.fetch(lost, connection=conn).meta["fair_org"] == "X"
    start = org_passes(q)["!X"]
    now[0] += 5
    assert q.recover(older_than=0) == [lost]
    assert org_passes(q)["!X"] == pytest.approx(start + 5 - 0.01)  # the time held, less the declared cost charged
    assert conn.hlen(q.fair_keys.charged) == 0 and conn.hexists(q.fair_keys.costs, lost)
    record = conn.hget(q.fair_keys.state, "=x")
    assert record is not None and b"|X|" in record  # back in its tenant's FIFO under its org
    served = [q.pop_job_id() for _ in range(2)]
    assert lost not in served  # Y first: X owes its 5 s
    before = entry_pass(q, "!Y")  # Y is idle now: its pass is kept
    now[0] += 2
    assert served[0] is not None and q.settle(served[0], None) == 1
    assert entry_pass(q, "!Y") == pytest.approx(before + 2 - 0.01)


def test_the_listing_is_the_serving_order_with_runtime_charging_and_orgs(conn: Redis) -> None:
    """get_job_ids replays the pops at both levels with each job's estimated charge, as fair_pop.lua charges it."""
    q = FairQueue("org_listed", connection=conn, settings=Settings(prefix=PREFIX, fair_charge="runtime"))
    for tenant, org in (("a0", "A"), ("a1", "A"), ("b0", "B"), ("solo", "")):
        meta = {"fair_tenant": tenant} | ({"fair_org": org} if org else {})
        q.enqueue_many([FairQueue.prepare_data(fair_jobs.sleep_ms, (0,), meta=meta, result_ttl=600)
                        for _ in range(10)])
    for _ in range(12):  # means learnt per tenant: A's 40 ms, B's and solo's 10 ms
        job_id = q.pop_job_id()
        assert job_id is not None
        tenant = cast(str, Job.fetch(job_id, connection=conn).meta["fair_tenant"])
        q.settle(job_id, 0.04 if tenant.startswith("a") else 0.01)
    listed = q.get_job_ids()
    popped = [q.pop_job_id() for _ in range(len(listed))]
    assert popped == listed
    tenants = [Job.fetch(cast(str, job_id), connection=conn).meta["fair_tenant"] for job_id in listed[:10]]
    assert sum(t.startswith("a") for t in tenants) <= 3, tenants  # not the alternation job charging would list
