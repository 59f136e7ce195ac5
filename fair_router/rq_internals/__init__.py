"""rq internals fair-router touches: every override of a non-public rq method, every private rq attribute
read or written, and all code restated from rq live in this package, so that an rq upgrade means checking
these modules against rq's source (rq 2.12 now). The rest of fair_router uses rq's public API and the hooks
defined here.

Worker side (:mod:`fair_router.rq_internals.worker`)
    What is touched, and why:

    - ``BaseWorker.reorder_queues`` and ``_ordered_queues``: rq's hook after each dequeue; the weighted order
      for the next fetch is written into ``_ordered_queues`` there (hook ``next_fetch_order``).
    - ``BaseWorker.dequeue_job_and_maintain_ttl``: rq does not reorder before the first fetch, and has no
      hook for the blocking wait; overridden to draw the first order and to cap the wait so that idle
      workers wake for crash recovery (hook ``fetch_wait_cap``).
    - ``BaseWorker.heartbeat`` and ``set_state``: sent as one round trip and repeats skipped (lean
      bookkeeping); the worker's own beats (rq's loop: before each fetch, after each idle wait and each
      job) run the recovery check (hook ``heartbeat_due``). ``is_horse`` keeps that out of the work horse.
    - ``Worker.maintain_heartbeats`` (forking worker): the job's heartbeats also run the recovery check.
    - ``SimpleWorker``: sends no heartbeat while a job runs; a thread calls ``maintain_heartbeats`` while
      ``execution`` is set, and ``cleanup_execution`` stops it before rq deletes the execution.
    - ``job_monitoring_interval``: lowered to ``abandon_after / 3`` (the forking worker's monitoring period
      and the job's heartbeat TTL base).
    - ``BaseWorker.prepare_execution`` (rq's ``executions.prepare_execution`` restated): the job's start
      record rides rq's job-start MULTI (hook ``job_started``).
    - ``BaseWorker.increment_total_working_time``: rq's after-job pipeline with the run time; runtime-charged
      fair queues settle there (hook ``job_ended``).
    - ``BaseWorker.teardown``: pending counters are written when the worker process stops (hook
      ``worker_stopping``).
    - ``_state``: set to busy in memory before the tenant checks, so that SIGTERM waits (warm shutdown) for a
      job already off its queue.
    - ``_exc_handlers``: passed to crash recovery, as rq's maintenance passes them for abandoned jobs.
    - ``scheduler`` and ``RQScheduler._process`` / ``acquire_locks``: a dead scheduler process is restarted at
      a recovery check instead of every ``maintenance_interval``.
    - ``Queue._default_timeout``: a plain queue the rq CLI built is rebuilt as a FairQueue with it.
    - ``StartedJobRegistry``: its member format ``<job id>:<execution id>`` (``parse_composite_key``),
      ``Execution.key`` and its ``last_heartbeat`` field (how long ago a running job last beat), and
      ``cleanup`` reading only ``self.key`` and ``get_queue()`` (crash recovery runs rq's own handling of
      abandoned jobs on a staging set).
"""
