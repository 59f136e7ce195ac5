"""FairQueue(charge="runtime"): a tenant's pass advances by its jobs' run time / weight (estimated at the pop,
settled with the measured time when the job ends), so tenants share worker time, not job counts. Against a
real redis-server, with real in-process workers where the shares are measured."""

from __future__ import annotations

import threading
import time
from typing import cast

import fair_jobs
import pytest
from redis import Redis
from rq.job import Job
from rq.registry import FinishedJobRegistry

from fair_router import FairQueue, Settings, WeightedSimpleWorker
from fair_router.config.settings import SettingsError, TiersConfig, load_settings
from fair_router.demo.metrics import jain, worker_time_shares
from fair_router.demo.timed import TimedWorker, read_spans

pytestmark = pytest.mark.usefixtures("isolated_settings")

PREFIX = "fq_charge"
TIERS = TiersConfig(resolver="tier_resolvers:by_name", weights={"pro": 3})  # "pro-*" tenants weigh 3


def queue(conn: Redis, name: str = "charged", charge: str = "runtime", **kwargs: object) -> FairQueue:
    return FairQueue(name, connection=conn, prefix=PREFIX, tiers=TIERS, charge=charge, **kwargs)  # type: ignore[arg-type]


def passes(q: FairQueue) -> dict[str, float]:
    conn = q.connection
    active = cast(list[tuple[bytes, float]], conn.zrange(q.fair_keys.active, 0, -1, withscores=True))
    kept = cast(list[tuple[bytes, float]], conn.zrange(q.fair_keys.kept, 0, -1, withscores=True))
    return {k.decode(): v for k, v in [*kept, *active]}


def pop_settle(q: FairQueue, seconds: dict[str, float]) -> str:
    """Pop one job and settle it as if it ran ``seconds[tenant]``; returns its tenant."""
    job_id = q.pop_job_id()
    assert job_id is not None
    tenant = cast(str, Job.fetch(job_id, connection=q.connection).meta["fair_tenant"])
    assert q.settle(job_id, seconds[tenant]) == 1
    return tenant


def test_runtime_charging_serves_the_short_jobs_tenant_in_proportion_to_run_time(conn: Redis) -> None:
    """Equal weights, a's jobs take 10x b's: once the run times are learnt, b gets ten turns per a turn."""
    q = queue(conn)
    for i in range(200):
        q.enqueue(fair_jobs.log, "a", i, fair_tenant="a")
        q.enqueue(fair_jobs.log, "b", i, fair_tenant="b")
    served = [pop_settle(q, {"a": 0.02, "b": 0.002}) for _ in range(110)]
    late = served[-88:]  # after the first estimates (no history yet) were settled
    assert 7 <= late.count("a") <= 9, late
    busy = {t: served.count(t) * {"a": 0.02, "b": 0.002}[t] for t in "ab"}
    assert jain(list(busy.values())) >= 0.95, busy
    means = conn.hgetall(q.fair_keys.runtimes)
    assert float(means[b"a|fair_jobs.log"]) == pytest.approx(0.02)
    assert float(means[b"b|fair_jobs.log"]) == pytest.approx(0.002)


def test_the_recent_means_stay_bounded_by_random_eviction_of_tenant_means(conn: Redis) -> None:
    """One mean per (tenant, function) would grow without bound with many tenants: past 10,000 means (the
    bound in fair_settle.lua), each settle evicts two random per-tenant means, never a function-wide one."""
    q = queue(conn)
    past = {f"old-{i}|fair_jobs.log": 0.5 for i in range(10_050)}  # tenants seen long ago
    conn.hset(q.fair_keys.runtimes, mapping=past)
    for i in range(60):
        q.enqueue(fair_jobs.log, "a", i, fair_tenant=f"t{i % 3}")
    for _ in range(60):
        pop_settle(q, {"t0": 0.01, "t1": 0.01, "t2": 0.01})
    means = conn.hgetall(q.fair_keys.runtimes)
    assert len(means) <= 10_000 + 2 + 3  # at most the bound, one settle's two misses, the 3 live tenants
    assert len(means) < len(past)
    assert b"*|*" in means and b"*|fair_jobs.log" in means  # function-wide means are never evicted


