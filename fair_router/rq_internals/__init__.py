"""rq internals fair-router touches: every rq member that is not public API, or whose code is copied, and why.

rq's public API is what its documentation shows (``Queue.enqueue*``, ``Queue.dequeue_any`` as the worker's
fetch entry point, ``push_job_id``, ``get_job_ids``, ``remove``, ``empty``, ``compact``, the registries,
``Job``'s accessors). Everything else fair-router relies on lives in this package, so an rq upgrade means
checking these modules against the new rq (and running ``python -m compat.run``, rq's own suite with our
classes substituted; ``--rq newest`` for a release not installed yet). Checked against rq 3.0.

Every member below, with its rq 3.0 signature, is listed in :mod:`fair_router.rq_internals.members`, which
:mod:`fair_router.rq_internals.guard` checks when ``fair_router`` is imported (``RqVersionError``).

Queue side (:mod:`fair_router.rq_internals.queue`, base class ``RqQueueSeam`` of ``FairQueue``)
    - ``Queue._enqueue_job`` (private, overridden): the one method every enqueue path of a queue passes
      with the Job (``enqueue_call``, ``enqueue_many``, dependents, retries, ``Job.requeue``, registry
      requeues, repeats). Overridden to hand the Job to the ``push_job_id`` that follows (no round trip to
      read its tenant back), to run a capped enqueue on a pipeline we execute (rq executes its own and
      would raise the backlog-cap refusal as a bare ``ResponseError``) and to add a ``unique=True`` job to
      the fair structure (rq's unique path pushes with its own script, never calling ``push_job_id``). rq
      has no public enqueue hook (no before/after-enqueue callback) to do this instead.
    - ``Queue.enqueue_job`` (public, overridden): an enqueue without a caller's pipeline, dependencies,
      rate limit or ``unique`` runs rq's own ``enqueue_job`` on a pipeline of ours (one MULTI for the queue's
      registration, which rq executes on a pipeline of its own first, and the job); it reads the job's
      private ``_dependency_ids`` as rq's ``enqueue_job`` does (the public ``dependency_ids`` is a round trip).
      The router's one-trip enqueue (:mod:`fair_router.routing.enqueue`, ``PlacedQueue``) overrides
      ``enqueue_job`` and ``push_job_id`` the same way, calling rq's private ``_enqueue_job`` to save the job.
    - ``Queue.push_job_id`` (public, overridden) relies on an internal order: ``_enqueue_async_job`` saves
      the job and then pushes its id on the same pipeline (so the fair push joins rq's MULTI), and rq's
      ``enqueue_many`` passes ``at_front=None``.
    - ``Queue.enqueue_many`` (public, overridden) relies on its internals: jobs without dependencies go
      through ``_enqueue_job`` on one pipeline, which rq executes only when it created it; jobs with
      dependencies take several pipeline steps. So a batch's pushes are collected and queued at the end
      of that one pipeline (one script call per 1,000 jobs instead of one each).
    - ``Queue.dequeue_any`` (public, replaced): its contract is copied (``timeout=0`` refused with rq's
      ValueError, ``DequeueTimeout``, missing jobs skipped, ``job_id``/``queue`` attached to a fetch error,
      ``rq.utils.backend_class`` for the job class) while the body is ours: a fair pop is a script, not
      rq's ``lpop``/``lmove`` classmethods, and workers block on a stalled queue's wake list instead of rq's.
      It returns the queue objects it was given, not ``Queue.from_queue_key`` rebuilds, so a FairQueue keeps
      its settings.
    - ``Queue.intermediate_queue`` / ``rq.intermediate_queue.IntermediateQueue.cleanup`` (internal
      maintenance hook, extended): rq's worker maintenance calls ``queue.intermediate_queue.cleanup(worker,
      queue)``; ours also gives back fair jobs popped but never started (``FairQueue.recover``). rq's own
      intermediate list is not used (another cluster slot; rq fails, not reruns, what it finds stuck there).
    - ``rq.utils`` helpers (undocumented): ``backend_class`` in the seam's ``dequeue_any`` (honours a
      ``job_class`` override as rq does); ``as_text`` (bytes to str) also in the fair-queue parts' listing
      and recovery, a decoding helper with no behaviour of its own to track.
    Everything else FairQueue does (``fair_router/fairqueue/``) goes through rq's public API and the seam's
    hooks: ``push``, ``push_many``, ``pushed_unique``, ``may_refuse``, ``check_room``, ``execute_checked``,
    ``pop_fair``, ``wake_key``, ``recover``.

Worker side (:mod:`fair_router.rq_internals.worker`; StartedJobRegistry: :mod:`fair_router.rq_internals.registry`)
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
    - ``BaseWorker.prepare_job_execution``: its ``LREM`` from the intermediate list is dropped when the worker
      dequeues through the seam's ``dequeue_any``, which never puts a job there.
    - ``BaseWorker._finalize_failure`` (private): what rq does with a job that raised (failure callback,
      exception handlers, ``handle_job_failure``), called by ``fail_unrun`` for a job the weighted workers
      fail without running it (an unusable ``job.meta["fair_tenant"]``), after rq's own start bookkeeping.
    - ``BaseWorker.increment_total_working_time``: rq's after-job pipeline with the run time; runtime-charged
      fair queues settle there (hook ``job_ended``) with the worker's time on the job, timed from the fetch
      (``dequeue_job_and_maintain_ttl``; the seam's ``dequeue_any`` notes its blocking wait) through
      ``execute_job`` (:mod:`fair_router.rq_internals.jobclock`).
    - ``BaseWorker.teardown``: pending counters are written when the worker process stops (hook
      ``worker_stopping``); after a fatal Redis error, rq's teardown once, without waiting for Redis.
    - ``BaseWorker.bootstrap``, ``check_for_suspension``, ``run_maintenance_tasks`` (and the fetch,
      ``execute_job``, ``heartbeat`` above): run under ``exit_on_fatal_redis``, because rq's ``work`` loop ends on
      any other exception with a normal return (exit status 0): Redis unreachable past the grace or out of
      memory ends the worker with ``SystemExit(1)``, its work horse killed (``horse_pid``, ``kill_horse``).
      ``bootstrap`` also calls hook ``worker_starting``; maintenance refused for memory is put off to the next
      ``maintenance_interval`` (``last_cleaned_at``). ``prepare_execution``'s MULTI and ``maintain_heartbeats``
      are sent again while Redis is out of memory, up to the grace.
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
