"""Start records (fair_router.observe.recorder) and the snapshot read back from them, on a real Redis; the
worker's job-start hook with real in-process rq workers."""

from __future__ import annotations

from typing import Any, cast

import pytest
from conftest import command_calls, monitored
from pydantic import ValidationError
from redis import Redis
from rq import Queue
from rq.job import Job
from rq.registry import FinishedJobRegistry, StartedJobRegistry
from worker_jobs import noop

from fair_router import FairQueue, Rule, Settings, WeightedSimpleWorker, WeightedWorker, fair_job
from fair_router.config.settings import ConcurrencyConfig, ObserveConfig
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.dashboard.reader import SnapshotReader
from fair_router.dashboard.text import render
from fair_router.observe.buckets import BOUNDS_US, PROMETHEUS_LE_US, Histogram, bucket_of
from fair_router.observe.recorder import ALL, MAX_GROUPS, StartRecorder
from fair_router.routing.router import FairRouter
from fair_router.workers.limiter import ConcurrencyLimiter

T0 = 1_800_000_000.0  # a fixed epoch second: on a minute boundary, so minute windows are exact below


def recorder(conn: Redis, clock: list[float], **observe: Any) -> StartRecorder:
    return StartRecorder(conn, Keys("obs"), ObserveConfig(**observe), clock=lambda: clock[0])


def reader(conn: Redis, clock: list[float], **settings: Any) -> SnapshotReader:
    return SnapshotReader(conn, Settings(**{"prefix": "obs", **settings}), clock=lambda: clock[0])


def test_buckets_bound_each_wait_and_estimate_percentiles() -> None:
    assert bucket_of(0) == 0 and bucket_of(1000) == 0 and bucket_of(1001) == 1  # bucket b: <= BOUNDS_US[b]
    assert bucket_of(10**12) == len(BOUNDS_US)  # beyond 100,000 s: the overflow bucket
    assert len(PROMETHEUS_LE_US) == 25 and all(le in BOUNDS_US for le in PROMETHEUS_LE_US)
    waits_us = [5_000] * 19 + [2_000_000]
    histogram = Histogram({})
    for wait in waits_us:
        histogram.counts[bucket_of(wait)] = histogram.counts.get(bucket_of(wait), 0) + 1
    p50, p95 = histogram.quantile(0.5), histogram.quantile(0.95)
    assert p50 is not None and 0.004 < p50 <= 0.005  # within the true value's bucket (4, 5] ms
    assert p95 is not None and 0.004 < p95 <= 0.005
    assert histogram.quantile(1.0) == pytest.approx(2.0)  # the 2 s wait's bucket is (1.6, 2] s
    cumulative = [count for _, count in histogram.prometheus_buckets()]
    assert cumulative == sorted(cumulative) and cumulative[-1] == 20
    assert dict(histogram.prometheus_buckets())["0.005"] == 19


def test_a_record_holds_waits_by_minute_by_tick_and_since_it_began(conn: Redis) -> None:
    clock = [T0 + 30]
    rec = recorder(conn, clock)
    for wait in (0.010, 0.012, 0.020, 3.0):
        assert rec.record("acme", wait, conn) == 1  # its own record
    rec.record("small:{1}", 0.002, conn)
    snap = reader(conn, clock).snapshot()
    rows = {row.tenant: row for row in snap.tenants}
    assert set(rows) == {"acme", "small:{1}"}  # a tenant id with ':' and braces comes back as given
    acme = rows["acme"]
    assert acme.wait_5m.starts == acme.wait_60m.starts == 4
    assert acme.wait_5m.p50 is not None and 0.0100 < acme.wait_5m.p50 <= 0.0125  # the 2nd of 4 waits: 12 ms
    assert acme.wait_5m.p95 is not None and 2.5 < acme.wait_5m.p95 <= 3.15  # the slowest one: 3 s
    assert acme.histogram.count == 4 and acme.histogram.total_us == 3_042_000
    assert acme.series == [(T0 + 30, pytest.approx(3.042 / 4))]  # one 10-second tick, mean wait
    assert acme.share_5m == pytest.approx(0.8)
    assert snap.everyone.wait_5m.starts == 5 and snap.other.wait_5m.starts == 0


