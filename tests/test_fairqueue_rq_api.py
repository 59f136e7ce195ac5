"""FairQueue under rq's own API: counts and listings exact at every moment, whoever touches the queue.

Each test here is a regression test for a defect found by running rq's own test suite with FairQueue in
place of rq's Queue: rq's internals build a plain ``Queue`` on our list for cancel, delete and
registry requeues, so only the list itself can be the truth."""

from __future__ import annotations

import time

import fair_jobs
import pytest
from redis import Redis
from rq import Queue, Retry, SimpleWorker
from rq.exceptions import DuplicateJobError
from rq.job import Job, JobStatus, cancel_job
from rq.registry import CanceledJobRegistry, FailedJobRegistry, StartedJobRegistry

from fair_router import FairQueue, Settings, WeightedSimpleWorker
from fair_router.rq_internals.queue import PopKind

pytestmark = pytest.mark.usefixtures("isolated_settings")
PREFIX = "fq_api"


def fair(conn: Redis, **options: object) -> FairQueue:
    return FairQueue("default", connection=conn, settings=Settings(prefix=PREFIX), **options)  # type: ignore[arg-type]


def enqueue(queue: Queue, tenant: str, n: int) -> list[Job]:
    return [queue.enqueue(fair_jobs.log, tenant, i, meta={"fair_tenant": tenant}) for i in range(n)]


def drain(queue: FairQueue) -> list[str]:
    served = []
    while (job_id := queue.pop_job_id()) is not None:
        served.append(job_id)
    return served


def test_enqueue_many_of_jobs_whose_dependency_already_finished_queues_them(conn: Redis) -> None:
    """rq passes at_front=None for those; the push took it as an int and raised after rq saved the jobs as
    deferred, so they never ran (rq's test_dependencies.py::test_multiple_jobs_with_dependencies)."""
    queue = fair(conn)
    parent = queue.enqueue(fair_jobs.log, "P", 0, meta={"fair_tenant": "P"})
    WeightedSimpleWorker([queue], connection=conn, settings=Settings(prefix=PREFIX)).work(burst=True)
    assert parent.get_status(refresh=True) == JobStatus.FINISHED
    datas = [Queue.prepare_data(fair_jobs.log, ("C", i), meta={"fair_tenant": "C"}, depends_on=parent)
             for i in range(2)]
    children = queue.enqueue_many(datas)
    assert [child.get_status(refresh=True) for child in children] == [JobStatus.QUEUED] * 2
    assert queue.job_ids == [child.id for child in children] and queue.count == 2


@pytest.mark.parametrize("how", ["Job.cancel", "cancel_job", "Job.delete", "Queue.remove (plain)"])
def test_a_waiting_job_taken_out_by_rq_leaves_every_listing_and_count_at_once(conn: Redis, how: str) -> None:
    queue = fair(conn)
    a_jobs, b_jobs = enqueue(queue, "A", 3), enqueue(queue, "B", 2)
    gone = a_jobs[1]
    if how == "Job.cancel":
        gone.cancel()
    elif how == "cancel_job":
        cancel_job(gone.id, connection=conn)
    elif how == "Job.delete":
        gone.delete()
    else:
        Queue("default", connection=conn).remove(gone)
    rest = [a_jobs[0], b_jobs[0], a_jobs[2], b_jobs[1]]  # serving order without it
    assert queue.get_job_ids() == queue.job_ids == [job.id for job in rest]
    assert [job.id for job in queue.get_jobs()] == [job.id for job in queue.jobs] == [job.id for job in rest]
    assert queue.get_job_position(gone) is None and gone.get_position() is None
    assert queue.get_job_position(a_jobs[2]) == 2
    assert len(queue) == queue.count == Queue("default", connection=conn).count == 4
    assert drain(queue) == [job.id for job in rest]
    assert queue.count == 0 and queue.is_empty()


def test_get_jobs_compact_and_remove_after_a_delete_never_drive_the_count_below_the_backlog(conn: Redis) -> None:
    queue = fair(conn)
    jobs = enqueue(queue, "A", 2) + enqueue(queue, "B", 1)
    jobs[0].delete()
    assert queue.count == 2
    assert len(queue.get_jobs()) == 2 and queue.count == 2
    queue.compact()
    assert queue.count == 2 == len(queue) and not queue.is_empty()
    assert queue.remove(jobs[0]) == 0  # not waiting any more: nothing to take out
    assert queue.count == 2
    conn.delete(jobs[2].key)  # a job hash that expired while its id waited
    queue.compact()
    assert queue.count == 1 and queue.job_ids == [jobs[1].id]
    assert drain(queue) == [jobs[1].id] and queue.count == 0


