"""Waiting counts stay exact under rq's own commands (fair_router.fairqueue.reconcile, observe.waitcheck,
lua/lib/recount.lua): after `rq requeue --all`, `rq empty`, Job.cancel, Job.delete, a plain Queue.remove,
Queue.empty and FailedJobRegistry.requeue, with no worker running in between, `fair-router tenant show` (the CLI,
a subprocess), the dashboard's snapshot and the backlog cap agree with rq's lists at once. Real Redis, rq's own
CLI and API; workers only make jobs fail before a requeue."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import fair_jobs
import pytest
import routed_jobs
from conftest import write_settings
from redis import Redis
from rq import Queue, Retry
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, StartedJobRegistry

from fair_router import FairQueue, FairRouter, Rule, Settings, WeightedSimpleWorker, fair_job
from fair_router.controls.backlog import TenantBacklogFull
from fair_router.dashboard.collector import metric_families
from fair_router.dashboard.reader import SnapshotReader
from fair_router.fairqueue.reconcile import reconcile_queues
from fair_router.fairqueue.scripts import tenant_waiting

pytestmark = pytest.mark.usefixtures("isolated_settings")

BIN = Path(sys.executable).parent
PREFIX = "cx"


def config(redis_url: str, cap: int | None = None) -> dict[str, object]:
    tiers = {"max_backlog": {"free": cap}} if cap else {}
    return {"prefix": PREFIX, "redis_url": redis_url, "fair_queues": ["fairq"], "tiers": tiers}


def cli(tool: str, *args: str) -> str:
    """`tool` (rq or fair-router from this virtualenv) in a subprocess; its output."""
    done = subprocess.run([str(BIN / tool), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def tenant_show(settings_file: Path, tenant: str) -> list[str]:
    """The `waiting` lines of `fair-router tenant show`."""
    out = cli("fair-router", "tenant", "show", tenant, "--config", str(settings_file))
    return [line.strip() for line in out.splitlines() if line.strip().startswith("waiting")]


def listed_tenants(conn: Redis, queue: str) -> Counter[str]:
    """The truth: tenant -> jobs on rq's list of ``queue``, read job by job."""
    return Counter(Job.fetch(raw.decode(), connection=conn).meta["fair_tenant"]
                   for raw in conn.lrange(f"rq:queue:{queue}", 0, -1))


def snapshot_waiting(conn: Redis, settings: Settings) -> Counter[tuple[str, str]]:
    """What the dashboard's reader shows: (queue, tenant) -> jobs waiting; /metrics agrees with it."""
    snap = SnapshotReader(conn, settings).snapshot()
    shown = Counter({(queue, row.tenant): n for row in snap.tenants for queue, n in row.waiting.items() if n})
    (family,) = [f for f in metric_families(snap) if f.name == "fair_router_tenant_waiting"]
    gauges = Counter({(s.labels["queue"], s.labels["tenant"]): int(s.value) for s in family.samples if s.value})
    assert gauges == shown
    assert not any(queue.approximate for queue in snap.queues)
    return shown


def stored(conn: Redis, queue: FairQueue) -> dict[str, int]:
    return tenant_waiting(conn.hgetall(queue.fair_keys.state))


# -- a FairQueue -----------------------------------------------------------------------------------------