def test_windows_keep_their_minutes_and_a_reused_slot_starts_empty(conn: Redis) -> None:
    clock = [T0]
    rec = recorder(conn, clock)
    rec.record("acme", 1.0, conn)
    clock[0] = T0 + 11 * 60
    rec.record("acme", 0.001, conn)
    acme = reader(conn, clock).snapshot().tenants[0]
    assert acme.wait_5m.starts == 1 and acme.wait_60m.starts == 2  # 11 minutes ago: in the hour only
    assert acme.series == [(T0 + 660, pytest.approx(0.001))]  # ticks older than ~10 minutes are gone
    clock[0] = T0 + 62 * 60  # the minute slot of T0 again: its old counts must not leak into this minute
    rec.record("acme", 0.001, conn)
    acme = reader(conn, clock).snapshot().tenants[0]
    assert acme.wait_5m.starts == 1 and acme.wait_60m.starts == 2  # this minute's and T0 + 11 min's
    assert acme.wait_60m.p95 is not None and acme.wait_60m.p95 <= 0.001  # T0's 1 s wait is gone
    fields = cast(dict[bytes, bytes], conn.hgetall(Keys("obs").observe_record("acme")))
    assert int(fields[b"c:" + str(bucket_of(1_000_000)).encode()]) == 1  # cumulative: everything since the start
    assert sum(int(v) for k, v in fields.items() if k.startswith(b"c:") and k != b"c:us") == 3


def test_tenants_past_the_per_minute_cap_are_recorded_under_other(conn: Redis) -> None:
    clock = [T0]
    rec = recorder(conn, clock, tenants_per_minute=2)
    placed = [rec.record(f"t{i}", 0.01, conn) for i in range(4)] + [rec.record("t0", 0.01, conn)]
    assert placed == [1, 1, 0, 0, 1]  # t0 and t1 hold the minute's two places; t0 keeps its own
    snap = reader(conn, clock).snapshot()
    assert {row.tenant for row in snap.tenants} == {"t0", "t1"}
    assert snap.capped_starts_5m == 2 and snap.everyone.wait_5m.starts == 5
    assert snap.other.wait_5m.starts == 2  # everyone minus the named rows
    clock[0] = T0 + 60  # a new minute: new places
    assert rec.record("t3", 0.01, conn) == 1


def test_once_a_minute_s_places_are_given_new_tenants_records_are_not_read(conn: Redis) -> None:
    """Past a full minute's cap, a flush reads only the records of tenants admitted in that minute (one
    ZMSCORE of the recent set tells which): a worker meeting thousands of tenants pays no HMGET for each."""
    clock = [T0 + 1]
    rec = recorder(conn, clock, tenants_per_minute=2)
    assert [rec.record(t, 0.01, conn) for t in ("t0", "t1")] == [1, 1]  # the minute's two places
    for i in range(2, 52):
        rec.add(f"t{i}", 0.01)
    rec.add("t1", 0.01)
    hmgets, zmscores = command_calls(conn, "hmget"), command_calls(conn, "zmscore")
    assert rec.flush(conn) == [0] * 50 + [1]  # t1 holds the minute and keeps its own record
    assert command_calls(conn, "hmget") - hmgets == 3  # #all, #other and t1's record, not the 50 others
    assert command_calls(conn, "zmscore") - zmscores == 1
    snap = reader(conn, clock).snapshot()
    assert snap.capped_starts_5m == 50 and snap.everyone.wait_5m.starts == 53


def test_a_late_flush_of_an_older_minute_keeps_a_newer_admission(conn: Redis) -> None:
    """A buffer flushed late admits a tenant in an older minute after the tenant was admitted in a newer one:
    the recent set keeps the newer admission (ZADD GT), so the tenant keeps its own record in the newer
    minute once that minute's places are all given."""
    clock = [T0 + 30]
    late = recorder(conn, clock, tenants_per_minute=1)
    late.add("t0", 0.01)  # gathered in minute 0, not sent yet
    clock[0] = T0 + 61
    rec = recorder(conn, clock, tenants_per_minute=1)
    assert rec.record("t0", 0.01, conn) == 1  # minute 1's one place
    clock[0] = T0 + 62
    assert late.flush(conn) == [1]  # minute 0's one place, admitted after minute 1's
    clock[0] = T0 + 63
    assert rec.record("t0", 0.01, conn) == 1  # still holds minute 1
    assert rec.record("t1", 0.01, conn) == 0


