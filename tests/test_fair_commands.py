"""How many Redis commands a fair job costs, counted by the server (INFO commandstats, where the
commands a script runs count one by one, as a plain rq job's do). Never a time."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest
from conftest import command_calls
from redis import Redis
from rq import Queue, SimpleWorker
from rq.registry import FinishedJobRegistry

from fair_router import FairQueue, WeightedSimpleWorker
from fair_router.fairqueue.pushing import waiting
from tests import fair_jobs
from tests.test_fairqueue import fair

TENANTS = 10
JOBS = 200


def all_calls(conn: Redis) -> int:
    """Every command counted since the last CONFIG RESETSTAT, but CONFIG and INFO themselves."""
    stats = cast(dict[str, dict[str, Any]], conn.info("commandstats"))
    return sum(int(value["calls"]) for name, value in stats.items()
               if not name.startswith(("cmdstat_config", "cmdstat_info")))


def filled(queue: Queue, jobs: int) -> None:
    """``jobs`` jobs round-robin over TENANTS tenants, in one enqueue_many."""
    queue.enqueue_many([Queue.prepare_data(fair_jobs.log, (f"t{i % TENANTS}", i),
                                           meta={"fair_tenant": f"t{i % TENANTS}"}, result_ttl=600)
                        for i in range(jobs)])


def test_a_fair_pop_costs_about_11_redis_commands(conn: Redis) -> None:
    """The pop script's own commands and its EVALSHA: 11 (17 before a record per tenant in `state` and the FIFO
    places in `members`, 12 before the tenant's waiting count moved into its record)."""
    queue = fair(conn)
    filled(queue, JOBS + TENANTS)
    conn.config_resetstat()
    for _ in range(JOBS):
        assert queue.pop_job_id() is not None
    assert all_calls(conn) / JOBS <= 11.5  # 11, and a ZREMRANGEBYSCORE of kept passes per TENANTS pops


def test_a_fair_enqueue_costs_about_5_redis_commands_more_than_a_plain_one(conn: Redis) -> None:
    """rq's enqueue MULTI either way, with the fair push script (its EVALSHA and what it runs) in place of rq's
    RPUSH: 3 commands more per job (8 before the script read the list head's position and the tenant's record in
    one HMGET, kept the waiting count in the record, and read the parks' ZCARD once per call instead of a ZSCORE
    and a ZCARD per job; 5 before it read the ZCARD only when state.due says a tenant may be parked, and left a
    tenant that had jobs waiting, and is not parked, as active as it is, without a ZSCORE of `active`)."""
    per_job = {}
    for side in ("plain", "fair"):
        conn.flushall()
        queue = fair(conn) if side == "fair" else Queue("default", connection=conn)
        filled(queue, TENANTS)  # every tenant active; the queue's fairness mark written
        conn.config_resetstat()
        for i in range(JOBS):
            queue.enqueue(fair_jobs.log, f"t{i % TENANTS}", i, meta={"fair_tenant": f"t{i % TENANTS}"}, result_ttl=600)
        per_job[side] = all_calls(conn) / JOBS
    assert per_job["fair"] - per_job["plain"] <= 3.05, per_job


def test_a_fair_job_costs_about_10_redis_commands_more_than_a_plain_one(conn: Redis) -> None:
    """A SimpleWorker drain of a FairQueue against one of a plain Queue: rq's own commands are the same, the
    fair pop replaces rq's LMOVE."""
    logging.getLogger("rq").setLevel(logging.WARNING)
    per_job = {}
    for side in ("plain", "fair"):
        conn.flushall()
        queue = fair(conn) if side == "fair" else Queue("default", connection=conn)
        filled(queue, JOBS + TENANTS)
        worker = SimpleWorker([queue], connection=conn)
        if side == "fair":
            worker.queue_class = FairQueue
        conn.config_resetstat()
        worker.work(burst=True, max_jobs=JOBS, logging_level="WARNING")
        per_job[side] = all_calls(conn) / JOBS
    assert per_job["fair"] - per_job["plain"] <= 10.5, per_job  # 10.1 (it was 16, then 11.1)


def test_tenants_tied_on_pass_are_served_in_list_order_without_moving_an_entry(conn: Redis) -> None:
    """Many tenants with one job each all sit at the same pass: each pop serves the list head (name order would
    be t0, t1, t10, t100, ...) and takes it as it is, with no LINDEX/LSET to swap another id into its place."""
    queue = fair(conn)
    tenants = 150
    queue.enqueue_many([Queue.prepare_data(fair_jobs.log, (f"t{i}", i), meta={"fair_tenant": f"t{i}"},
                                           result_ttl=600) for i in range(tenants)])
    listed = queue.get_job_ids()
    assert [conn.lindex(queue.key, i).decode() for i in range(3)] == listed[:3]  # the listing is list order
    conn.config_resetstat()
    popped = [queue.pop_job_id() for _ in range(tenants)]
    assert popped == listed
    assert command_calls(conn, "lset", "lindex") == 0