def test_job_charging_is_unchanged_and_records_no_costs(conn: Redis) -> None:
    q = queue(conn, charge="jobs")
    for i in range(4):
        q.enqueue(fair_jobs.log, "a", i, fair_tenant="a")
        q.enqueue(fair_jobs.log, "b", i, fair_tenant="b")
    assert conn.hlen(q.fair_keys.costs) == 0
    served = [pop_settle_jobs(q) for _ in range(8)]
    assert served == ["a", "b"] * 4
    assert conn.hlen(q.fair_keys.charged) == 0


def pop_settle_jobs(q: FairQueue) -> str:
    job_id = q.pop_job_id()
    assert job_id is not None
    assert q.settle(job_id, 5.0) == 0  # nothing to settle with job-count charging
    return cast(str, Job.fetch(job_id, connection=q.connection).meta["fair_tenant"])


def test_a_newly_active_tenant_still_goes_next(conn: Redis) -> None:
    """Small-tenant isolation as with job charging: a tenant that becomes active starts at the virtual time,
    so however much the backlogged tenants have run, its job is the next served."""
    q = queue(conn)
    for i in range(50):
        q.enqueue(fair_jobs.log, "a", i, fair_tenant="a")
        q.enqueue(fair_jobs.log, "b", i, fair_tenant="b")
    for _ in range(30):
        pop_settle(q, {"a": 0.02, "b": 0.002})
    small = q.enqueue(fair_jobs.log, "c", 0, fair_tenant="c")
    assert q.pop_job_id() == small.id


def test_an_idle_tenant_banks_no_credit(conn: Redis) -> None:
    """A tenant idle while others ran comes back at the virtual time, not at its old low pass."""
    q = queue(conn)
    q.enqueue(fair_jobs.log, "c", 0, fair_tenant="c")
    pop_settle(q, {"c": 0.001})
    for i in range(30):
        q.enqueue(fair_jobs.log, "a", i, fair_tenant="a")
    for _ in range(20):
        pop_settle(q, {"a": 0.02})
    for i in range(3):
        q.enqueue(fair_jobs.log, "c", i, fair_tenant="c")
    served = [pop_settle(q, {"a": 0.02, "c": 0.02}) for _ in range(6)]
    # c starts at the virtual time: served first, then c and a tie on pass (which one goes first depends on the
    # rounding of c's estimate and settlement), never a burst of c's from its old low pass
    assert served[0] == "c" and served[:3].count("c") <= 2 and served.count("c") == 3, served


def test_weights_divide_worker_time(conn: Redis) -> None:
    """pro-b weighs 3: with equal job lengths it gets three jobs per job of a."""
    q = queue(conn)
    for i in range(100):
        q.enqueue(fair_jobs.log, "a", i, fair_tenant="a")
        q.enqueue(fair_jobs.log, "pro-b", i, fair_tenant="pro-b")
    served = [pop_settle(q, {"a": 0.01, "pro-b": 0.01}) for _ in range(80)]
    assert served.count("pro-b") == pytest.approx(60, abs=2)


def test_a_declared_cost_is_the_estimate_and_only_trusted_when_the_queue_says_so(conn: Redis) -> None:
    for trust in (False, True):
        q = queue(conn, name=f"declared{int(trust)}", trust_cost=trust)
        job = q.enqueue(fair_jobs.log, "a", 0, fair_tenant="a", fair_cost=0.5)
        q.enqueue(fair_jobs.log, "a", 1, fair_tenant="a")  # keeps a active: its pass stays in `active`
        assert q.pop_job_id() == job.id
        assert passes(q)["a"] == pytest.approx(0.5)  # the pop charged the declared cost
        q.settle(job.id, 2.0)  # it really ran 2 s
        assert passes(q)["a"] == pytest.approx(0.5 if trust else 2.0)
    with pytest.raises(SettingsError, match="fair_cost"):
        queue(conn).enqueue(fair_jobs.log, "a", 0, fair_tenant="a", fair_cost=-1)


