"""How many Redis commands a fair job costs (issue 27), counted by the server (INFO commandstats, where the
commands a script runs count one by one, as a plain rq job's do). Never a time."""

from __future__ import annotations

import logging
from typing import Any, cast

from redis import Redis
from rq import Queue, SimpleWorker

from fair_router import FairQueue
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


def test_a_fair_pop_costs_about_12_redis_commands(conn: Redis) -> None:
    """The pop script's own commands and its EVALSHA: 12 (17 before a record per tenant in `state` and the FIFO
    places in `members`)."""
    queue = fair(conn)
    filled(queue, JOBS + TENANTS)
    conn.config_resetstat()
    for _ in range(JOBS):
        assert queue.pop_job_id() is not None
    assert all_calls(conn) / JOBS <= 12.5  # 12, and a ZREMRANGEBYSCORE of kept passes per TENANTS pops


def test_a_fair_job_costs_about_11_redis_commands_more_than_a_plain_one(conn: Redis) -> None:
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
    assert per_job["fair"] - per_job["plain"] <= 12, per_job  # 11 (it was 16)
