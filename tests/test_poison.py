"""A poison job is that job's problem: a job whose stored tenant (``job.meta["fair_tenant"]``, written by plain rq
or by code editing the meta, past the validated API) is no tenant id fails with a message naming the field,
its value and why, and no worker, recovery or reader stops over it. Real Redis, real workers."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import poison_jobs
import pytest
from conftest import Fleet, wait_for, write_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis
from rq import Queue
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry, FinishedJobRegistry, StartedJobRegistry

from fair_router import FairQueue, InvalidTenant, Settings, WeightedSimpleWorker
from fair_router.config.settings import ObserveConfig
from fair_router.core.keys import Keys
from fair_router.core.tenancy import STORED_FIELD, InvalidStoredTenant, stored_tenant, tenant_id
from fair_router.dashboard.iterations import running_iterations
from fair_router.iteration.turns import TURNS
from fair_router.observe.recorder import StartRecorder

PREFIX = "poison_test"
FAIR, PLAIN = "poison_fair", "poison_plain"
GOOD = 30
"""Good jobs per queue around the poison ones."""
CONTROLS: dict[str, Any] = {
    # Every control on, none refusing a good job (a burst worker exits while a refused job waits): the poison
    # job meets the same start path as in production.
    "concurrency": {"enabled": True, "lease_ttl": "30s"},
    "tiers": {"concurrency": {"free": 1000}, "priority": [], "rate": {"free": "100000/s"}, "burst": {"free": 1000}},
}
HOSTILE: list[object] = [
    "\udcff",  # a lone surrogate, as os.fsdecode produces from an undecodable byte
    "acme\ud800tail",
    "x" * 10_240,  # 10 KB of text: over tenant_max_bytes
    b"acme",
    1.5,
    ["acme"],
    {"tenant": "acme"},
    True,
    2**5000,  # an int of 1,506 digits: over tenant_max_bytes too
]

pytestmark = pytest.mark.usefixtures("isolated_settings")


# -- helpers -----------------------------------------------------------------------------------------------------


def poisoned(queue: Queue, value: object) -> Job:
    """A job enqueued by plain rq whose ``fair_tenant`` is then edited to ``value``, exactly as a user would."""
    job = Queue(queue.name, connection=queue.connection).enqueue(poison_jobs.echo, -1, result_ttl=600)
    job.meta["fair_tenant"] = value
    job.save_meta()
    return job


def fill(conn: Redis, value: object) -> tuple[list[Job], list[Job]]:
    """GOOD jobs of three tenants in each queue (the fair one through FairQueue, the plain one through plain rq
    with the tenant in meta), with poison jobs among them: one pushed by plain rq into each queue, and one
    enqueued fairly for a valid tenant whose meta is edited afterwards. Returns (good, poison)."""
    fair, plain = FairQueue(FAIR, connection=conn, prefix=PREFIX), Queue(PLAIN, connection=conn)
    good: list[Job] = []
    poison: list[Job] = []
    for i in range(GOOD):
        good.append(fair.enqueue(poison_jobs.echo, i, fair_tenant=f"t{i % 3}", result_ttl=600))
        good.append(plain.enqueue(poison_jobs.echo, i, meta={"fair_tenant": f"t{i % 3}"}, result_ttl=600))
        if i == GOOD // 2:
            poison += [poisoned(fair, value), poisoned(plain, value)]
            edited = fair.enqueue(poison_jobs.echo, -2, fair_tenant="t0", result_ttl=600)
            edited.meta["fair_tenant"] = value
            edited.save_meta()
            poison.append(edited)
    return good, poison


def status(conn: Redis, job: Job) -> JobStatus | None:
    return Job.fetch(job.id, connection=conn).get_status(refresh=True)


def assert_failed_by_name(conn: Redis, job: Job, value: object) -> None:
    """``job`` is in its FailedJobRegistry, its exc_info naming the field, the value (shortened) and why."""
    fetched = Job.fetch(job.id, connection=conn)
    assert fetched.get_status() == JobStatus.FAILED
    assert job.id in FailedJobRegistry(fetched.origin, connection=conn).get_job_ids()
    exc_info = fetched.latest_result().exc_string  # type: ignore[union-attr]
    assert exc_info is not None and "InvalidStoredTenant" in exc_info, exc_info
    with pytest.raises(InvalidStoredTenant) as expected:
        stored_tenant({"fair_tenant": value})
    assert f"{STORED_FIELD} = {expected.value.shown} is no tenant id: " in exc_info, exc_info
    assert len(expected.value.shown) <= 130


# -- the one validator ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "tenant"), [("acme", "acme"), (42, "42"), (None, None), ("", None)])
def test_a_stored_tenant_id_is_read_as_the_validated_api_reads_it(value: object, tenant: str | None) -> None:
    assert stored_tenant({"fair_tenant": value}) == tenant
    assert stored_tenant({}) is None and stored_tenant(None) is None


@pytest.mark.parametrize("value", HOSTILE, ids=lambda value: type(value).__name__)
def test_a_stored_value_that_is_no_tenant_id_is_refused_naming_field_value_and_why(value: object) -> None:
    with pytest.raises(InvalidStoredTenant) as refused:
        stored_tenant({"fair_tenant": value})
    message = str(refused.value)
    assert message.startswith('job.meta["fair_tenant"] = ')
    assert len(message) < 600  # short, whatever the value holds
    message.encode("utf-8")  # printable anywhere: a lone surrogate is shown escaped
    why = ("lone surrogates" if isinstance(value, str) and len(value) < 100
           else "tenant_max_bytes" if isinstance(value, (str, int)) and not isinstance(value, bool)
           else f"got {type(value).__name__}")
    assert why in message, message
    assert isinstance(refused.value, InvalidTenant)  # a ValueError, as the validated API's refusals


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(VALUES)
def test_any_stored_value_is_a_tenant_id_or_refused_by_name(value: object) -> None:
    """Whatever a meta holds: the validated API's own id, no tenant, or InvalidStoredTenant (nothing else)."""
    try:
        tenant = stored_tenant({"fair_tenant": value})
    except InvalidStoredTenant as refused:
        assert str(refused).startswith(f"{STORED_FIELD} = ") and len(str(refused)) < 600
        str(refused).encode("utf-8")
        return
    if value is None or value == "":
        assert tenant is None
    else:
        assert tenant == tenant_id(value)