def test_a_park_refunds_what_the_pop_charged(conn: Redis) -> None:
    q = queue(conn)
    for i in range(3):
        q.enqueue(fair_jobs.log, "a", i, fair_tenant="a", fair_cost=0.25)
    before = passes(q)["a"]
    job_id = q.pop_job_id()
    assert job_id is not None and passes(q)["a"] == pytest.approx(before + 0.25)
    q.park(Job.fetch(job_id, connection=conn), "a", 60)
    assert passes(q)["a"] == pytest.approx(before)
    assert conn.hlen(q.fair_keys.charged) == 0 and conn.hlen(q.fair_keys.costs) == 3  # its cost is back
    q.unpark("a")
    assert q.pop_job_id() == job_id and passes(q)["a"] == pytest.approx(before + 0.25)


def test_a_job_whose_worker_died_is_charged_its_time_up_to_recovery(conn: Redis) -> None:
    """Popped and never started (the worker died): recovery charges the time from the pop until then, and
    gives the job back with its cost recorded again. Settling with no measured time (crash recovery of a
    started job) charges the same way."""
    q = queue(conn)
    lost = q.enqueue(fair_jobs.log, "a", 0, fair_tenant="a", fair_cost=0.001)
    q.enqueue(fair_jobs.log, "a", 1, fair_tenant="a", fair_cost=0.001)
    assert q.pop_job_id() == lost.id
    start = passes(q)["a"]
    time.sleep(0.3)
    assert q.recover(older_than=0) == [lost.id]
    assert passes(q)["a"] >= start + 0.3 - 0.001  # at least the 0.3 s it was held (a lower bound, not a timing)
    assert conn.hlen(q.fair_keys.charged) == 0 and conn.hexists(q.fair_keys.costs, lost.id)
    popped = q.pop_job_id()
    assert popped == lost.id
    time.sleep(0.2)
    before = passes(q)["a"]
    assert q.settle(lost.id, None) == 1
    assert passes(q)["a"] >= before + 0.2 - 0.001
    means = conn.hgetall(q.fair_keys.runtimes)
    assert means == {}  # a dead worker's time says nothing about how long the job runs


def test_the_charge_comes_from_settings_and_is_validated(monkeypatch: pytest.MonkeyPatch, conn: Redis) -> None:
    monkeypatch.setenv("FAIR_ROUTER_FAIR_CHARGE", "runtime")
    assert load_settings().fair_charge == "runtime"
    assert FairQueue("x", connection=conn).charge == "runtime"
    assert FairQueue("x", connection=conn, charge="jobs").charge == "jobs"
    monkeypatch.setenv("FAIR_ROUTER_FAIR_CHARGE", "seconds")
    with pytest.raises(SettingsError, match="fair_charge"):
        load_settings()
    with pytest.raises(SettingsError, match="charge"):
        FairQueue("x", connection=conn, charge="seconds")  # type: ignore[arg-type]


