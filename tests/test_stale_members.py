"""A plain `rq worker` (none of our code runs in it) serving a fair queue: what happens to the per-tenant counts,
and how our processes detect and report it (fair_router.fairqueue.stale). Real worker subprocesses."""

from __future__ import annotations

from pathlib import Path

import fair_jobs
import pytest
from click.testing import CliRunner
from conftest import Fleet, write_settings
from redis import Redis

from fair_router import FairQueue, FairRouter, Settings, WeightedSimpleWorker
from fair_router.cli import main
from fair_router.dashboard.reader import SnapshotReader
from fair_router.fairqueue.scripts import tenant_waiting
from fair_router.fairqueue.stale import PlainPops

pytestmark = pytest.mark.usefixtures("isolated_settings")

TENANTS = {"big": 12, "s1": 3, "s2": 3}


def fill(queue: FairQueue) -> None:
    for tenant, n in TENANTS.items():
        for i in range(n):
            queue.enqueue(fair_jobs.log, tenant, i, fair_tenant=tenant)


def backlog(conn: Redis, queue: FairQueue) -> dict[str, int]:
    return tenant_waiting(conn.hgetall(queue.fair_keys.state))


def burst_worker(redis_url: str, tmp_path: Path, config: dict[str, object], worker_class: str, *args: str) -> str:
    """`rq worker -w <worker_class> --burst fairq` in a subprocess; returns its log."""
    fleet = Fleet(redis_url, tmp_path / worker_class, queues=["fairq"])
    (tmp_path / worker_class).mkdir()
    fleet.config = write_settings(tmp_path, config)
    (proc,) = fleet.start(worker_class=worker_class, scheduler=False, burst=True, args=args)
    assert fleet.wait_exit(proc, 60) == 0, fleet.logs()
    return fleet.logs()


def plain_worker(redis_url: str, tmp_path: Path, config: dict[str, object], *args: str) -> None:
    """rq's own Worker class: what `rq worker` runs without `-w`."""
    burst_worker(redis_url, tmp_path, config, "rq.worker.Worker", *args)


def test_a_plain_worker_taking_part_of_a_fair_queue_leaves_counts_exact_once_a_weighted_worker_pops(
        redis_server, conn: Redis, tmp_path: Path) -> None:
    config = {"prefix": "pp", "redis_url": redis_server.url}
    settings = Settings.model_validate(config)
    queue = FairQueue("fairq", connection=conn, settings=settings)
    fill(queue)
    assert backlog(conn, queue) == TENANTS

    plain_worker(redis_server.url, tmp_path, config, "--max-jobs", "5")
    # rq's LPOP took the 5 oldest (all of big's, first-in first-out); the fair state cannot know yet
    assert conn.llen(queue.key) == sum(TENANTS.values()) - 5
    assert conn.lrange(fair_jobs.LOG, 0, -1) == [f"big:{i}".encode() for i in range(5)]

    log = burst_worker(redis_server.url, tmp_path, config, "fair_router.WeightedWorker")
    assert len(conn.lrange(fair_jobs.LOG, 0, -1)) == sum(TENANTS.values())  # every job ran once
    assert backlog(conn, queue) == {} and conn.hlen(queue.fair_keys.members) == 0
    state = conn.hmget(queue.fair_keys.state, "stale", "plain")
    assert state == [b"5", b"5"]  # each stale member counted once; all five seen run by the plain worker
    warnings = [line for line in log.splitlines() if "not fair-router's" in line]
    assert len(warnings) == 1 and "'fairq'" in warnings[0] and "fair_router.WeightedWorker" in warnings[0], log


def test_a_plain_worker_draining_a_fair_queue_is_reported_by_check_the_dashboard_and_tenant_show(
        redis_server, conn: Redis, tmp_path: Path) -> None:
    config = {"prefix": "pp", "redis_url": redis_server.url, "fair_queues": ["fairq"]}
    settings = Settings.model_validate(config)
    queue = FairQueue("fairq", connection=conn, settings=settings)
    fill(queue)
    plain_worker(redis_server.url, tmp_path, config)
    assert conn.llen(queue.key) == 0
    # counts are not trusted once rq's list is empty: nothing waits, whatever the members say
    runner = CliRunner()
    shown = runner.invoke(main, ["tenant", "show", "big", "--config", str(tmp_path / "fair_router.yaml")])
    assert shown.exit_code == 0 and "waiting     none" in shown.output, shown.output
    snap = SnapshotReader(conn, settings).snapshot()
    assert sum(row.waiting_total for row in snap.tenants) == 0
    (view,) = [q for q in snap.queues if q.name == "fairq"]
    assert view.tenants_waiting == 0

    checked = runner.invoke(main, ["check", str(tmp_path / "fair_router.yaml"), "--ping"])
    assert checked.exit_code == 0, checked.output
    assert "not fair-router's" in checked.output and "'fairq'" in checked.output
    assert "warning" in checked.output.splitlines()[-1]
    # the check tidied: the stale members are gone and counted, and the dashboard shows it
    assert backlog(conn, queue) == {} and conn.hlen(queue.fair_keys.members) == 0
    (view,) = [q for q in SnapshotReader(conn, settings).snapshot().queues if q.name == "fairq"]
    assert view.stale_pops == sum(TENANTS.values())  # exact
    assert 0 < view.plain_pops <= view.stale_pops  # the ids looked at are a sample (lua/lib/stale.lua): a lower bound
    assert PlainPops(conn).check("fairq", queue.fair_keys).plain == view.plain_pops  # nothing counted twice


def test_jobs_removed_by_rq_itself_are_not_taken_for_a_plain_worker(conn: Redis) -> None:
    settings = Settings(prefix="pp")
    queue = FairQueue("fairq", connection=conn, settings=settings)
    jobs = [queue.enqueue(fair_jobs.log, "a", i, fair_tenant="a") for i in range(3)]
    jobs[0].cancel()  # rq's cancel LREMs the id through a plain Queue, behind the fair state
    jobs[1].delete()
    WeightedSimpleWorker([queue], connection=conn, settings=settings).work(burst=True)
    report = PlainPops(conn).check("fairq", queue.fair_keys)
    assert (report.stale, report.plain) == (2, 0)
    assert FairRouter(conn, prefix="pp").tenant_jobs("a")[1] == {}


def test_a_job_in_another_weighted_workers_hand_is_not_taken_for_a_plain_pop(conn: Redis) -> None:
    """A weighted worker's BLPOP takes the head entry off rq's list before its fair pop runs; a pop of another
    worker in between finds that member gone and drops it for stale. The first pop, given the entry, puts
    the stale count right again."""
    settings = Settings(prefix="pp")
    queue = FairQueue("fairq", connection=conn, settings=settings)
    first = queue.enqueue(fair_jobs.log, "a", 0, fair_tenant="a")
    queue.enqueue(fair_jobs.log, "a", 1, fair_tenant="a")
    given = conn.lpop(queue.key)  # worker A's BLPOP
    assert given == first.id.encode()
    other = FairQueue("fairq", connection=conn, settings=settings).pop_fair()  # worker B's pop meanwhile
    assert other.job_id != first.id and conn.hget(queue.fair_keys.state, "stale") == b"1"
    assert queue.pop_fair(given.decode()).job_id == first.id  # worker A's pop, given its entry
    first.set_status("finished")  # it ran, on a weighted worker
    report = PlainPops(conn).check("fairq", queue.fair_keys)
    assert (report.stale, report.plain) == (0, 0)