def test_every_reader_of_a_stored_tenant_goes_through_the_validator() -> None:
    """The one reader is ``stored_tenant``; elsewhere ``job.meta``'s tenant is only written, or read by the
    validated enqueue (``tenant_id``, which refuses before anything is written)."""
    package = Path(__file__).resolve().parent.parent / "fair_router"
    reads = []
    for path in sorted(package.rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            read = re.search(r"\.get\((META_TENANT|[\"']fair_tenant[\"'])|\[META_TENANT\](?!\s*=)", line)
            if read and "self.tenant_id(" not in line:
                reads.append((str(path.relative_to(package)), line.strip()))
    assert reads == [("core/tenancy.py", "value = (meta or {}).get(META_TENANT)")], reads


# -- readers other than the worker's start ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE[:4], ids=["surrogate", "surrogate-inside", "10KB", "bytes"])
def test_rq_pushing_a_poison_job_into_a_fair_queue_serves_it_without_tenant(conn: Redis, value: object) -> None:
    """rq's internals (a retry, a requeue, the scheduler, dependents) push the ids of saved jobs: such a push
    never raises over the job's meta; the job waits as one without tenant (a worker then fails it)."""
    queue = FairQueue(FAIR, connection=conn, prefix=PREFIX)
    good = queue.enqueue(poison_jobs.echo, 1, fair_tenant="acme")
    job = queue.enqueue(poison_jobs.echo, 2, fair_tenant="acme")
    job.meta["fair_tenant"] = value
    job.save_meta()
    queue.remove(job)
    queue.enqueue_job(job)  # what rq's Job.requeue / retry / scheduler do: push a saved job
    assert queue.get_job_ids() == [good.id, job.id]
    popped = [FairQueue.dequeue_any([queue], None, connection=conn) for _ in range(2)]
    assert sorted(found[0].id for found in popped if found is not None) == sorted([good.id, job.id])


def test_the_start_recorder_records_a_stored_id_and_skips_a_poison_one(conn: Redis) -> None:
    recorder = StartRecorder(conn, Keys(PREFIX), ObserveConfig())
    queue = Queue(PLAIN, connection=conn)
    for meta in ({"fair_tenant": 42}, {"fair_tenant": "\udcff"}, {"fair_tenant": ["x"]}, {}):
        recorder.note(queue.enqueue(poison_jobs.echo, 1, meta=meta))
    assert sorted(str(tenant) for tenant, _ in recorder._pending) == ["42", "None"]
    recorder.send()  # the Lua call encodes every tenant it is given: nothing unencodable reaches it


def test_the_dashboards_running_iterations_show_a_poison_tenant_escaped(conn: Redis) -> None:
    """A plain rq worker may run such a job: the dashboard lists it, its tenant shown escaped, matching none."""
    queue = Queue(PLAIN, connection=conn)
    job = queue.enqueue(poison_jobs.echo, 1, meta={"fair_tenant": "\udcff", TURNS: 1})
    conn.zadd(StartedJobRegistry(queue=queue).key, {f"{job.id}:exec": time.time() + 600})  # as rq writes it
    [shown] = running_iterations(conn, [PLAIN])
    assert shown.job_id == job.id and shown.tenant == "(no tenant id: '\\udcff')"
    assert running_iterations(conn, [PLAIN], tenant="\udcff") == []
    assert running_iterations(conn, [PLAIN], tenant="acme") == []


# -- in-process worker: each hostile value -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", HOSTILE, ids=lambda value: type(value).__name__)
def test_the_in_process_worker_fails_each_hostile_tenant_and_serves_the_rest(conn: Redis, value: object) -> None:
    good, poison = fill(conn, value)
    worker = WeightedSimpleWorker([FAIR, PLAIN], connection=conn,
                                  settings=Settings(prefix=PREFIX, fair_queues=[FAIR], **CONTROLS))
    assert worker.work(burst=True) is True  # it worked, and returned at the end of the burst
    assert [job.id for job in good if status(conn, job) != JobStatus.FINISHED] == []
    for job in poison:
        assert_failed_by_name(conn, job, value)
    assert FailedJobRegistry(FAIR, connection=conn).count == 2 and FailedJobRegistry(PLAIN, connection=conn).count == 1
    assert conn.zcard(Keys(PREFIX).leases("t0")) == 0  # every slot taken was given back


def test_a_poison_job_with_retries_is_retried_as_rq_retries_a_failed_job(conn: Redis) -> None:
    """rq's failure path, retries included: each retry is pushed back into the fair queue (as a job without
    tenant) and fails again, until none is left."""
    from rq import Retry

    queue = FairQueue(FAIR, connection=conn, prefix=PREFIX)
    job = Queue(FAIR, connection=conn).enqueue(poison_jobs.echo, 1, retry=Retry(max=2), result_ttl=600)
    job.meta["fair_tenant"] = b"acme"
    job.save_meta()
    after = queue.enqueue(poison_jobs.echo, 2, fair_tenant="acme", result_ttl=600)
    worker = WeightedSimpleWorker([queue], connection=conn,
                                  settings=Settings(prefix=PREFIX, fair_queues=[FAIR], **CONTROLS))
    assert worker.work(burst=True) is True
    assert_failed_by_name(conn, job, b"acme")
    assert Job.fetch(job.id, connection=conn).retries_left == 0  # both retries spent, as for a job that raised
    assert status(conn, after) == JobStatus.FINISHED


# -- real worker processes ------------------------------------------------------------------------------------------


@pytest.fixture
def fleet(fleet_of: Callable[..., Fleet], tmp_path: Path) -> Fleet:
    fleet = fleet_of(FAIR, PLAIN)
    fleet.config = write_settings(tmp_path, {"prefix": PREFIX, "fair_queues": [FAIR], **CONTROLS,
                                             "recovery": {"abandon_after": "3s"}})
    return fleet


JOB_FAILURES = ("fair_router.core.tenancy.InvalidStoredTenant", "rq.exceptions.AbandonedJobError")
"""The exceptions rq's exception handler logs (with a traceback) for the jobs these tests fail."""


def crashes(log: str) -> list[str]:
    """What in a worker's log is not a job's own failure: a worker crash, or a traceback of anything but a
    job's own failure (rq's exception handler logs those with the job)."""
    lines = log.splitlines()
    found = [line for line in lines if "unhandled exception" in line or "quitting..." in line]
    for start, line in enumerate(lines):
        if line.startswith("Traceback"):  # its frames are indented; the exception is its first line that is not
            end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" ")), len(lines) - 1)
            if not lines[end].startswith(JOB_FAILURES):
                found.append("\n".join(lines[start:end + 1]))
    return found


