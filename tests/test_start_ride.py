"""A job start's tenant checks ride rq's job-start MULTI (fair_router.workers.start_gate): no round trip of their
own when admitted; a refused start leaves no trace of a start (no execution, its waiting count back, no start
record) and its job waits. Real Redis, real rq jobs, an in-process weighted worker."""

from __future__ import annotations

import time
from collections.abc import Sequence

import pytest
import routed_jobs
from conftest import command_calls, monitored
from redis import Redis
from rq.registry import FinishedJobRegistry, ScheduledJobRegistry, StartedJobRegistry

from fair_router import FairRouter, Rule, Settings, WeightedSimpleWorker, fair_job
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.dashboard.reader import SnapshotReader
from fair_router.workers.limiter import ConcurrencyLimiter

pytestmark = pytest.mark.usefixtures("isolated_settings")

QUEUE = "default"
RULES = [Rule(queue="default_throttled", threshold=1000, per="1h")]  # a job key with rules: counted waiting


def TENANT(account: str, item: int = 0) -> str:
    return account


def settings(limits: bool) -> Settings:
    return Settings.model_validate({"concurrency": {"enabled": limits, "snooze": "100ms", "jitter": "1ms"}})


def blocks(feed: Sequence[tuple[str, str]]) -> list[list[str]]:
    """Each client's MULTI ... EXEC blocks in a monitored feed, as their command names."""
    open_: dict[str, list[str]] = {}
    done: list[list[str]] = []
    for client, name in feed:
        if name == "MULTI":
            open_[client] = []
        elif name == "EXEC" and client in open_:
            done.append(open_.pop(client))
        elif client in open_:
            open_[client].append(name)
    return done


def before_start(feed: Sequence[tuple[str, str]]) -> list[str]:
    """The commands sent from the job's pop (rq 3.0's LMOVE into its intermediate queue) to the start of rq's
    job-start MULTI, a new connection's handshake left out, and a script's first call on this server (EVALSHA
    refused, SCRIPT LOAD, EVALSHA again) counted as its one EVALSHA, and a function library's first load (FUNCTION
    LOAD) left out: what a job start costs before it runs."""
    names: list[str] = []
    for _, name in feed:
        if name == "SCRIPT" and names and names[-1] == "EVALSHA":
            names.pop()
        elif name not in ("HELLO", "CLIENT", "FUNCTION"):
            names.append(name)
    popped = max(i for i, name in enumerate(names) if name in ("LMOVE", "BLMOVE"))
    return names[popped:names.index("MULTI", popped)]


def one_start(conn: Redis, limits: bool) -> tuple[list[str], list[str]]:
    """One routed job run by a burst worker: the commands of rq's job-start MULTI (the one with the execution's
    hash, its StartedJobRegistry entry and the worker's execution index), and :func:`before_start`."""
    job = fair_job(QUEUE, rules=RULES, tenant=TENANT, router=FairRouter(conn))(routed_jobs.echo)
    queued = job.delay("acme", 1)
    worker = WeightedSimpleWorker([QUEUE], connection=conn, settings=settings(limits))
    with monitored(conn) as feed:
        assert worker.work(burst=True, max_jobs=1)
    assert queued.id in FinishedJobRegistry(QUEUE, connection=conn).get_job_ids()
    (start,) = [names for names in blocks(feed) if "SADD" in names and "HSET" in names and "ZADD" in names]
    return start, before_start(feed)


def test_an_admitted_start_checks_its_slot_on_rqs_job_start_multi(conn: Redis) -> None:
    start_off, before_off = one_start(conn, limits=False)
    start_on, before_on = one_start(conn, limits=True)
    assert start_off.count("EVAL") == 1, start_off  # the end of the job's waiting count
    functions = int(str(conn.info("server")["redis_version"]).split(".")[0]) >= 7
    # ... and the start script: a Redis function where the server has them
    assert start_on.count("EVAL") == (1 if functions else 2) and start_on.count("FCALL") == int(functions), start_on
    assert before_on == before_off, (before_on, before_off)  # the check sent nothing of its own
    # no script before the start but the tier cache's poll for profile changes (once per cache_ttl, limits or not)
    assert "EVAL" not in before_on and before_on.count("EVALSHA") <= 1
    # the slot was taken (and released at the end): the tenant's lease set is empty again
    assert conn.zcard(Keys("fair_router").leases("acme")) == 0