def test_a_flushed_batch_leaves_the_records_one_call_per_start_would(conn: Redis) -> None:
    """The same starts (five tenants and no tenant, two minutes, several ticks and buckets, a cap of 3 places a
    minute) recorded one call per start under one prefix, and gathered then flushed as one batch under
    another: every observe key holds the same fields, the cap's choice of tenants included."""
    clock = [T0 + 50.0]
    one = StartRecorder(conn, Keys("one"), ObserveConfig(tenants_per_minute=3), clock=lambda: clock[0])
    many = StartRecorder(conn, Keys("many"), ObserveConfig(tenants_per_minute=3), clock=lambda: clock[0])
    starts = [(f"t{(k * 7) % 5}" if k % 6 else None, (k % 9) * 0.37 + 0.002) for k in range(60)]
    for k, (tenant, wait) in enumerate(starts):
        clock[0] = T0 + 50 + k * 0.3  # 18 s across the minute's end: groups of a second, ticks, two minutes
        one.record(tenant, wait, conn)
        many.add(tenant, wait)
    assert many.pending == 60 and conn.keys("many:*") == []  # gathered, nothing sent yet
    placed = many.flush(conn)
    assert many.pending == 0 and placed is not None and 0 in placed and 1 in placed  # the cap sent some away

    def contents(prefix: str) -> dict[bytes, Any]:
        found: dict[bytes, Any] = {}
        for key in conn.keys(f"{prefix}:*"):
            name = key[len(prefix):]
            found[name] = conn.hgetall(key) if conn.type(key) == b"hash" else conn.zrange(key, 0, -1, withscores=True)
        return found

    ones, batch = contents("one"), contents("many")
    assert len(ones) == 8  # five tenants (three own records a minute, not the same three), #none, #other, #all
    assert batch == ones
    assert many.flush(conn) is None  # nothing left to send: no call


def test_starts_flushed_after_their_minute_slot_moved_on_count_only_since_the_record_began(conn: Redis) -> None:
    """A batch far older than its minute slot (a buffer held over an hour: never with the worker's flushes,
    but the script must not trust it) leaves the newer minute's counts alone."""
    clock = [T0]
    rec = recorder(conn, clock)
    rec.add("acme", 1.0)  # at T0, gathered ...
    clock[0] = T0 + 62 * 60  # ... and the slot of T0's minute now holds this minute
    rec.record("acme", 0.001, conn)
    assert rec.flush(conn) == [1]
    acme = reader(conn, clock).snapshot().tenants[0]
    assert acme.wait_5m.starts == 1 and acme.wait_5m.p95 is not None and acme.wait_5m.p95 <= 0.001
    assert acme.histogram.count == 2 and acme.histogram.total_us == 1_001_000  # cumulative: both


def test_a_buffer_larger_than_one_call_goes_as_several_and_the_cap_holds_across_them(conn: Redis) -> None:
    clock = [T0 - 30]
    rec = recorder(conn, clock)  # 500 tenants a minute get their own record
    rec.record("warm-up", 0.01, conn)  # the minute before: Redis now has the script (no NOSCRIPT retry below)
    clock[0] = T0 + 1
    tenants = MAX_GROUPS + 200
    for i in range(tenants):
        rec.add(f"t{i}", 0.01)
    evals = command_calls(conn, "evalsha")
    placed = rec.flush(conn)
    assert command_calls(conn, "evalsha") - evals == 2
    assert placed == [1] * 500 + [0] * (tenants - 500)  # oldest first: the first 500 took the minute's places
    snap = reader(conn, clock).snapshot()
    assert snap.everyone.wait_5m.starts == tenants + 1 and snap.capped_starts_5m == tenants - 500


def test_the_flush_interval_is_checked() -> None:
    assert ObserveConfig(flush_interval="250ms").flush_interval == 0.25
    with pytest.raises(ValidationError, match="flush_interval must be at most 60s"):
        ObserveConfig(flush_interval="2m")