@pytest.mark.parametrize("worker_class", ["fair_router.WeightedWorker", "fair_router.WeightedSimpleWorker"])
def test_two_burst_workers_fail_the_poison_jobs_and_finish_every_other(
    conn: Redis, fleet: Fleet, worker_class: str
) -> None:
    good, poison = fill(conn, "\udcff")
    procs = fleet.start(2, worker_class=worker_class, burst=True, scheduler=False)
    codes = [fleet.wait_exit(proc, timeout=120) for proc in procs]
    logs = fleet.logs()
    assert codes == [0, 0], logs
    assert crashes(logs) == [], logs
    assert [job.id for job in good if status(conn, job) != JobStatus.FINISHED] == [], logs
    assert FinishedJobRegistry(FAIR, connection=conn).count == FinishedJobRegistry(PLAIN, connection=conn).count == GOOD
    for job in poison:
        assert_failed_by_name(conn, job, "\udcff")
    assert Queue(FAIR, connection=conn).count == Queue(PLAIN, connection=conn).count == 0


def test_a_restarted_workers_recovery_hands_back_poison_jobs_and_goes_on(conn: Redis, fleet: Fleet) -> None:
    """A worker dies running a job that wrote a lone surrogate into its own tenant, while a job it popped (an
    edited one) was not started yet. The restarted worker's recovery hands both back (rq's AbandonedJobError
    for the first, the fair queue again for the second, which it then fails by name), and goes on working."""
    queue = FairQueue(FAIR, connection=conn, prefix=PREFIX)
    running = queue.enqueue(poison_jobs.poison_self, "\udcff", 120, fair_tenant="acme", result_ttl=600)
    [first] = fleet.start(1, scheduler=False)
    wait_for(lambda: conn.exists(f"test:poisoned:{running.id}"), 60, "the job to poison itself", fleet)
    # A job popped by the worker that is about to die, never started: edited after its fair enqueue.
    popped = queue.enqueue(poison_jobs.echo, 1, fair_tenant="acme", result_ttl=600)
    popped.meta["fair_tenant"] = "\udcff"
    popped.save_meta()
    assert (found := FairQueue.dequeue_any([queue], None, connection=conn)) is not None and found[0].id == popped.id
    fleet.kill(first)

    [second] = fleet.start(1, scheduler=False)
    wait_for(lambda: status(conn, running) == JobStatus.FAILED and status(conn, popped) == JobStatus.FAILED,
             90, "the restarted worker's recovery to hand both back", fleet)
    abandoned = Job.fetch(running.id, connection=conn).latest_result()
    assert abandoned is not None and "AbandonedJobError" in (abandoned.exc_string or "")
    assert_failed_by_name(conn, popped, "\udcff")
    after = queue.enqueue(poison_jobs.echo, 7, fair_tenant="acme", result_ttl=600)
    wait_for(lambda: status(conn, after) == JobStatus.FINISHED, 60, "a good job after them", fleet)
    assert second.poll() is None, fleet.logs()  # still working
    assert crashes(fleet.logs()) == [], fleet.logs()