def test_cancel_and_delete_leave_the_fair_counts_and_the_cap_exact_at_once(
        redis_server, conn: Redis, tmp_path: Path) -> None:
    settings_file = write_settings(tmp_path, config(redis_server.url, cap=10))
    settings = Settings.model_validate(config(redis_server.url, cap=10))
    queue = FairQueue("fairq", connection=conn, settings=settings)
    jobs = [queue.enqueue(fair_jobs.log, "a", i, fair_tenant="a") for i in range(10)]
    queue.enqueue(fair_jobs.log, "b", 0, fair_tenant="b")
    for job in jobs[2:6]:
        job.cancel()  # rq's cancel: LREM through a plain Queue, none of our code
    assert stored(conn, queue) == {"a": 10, "b": 1}  # what the structure holds before anyone reads: the drift
    # the cap is checked against rq's list before it refuses: 6 wait, 4 more fit (no read, no worker before)
    more = [queue.enqueue(fair_jobs.log, "a", 10 + i, fair_tenant="a") for i in range(4)]
    with pytest.raises(TenantBacklogFull):
        queue.enqueue(fair_jobs.log, "a", 99, fair_tenant="a")  # 10 wait now: exactly at the cap
    jobs[0].delete()
    Queue("fairq", connection=conn).remove(more[0].id)  # rq's own remove, a plain Queue's LREM
    truth = listed_tenants(conn, "fairq")
    assert truth == {"a": 8, "b": 1}
    assert tenant_show(settings_file, "a") == ["waiting     8 in fairq"]
    assert snapshot_waiting(conn, settings) == {("fairq", "a"): 8, ("fairq", "b"): 1}
    assert stored(conn, queue) == {"a": 8, "b": 1}
    # the dropped members were noted stale, none taken for a plain worker's pop
    assert int(conn.hget(queue.fair_keys.state, "stale")) == 6
    WeightedSimpleWorker([queue], connection=conn, settings=settings).work(burst=True)
    assert conn.llen(fair_jobs.LOG) == 9 and stored(conn, queue) == {}


def test_a_callers_pipeline_precheck_counts_what_rq_removed_out(conn: Redis) -> None:
    settings = Settings.model_validate({"prefix": PREFIX, "tiers": {"max_backlog": {"free": 3}}})
    queue = FairQueue("fairq", connection=conn, settings=settings)
    jobs = [queue.enqueue(fair_jobs.log, "a", i, fair_tenant="a") for i in range(3)]
    jobs[1].cancel()
    with conn.pipeline() as pipe:  # checked before anything is queued on it (a read): 2 wait, not 3
        queue.enqueue(fair_jobs.log, "a", 3, fair_tenant="a", pipeline=pipe)
        pipe.execute()
    assert queue.count == 3 and stored(conn, queue) == {"a": 3}
    with conn.pipeline() as pipe, pytest.raises(TenantBacklogFull):
        queue.enqueue(fair_jobs.log, "a", 4, fair_tenant="a", pipeline=pipe)


@pytest.mark.parametrize("how", ["rq empty", "Queue.empty", "FairQueue.empty"])
def test_an_emptied_fair_queue_counts_nothing_and_refuses_no_one(
        redis_server, conn: Redis, tmp_path: Path, how: str) -> None:
    settings_file = write_settings(tmp_path, config(redis_server.url, cap=5))
    settings = Settings.model_validate(config(redis_server.url, cap=5))
    queue = FairQueue("fairq", connection=conn, settings=settings)
    for i in range(5):
        queue.enqueue(fair_jobs.log, "a", i, fair_tenant="a")
    if how == "rq empty":
        assert "5 jobs removed" in cli("rq", "empty", "fairq", "-u", redis_server.url)
    elif how == "Queue.empty":
        Queue("fairq", connection=conn).empty()
    else:
        queue.empty()
    # a full cap's worth at once: the emptied jobs no longer count
    fresh = [queue.enqueue(fair_jobs.log, "a", 10 + i, fair_tenant="a") for i in range(5)]
    with pytest.raises(TenantBacklogFull):
        queue.enqueue(fair_jobs.log, "a", 99, fair_tenant="a")
    assert snapshot_waiting(conn, settings) == {("fairq", "a"): 5}
    assert tenant_show(settings_file, "a") == ["waiting     5 in fairq"]
    assert conn.hlen(queue.fair_keys.members) == 2 * 5  # the emptied jobs' members are gone
    WeightedSimpleWorker([queue], connection=conn, settings=settings).work(burst=True)
    assert conn.lrange(fair_jobs.LOG, 0, -1) == [f"a:{job.args[1]}".encode() for job in fresh]


def failed_fair_jobs(conn: Redis, settings: Settings, per_tenant: dict[str, int]) -> FairQueue:
    """Jobs of each tenant run once by a weighted worker and failed: in rq's FailedJobRegistry."""
    queue = FairQueue("fairq", connection=conn, settings=settings)
    for tenant, n in per_tenant.items():
        for i in range(n):
            queue.enqueue(routed_jobs.fail_twice, tenant, i, fair_tenant=tenant)
    WeightedSimpleWorker([queue], connection=conn, settings=settings).work(burst=True)
    assert FailedJobRegistry("fairq", connection=conn).count == sum(per_tenant.values())
    assert stored(conn, queue) == {} and queue.count == 0
    return queue