@pytest.mark.parametrize("worker_class", [WeightedSimpleWorker, WeightedWorker])
def test_the_worker_gathers_starts_and_flushes_them_on_rq_s_own_job_start_pipeline(
    conn: Redis, isolated_settings: None, worker_class: type[WeightedSimpleWorker | WeightedWorker]
) -> None:
    """Same jobs with recording off; on with a flush due at every job start; and on with a 60 s interval, so
    the burst's starts all wait for the worker's teardown. A flush at a job start is one EVAL inside rq's own
    job-start MULTI (seen in the server's MONITOR feed: between that connection's MULTI and EXEC; no MULTI,
    EXEC or other command of its own); the teardown flush is one call (EVALSHA) of its own. Every start is
    recorded exactly once (the forking worker's horses send nothing). A first run with recording off loads the
    worker's scripts into Redis, so that no NOSCRIPT retry counts in the runs compared (run on its own, this
    test meets a server that has none yet)."""
    jobs = 30
    per_job: dict[str, tuple[float, float, float]] = {}
    for mode in ("warm-up", "off", "every", "buffered"):
        queue = Queue(f"hook_{mode}", connection=conn)
        queue.enqueue_many([Queue.prepare_data(noop, meta={"fair_tenant": f"t{k % 3}"}, result_ttl=600)
                            for k in range(jobs)])
        recording = mode not in ("off", "warm-up")
        settings = Settings(prefix=f"hook_{mode}", observe=ObserveConfig(record=recording, flush_interval=60))
        worker = worker_class([queue], connection=conn, weights={queue.name: 1}, settings=settings)
        if mode == "every":
            assert worker.starts.start_recorder is not None
            worker.starts.start_recorder.interval = 0.0
        execs, evals, evalshas = (command_calls(conn, name) for name in ("exec", "eval", "evalsha"))
        with monitored(conn) as feed:
            worker.work(burst=True, logging_level="WARNING")
        per_job[mode] = ((command_calls(conn, "eval") - evals) / jobs, (command_calls(conn, "exec") - execs) / jobs,
                         command_calls(conn, "evalsha") - evalshas)
        assert FinishedJobRegistry(queue.name, connection=conn).count == jobs
        if mode == "every":
            assert _in_transaction(feed, "EVAL") == [True] * jobs, feed
    off, every, buffered = per_job["off"], per_job["every"], per_job["buffered"]
    assert every[0] - off[0] == 1 and every[2] == off[2]  # one EVAL per job start ...
    assert every[1] == off[1]  # ... inside the MULTIs rq sends anyway (checked above): no round trip of its own
    assert buffered[0] == off[0] and buffered[1] == off[1]  # no EVAL at the job starts ...
    assert buffered[2] - off[2] == 1, per_job  # ... one call at teardown, for all 30 starts
    for mode in ("every", "buffered"):
        snap = SnapshotReader(conn, Settings(prefix=f"hook_{mode}")).snapshot()
        assert sorted((row.tenant, row.wait_60m.starts) for row in snap.tenants) == [("t0", 10), ("t1", 10),
                                                                                    ("t2", 10)], mode
        # Our start is taken as rq prepares the execution, a moment before rq stamps started_at.
        registry = FinishedJobRegistry(f"hook_{mode}", connection=conn)
        finished = Job.fetch_many(registry.get_job_ids(), connection=conn)
        rq_waits = sum((job.started_at - job.enqueued_at).total_seconds() for job in finished if job is not None)
        ours = snap.everyone.histogram.total_us / 1e6
        assert rq_waits - jobs * 0.25 <= ours <= rq_waits + 0.001 * jobs, (mode, ours, rq_waits)


def _in_transaction(feed: list[tuple[str, str]], command: str) -> list[bool]:
    """For each ``command`` in the feed: whether its connection was inside MULTI ... EXEC then (a queued
    command runs at its EXEC, after its connection's MULTI, before its EXEC)."""
    inside: dict[str, bool] = {}
    found = []
    for client, name in feed:
        if name == "MULTI":
            inside[client] = True
        elif name in ("EXEC", "DISCARD"):
            inside[client] = False
        elif name == command:
            found.append(inside.get(client, False))
    return found


def test_an_idle_worker_flushes_its_starts_from_its_heartbeat_once_twice_the_interval_has_passed(
    conn: Redis, isolated_settings: None
) -> None:
    """rq's loop heartbeats after every idle wait (and before every fetch): starts gathered and not flushed by
    a later job start go out there, after twice the interval, in a call of their own; before that they are
    only in the worker's memory (what a killed worker loses)."""
    clock = [T0 + 5.0]
    settings = Settings(prefix="idle", observe=ObserveConfig(flush_interval=1))
    worker = WeightedSimpleWorker(["idle"], connection=conn, weights={"idle": 1}, settings=settings)
    worker.starts.start_recorder = StartRecorder(conn, Keys("idle"), settings.observe, clock=lambda: clock[0])
    worker.starts.start_recorder.add("acme", 0.25)
    worker.starts.start_recorder.add("acme", 0.5)
    clock[0] = T0 + 6.9  # the interval has passed, but a job start may still come to carry them
    worker.heartbeat()
    assert worker.starts.start_recorder.pending == 2 and conn.keys("idle:{obs}:*") == []
    clock[0] = T0 + 7.0
    worker.heartbeat()
    assert worker.starts.start_recorder.pending == 0
    acme = reader(conn, clock, prefix="idle").snapshot().tenants[0]
    assert (acme.tenant, acme.wait_5m.starts, acme.histogram.total_us) == ("acme", 2, 750_000)
    assert acme.series == [(T0, pytest.approx(0.375))]  # placed at the first start's time, on the clock given
    worker.starts.start_recorder.add("acme", 0.125)
    worker.teardown()  # rq calls it whichever way its loop ends
    assert reader(conn, clock, prefix="idle").snapshot().tenants[0].wait_5m.starts == 3