def test_a_canceled_job_requeued_through_the_registry_runs_once(conn: Redis) -> None:
    queue = fair(conn)
    a_jobs = enqueue(queue, "A", 2)
    a_jobs[0].cancel()
    assert queue.count == 1
    CanceledJobRegistry("default", connection=conn).requeue(a_jobs[0].id)  # a plain Queue push
    assert queue.count == 2 and sorted(queue.job_ids) == sorted(job.id for job in a_jobs)
    assert sorted(drain(queue)) == sorted(job.id for job in a_jobs)
    assert queue.count == 0 and queue.pop_fair().kind == PopKind.EMPTY


def test_a_failed_job_requeued_by_job_requeue_is_counted_and_served(conn: Redis) -> None:
    queue = fair(conn)
    job = queue.enqueue(fair_jobs.fail_once, "test:runs:requeue", meta={"fair_tenant": "A"})
    WeightedSimpleWorker([queue], connection=conn, settings=Settings(prefix=PREFIX)).work(burst=True)
    assert job.get_status(refresh=True) == JobStatus.FAILED and queue.count == 0
    job.requeue()
    assert queue.count == 1 and queue.job_ids == [job.id]
    assert FailedJobRegistry("default", connection=conn).count == 0
    WeightedSimpleWorker([queue], connection=conn, settings=Settings(prefix=PREFIX)).work(burst=True)
    assert job.get_status(refresh=True) == JobStatus.FINISHED and queue.count == 0


def test_dequeue_any_refuses_an_indefinite_timeout_as_rq_does(conn: Redis) -> None:
    queue = fair(conn)
    with pytest.raises(ValueError, match="indefinite"):
        FairQueue.dequeue_any([queue], 0, connection=conn)


def test_unique_pushes_are_listed_in_the_order_they_are_served(conn: Redis) -> None:
    """rq's unique=True pushes with its own script (rq's test_scripts.py::
    test_enqueue_job_unique_push_direction): the listing must still be the serving order."""
    queue = fair(conn)
    queue.enqueue(fair_jobs.log, "A", 0, job_id="back", unique=True, meta={"fair_tenant": "A"})
    queue.enqueue(fair_jobs.log, "A", 1, job_id="front", unique=True, at_front=True, meta={"fair_tenant": "A"})
    queue.enqueue(fair_jobs.log, "B", 0, job_id="other", meta={"fair_tenant": "B"})
    with pytest.raises(DuplicateJobError):
        queue.enqueue(fair_jobs.log, "A", 2, job_id="back", unique=True, meta={"fair_tenant": "A"})
    listed = queue.job_ids
    assert listed == ["front", "other", "back"]  # A's FIFO: front, back; B takes its turn between them
    assert drain(queue) == listed and queue.count == 0


def test_unique_and_synchronous_enqueues_leave_nothing_behind_in_the_queue_object(conn: Redis) -> None:
    queue = fair(conn)
    queue.enqueue(fair_jobs.log, "A", 0, job_id="u1", unique=True, meta={"fair_tenant": "A"})
    assert queue._enqueuing is None
    sync = fair(conn, is_async=False)
    job = sync.enqueue(fair_jobs.log, "A", 1, meta={"fair_tenant": "A"})
    assert job.get_status() == JobStatus.FINISHED and sync._enqueuing is None
    assert queue.count == 1 and queue.job_ids == ["u1"]


def test_empty_deletes_every_waiting_job_and_the_fair_state(conn: Redis) -> None:
    queue = fair(conn)
    jobs = enqueue(queue, "A", 2) + enqueue(queue, "B", 2)
    jobs[0].cancel()
    assert queue.empty() == 3
    assert queue.count == 0 and queue.job_ids == [] and conn.keys(f"{PREFIX}:*") == []
    assert not any(Job.exists(job.id, connection=conn) for job in jobs[1:])


def test_a_started_job_rq_retried_after_its_worker_died_is_not_queued_twice_by_recovery(conn: Redis) -> None:
    """rq's maintenance retries a started job whose worker died through a plain Queue; the fair queue's own
    recovery of popped-not-started jobs must then leave it alone (it was queued again after its pop)."""
    queue = FairQueue("default", connection=conn, settings=Settings(prefix=PREFIX), recover_after=0)
    job = queue.enqueue(fair_jobs.log, "A", 0, meta={"fair_tenant": "A"}, retry=Retry(max=2))
    worker = SimpleWorker([queue], connection=conn, queue_class=FairQueue)
    result = worker.dequeue_job_and_maintain_ttl(None)
    assert result is not None and result[0].id == job.id
    worker.prepare_execution(result[0])  # started (rq 3.0 retries only STARTED jobs), then the worker dies
    worker.prepare_job_execution(result[0])
    StartedJobRegistry(queue=queue).cleanup(timestamp=time.time() + 10**6)  # rq retries it: a plain push
    assert queue.count == 1
    queue.intermediate_queue.cleanup(worker, queue)  # what rq's maintenance calls: FairQueue.recover()
    assert queue.count == 1 and queue.job_ids == [job.id]
    assert conn.zcard(queue.fair_keys.inflight) == 0