def test_rq_requeue_all_counts_the_requeued_jobs_for_their_tenants(
        redis_server, conn: Redis, tmp_path: Path) -> None:
    settings_file = write_settings(tmp_path, config(redis_server.url))
    settings = Settings.model_validate(config(redis_server.url))
    queue = failed_fair_jobs(conn, settings, {"a": 3, "b": 2})
    assert "Requeueing 5 jobs" in cli("rq", "requeue", "--all", "--queue", "fairq", "-u", redis_server.url)
    assert queue.count == 5 and stored(conn, queue) == {}  # rq pushed them plain: no member, nobody counted
    assert snapshot_waiting(conn, settings) == {("fairq", "a"): 3, ("fairq", "b"): 2}  # the read adopted them
    assert stored(conn, queue) == {"a": 3, "b": 2}
    assert tenant_show(settings_file, "a") == ["waiting     3 in fairq"]
    # adopted members are served by fair share from their FIFOs; their list positions were recorded
    served = [queue.pop_job_id() for _ in range(5)]
    assert Counter(Job.fetch(i, connection=conn).meta["fair_tenant"] for i in served[:4]) == {"a": 2, "b": 2}
    assert queue.count == 0 and stored(conn, queue) == {} and conn.hget(queue.fair_keys.state, "stale") is None


def test_failed_job_registry_requeue_and_a_cancel_together_keep_the_count(conn: Redis) -> None:
    """A requeue (one uncounted job) and a cancel (one counted job gone) cancel out in the list's length: the
    reconcile compares ids, not lengths."""
    settings = Settings.model_validate({"prefix": PREFIX})
    queue = failed_fair_jobs(conn, settings, {"a": 1})
    (failed,) = FailedJobRegistry("fairq", connection=conn).get_job_ids()
    waiting = [queue.enqueue(fair_jobs.log, "a", i, fair_tenant="a") for i in range(2)]
    FailedJobRegistry("fairq", connection=conn).requeue(failed)
    waiting[0].cancel()
    assert queue.count == 2 and stored(conn, queue) == {"a": 2}  # right by accident: 1 stale, 1 uncounted
    (done,) = reconcile_queues([queue]).values()
    assert (done.exact, done.dropped, done.adopted) == (True, 1, 1)
    assert stored(conn, queue) == {"a": 2}
    assert set(conn.hkeys(queue.fair_keys.members)) >= {failed.encode(), waiting[1].id.encode()}
    assert not reconcile_queues([queue])["fairq"].adopted  # nothing more to do


def test_a_job_in_a_weighted_workers_hand_during_a_read_is_served_and_counted_once(conn: Redis) -> None:
    """A weighted worker's BLPOP takes the head entry off rq's list before its fair pop runs; a read in between
    finds that member off the list and drops it as stale. The pop, given the entry, serves it all the same and
    takes it out of the stale count (lua/lib/stale.lua): nothing is lost or counted twice."""
    settings = Settings.model_validate({"prefix": PREFIX})
    queue = FairQueue("fairq", connection=conn, settings=settings)
    first = queue.enqueue(fair_jobs.log, "a", 0, fair_tenant="a")
    queue.enqueue(fair_jobs.log, "a", 1, fair_tenant="a")
    given = conn.lpop(queue.key)  # the worker's BLPOP
    assert given == first.id.encode()
    assert reconcile_queues([queue])["fairq"].dropped == 1 and stored(conn, queue) == {"a": 1}
    assert queue.pop_fair(given.decode()).job_id == first.id  # its fair pop, given the entry
    assert conn.hget(queue.fair_keys.state, "stale") == b"0" and stored(conn, queue) == {"a": 1}
    assert queue.count == 1


