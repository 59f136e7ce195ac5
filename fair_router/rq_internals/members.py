"""Every rq member fair-router overrides or reaches into, with its rq 3.0 shape (parameter names, ``property`` or
``attribute``) and kind: what the guard checks and docs/compatibility.md's table lists (tests/test_rq_guard.py)."""

from __future__ import annotations

from typing import Literal, NamedTuple

Kind = Literal["feature", "speed-up"]

PROPERTY = "property"
ATTRIBUTE = "attribute"


class RqMember(NamedTuple):
    """One rq member fair-router relies on: where it is (``owner``: a module, or a module's class), its shape in rq 3.0
    and its kind; why each is touched: docs/compatibility.md's table (a NamedTuple: a dataclass costs a millisecond)."""

    owner: str
    name: str
    shape: str
    kind: Kind

    @property
    def path(self) -> str:
        """``owner.name``, as the docs' table names it."""
        return f"{self.owner}.{self.name}"


QUEUE, WORKER, JOB = "rq.queue.Queue", "rq.worker.BaseWorker", "rq.job.Job"
REGISTRY, EXECUTION, UTILS = "rq.registry.StartedJobRegistry", "rq.executions.Execution", "rq.utils"

MEMBERS: tuple[RqMember, ...] = (
    # -- Queue side: rq_internals/queue.py (RqQueueSeam), rq_internals/placed.py (PlacedQueue), fairqueue/queue.py
    RqMember(QUEUE, "_enqueue_job", "(self, job, pipeline, at_front, unique)", "feature"),
    RqMember(QUEUE, "enqueue_job", "(self, job, pipeline, at_front, unique)", "speed-up"),
    RqMember(QUEUE, "push_job_id", "(self, job_id, pipeline, at_front)", "feature"),
    RqMember(QUEUE, "enqueue_many", "(self, job_datas, pipeline, group_id)", "speed-up"),
    RqMember(QUEUE, "dequeue_any",
             "(cls, queues, timeout, connection, job_class, serializer, death_penalty_class)", "feature"),
    RqMember(QUEUE, "intermediate_queue", PROPERTY, "feature"),
    RqMember(QUEUE, "_default_timeout", ATTRIBUTE, "feature"),
    RqMember(QUEUE, "enqueue", "(self, f, *args, **kwargs)", "feature"),
    RqMember(QUEUE, "enqueue_call",
             "(self, func, args, kwargs, timeout, result_ttl, ttl, failure_ttl, description, depends_on, job_id, "
             "at_front, meta, retry, repeat, on_success, on_failure, on_stopped, rate_limit, pipeline, unique, "
             "webhooks)", "feature"),
    RqMember(QUEUE, "enqueue_at", "(self, datetime, f, *args, **kwargs)", "feature"),
    RqMember(QUEUE, "pop_job_id", "(self)", "feature"),
    RqMember(QUEUE, "get_job_ids", "(self, offset, length)", "feature"),
    RqMember(QUEUE, "get_job_position", "(self, job_or_id)", "feature"),
    RqMember(QUEUE, "remove", "(self, job_or_id, pipeline)", "feature"),
    RqMember(QUEUE, "empty", "(self)", "feature"),
    RqMember(QUEUE, "delete", "(self, delete_jobs)", "feature"),
    RqMember(QUEUE, "compact", "(self)", "feature"),
    RqMember("rq.intermediate_queue.IntermediateQueue", "cleanup", "(self, worker, queue)", "feature"),
    RqMember(JOB, "_dependency_ids", ATTRIBUTE, "speed-up"),
    RqMember(JOB, "_result", ATTRIBUTE, "feature"),
    RqMember(UTILS, "backend_class", "(holder, default_name, override)", "feature"),
    RqMember(UTILS, "as_text", "(v)", "feature"),
    RqMember(UTILS, "now", "()", "feature"),
    RqMember(UTILS, "import_worker_class", "(name)", "feature"),
    RqMember("rq.defaults", "RQ_KEY_PREFIX", ATTRIBUTE, "feature"),
    # -- Worker side: rq_internals/worker.py (RqWorkerSeam) and turns.py
    RqMember(WORKER, "_ordered_queues", ATTRIBUTE, "feature"),
    RqMember(WORKER, "_dequeue_strategy", ATTRIBUTE, "feature"),
    RqMember(WORKER, "dequeue_job_and_maintain_ttl", "(self, timeout, max_idle_time)", "feature"),
    RqMember(WORKER, "heartbeat", "(self, timeout, pipeline)", "feature"),
    RqMember(WORKER, "set_state", "(self, state, pipeline)", "speed-up"),
    RqMember(WORKER, "get_state", "(self)", "speed-up"),
    RqMember(WORKER, "prepare_execution", "(self, job)", "speed-up"),
    RqMember(WORKER, "executions", ATTRIBUTE, "feature"),
    RqMember(WORKER, "get_heartbeat_ttl", "(self, job, working_time)", "speed-up"),
    RqMember(EXECUTION, "create", "(cls, job, ttl, pipeline, worker_name)", "speed-up"),
    RqMember(WORKER, "prepare_job_execution", "(self, job, remove_from_intermediate_queue)", "feature"),
    RqMember(WORKER, "execute_job", "(self, job, queue)", "feature"),
    RqMember("rq.worker.Worker", "execute_job", "(self, job, queue)", "feature"),
    RqMember("rq.worker.SimpleWorker", "execute_job", "(self, job, queue)", "feature"),
    RqMember(WORKER, "increment_total_working_time", "(self, job_execution_time, pipeline)", "feature"),
    RqMember(WORKER, "bootstrap", "(self, logging_level, date_format, log_format)", "feature"),
    RqMember(WORKER, "check_for_suspension", "(self, burst)", "feature"),
    RqMember(WORKER, "run_maintenance_tasks", "(self)", "feature"),
    RqMember(WORKER, "_finalize_failure", "(self, job, queue, execution, exc_info)", "feature"),
    RqMember(WORKER, "teardown", "(self)", "feature"),
    RqMember(WORKER, "maintain_heartbeats", "(self, job, execution)", "feature"),
    RqMember(WORKER, "cleanup_execution", "(self, job, pipeline, execution)", "feature"),
    RqMember(WORKER, "job_monitoring_interval", ATTRIBUTE, "feature"),
    RqMember(WORKER, "_state", ATTRIBUTE, "feature"),
    RqMember(WORKER, "_exc_handlers", ATTRIBUTE, "feature"),
    RqMember(WORKER, "scheduler", ATTRIBUTE, "feature"),
    RqMember("rq.scheduler.RQScheduler", "_process", ATTRIBUTE, "feature"),
    RqMember("rq.scheduler.RQScheduler", "acquire_locks", "(self, auto_start)", "feature"),
    RqMember(WORKER, "_start_scheduler", "(self, burst, logging_level, date_format, log_format)", "feature"),
    RqMember(WORKER, "_finalize_success", "(self, job, queue, execution, return_value)", "feature"),
    RqMember(WORKER, "handle_warm_shutdown_request", "(self)", "feature"),
    RqMember(WORKER, "_install_signal_handlers", "(self)", "feature"),
    RqMember(WORKER, "setup_work_horse_signals", "(self)", "feature"),
    RqMember(WORKER, "_stop_requested", ATTRIBUTE, "feature"),
    RqMember(WORKER, "horse_pid", PROPERTY, "feature"),
    RqMember(WORKER, "is_horse", PROPERTY, "feature"),
    # -- StartedJobRegistry: rq_internals/registry.py (crash recovery)
    RqMember(REGISTRY, "cleanup", "(self, timestamp, exception_handlers)", "feature"),
    RqMember(REGISTRY, "get_queue", "(self)", "feature"),
    RqMember(EXECUTION, "from_composite_key", "(cls, composite_key, connection)", "feature"),
    RqMember(UTILS, "parse_composite_key", "(composite_key)", "feature"),
)