def test_the_snapshot_names_the_top_n_and_sums_the_rest(conn: Redis, isolated_settings: None) -> None:
    settings = Settings(prefix="obs", fair_queues=["fq"], queues={"fq": 3},
                        concurrency=ConcurrencyConfig(enabled=True), observe=ObserveConfig(top_tenants=2))
    queue = FairQueue("fq", connection=conn, settings=settings)
    backlog = {"big": 5, "mid": 3, "a": 1, "b": 1}
    for tenant, count in backlog.items():
        for _ in range(count):
            queue.enqueue(noop, fair_tenant=tenant)
    keys = Keys("obs")
    limiter = ConcurrencyLimiter(conn, keys, TierBook(conn, keys, settings.tiers), settings.concurrency)
    assert limiter.acquire("mid", "running-job") is not None  # "mid" runs one job (its limit: 1)
    queue.park(Job.fetch(queue.get_job_ids()[-1], connection=conn), "mid", 30)
    snap = SnapshotReader(conn, settings).snapshot()
    assert [row.tenant for row in snap.tenants] == ["big", "mid"]  # waiting + running: 5, 3 + 1
    big, mid = snap.tenants
    assert big.waiting == {"fq": 5} and mid.waiting == {"fq": 3} and mid.running == 1 and mid.limit == 1
    assert mid.parked == ["fq"] and big.parked == []
    assert big.fair_share == pytest.approx(1 / 4)  # four tenants waiting, equal weights
    assert snap.other.waiting == {"fq": 2} and snap.other.tenant == "_other"
    assert snap.queues[0].name == "fq" and snap.queues[0].jobs == 10 and snap.queues[0].fair
    assert snap.queues[0].tenants_waiting == 4 and snap.queues[0].tenants_parked == 1


def test_a_lone_waiting_tenant_shows_no_fair_share(conn: Redis, isolated_settings: None) -> None:
    """With one tenant waiting there is nothing to share: no "fair share 100%" mark beside its bar."""
    settings = Settings(prefix="obs", fair_queues=["fq"], observe=ObserveConfig(top_tenants=2))
    queue = FairQueue("fq", connection=conn, settings=settings)
    queue.enqueue(noop, fair_tenant="alone")
    (row,) = SnapshotReader(conn, settings).snapshot().tenants
    assert row.tenant == "alone" and row.waiting == {"fq": 1} and row.fair_share is None


def test_a_snapshot_costs_the_same_commands_for_50_or_500_tenants(conn: Redis, isolated_settings: None) -> None:
    costs = []
    for tenants in (50, 500):
        conn.flushall()
        settings = Settings(prefix="obs", fair_queues=["fq"], observe=ObserveConfig(top_tenants=5))
        queue = FairQueue("fq", connection=conn, settings=settings)
        queue.enqueue_many([Queue.prepare_data(noop, meta={"fair_tenant": f"t{i}"}) for i in range(tenants)])
        rec = StartRecorder(conn, Keys("obs"), settings.observe)
        for i in range(tenants):
            rec.record(f"r{i}", 0.01, conn)
        before = command_calls(conn)
        SnapshotReader(conn, settings).snapshot()
        costs.append(command_calls(conn) - before)
    assert costs[0] == costs[1], costs
    assert costs[0] < 66, costs  # of which 7 reconcile the fair queue's counts with rq's list (fairqueue.reconcile)