def run_workers(conn: Redis, charge: str, weights: tuple[str, str], jobs: int) -> dict[str, float]:
    """A real in-process weighted worker draining a backlog of 40 ms jobs (tenant weights[0]) and 4 ms jobs
    (weights[1]) for ``jobs`` jobs; each tenant's share of the worker time: the worker's own time on each job,
    from the fetch that found it to its after-job writes done (TimedWorker: rq's per-job bookkeeping, a few
    ms, included, as much as a short job runs)."""
    long, short = weights
    q = queue(conn, name=f"mixed_{charge}_{short}", charge=charge)
    q.enqueue_many([FairQueue.prepare_data(fair_jobs.sleep_ms, (40,), meta={"fair_tenant": long}, result_ttl=600)
                    for _ in range(jobs)]
                   + [FairQueue.prepare_data(fair_jobs.sleep_ms, (4,), meta={"fair_tenant": short}, result_ttl=600)
                      for _ in range(jobs)])
    settings = Settings(prefix=PREFIX, tiers=TIERS, fair_charge=charge)  # type: ignore[arg-type]
    read_spans(conn)  # none left from an earlier run
    worker = TimedWorker([q], connection=conn, settings=settings)
    worker.work(burst=True, max_jobs=jobs, logging_level="WARNING")  # its spans written as it stops
    spent, _ = read_spans(conn)
    assert len(spent) == jobs
    assert q.count == jobs  # both still backlogged at the end: the shares are of a backlogged period
    return worker_time_shares(spent)


def test_real_workers_share_worker_time_not_job_counts(conn: Redis) -> None:
    """Equal weights, one worker, jobs of 40 ms against 4 ms: job-count charging gives the long-jobs tenant
    most of the worker time (Jain about 0.68 counting the worker's per-job bookkeeping, 0.60 without);
    runtime charging gives both the same (Jain >= 0.95): it charges the worker's time on each job, not only
    the job's run, so a short job's bookkeeping is its tenant's."""
    by_jobs = run_workers(conn, "jobs", ("a", "b"), 100)
    by_time = run_workers(conn, "runtime", ("a", "b"), 250)
    assert jain([by_jobs["a"], by_jobs["b"]]) < 0.8, by_jobs
    assert jain([by_time["a"], by_time["b"]]) >= 0.95, by_time


def test_real_workers_divide_worker_time_by_weight(conn: Redis) -> None:
    """Weights 1:3 (the short-jobs tenant weighs 3): it gets 3/4 of the worker time (within 5 %)."""
    shares = run_workers(conn, "runtime", ("a", "pro-b"), 250)
    assert shares["pro-b"] == pytest.approx(0.75, rel=0.05), shares


def test_the_settlement_rides_in_rqs_after_job_transaction(conn: Redis) -> None:
    """The settlement is one more script call in rq's own after-job MULTI, not a round trip of its own: per
    job, runtime charging sends one script call (EVAL) more than job charging and as many transactions
    (commandstats; a script's own commands are counted under their names), and MONITOR shows that EVAL
    between rq's MULTI and EXEC on the worker's connection."""
    calls: dict[str, tuple[int, int]] = {}
    for charge in ("jobs", "runtime"):
        q = queue(conn, name=f"trip_{charge}", charge=charge)
        q.enqueue_many([FairQueue.prepare_data(fair_jobs.sleep_ms, (0,), meta={"fair_tenant": "a"}, result_ttl=600)
                        for _ in range(5)])
        # start records off: their flush is a script call on a timer, which a slow round may or may not meet
        settings = Settings(prefix=PREFIX, fair_charge=charge, observe={"record": False})
        worker = WeightedSimpleWorker([q], connection=conn, settings=settings)
        worker.work(burst=True, max_jobs=1, logging_level="WARNING")  # warm-up: registration, scripts loaded
        before = script_and_exec_calls(conn)
        worker.work(burst=True, max_jobs=3, logging_level="WARNING")
        after = script_and_exec_calls(conn)
        calls[charge] = (after[0] - before[0], after[1] - before[1])
    assert calls["runtime"][0] == calls["jobs"][0] + 3, calls  # the settle script, once per job
    assert calls["runtime"][1] == calls["jobs"][1], calls  # no transaction of its own

    q = queue(conn, name="trip_monitor")
    q.enqueue(fair_jobs.sleep_ms, 0, fair_tenant="a")
    worker = WeightedSimpleWorker([q], connection=conn, settings=Settings(prefix=PREFIX, fair_charge="runtime"))
    worker.work(burst=True, max_jobs=1, logging_level="WARNING")  # warm-up: scripts loaded
    q.enqueue(fair_jobs.sleep_ms, 0, fair_tenant="a")
    with conn.monitor() as monitor:
        worker.work(burst=True, max_jobs=1, logging_level="WARNING")
        conn.ping()
        seen: list[tuple[str, str]] = []
        while True:
            item = monitor.next_command()
            command = cast(str, item["command"])
            seen.append((f"{item.get('client_address')}:{item.get('client_port')}", command))
            if command == "PING":
                break
    settle = [i for i, (_, command) in enumerate(seen) if command.startswith("EVAL") and "fair_settle.lua" in command]
    assert len(settle) == 1, [c[:60] for _, c in seen]
    client = seen[settle[0]][0]
    mine = [command.split(" ")[0] for c, command in seen[:settle[0]] if c == client]
    assert "MULTI" in mine and "EXEC" not in mine[len(mine) - mine[::-1].index("MULTI"):], mine