def test_a_refused_start_leaves_no_trace_of_a_start_and_its_job_runs_later(conn: Redis) -> None:
    keys = Keys("fair_router")
    job = fair_job(QUEUE, rules=RULES, tenant=TENANT, router=FairRouter(conn))(routed_jobs.echo)
    limits = settings(limits=True)
    slots = ConcurrencyLimiter(conn, keys, TierBook(conn, keys), limits.concurrency)
    lease = slots.acquire("acme", "someone-elses-job")  # the free tier's one slot, taken elsewhere
    assert lease is not None
    queued = job.delay("acme", 1)
    waiting_counts, waiting_jobs = keys.waiting(job.fair_job.route.job_key)
    assert conn.hlen(waiting_jobs) == 1

    worker = WeightedSimpleWorker([QUEUE], connection=conn, settings=limits)
    worker.work(burst=True, max_jobs=1)

    assert ScheduledJobRegistry(QUEUE, connection=conn).get_job_ids() == [queued.id]  # snoozed, not failed
    assert StartedJobRegistry(QUEUE, connection=conn).get_job_ids() == []
    assert list(conn.scan_iter(match="rq:execution:*")) == []  # rq's execution of the refused start is gone
    assert worker.executions == {}
    assert conn.hlen(waiting_jobs) == 1 and conn.hvals(waiting_counts) == [b"1"]  # it still counts waiting
    recorder = worker.starts.start_recorder
    assert recorder is not None and recorder.flush(conn) is None  # no start gathered

    slots.release(lease)
    time.sleep(1.2)  # rq keeps scheduled times in whole seconds
    assert worker.work(burst=True, with_scheduler=True)  # rq's burst scheduler moves it back first
    assert FinishedJobRegistry(QUEUE, connection=conn).get_job_ids() == [queued.id]
    assert conn.exists(waiting_counts, waiting_jobs) == 0  # its count ended with its start, once
    (row,) = [row for row in SnapshotReader(conn, limits).snapshot().tenants if row.tenant == "acme"]
    assert row.wait_5m.starts == 1  # one start recorded (at the worker's stop), not two


def test_a_start_after_redis_lost_its_functions_runs_its_check_again_on_its_own(conn: Redis) -> None:
    """The start check rides rq's MULTI as FCALL once this process loaded its library; Redis losing it since (FUNCTION
    FLUSH, a restart without persistence) makes that FCALL answer "Function not found", having done nothing: the
    check is made again on its own (the library loaded again) and the job runs, its slot taken and released."""
    if int(str(conn.info("server")["redis_version"]).split(".")[0]) < 7:
        pytest.skip("Redis < 7 has no functions: the start is an EVAL")
    job = fair_job(QUEUE, rules=RULES, tenant=TENANT, router=FairRouter(conn))(routed_jobs.echo)
    worker = WeightedSimpleWorker([QUEUE], connection=conn, settings=settings(limits=True))
    first, second = job.delay("acme", 1), job.delay("acme", 2)
    assert worker.work(burst=True, max_jobs=1)  # the library loaded, the first start an FCALL
    conn.function_flush()
    fcalls = command_calls(conn, "fcall")
    assert worker.work(burst=True, max_jobs=1)
    # both finished (the registry orders by whole-second expiry: two jobs ending in one second come in id order)
    assert sorted(FinishedJobRegistry(QUEUE, connection=conn).get_job_ids()) == sorted([first.id, second.id])
    assert command_calls(conn, "fcall") - fcalls >= 2  # the lost one, and the one made again
    assert any(b"fair_router_start_" in entry[entry.index(b"library_name") + 1] for entry in conn.function_list())
    assert conn.zcard(Keys("fair_router").leases("acme")) == 0