def test_routed_jobs_are_counted_by_target_queue(conn: Redis, isolated_settings: None) -> None:
    router = FairRouter(conn, prefix="obs")
    rules = [Rule(queue="slow", threshold=2, per="1h")]
    task = fair_job("base", rules=rules, tenant=lambda account, i: account, router=router, job_key="app.task")(noop)
    task.enqueue_many([(("acme", i), {}) for i in range(5)])
    task.delay("small", 0)
    snap = SnapshotReader(conn, Settings(prefix="obs")).snapshot()
    assert snap.routed == {("app.task", "base"): 3, ("app.task", "slow"): 3}
    assert conn.smembers(Keys("obs").observe_job_keys()) == {b"app.task"}
    # The rule column: where each shown tenant's next job would go, for the job keys in the settings.
    settings = Settings(prefix="obs", jobs={"app.task": {"queue": "base", "rules": rules}})
    rec = StartRecorder(conn, Keys("obs"), settings.observe)
    rec.record("acme", 0.01, conn)
    rec.record("small", 0.01, conn)
    rows = {row.tenant: row for row in SnapshotReader(conn, settings, queues=["base", "slow"]).snapshot().tenants}
    assert rows["acme"].rule == rules[0].describe() and rows["small"].rule is None


def test_held_starts_are_counted_by_reason_and_outcome_and_paused_tenants_show(
    conn: Redis, isolated_settings: None
) -> None:
    """Real in-process worker, limits off: a paused tenant's job in a fair queue (parked) and on a plain queue
    (snoozed), a rate-limited tenant's second job on a plain queue (deferred to its token); each start held is
    counted once by why and once by what became of the job, and the paused tenant's row says so."""
    keys = Keys("obs")
    limiter = ConcurrencyLimiter(conn, keys, TierBook(conn, keys), ConcurrencyConfig(enabled=True))
    assert limiter.acquire("acme", "a") is not None
    assert limiter.acquire("acme", "b") is None  # the free tier runs one at once: refused at its limit
    assert limiter.acquire("acme", "a", refresh=True) is not None  # a refresh of a held slot: not refused
    limiter.flush()
    assert limiter.counters()["free"]["refused"] == 1

    settings = Settings(prefix="obs", fair_queues=["fq"], queues={"fq": 1, "pq": 1})
    router = FairRouter(conn, prefix="obs")
    router.pause("held")
    router.set_tenant("slow", rate="1/h")
    fair, plain = FairQueue("fq", connection=conn, settings=settings), Queue("pq", connection=conn)
    fair.enqueue(noop, fair_tenant="held")
    fair.enqueue(noop, fair_tenant="free-flowing")
    for tenant in ("held", "slow", "slow"):
        plain.enqueue(noop, meta={"fair_tenant": tenant})
    worker = WeightedSimpleWorker([fair, plain], connection=conn, settings=settings)
    worker.work(burst=True, logging_level="WARNING")
    assert FinishedJobRegistry(queue=fair).count == 1 and FinishedJobRegistry(queue=plain).count == 1

    counts = ConcurrencyLimiter(conn, keys, TierBook(conn, keys), ConcurrencyConfig()).counters()["free"]
    assert counts["paused"] == 2 and counts["rate_deferred"] == 1  # why: two pauses, one rate
    assert counts["parked"] == 1 and counts["snoozed"] == 1  # what became of them (the rate's: deferred)
    assert counts["refused"] == 1 and counts["acquired"] == 1  # the limiter's own above
    snap = SnapshotReader(conn, settings).snapshot()
    assert snap.limit_counters["free"] == counts
    rows = {row.tenant: row for row in snap.tenants}
    assert rows["held"].paused and rows["held"].parked == ["fq"] and rows["held"].waiting == {"fq": 1}
    assert not rows["free-flowing"].paused
    assert "paused; parked in fq" in "\n".join(render(snap))


def test_abandoned_jobs_are_counted_per_queue(conn: Redis, isolated_settings: None) -> None:
    """The count abandon.lua keeps with each move (crash recovery) shows as an event of the queue."""
    keys = Keys("obs")
    conn.incrby(keys.abandoned_total(StartedJobRegistry("pq", connection=conn).key), 2)
    conn.sadd(Queue.redis_queues_keys, Queue("pq", connection=conn).key)
    snap = SnapshotReader(conn, Settings(prefix="obs")).snapshot()
    assert snap.events == {("abandoned", "pq"): 2}


def test_fair_jobs_given_back_after_a_lost_pop_are_counted(conn: Redis, isolated_settings: None) -> None:
    settings = Settings(prefix="obs", fair_queues=["fq"])
    queue = FairQueue("fq", connection=conn, settings=settings)
    queue.enqueue(noop, fair_tenant="acme")
    popped = FairQueue.dequeue_any([queue], None, connection=conn)
    assert popped is not None  # popped, never started: its worker "died"
    assert queue.recover(older_than=0) == [popped[0].id]
    snap = SnapshotReader(conn, settings).snapshot()
    assert snap.events == {("recovered", "fq"): 1}
    assert ALL == "#all"