def script_and_exec_calls(conn: Redis) -> tuple[int, int]:
    stats = conn.info("commandstats")
    scripts = sum(int(stats.get(f"cmdstat_{name}", {"calls": 0})["calls"]) for name in ("eval", "evalsha", "fcall"))
    return scripts, int(stats.get("cmdstat_exec", {"calls": 0})["calls"])


def test_the_listing_is_the_serving_order_with_runtime_charging(conn: Redis) -> None:
    """get_job_ids replays the pops with each job's estimated charge, as fair_pop.lua charges it."""
    q = queue(conn)
    for i in range(10):  # both still have jobs waiting after the 8 pops, so they keep their means
        q.enqueue(fair_jobs.log, "a", i, fair_tenant="a")
        q.enqueue(fair_jobs.log, "b", i, fair_tenant="b")
    for _ in range(8):
        pop_settle(q, {"a": 0.04, "b": 0.01})  # means learnt: a 0.04-ish, b 0.01-ish
    for i in range(12):
        q.enqueue(fair_jobs.log, "a", i, fair_tenant="a")
        q.enqueue(fair_jobs.log, "b", i, fair_tenant="b", fair_cost=0.005 if i % 3 == 0 else None)
    listed = q.get_job_ids()
    popped = [q.pop_job_id() for _ in range(len(listed))]
    assert popped == listed
    tenants = [Job.fetch(cast(str, job_id), connection=conn).meta["fair_tenant"] for job_id in listed[:10]]
    assert tenants.count("b") >= 7, tenants  # not the alternation job charging would list


def test_the_charge_is_the_workers_time_on_the_job_without_its_idle_wait(conn: Redis) -> None:
    """The settled time is the worker's own on the job: at least the run rq stamps (the start and after-job
    transactions come on top), and not the second the worker waited, blocked, for the job to arrive."""
    q = queue(conn, name="waited")
    worker = WeightedSimpleWorker([q], connection=conn, settings=Settings(prefix=PREFIX, fair_charge="runtime"))
    wait = 1.0
    timer = threading.Timer(wait, lambda: [q.enqueue(fair_jobs.log, "w", i, fair_tenant="w") for i in range(2)])
    timer.start()
    try:
        worker.work(burst=False, max_jobs=1, logging_level="WARNING")  # blocks until the jobs arrive
    finally:
        timer.join()
    done = Job.fetch_many(FinishedJobRegistry(q.name, connection=conn).get_job_ids(), connection=conn)
    assert len(done) == 1 and done[0] is not None and done[0].started_at and done[0].ended_at
    run = (done[0].ended_at - done[0].started_at).total_seconds()
    charged = float(conn.hget(q.fair_keys.runtimes, "w|fair_jobs.log") or 0)  # its second job still waits
    assert run <= charged < wait / 2, (run, charged)