def test_an_abandoned_job_retried_by_started_registry_cleanup_counts_again(conn: Redis) -> None:
    """rq's StartedJobRegistry.cleanup retries an abandoned job (its worker died mid-run) through a plain
    Queue: a plain push, counted for its tenant at the next read."""
    settings = Settings.model_validate({"prefix": PREFIX})
    queue = FairQueue("fairq", connection=conn, settings=settings)
    job = queue.enqueue(fair_jobs.log, "a", 0, fair_tenant="a", retry=Retry(max=1))
    queue.enqueue(fair_jobs.log, "a", 1, fair_tenant="a")
    assert queue.pop_job_id() == job.id  # a worker took it ...
    job.set_status(JobStatus.STARTED)  # ... started it, and died: its execution expired in rq's registry
    registry = StartedJobRegistry("fairq", connection=conn)
    conn.zadd(registry.key, {f"{job.id}:dead-execution": 1})
    registry.cleanup()
    assert job.get_status() == JobStatus.QUEUED and queue.count == 2
    assert stored(conn, queue) == {"a": 1}  # rq pushed it plain
    assert snapshot_waiting(conn, Settings.model_validate({"prefix": PREFIX, "fair_queues": ["fairq"]})) == {
        ("fairq", "a"): 2}
    assert stored(conn, queue) == {"a": 2}


def test_beyond_the_bound_counts_are_marked_approximate(redis_server, conn: Redis, tmp_path: Path) -> None:
    settings = Settings.model_validate(config(redis_server.url))
    queue = FairQueue("fairq", connection=conn, settings=settings)
    jobs = queue.enqueue_many([Queue.prepare_data(fair_jobs.log, ("a", i), meta={"fair_tenant": "a"})
                               for i in range(12)])
    jobs[0].cancel()
    assert reconcile_queues([queue], bound=10)["fairq"].exact is False
    assert stored(conn, queue) == {"a": 12}  # left as it was
    reader = SnapshotReader(conn, settings)
    reader.reconcile_bound = 10
    snap = reader.snapshot()
    (view,) = [q for q in snap.queues if q.name == "fairq"]
    assert view.approximate
    (family,) = [f for f in metric_families(snap) if f.name == "fair_router_queue_counts_approximate"]
    assert [(s.labels["queue"], s.value) for s in family.samples] == [("fairq", 1)]
    reader.reconcile_bound = 100
    (view,) = [q for q in reader.snapshot().queues if q.name == "fairq"]
    assert not view.approximate and stored(conn, queue) == {"a": 11}


def test_a_big_emptied_and_refilled_queue_pages_through_its_stale_members(conn: Redis) -> None:
    """`rq empty` of a queue holding more than the bound, then new jobs before any read: the list is small, the
    members are many (past Redis' listpack size: HSCAN pages). Each read drops one page of them, marked
    approximate until none is left."""
    settings = Settings.model_validate({"prefix": PREFIX})
    queue = FairQueue("fairq", connection=conn, settings=settings)
    queue.enqueue_many([Queue.prepare_data(fair_jobs.log, ("a", i), meta={"fair_tenant": "a"}) for i in range(300)])
    Queue("fairq", connection=conn).empty()
    for i in range(3):
        queue.enqueue(fair_jobs.log, "b", i, fair_tenant="b")
    reads = []
    while not reads or not reads[-1].exact:
        reads.append(reconcile_queues([queue], bound=20)["fairq"])
        assert len(reads) <= 300 // 5, reads  # each page drops some: it ends
    assert len(reads) > 1 and sum(read.dropped for read in reads) == 300
    assert stored(conn, queue) == {"b": 3} and conn.hlen(queue.fair_keys.members) == 2 * 3
    assert conn.hget(queue.fair_keys.state, "reconcile_cursor") is None


# -- a routed plain queue (the router's waiting counts) --------------------------------------------------


def routed(conn: Redis) -> object:
    router = FairRouter(conn, prefix=PREFIX)
    return fair_job("plainq", rules=[Rule(queue="plainq_slow", threshold=3, per="1h")],
                    tenant=lambda account, item=0: account, router=router,
                    settings=Settings(prefix=PREFIX, throttled_queues="plain"))


