"""Every rq member fair-router overrides or reaches into, with its rq 3.0 shape (parameter names, ``property`` or
``attribute``) and kind: what the guard checks and docs/compatibility.md's table lists (tests/test_rq_guard.py)."""

from __future__ import annotations

from typing import Literal, NamedTuple

Kind = Literal["feature", "speed-up"]

PROPERTY = "property"
ATTRIBUTE = "attribute"


class RqMember(NamedTuple):
    """One rq member fair-router relies on: where it is (``owner``: a module, or a module's class), its shape
    in rq 3.0, and why fair-router touches it (a NamedTuple: a dataclass costs a millisecond at import)."""

    owner: str
    name: str
    shape: str
    kind: Kind
    why: str

    @property
    def path(self) -> str:
        """``owner.name``, as the docs' table names it."""
        return f"{self.owner}.{self.name}"


QUEUE, WORKER, JOB = "rq.queue.Queue", "rq.worker.BaseWorker", "rq.job.Job"
REGISTRY, EXECUTION, UTILS = "rq.registry.StartedJobRegistry", "rq.executions.Execution", "rq.utils"

MEMBERS: tuple[RqMember, ...] = (
    # -- Queue side: rq_internals/queue.py (RqQueueSeam), rq_internals/placed.py (PlacedQueue), fairqueue/queue.py
    RqMember(QUEUE, "_enqueue_job", "(self, job, pipeline, at_front, unique)", "feature",
             "overridden: every enqueue path (retries, requeues, dependents) reaches the fair push and backlog "
             "caps; called by the one-trip enqueue and interruptible turns' requeue"),
    RqMember(QUEUE, "enqueue_job", "(self, job, pipeline, at_front, unique)", "speed-up",
             "overridden: the queue's registration and the job in one MULTI; the router's one-trip enqueue; "
             "1.40x single enqueues/s (bench/fairqueue.py --seam)"),
    RqMember(QUEUE, "push_job_id", "(self, job_id, pipeline, at_front)", "feature",
             "overridden: the fair push joins rq's MULTI that saves the job"),
    RqMember(QUEUE, "enqueue_many", "(self, job_datas, pipeline, group_id)", "speed-up",
             "overridden: a batch's fair pushes collected into one script call per 1,000 jobs (all or nothing "
             "under a backlog cap); 2.13x enqueue_many jobs/s (bench/fairqueue.py --seam)"),
    RqMember(QUEUE, "dequeue_any", "(cls, queues, timeout, connection, job_class, serializer, death_penalty_class)",
             "feature", "replaced: fair pops, rq's contract kept"),
    RqMember(QUEUE, "intermediate_queue", PROPERTY, "feature",
             "overridden: rq's maintenance also recovers fair jobs popped but never started"),
    RqMember(QUEUE, "_default_timeout", ATTRIBUTE, "feature",
             "read: a queue the rq CLI built is rebuilt as a FairQueue with its default job timeout"),
    RqMember(QUEUE, "enqueue", "(self, f, *args, **kwargs)", "feature", "overridden: fair_tenant=, fair_cost="),
    RqMember(QUEUE, "enqueue_call",
             "(self, func, args, kwargs, timeout, result_ttl, ttl, failure_ttl, description, depends_on, job_id, "
             "at_front, meta, retry, repeat, on_success, on_failure, on_stopped, rate_limit, pipeline, unique, "
             "webhooks)", "feature", "overridden: fair_tenant=, fair_cost=, Redis errors named"),
    RqMember(QUEUE, "enqueue_at", "(self, datetime, f, *args, **kwargs)", "feature",
             "overridden: fair_tenant=, fair_cost= (rq's enqueue_in calls it)"),
    RqMember(QUEUE, "pop_job_id", "(self)", "feature", "overridden: a pop takes the fair choice"),
    RqMember(QUEUE, "get_job_ids", "(self, offset, length)", "feature", "overridden: serving order"),
    RqMember(QUEUE, "get_job_position", "(self, job_or_id)", "feature", "overridden: place in serving order"),
    RqMember(QUEUE, "remove", "(self, job_or_id, pipeline)", "feature",
             "overridden: out of rq's list and the fair state in one script"),
    RqMember(QUEUE, "empty", "(self)", "feature", "overridden: the fair state emptied with rq's list"),
    RqMember(QUEUE, "delete", "(self, delete_jobs)", "feature", "overridden: the fair state deleted with the queue"),
    RqMember(QUEUE, "compact", "(self)", "feature", "overridden: the fair state compacted with rq's list"),
    RqMember("rq.intermediate_queue.IntermediateQueue", "cleanup", "(self, worker, queue)", "feature",
             "overridden: rq's maintenance hook also gives back fair jobs popped but never started"),
    RqMember(JOB, "_dependency_ids", ATTRIBUTE, "speed-up",
             "read: a job without dependencies takes the one-MULTI enqueue (the public accessor is a round trip)"),
    RqMember(JOB, "_result", ATTRIBUTE, "feature",
             "cleared: a job ending its turn must not save its return value as a result"),
    RqMember(UTILS, "backend_class", "(holder, default_name, override)", "feature",
             "called: the fair dequeue honours a job_class override as rq does"),
    RqMember(UTILS, "as_text", "(v)", "feature", "called: bytes to str in listings, pauses and recovery"),
    RqMember(UTILS, "now", "()", "feature", "called: a turn's end time, as rq stamps it"),
    RqMember(UTILS, "import_worker_class", "(name)", "feature", "called: fair-router pool --worker-class"),
    RqMember("rq.defaults", "RQ_KEY_PREFIX", ATTRIBUTE, "feature",
             "read: the cluster slot of our keys that scripts touch with rq's"),
    # -- Worker side: rq_internals/worker.py (RqWorkerSeam) and turns.py. Measured gains: bench/seam.py
    RqMember(WORKER, "_ordered_queues", ATTRIBUTE, "feature",
             "written: the weighted fetch order before each fetch; a queue marked fair replaced in it"),
    RqMember(WORKER, "dequeue_job_and_maintain_ttl", "(self, timeout, max_idle_time)", "feature",
             "overridden: a fresh weighted order before each fetch, the idle wait capped for crash recovery"),
    RqMember(WORKER, "heartbeat", "(self, timeout, pipeline)", "feature",
             "overridden: duties (crash recovery) at the worker's own beats; speed-up with set_state: one round trip, "
             "repeats skipped: 10 round trips of 21.2 per job saved, 8-17 % less client CPU (bench/seam.py)"),
    RqMember(WORKER, "set_state", "(self, state, pipeline)", "speed-up",
             "overridden: a write of the state the worker is in already skipped (with heartbeat: 10 round trips "
             "of 21.2 per job saved)"),
    RqMember(WORKER, "get_state", "(self)", "speed-up", "called: by the set_state override"),
    RqMember(WORKER, "prepare_execution", "(self, job)", "speed-up",
             "restated from rq.executions.prepare_execution: the start check, start record and waiting count ride "
             "rq's job-start MULTI (1 round trip of 12.2 per checked start saved; jobs/s on a local Redis within "
             "noise); sent again while Redis is out of memory"),
    RqMember(WORKER, "executions", ATTRIBUTE, "feature",
             "written by the restated prepare_execution; read by the in-process job heartbeat"),
    RqMember(WORKER, "get_heartbeat_ttl", "(self, job, working_time)", "speed-up",
             "called by the restated prepare_execution"),
    RqMember(EXECUTION, "create", "(cls, job, ttl, pipeline, worker_name)", "speed-up",
             "called by the restated prepare_execution"),
    RqMember(WORKER, "prepare_job_execution", "(self, job, remove_from_intermediate_queue)", "feature",
             "called: rq's start bookkeeping for a job failed without running"),
    RqMember(WORKER, "execute_job", "(self, job, queue)", "feature",
             "overridden: the start gate first; the running job noted for its end, turns, the in-process job "
             "heartbeat"),
    RqMember("rq.worker.Worker", "execute_job", "(self, job, queue)", "feature",
             "overridden (WeightedWorker): as BaseWorker.execute_job"),
    RqMember("rq.worker.SimpleWorker", "execute_job", "(self, job, queue)", "feature",
             "overridden (WeightedSimpleWorker): as BaseWorker.execute_job"),
    RqMember(WORKER, "increment_total_working_time", "(self, job_execution_time, pipeline)", "feature",
             "overridden: runtime-charged fair queues settle on rq's after-job pipeline"),
    RqMember(WORKER, "bootstrap", "(self, logging_level, date_format, log_format)", "feature",
             "overridden: the start duties (maxmemory-policy warning) once rq registered the worker; a "
             "Redis that cannot serve ends the worker with exit status 1"),
    RqMember(WORKER, "check_for_suspension", "(self, burst)", "feature",
             "overridden: a Redis that cannot serve during rq's loop step ends the worker with exit status 1"),
    RqMember(WORKER, "run_maintenance_tasks", "(self)", "feature",
             "overridden: put off to the next interval while Redis is out of memory; unreachable past the grace "
             "ends the worker with exit status 1"),
    RqMember(WORKER, "_finalize_failure", "(self, job, queue, execution, exc_info)", "feature",
             "called: a job whose stored tenant is no tenant id fails through rq's own failure path (callback, "
             "exception handlers, retries, FailedJobRegistry) without running"),
    RqMember(WORKER, "teardown", "(self)", "feature",
             "overridden: counters written, the job heartbeat thread and the turn signal's handler ended"),
    RqMember(WORKER, "maintain_heartbeats", "(self, job, execution)", "feature",
             "overridden and called: crash recovery at the running job's beats; an in-process job's heartbeat"),
    RqMember(WORKER, "cleanup_execution", "(self, job, pipeline, execution)", "feature",
             "overridden and called: no job heartbeat after rq deletes the execution; a turn's end"),
    RqMember(WORKER, "job_monitoring_interval", ATTRIBUTE, "feature",
             "lowered to abandon_after / 3: how soon a dead worker's job is seen"),
    RqMember(WORKER, "_state", ATTRIBUTE, "feature",
             "set to busy before the tenant checks: SIGTERM waits for a job already off its queue"),
    RqMember(WORKER, "_exc_handlers", ATTRIBUTE, "feature",
             "read: crash recovery passes the worker's exception handlers, as rq's maintenance does"),
    RqMember(WORKER, "scheduler", ATTRIBUTE, "feature", "read: a dead scheduler process is restarted"),
    RqMember("rq.scheduler.RQScheduler", "_process", ATTRIBUTE, "feature",
             "read: whether the scheduler process is alive"),
    RqMember("rq.scheduler.RQScheduler", "acquire_locks", "(self, auto_start)", "feature",
             "called: the scheduler restarted"),
    RqMember(WORKER, "_start_scheduler", "(self, burst, logging_level, date_format, log_format)", "feature",
             "overridden: burst mode noted (no scheduler process to revive)"),
    RqMember(WORKER, "_finalize_success", "(self, job, queue, execution, return_value)", "feature",
             "overridden: an interruptible job's turn ends without rq's success handling"),
    RqMember(WORKER, "handle_warm_shutdown_request", "(self)", "feature",
             "overridden: warm shutdown reaches a running interruptible job"),
    RqMember(WORKER, "_install_signal_handlers", "(self)", "feature",
             "overridden: the turn signal's handler, inherited by the work horse"),
    RqMember(WORKER, "setup_work_horse_signals", "(self)", "feature", "overridden: the turn signal's handler"),
    RqMember(WORKER, "_stop_requested", ATTRIBUTE, "feature",
             "read: a warm shutdown pending when a job starts stops it at its first checkpoint"),
    RqMember(WORKER, "horse_pid", PROPERTY, "feature", "read: the work horse gets the turn signal"),
    RqMember(WORKER, "is_horse", PROPERTY, "feature", "read: duties kept out of the work horse"),
    # -- StartedJobRegistry: rq_internals/registry.py (crash recovery)
    RqMember(REGISTRY, "cleanup", "(self, timestamp, exception_handlers)", "feature",
             "overridden and called: rq's handling of abandoned jobs, on a staging set"),
    RqMember(REGISTRY, "get_queue", "(self)", "feature",
             "overridden: a retried abandoned job goes back to the worker's FairQueue"),
    RqMember(EXECUTION, "from_composite_key", "(cls, composite_key, connection)", "feature",
             "called: the execution hash of a StartedJobRegistry member (its last heartbeat)"),
    RqMember(UTILS, "parse_composite_key", "(composite_key)", "feature",
             "called: a StartedJobRegistry member is <job id>:<execution id>"),
)