def test_a_weighted_worker_on_a_fair_queue_sends_rqs_lrem_as_rq_does(conn: Redis) -> None:
    """A fair pop never moves a job onto rq's intermediate list; rq's LREM from it, one command of about a hundred
    per job and no round trip (bench/seam.py), is left to rq rather than overridden."""
    sent = {}
    for side, worker_class in (("rq", SimpleWorker), ("ours", WeightedSimpleWorker)):
        conn.flushall()
        queue = fair(conn)
        filled(queue, 20)
        worker = worker_class([queue], connection=conn)
        worker.queue_class = FairQueue
        conn.config_resetstat()
        worker.work(burst=True, max_jobs=20, logging_level="WARNING")
        sent[side] = command_calls(conn, "lrem")
        assert len(FinishedJobRegistry(queue=queue)) == 20
    assert sent == {"rq": 20, "ours": 20}


def test_a_job_taken_by_rqs_own_dequeue_leaves_the_intermediate_list_though_its_queue_turned_fair(conn: Redis) -> None:
    """rq's dequeue LMOVEs onto the intermediate list, then the worker's queue class becomes FairQueue before the
    job starts (a heartbeat saw the queue marked fair): the job's LREM still goes, as the dequeue decides."""
    queue = Queue("default", connection=conn)
    job = queue.enqueue(fair_jobs.log, "t", 0)
    worker = WeightedSimpleWorker([queue], connection=conn)
    dequeued = worker.dequeue_job_and_maintain_ttl(timeout=None)
    assert dequeued is not None and dequeued[0].id == job.id
    assert conn.lrange(queue.intermediate_queue_key, 0, -1) == [job.id.encode()]  # rq's LMOVE put it there
    worker.queue_class = FairQueue
    worker.execute_job(dequeued[0], dequeued[1])
    assert job.get_status() == "finished"
    assert conn.llen(queue.intermediate_queue_key) == 0


def to_legacy_layout(conn: Redis, queue: FairQueue, layout: str) -> int:
    """Rewrite ``queue``'s fair state into an earlier layout, as a build of that time left it in Redis:
    ``"records"`` (tenant records without their waiting count, the counts in a ``backlog`` hash; t1's count
    left out, so that the move counts its places),
    ``"hashes"`` (before tenant records: head, tail and weights hashes per tenant, FIFO places in a hash of
    their own, the counts in ``backlog``), or ``"uncounted"`` (records without a count, and no count anywhere).
    Returns the tenants rewritten.
    """
    keys, (head, tail, weights, fifo, backlog) = queue.fair_keys, queue.prefix_keys.fair_queue_legacy(queue.key)
    records = {field[1:]: value for field, value in conn.hgetall(keys.state).items()
               for field in [field.decode()] if field.startswith("=")}
    for tenant, record in records.items():
        h, t, w, n = record.decode().split("|")
        if layout == "hashes" or (layout == "records" and tenant != queue.tenant_key("t1")):
            conn.hset(backlog, tenant, n)
        if layout == "hashes":
            conn.hset(head, tenant, h)
            conn.hset(tail, tenant, t)
            conn.hset(weights, tenant, w)
            conn.hdel(keys.state, "=" + tenant)
        else:
            conn.hset(keys.state, "=" + tenant, f"{h}|{t}|{w}")
    if layout == "hashes":
        for field, job_id in conn.hgetall(keys.members).items():
            if b":" in field:
                conn.hset(fifo, field, job_id)
                conn.hdel(keys.members, field)
    return len(records)


@pytest.mark.parametrize("layout", ["hashes", "records", "uncounted"])
def test_jobs_waiting_across_an_upgrade_of_the_layout_keep_their_places(conn: Redis, layout: str) -> None:
    """Two queues filled alike, with holes (removed jobs); one is rewritten into an earlier layout. A new
    FairQueue object moves it back (lua/fair_migrate.lua) and serves exactly the same jobs in the same order
    as the untouched one, counting each tenant's waiting jobs as the untouched one does."""
    orders, counts = [], []
    for name, legacy in (("same", False), ("upgraded", True)):
        queue = FairQueue(name, connection=conn)
        queue.enqueue_many([Queue.prepare_data(fair_jobs.log, (f"t{i % 3}", i), job_id=f"j{i}",
                                               meta={"fair_tenant": f"t{i % 3 if i < 30 else 0}"})
                            for i in range(40)])
        for job_id in ("j4", "j7", "j35"):
            queue.remove(job_id)
        if legacy:
            assert to_legacy_layout(conn, queue, layout) == 3
        fresh = FairQueue(name, connection=conn)
        tenants = [fresh.tenant_key(t) for t in ("t0", "t1", "t2")]
        counts.append(waiting(conn, fresh.fair_keys, tenants))  # the keys' first use moves an earlier layout
        assert not conn.exists(*queue.prefix_keys.fair_queue_legacy(queue.key))
        served = []
        while (job_id := fresh.pop_job_id()) is not None:
            served.append(job_id)
        orders.append(served)
        assert not conn.exists(fresh.fair_keys.members)
        if not (legacy and layout == "uncounted"):  # there a count too high is left until the tenant's next turn
            assert waiting(conn, fresh.fair_keys, tenants) == {} and not conn.exists(fresh.fair_keys.active)
    assert len(orders[0]) == 37 and orders[0] == orders[1]
    t0, t1, t2 = (fresh.tenant_key(t) for t in ("t0", "t1", "t2"))
    assert counts[0] == {t0: 19, t1: 8, t2: 10}
    # without a count anywhere (never written so) a record counts its places, holes too: too many, never too few
    assert counts[1] == ({t0: 20, t1: 10, t2: 10} if layout == "uncounted" else counts[0])