def test_routed_plain_queue_counts_after_cancel_delete_remove_and_empty(
        redis_server, conn: Redis, tmp_path: Path) -> None:
    cfg = {"prefix": PREFIX, "redis_url": redis_server.url}
    settings_file = write_settings(tmp_path, cfg)
    settings = Settings.model_validate(cfg)
    echo = routed(conn)(routed_jobs.echo)
    jobs = [echo.delay("hog", i) for i in range(8)] + [echo.delay("s", 0)]
    assert listed_tenants(conn, "plainq_slow") == {"hog": 5}
    jobs[4].cancel()
    jobs[5].delete()
    Queue("plainq_slow", connection=conn).remove(jobs[6].id)
    assert tenant_show(settings_file, "hog") == ["waiting     3 in plainq (routed plain queue)",
                                                 "waiting     2 in plainq_slow (routed plain queue)"]
    assert snapshot_waiting(conn, settings) == {("plainq", "hog"): 3, ("plainq", "s"): 1, ("plainq_slow", "hog"): 2}
    cli("rq", "empty", "plainq_slow", "-u", redis_server.url)
    more = [echo.delay("hog", 10 + i) for i in range(2)]  # both to the slow queue
    assert all(job.origin == "plainq_slow" for job in more)
    assert snapshot_waiting(conn, settings) == {("plainq", "hog"): 3, ("plainq", "s"): 1, ("plainq_slow", "hog"): 2}
    WeightedSimpleWorker(["plainq", "plainq_slow"], connection=conn, settings=settings).work(burst=True)
    assert snapshot_waiting(conn, settings) == {}
    assert conn.hlen(f"{PREFIX}:{{{echo.fair_job.route.job_key}}}:waiting_jobs") == 0  # nothing left counted


def test_routed_plain_queue_counts_after_rq_requeue(redis_server, conn: Redis, tmp_path: Path) -> None:
    cfg = {"prefix": PREFIX, "redis_url": redis_server.url}
    settings_file = write_settings(tmp_path, cfg)
    settings = Settings.model_validate(cfg)
    flaky = routed(conn)(routed_jobs.fail_twice)
    for i in range(5):
        flaky.delay("hog", i)
    WeightedSimpleWorker(["plainq", "plainq_slow"], connection=conn, settings=settings).work(burst=True)
    assert snapshot_waiting(conn, settings) == {}
    for name in ("plainq", "plainq_slow"):
        cli("rq", "requeue", "--all", "--queue", name, "-u", redis_server.url)
    assert snapshot_waiting(conn, settings) == {("plainq", "hog"): 3, ("plainq_slow", "hog"): 2}
    assert tenant_show(settings_file, "hog") == ["waiting     3 in plainq (routed plain queue)",
                                                 "waiting     2 in plainq_slow (routed plain queue)"]
    WeightedSimpleWorker(["plainq", "plainq_slow"], connection=conn, settings=settings).work(burst=True)
    assert snapshot_waiting(conn, settings) == {}


def test_a_reader_that_may_not_run_scripts_shows_the_counts_as_stored_and_says_so(
        redis_server, conn: Redis, caplog: pytest.LogCaptureFixture) -> None:
    """A dashboard connected as a user without EVAL (or to a replica) cannot reconcile: the counts are shown as
    stored, every queue marked approximate, and a warning names the fix, once."""
    settings = Settings.model_validate({"prefix": PREFIX, "fair_queues": ["fairq"]})
    queue = FairQueue("fairq", connection=conn, settings=settings)
    jobs = [queue.enqueue(fair_jobs.log, "a", i, fair_tenant="a") for i in range(3)]
    jobs[0].cancel()
    conn.acl_setuser("viewer", enabled=True, passwords=["+viewer-pw"], keys=["*"], channels=["*"],
                     commands=["+@all", "-eval", "-evalsha", "-fcall", "-script"])
    viewer = Redis.from_url(redis_server.url, username="viewer", password="viewer-pw")
    try:
        reader = SnapshotReader(viewer, settings)
        for _ in range(2):
            snap = reader.snapshot()
            (view,) = [q for q in snap.queues if q.name == "fairq"]
            assert view.approximate and {row.tenant: row.waiting for row in snap.tenants} == {"a": {"fairq": 3}}
        warnings = [r.getMessage() for r in caplog.records if "cannot reconcile" in r.getMessage()]
        assert len(warnings) == 1 and "EVAL" in warnings[0]
    finally:
        viewer.close()
        conn.acl_deluser("viewer")

