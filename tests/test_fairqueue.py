"""FairQueue: weighted fair share across tenants inside one rq queue, on a real redis-server with real rq
workers (in-process SimpleWorkers where processes do not matter; `rq worker` subprocesses for the rq CLI,
SIGKILL, blocking and concurrency-limit cases)."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import fair_jobs
import pytest
import yaml
from conftest import command_calls, monitored, round_trips, terminate
from redis import Redis
from rq import Queue, Retry, SimpleWorker, Worker
from rq.job import Job, JobStatus
from rq.registry import CanceledJobRegistry, FailedJobRegistry, FinishedJobRegistry, ScheduledJobRegistry
from rq.scheduler import RQScheduler

from fair_router import FairQueue, FairRouter, Settings, WeightedSimpleWorker, fair_job
from fair_router.config.settings import TiersConfig
from fair_router.demo.redis_server import RedisServer
from fair_router.rq_internals.queue import PopKind

TESTS = Path(__file__).resolve().parent
PREFIX = "fq_test"
WEIGHTED_TIERS = TiersConfig(weights={"free": 1, "pro": 3, "enterprise": 5})


pytestmark = pytest.mark.usefixtures("isolated_settings")


def settings(**extra: Any) -> Settings:
    return Settings(prefix=PREFIX, **extra)


def fair(conn: Redis, name: str = "default", **extra: Any) -> FairQueue:
    return FairQueue(name, connection=conn, settings=settings(**extra))


def fill(queue: Queue, tenant: str, n: int, func: Callable[..., Any] = fair_jobs.log, **options: Any) -> list[Job]:
    """``n`` jobs of ``tenant`` in one pipeline (rq's enqueue_many goes through push_job_id too)."""
    datas = [Queue.prepare_data(func, (tenant, i), meta={"fair_tenant": tenant}, result_ttl=600, **options)
             for i in range(n)]
    jobs: list[Job] = queue.enqueue_many(datas)
    return jobs


def ran(conn: Redis) -> list[tuple[str, int]]:
    """(tenant, n) of every logged job, in the order the jobs ran."""
    return [(t, int(n)) for t, n in (raw.decode().rsplit(":", 1) for raw in conn.lrange(fair_jobs.LOG, 0, -1))]


def pop_ids(queue: FairQueue, n: int, tenant_of: dict[str, str]) -> list[str]:
    """Tenant of each of ``n`` pops by the fair queue's pop script alone (the dequeue hot path, without
    the ~1 ms of rq worker bookkeeping per fetch: keeps 9,000-pop tests fast)."""
    tenants = []
    for _ in range(n):
        job_id = queue.pop_job_id()
        assert job_id is not None, "the backlog ran dry"
        tenants.append(tenant_of[job_id])
    return tenants


def pop_tenants(worker: Worker, n: int) -> list[str]:
    """Tenant of each of ``n`` fetches through the worker's real dequeue (non-blocking)."""
    tenants = []
    for _ in range(n):
        result = worker.dequeue_job_and_maintain_ttl(timeout=None)
        assert result is not None, "the backlog ran dry"
        tenants.append(result[0].meta["fair_tenant"])
    return tenants


# -- fair order --------------------------------------------------------------------------------------


def flood_then_small(queue: Queue) -> None:
    fill(queue, "G", 500)
    for k in range(10):
        fill(queue, f"small{k}", 5)


def test_small_tenants_are_done_within_the_first_60_dequeues_and_each_tenant_stays_fifo(conn: Redis) -> None:
    queue = fair(conn)
    flood_then_small(queue)
    assert len(queue) == queue.count == 550
    WeightedSimpleWorker([queue], connection=conn, settings=settings()).work(burst=True)
    order = ran(conn)
    assert len(order) == 550 and len(queue) == 0
    small = [i for i, (tenant, _) in enumerate(order) if tenant != "G"]
    assert len(small) == 50 and max(small) < 60, max(small)
    for tenant in {t for t, _ in order}:
        assert [n for t, n in order if t == tenant] == sorted(n for t, n in order if t == tenant), tenant


def test_the_same_scenario_on_a_plain_queue_fails_the_fairness_check(conn: Redis) -> None:
    # The check above discriminates: plain FIFO runs every small job after the 500 big ones.
    queue = Queue("default", connection=conn)
    flood_then_small(queue)
    SimpleWorker([queue], connection=conn).work(burst=True)
    assert min(i for i, (tenant, _) in enumerate(ran(conn)) if tenant != "G") == 500


def test_weights_1_3_5_get_shares_within_2_points_over_9000_pops(conn: Redis) -> None:
    router = FairRouter(conn, prefix=PREFIX)
    router.set_tier("f", "free")
    router.set_tier("p", "pro")
    router.set_tier("e", "enterprise")
    sets = settings(tiers=WEIGHTED_TIERS, fair_queues=["default"])
    plain = Queue("default", connection=conn)  # producers may use FairQueue: here through the worker's
    queue = FairQueue("default", connection=conn, settings=sets)
    owner = {}
    for tenant, n in (("f", 1300), ("p", 3300), ("e", 5300)):  # all stay backlogged for 9,000 pops
        owner |= {job.id: tenant for job in fill(queue, tenant, n)}
    assert plain.count == 9900
    worker = WeightedSimpleWorker(["default"], connection=conn, settings=sets)  # FairQueue via fair_queues
    assert isinstance(worker.queues[0], FairQueue)
    head = Counter(pop_tenants(worker, 90))  # the worker's own dequeue path agrees
    assert head == {"f": 10, "p": 30, "e": 50}, head
    shares = Counter(pop_ids(queue, 9000, owner))
    for tenant, weight in (("f", 1), ("p", 3), ("e", 5)):
        assert shares[tenant] / 9000 == pytest.approx(weight / 9, abs=0.02), shares
    # Stride scheduling interleaves rather than batches: every window of 9 pops is 1 / 3 / 5 up to +-1.
    assert plain.count == 9900 - 90 - 9000


def test_a_tenant_idle_for_a_while_gets_no_more_than_its_share_when_it_floods(conn: Redis) -> None:
    queue = fair(conn)
    owner = {job.id: "late" for job in fill(queue, "late", 10)}
    owner |= {job.id: "a" for job in fill(queue, "a", 2000)}
    owner |= {job.id: "b" for job in fill(queue, "b", 2000)}
    first = pop_ids(queue, 1030, owner)
    assert first.count("late") == 10  # served, then idle for ~1000 pops while a and b ran
    owner |= {job.id: "late" for job in fill(queue, "late", 2000)}
    shares = Counter(pop_ids(queue, 900, owner))
    # Banking its idle time would give `late` the next ~1000 pops; fair share is one third.
    assert shares["late"] / 900 == pytest.approx(1 / 3, abs=0.01), shares
    assert shares["a"] / 900 == pytest.approx(1 / 3, abs=0.01), shares


def test_fair_job_decorator_with_fair_true_enqueues_fairly(conn: Redis) -> None:
    router = FairRouter(conn, prefix=PREFIX)
    logged = fair_job("default", rules=[], router=router, fair=True, result_ttl=600)(fair_jobs.log)
    for i in range(30):
        logged.enqueue("G", i, fair_tenant="G")
    logged.enqueue_many([(("s", i), {"fair_tenant": "s"}) for i in range(3)])
    queue = fair(conn)
    assert queue.count == 33
    worker = SimpleWorker([queue], connection=conn)
    worker.queue_class = FairQueue
    assert pop_tenants(worker, 6) == ["G", "s", "G", "s", "G", "s"]


# -- rq compatibility --------------------------------------------------------------------------------


def test_counts_job_ids_remove_and_empty_show_the_true_backlog(conn: Redis, redis_server: RedisServer) -> None:
    queue = fair(conn)
    jobs = fill(queue, "G", 4) + fill(queue, "s", 2)
    plain = Queue("default", connection=conn).enqueue(fair_jobs.log, "plain", 0)  # rq internals: plain push
    assert len(queue) == queue.count == Queue("default", connection=conn).count == 7
    assert sorted(queue.job_ids) == sorted([j.id for j in jobs] + [plain.id])
    g, s = jobs[:4], jobs[4:]  # serving order: G and s take turns (ties by name), the plain entry last
    assert queue.job_ids == [g[0].id, s[0].id, g[1].id, s[1].id, g[2].id, g[3].id, plain.id]
    assert [queue.get_job_position(job) for job in (g[1], s[1], plain)] == [2, 3, 6]
    queue.remove(jobs[1])
    assert queue.count == 6 and jobs[1].id not in queue.job_ids
    counts = {q.name: q.count for q in Queue.all(connection=conn)}
    assert counts == {"default": 6}
    info = subprocess.run([str(Path(sys.executable).parent / "rq"), "info", "--url", redis_server.url, "-Q", "-r"],
                          capture_output=True, text=True, timeout=30)
    assert re.search(r"queue default 6\b", info.stdout), info.stdout
    worker = SimpleWorker([queue], connection=conn)
    worker.queue_class = FairQueue
    pop_tenants(worker, 2)
    assert queue.count == 4 == len(queue.job_ids)
    queue.empty()
    assert queue.count == 0 and queue.job_ids == []
    assert not conn.keys(f"{PREFIX}:*:fq:members")


def test_jobs_pushed_by_the_scheduler_and_by_retries_come_back_and_run(conn: Redis) -> None:
    queue = fair(conn)
    retried = queue.enqueue(fair_jobs.fail_once, "test:runs:retry", fair_tenant="acme", retry=Retry(max=1))
    due = queue.enqueue_at(datetime.now(timezone.utc) - timedelta(seconds=1), fair_jobs.log, "sched", 0,
                           fair_tenant="acme")
    assert ScheduledJobRegistry("default", connection=conn).count == 1
    scheduler = RQScheduler(["default"], connection=conn)
    scheduler.acquire_locks()
    scheduler.enqueue_scheduled_jobs()  # rq's own scheduler: pushes with a plain Queue
    scheduler.release_locks()
    assert queue.count == 2
    WeightedSimpleWorker([queue], connection=conn, settings=settings()).work(burst=True)
    assert due.get_status(refresh=True) == JobStatus.FINISHED
    assert retried.get_status(refresh=True) == JobStatus.FINISHED
    assert conn.get("test:runs:retry") == b"2"
    assert queue.count == 0


def test_canceled_and_deleted_jobs_are_skipped(conn: Redis) -> None:
    queue = fair(conn)
    jobs = fill(queue, "t", 3)
    jobs[0].cancel()  # rq cancels through a plain Queue: only an LREM of the id
    jobs[1].delete()
    WeightedSimpleWorker([queue], connection=conn, settings=settings()).work(burst=True)
    assert ran(conn) == [("t", 2)]
    assert queue.count == 0


def test_a_weighted_worker_mixes_fair_and_plain_queues(conn: Redis) -> None:
    sets = settings(fair_queues=["fq"], queues={"fq": 1, "pq": 1})
    fill(FairQueue("fq", connection=conn, settings=sets), "G", 20)
    fill(Queue("pq", connection=conn), "plain", 20)
    worker = WeightedSimpleWorker(["fq", "pq"], connection=conn, settings=sets)
    assert [type(q) for q in worker.queues] == [FairQueue, Queue]
    worker.work(burst=True)
    assert Counter(t for t, _ in ran(conn)) == {"G": 20, "plain": 20}


# -- processes: rq CLI, blocking, SIGKILL, limits ------------------------------------------------------


def rq_worker(url: str, queue_class: str, *args: str, config: Path | None = None,
              log: Path | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIR_ROUTER_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    env["FAIR_ROUTER_PREFIX"] = PREFIX
    if config is not None:
        env["FAIR_ROUTER_CONFIG"] = str(config)
    out = log.open("wb") if log else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "--url", url, "--queue-class", queue_class,
                             *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    terminate(proc, grace=10)


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads CPU time from /proc")
def test_rq_cli_worker_blocks_idle_and_wakes_on_enqueue(conn: Redis, redis_server: RedisServer) -> None:
    """An idle worker waits in a blocking pop (the server counts it as a blocked client, and it burns no CPU),
    and each enqueue wakes it: the job finishes while the worker had been blocked, not polling. Timings are
    left out on purpose (a loaded machine stretches them); the blocked client is the mechanism."""
    queue = fair(conn)
    proc = rq_worker(redis_server.url, "fair_router.FairQueue", "-w", "rq.SimpleWorker", "default")
    try:
        wait_for(lambda: Worker.count(connection=conn) == 1, 20, "the worker to register")
        wait_for(lambda: int(conn.info("clients")["blocked_clients"]) >= 1, 20, "the worker to block")
        before = cpu_seconds(proc.pid)
        time.sleep(1.5)
        assert cpu_seconds(proc.pid) - before < 0.1  # blocked in BLPOP, not polling
        for i in range(5):
            wait_for(lambda: int(conn.info("clients")["blocked_clients"]) >= 1, 20, "the worker to block again")
            job = queue.enqueue(fair_jobs.log, "t", i, fair_tenant="t")
            wait_for(lambda j=job: j.get_status(refresh=True) == JobStatus.FINISHED, 30, "the job")  # type: ignore[misc]
    finally:
        stop(proc)


def test_a_worker_sigkilled_between_pop_and_start_loses_no_job(
    conn: Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    queue = fair(conn)
    jobs = fill(queue, "t", 3)
    dying = rq_worker(redis_server.url, "fair_jobs.QuickRecoverFairQueue", "-w", "fair_jobs.DiesAfterPopWorker",
                      "--burst", "default", log=tmp_path / "dying.log")
    assert dying.wait(30) == -signal.SIGKILL
    assert queue.count == 2  # one job left the queue with the dead worker
    assert jobs[0].get_status(refresh=True) == JobStatus.QUEUED
    time.sleep(0.6)  # QuickRecoverFairQueue.recover_after
    survivor = rq_worker(redis_server.url, "fair_jobs.QuickRecoverFairQueue", "--burst", "default",
                         log=tmp_path / "survivor.log")
    assert survivor.wait(30) == 0, (tmp_path / "survivor.log").read_text()
    assert sorted(n for _, n in ran(conn)) == [0, 1, 2]
    assert [j.get_status(refresh=True) for j in jobs] == [JobStatus.FINISHED] * 3
    assert FinishedJobRegistry("default", connection=conn).count == 3


def test_limit_1_per_tenant_two_workers_never_overlap_and_others_pass(
    conn: Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    config = tmp_path / "fair_router.yaml"
    config.write_text(yaml.safe_dump({
        "prefix": PREFIX, "fair_queues": ["default"],
        "concurrency": {"enabled": True, "lease_ttl": "10s", "snooze": "30s", "jitter": "1s"},
    }))
    queue = fair(conn)
    procs = [rq_worker(redis_server.url, "rq.Queue", "-w", "fair_router.WeightedWorker", "default",
                       config=config, log=tmp_path / f"w{i}.log") for i in range(2)]
    try:
        wait_for(lambda: Worker.count(connection=conn) == 2, 20, "two workers")
        big = [queue.enqueue(fair_jobs.span, "big", 0.3, fair_tenant="big") for _ in range(5)]
        time.sleep(0.1)
        small = [queue.enqueue(fair_jobs.span, "small", 0.05, fair_tenant="small") for _ in range(3)]
        wait_for(lambda: conn.llen("test:fair:spans") == 8, 30, "all eight jobs")
    finally:
        for proc in procs:
            stop(proc)
    spans: dict[str, list[tuple[float, float]]] = {}
    for raw in conn.lrange("test:fair:spans", 0, -1):
        tenant, start, end = raw.decode().split()
        spans.setdefault(tenant, []).append((float(start), float(end)))
    ordered = sorted(spans["big"])
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ordered)), ordered  # never two at once
    # small is not stuck behind big's five sequential jobs: all done before big's third finishes.
    assert max(end for _, end in spans["small"]) < ordered[2][1], (spans, ordered)
    assert ScheduledJobRegistry("default", connection=conn).count == 0  # parked, never snoozed
    assert all(j.get_status(refresh=True) == JobStatus.FINISHED for j in big + small)


# -- parking and deletion ------------------------------------------------------------------------------


def test_a_parked_tenant_is_skipped_until_its_park_ends_and_keeps_its_fifo(conn: Redis) -> None:
    queue = fair(conn)
    a_jobs, b_jobs = fill(queue, "A", 3), fill(queue, "B", 2)
    first = queue.pop_job_id()
    assert first == a_jobs[0].id
    queue.park(a_jobs[0], "A", seconds=0.4)  # A at its limit: back to the front of A's FIFO
    assert queue.count == 5
    assert [queue.pop_job_id() for _ in range(2)] == [b.id for b in b_jobs]
    result = queue.pop_fair()
    assert result.kind == PopKind.STALLED and result.job_id is None  # only the parked tenant waits
    assert result.wake_ms > 0 and queue.count == 3 == conn.llen(queue.key)
    deadline = time.monotonic() + 5
    while (popped := queue.pop_job_id()) is None:
        assert time.monotonic() < deadline, "the park never ended"
        time.sleep(0.05)
    assert [popped, queue.pop_job_id(), queue.pop_job_id()] == [j.id for j in a_jobs]
    assert queue.count == 0 and queue.pop_job_id() is None


def test_unpark_makes_the_tenant_eligible_at_once(conn: Redis) -> None:
    queue = fair(conn)
    a_jobs, b_jobs = fill(queue, "A", 2), fill(queue, "B", 1)
    queue.park(conn_job(conn, queue.pop_job_id()), "A", seconds=60)
    assert queue.pop_job_id() == b_jobs[0].id
    assert queue.pop_job_id() is None  # A parked for a minute
    queue.unpark("A")  # one of A's slots was released
    assert [queue.pop_job_id(), queue.pop_job_id()] == [j.id for j in a_jobs]


@pytest.mark.parametrize(("a_backlog", "order"), [(3, "A0 B0 A1 B1 A2 B2"), (1, "A0 B0 B1 B2")])
def test_a_refused_fair_pop_costs_the_tenant_no_turn(conn: Redis, a_backlog: int, order: str) -> None:
    # Equal weights, A and B backlogged from pass 0; ties go to the smaller name, so A is served first
    # (A's pass 0 -> 1, virtual time 0). Its slot is refused: the park takes the step back (from its
    # active pass, or from the pass it went idle with when the pop took its last job), so after the
    # unpark A starts at max(0, 0) and wins the tie again: A, B, A, B... Without the refund A would
    # come back at pass 1 and B would go first: one turn lost per refusal.
    queue = fair(conn)
    a_jobs, b_jobs = fill(queue, "A", a_backlog), fill(queue, "B", 3)
    assert queue.pop_job_id() == a_jobs[0].id
    queue.park(a_jobs[0], "A", seconds=600)
    queue.unpark("A")
    jobs = {"A": a_jobs, "B": b_jobs}
    expected = [jobs[name[0]][int(name[1:])].id for name in order.split()]
    assert [queue.pop_job_id() for _ in expected] == expected
    assert queue.count == 0


def test_a_refused_plain_entry_gets_no_refund(conn: Redis) -> None:
    # A plain entry (rq's scheduler) moved no pass, so its park must not take a step back.
    queue = fair(conn)
    a_jobs, b_jobs = fill(queue, "A", 2), fill(queue, "B", 2)
    assert queue.pop_job_id() == a_jobs[0].id  # A: pass 0 -> 1, virtual time 0
    plain = Queue("default", connection=conn).enqueue(fair_jobs.log, "A", 9, meta={"fair_tenant": "A"},
                                                      at_front=True)
    assert queue.pop_job_id() == plain.id  # served as a plain entry: no pass moved
    queue.park(plain, "A", seconds=600)  # into A's FIFO, at its front
    queue.unpark("A")  # A back at pass 1 (a refund would make it 0 and win the tie with B)
    expected = [b_jobs[0], plain, b_jobs[1], a_jobs[1]]
    assert [queue.pop_job_id() for _ in expected] == [j.id for j in expected]
    assert queue.count == 0


def test_a_stalled_pop_leaves_every_job_listed_and_unpark_wakes_a_blocked_worker(conn: Redis) -> None:
    queue = fair(conn)
    a_jobs = fill(queue, "A", 2)
    assert queue.pop_job_id() == a_jobs[0].id
    queue.park(a_jobs[0], "A", seconds=600)
    assert queue.count == conn.llen(queue.key) == 2 and queue.job_ids == [j.id for j in a_jobs]
    result = queue.pop_fair()
    assert result.kind == PopKind.STALLED and result.wake_ms > time.time() * 1000 + 500_000
    assert queue.count == 2 and queue.job_ids == [j.id for j in a_jobs]  # nothing taken off the list
    assert conn.llen(queue.fair_keys.wake) == 0
    assert queue.unpark("A") == 1  # one slot freed: a worker blocked on the wake list is woken
    assert conn.llen(queue.fair_keys.wake) == 1
    assert queue.pop_job_id() == a_jobs[0].id  # A's head first: FIFO kept through the park
    assert queue.count == 1 == len(queue.job_ids)
    assert queue.pop_job_id() == a_jobs[1].id
    assert queue.pop_job_id() is None and queue.count == 0
    assert conn.llen(queue.fair_keys.wake) == 0  # no park left: the wake list goes


def test_counts_stay_exact_through_park_and_unpark_while_other_tenants_wait(conn: Redis) -> None:
    queue = fair(conn)
    a_jobs, b_jobs = fill(queue, "A", 2), fill(queue, "B", 2)
    assert queue.pop_job_id() == a_jobs[0].id
    assert queue.count == 3
    queue.park(a_jobs[0], "A", seconds=600)
    assert queue.count == 4 == Queue("default", connection=conn).count
    assert queue.job_ids == [b_jobs[0].id, b_jobs[1].id, a_jobs[0].id, a_jobs[1].id]  # parked A last
    assert queue.pop_job_id() == b_jobs[0].id  # A skipped while parked
    assert queue.count == 3
    assert queue.unpark("A") == 1
    # A (pass 0 after the refund, virtual time 0) and B (pass 1): A, then the tie at 1 goes to A again.
    expected = [a_jobs[0], a_jobs[1], b_jobs[1]]
    assert queue.job_ids == [job.id for job in expected]
    for n, job in enumerate(expected, 1):
        assert queue.pop_job_id() == job.id
        assert queue.count == conn.llen(queue.key) == len(queue.get_job_ids()) == len(expected) - n
    assert queue.pop_job_id() is None


def test_delete_and_empty_leave_no_fair_state_behind(conn: Redis) -> None:
    queue = fair(conn)
    fill(queue, "A", 3)
    fill(queue, "B", 3)
    queue.empty()
    assert queue.count == 0 and conn.keys(f"{PREFIX}:*") == []
    fill(queue, "C", 2)
    queue.delete()
    assert conn.keys(f"{PREFIX}:*") == [] and not conn.exists(queue.key)


def conn_job(conn: Redis, job_id: str | None) -> Job:
    assert job_id is not None
    return Job.fetch(job_id, connection=conn)


@pytest.mark.parametrize("parks", ["in pop order", "reversed"])
def test_jobs_of_one_tenant_refused_at_once_come_back_in_fifo_order(conn: Redis, parks: str) -> None:
    # Two workers (two queue objects) pop A0 and A1 before either park lands, and the parks arrive in
    # either order. Each job goes back to its own place (to the front, the first park would put A0 at
    # A1's place and the second A1 before it), so FIFO holds.
    first, second = fair(conn), fair(conn)
    a_jobs = fill(first, "A", 3)
    assert first.pop_job_id() == a_jobs[0].id
    assert second.pop_job_id() == a_jobs[1].id
    refusals = [(first, a_jobs[0]), (second, a_jobs[1])]
    for queue, job in refusals if parks == "in pop order" else refusals[::-1]:
        queue.park(job, "A", seconds=600)
    first.unpark("A")
    assert [first.pop_job_id() for _ in range(3)] == [j.id for j in a_jobs]


def test_a_refused_last_job_goes_before_jobs_pushed_since(conn: Redis) -> None:
    queue = fair(conn)
    (a0,) = fill(queue, "A", 1)
    assert queue.pop_job_id() == a0.id  # A's last job: A goes idle
    (a1,) = fill(queue, "A", 1)  # a new FIFO for A
    queue.park(a0, "A", seconds=600)
    queue.unpark("A")
    assert [queue.pop_job_id(), queue.pop_job_id()] == [a0.id, a1.id]


def test_jobs_recovered_from_dead_workers_keep_their_tenant_order(conn: Redis) -> None:
    first, second = fair(conn), fair(conn)
    a_jobs = fill(first, "A", 3)
    assert [first.pop_job_id(), second.pop_job_id()] == [a_jobs[0].id, a_jobs[1].id]
    time.sleep(0.01)  # both popped, never started: their workers died
    assert sorted(fair(conn).recover(older_than=0)) == sorted(j.id for j in a_jobs[:2])
    assert [first.pop_job_id() for _ in range(3)] == [j.id for j in a_jobs]


def test_a_canceled_fair_job_requeued_by_rq_is_not_lost(conn: Redis) -> None:
    # rq's Job.cancel LREMs the id through a plain Queue, taking a token the fair structure still counts.
    # When the canceled job surfaces (skipped), the token is settled; else a later plain push of the same
    # id (CanceledJobRegistry.requeue) would be taken for a token and the job never served.
    queue = fair(conn)
    x, y = fill(queue, "A", 1)[0], fill(queue, "B", 1)[0]
    x.cancel()
    assert queue.count == 1
    worker = WeightedSimpleWorker([queue], connection=conn, settings=settings())
    worker.work(burst=True)
    assert ran(conn) == [("B", 0)] and y.get_status(refresh=True) == JobStatus.FINISHED
    assert queue.count == 0 and conn.hlen(queue.fair_keys.members) == 0
    CanceledJobRegistry("default", connection=conn).requeue(x.id)
    assert queue.count == 1
    worker.work(burst=True)
    assert ran(conn) == [("B", 0), ("A", 0)] and x.get_status(refresh=True) == JobStatus.FINISHED
    assert queue.count == 0


def test_jobs_rq_requeues_as_plain_ids_are_served_by_fair_share(conn: Redis) -> None:
    """``rq requeue --all`` (FailedJobRegistry.requeue) pushes plain ids through a plain rq Queue: the pop that meets
    one puts it in its tenant's FIFO, so a requeued backlog does not run ahead of a small tenant's jobs."""
    queue = fair(conn)
    big = fill(queue, "big", 6, fair_jobs.log_after_a_failure)
    worker = WeightedSimpleWorker([queue], connection=conn, settings=settings())
    worker.work(burst=True)
    registry = FailedJobRegistry("default", connection=conn)
    assert registry.count == 6
    for job in big:
        registry.requeue(job.id)
    fill(queue, "small", 2)
    worker.work(burst=True)
    order = [tenant for tenant, _ in ran(conn)]
    assert sorted(order) == ["big"] * 6 + ["small"] * 2
    assert order[:4].count("small") == 2, order  # by turns, not after the requeued backlog
    assert queue.count == 0 and conn.hlen(queue.fair_keys.members) == 0


def test_a_canceled_job_behind_waiting_ones_leaves_the_count_exact(conn: Redis) -> None:
    queue = fair(conn)
    a_jobs = fill(queue, "A", 2)
    b_jobs = fill(queue, "B", 2)
    a_jobs[0].cancel()  # LREMs A0's own id: the count is exact at once
    assert queue.count == 3 and queue.job_ids == [a_jobs[1].id, b_jobs[0].id, b_jobs[1].id]
    # A0 is dropped when the scheduler meets it, without costing A its turn: A1 comes out first.
    got = [FairQueue.dequeue_any([queue], None, connection=conn) for _ in range(3)]
    assert [r[0].id for r in got if r] == [a_jobs[1].id, b_jobs[0].id, b_jobs[1].id]
    assert queue.count == 0 and conn.hlen(queue.fair_keys.members) == 0


def test_enqueue_many_pushes_in_batches_inside_the_callers_pipeline(conn: Redis) -> None:
    queue = fair(conn)
    datas = [Queue.prepare_data(fair_jobs.log, ("AB"[i % 2], i // 2), meta={"fair_tenant": "AB"[i % 2]})
             for i in range(2501)]  # more than one PUSH_BATCH
    conn.config_resetstat()
    with conn.pipeline() as pipe:
        jobs = queue.enqueue_many(datas, pipeline=pipe)
        assert queue.count == 0  # saved and pushed only when the caller's MULTI runs
        pipe.execute()
    assert command_calls(conn, "eval") == 3  # 1,000 + 1,000 + 501 jobs
    assert queue.count == 2501 == len(queue.get_job_ids())
    tenant_of = {job.id: job.meta["fair_tenant"] for job in jobs}
    assert pop_ids(queue, 6, tenant_of) == ["A", "B", "A", "B", "A", "B"]
    parent = queue.enqueue(fair_jobs.log, "P", 0, fair_tenant="P")
    (child,) = queue.enqueue_many([Queue.prepare_data(fair_jobs.log, ("C", 0), meta={"fair_tenant": "C"},
                                                      depends_on=parent)])
    assert child.get_status() == JobStatus.DEFERRED and queue.count == 2501 - 6 + 1


def test_a_fair_enqueue_is_one_round_trip_and_survives_a_flushed_script_cache(conn: Redis) -> None:
    """rq's enqueue takes two round trips (the queue's registration, then the job's MULTI); a fair enqueue
    sends both in one MULTI, its push an FCALL of the library loaded once (Redis >= 7; before, an EVALSHA of the
    script loaded once): not the 12 KB source, and no SCRIPT EXISTS, which redis-py sends before a pipeline
    holding a registered script. When the server has lost its scripts and functions (a restart), the enqueue
    runs again: the job is queued once."""
    queue = fair(conn)
    queue.enqueue(fair_jobs.log, "A", 0, fair_tenant="A")
    push = "fcall" if int(str(conn.info("server")["redis_version"]).split(".")[0]) >= 7 else "evalsha"
    conn.config_resetstat()
    with monitored(conn) as feed:
        queue.enqueue(fair_jobs.log, "A", 1, fair_tenant="A")
    assert round_trips(feed) == 1, feed
    assert (push.upper() in [name for _, name in feed]) and ("SADD" in [name for _, name in feed])
    queue.enqueue_many([Queue.prepare_data(fair_jobs.log, ("B", 0), meta={"fair_tenant": "B"})])
    assert command_calls(conn, "script|exists", "script|load", "script") == 0  # "script": before Redis 7
    assert command_calls(conn, "eval") == 0 and command_calls(conn, push) == 2
    conn.script_flush()
    if push == "fcall":
        conn.function_flush()
    queue.enqueue(fair_jobs.log, "A", 2, fair_tenant="A")
    assert command_calls(conn, "script|load", "script") == (push == "evalsha")  # a lost FCALL is sent again as EVAL
    assert queue.count == 4 and conn.llen(queue.key) == 4
    assert pop_ids(queue, 4, {job.id: job.meta["fair_tenant"] for job in queue.jobs}) == ["A", "B", "A", "A"]
    # Into a caller's pipeline (which we cannot run twice) the push goes as EVAL of the source.
    conn.script_flush()
    with conn.pipeline() as pipe:
        job = queue.enqueue(fair_jobs.log, "C", 0, fair_tenant="C", pipeline=pipe)
        pipe.execute()
    assert queue.get_job_ids() == [job.id]


def test_tenants_that_went_idle_leave_no_state_once_the_virtual_time_passes_them(conn: Redis) -> None:
    queue = fair(conn)
    jobs = fill(queue, "G", 3) + [job for k in range(100) for job in fill(queue, f"T{k:03}", 1)]
    for _ in jobs:
        assert queue.pop_job_id() is not None
    # Every T went idle keeping pass 1; G's second job was served at pass 1, so those passes can change
    # nothing any more and are gone. Only G's kept pass (3) is left; every other per-tenant field went.
    assert conn.zrange(queue.fair_keys.kept, 0, -1) == [b"G"]
    assert not [field for field in conn.hkeys(queue.fair_keys.state) if field.startswith(b"=")]  # no records
    assert queue.pop_job_id() is None and queue.count == 0


def test_a_job_canceled_while_only_parked_tenants_wait_leaves_the_count_exact(conn: Redis) -> None:
    queue = fair(conn)
    a_jobs = fill(queue, "A", 2)
    assert queue.pop_job_id() == a_jobs[0].id
    queue.park(a_jobs[0], "A", seconds=600)
    assert queue.pop_fair().kind == PopKind.STALLED
    (b0,) = fill(queue, "B", 1)
    assert conn.llen(queue.fair_keys.wake) == 1  # B can be served: a worker blocked on the wake list wakes
    b0.cancel()
    assert queue.count == 2 and b0.id not in queue.job_ids
    assert FairQueue.dequeue_any([queue], None, connection=conn) is None  # B0 dropped, A still parked
    assert queue.count == 2 and queue.job_ids == [a_jobs[0].id, a_jobs[1].id]
    assert queue.unpark("A") == 1
    assert [queue.pop_job_id(), queue.pop_job_id()] == [a_jobs[0].id, a_jobs[1].id]
    assert queue.count == 0 and queue.pop_job_id() is None


def test_enqueue_many_that_fails_midway_keeps_what_rq_queued_in_the_callers_pipeline(conn: Redis) -> None:
    queue = fair(conn)
    datas = [Queue.prepare_data(fair_jobs.log, ("A", 0), meta={"fair_tenant": "A"}, job_id="saved"),
             Queue.prepare_data(fair_jobs.log, ("A", threading.Lock()), meta={"fair_tenant": "A"})]
    with conn.pipeline() as pipe:
        with pytest.raises(TypeError):  # the lock cannot be pickled
            queue.enqueue_many(datas, pipeline=pipe)
        pipe.execute()  # the caller keeps what was queued, as with rq's plain Queue
    assert queue.get_job_ids() == ["saved"] and queue.count == 1


def test_deleting_a_finished_fair_job_leaves_the_waiting_ones_listed(conn: Redis) -> None:
    queue = fair(conn)
    a_jobs, (b0,) = fill(queue, "A", 3), fill(queue, "B", 1)
    assert [queue.pop_job_id(), queue.pop_job_id()] == [a_jobs[0].id, b0.id]
    b0.delete()  # a plain Queue LREM of B0's id: nothing of it is left on the list
    assert queue.count == 2 == conn.llen(queue.key) and queue.job_ids == [a_jobs[1].id, a_jobs[2].id]
    assert [queue.pop_job_id(), queue.pop_job_id()] == [a_jobs[1].id, a_jobs[2].id]
    assert queue.count == 0


def test_a_reused_job_id_pushed_again_after_a_delete_is_served(conn: Redis) -> None:
    queue = fair(conn)
    a_jobs = fill(queue, "A", 2)
    report = queue.enqueue(fair_jobs.log, "B", 0, fair_tenant="B", job_id="daily-report")
    assert [queue.pop_job_id(), queue.pop_job_id()] == [a_jobs[0].id, report.id]
    report.delete()  # its entry stood in for A1
    assert queue.pop_job_id() == a_jobs[1].id
    queue.intermediate_queue.cleanup(None, queue)  # what rq's maintenance calls
    again = queue.enqueue(fair_jobs.log, "B", 1, fair_tenant="B", job_id="daily-report", unique=True)  # plain
    assert queue.count == 1
    assert queue.pop_job_id() == again.id
