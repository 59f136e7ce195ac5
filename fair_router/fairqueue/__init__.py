"""FairQueue: an ``rq.Queue`` whose workers take jobs by weighted fair share across tenants.

``FairQueue("default", connection=r).enqueue(f, *args, fair_tenant="acme")`` keeps each tenant's jobs
in FIFO order, and a pop serves the tenant whose turn it is, so one tenant's 100k-job flood delays a
small tenant's job by about one job per active tenant instead of by 100k jobs.

Scheduler: stride scheduling, not deficit round robin
    Every active tenant (one with a waiting job) has a *pass*; a pop serves the smallest pass and adds
    ``1 / weight``. With a sorted set that is O(log n) in active tenants per pop, whatever the weights
    (DRR needs a quantum loop per round, and with fractional weights and unit-cost jobs it degenerates
    into stride anyway, only burstier: a weight-5 tenant gets 5 jobs in a row where stride interleaves
    them). Equal weights give round robin. Among tenants tied on the smallest pass, the tenant of the job
    at the list head goes first when that job is its oldest, else the first by name: so with equal
    weights (whole-number passes, ties everywhere) jobs are served in the order they wait on the list,
    and the served id is the head itself. Weights come from the tenant's tier (``tiers.weights``,
    default 1), written with each push. The *virtual time* is the pass of the last served tenant. A
    tenant that becomes active starts at ``max(virtual time, the pass it had when it went idle)``:
    idle time earns nothing (it cannot come back with a low pass and monopolise the queue), and a
    tenant that just took its turn cannot skip the wait by draining and refilling.

rq's list stays the truth
    rq's own ``rq:queue:<name>`` list holds exactly one entry per waiting job, the job's own id, at every
    moment: a fair push RPUSHes the id as rq does, and a fair pop takes the served job's own id off the
    list. So ``count`` (LLEN), ``rq info``, rq-dashboard and every plain ``Queue`` rq builds internally
    see the true backlog, and rq's own removals (``Job.cancel``, ``Job.delete``, registry cleanups, which
    LREM the id through a plain Queue) take exactly that job out. Idle workers BLPOP rq's list keys as
    usual (no polling; a push wakes one at once).

    Fair jobs are also *members* with a place in their tenant's FIFO. A pop looks at the list head: an
    id that is not a member was pushed by rq's internals with a plain Queue (the scheduler, registry
    requeues, dependents of another queue class) and is served as it is; a member's turn goes to the
    stride choice, and the head entry takes the chosen id's slot on the list (one LSET at the position
    the member recorded, so no other entry moves and no entry is compared). A member whose id is no
    longer on the list was removed by rq behind our back: the pop drops it when the scheduler reaches it.
    All fair keys carry the hash tag ``{rq:queue:<name>}``, the cluster slot of rq's untagged list key,
    so each script touches one slot.

Fair share of worker time (``charge="runtime"``)
    With ``charge="jobs"`` (the default) every pop costs its tenant ``1 / weight``: tenants get equal
    shares of *jobs*, and a tenant whose jobs run 10x longer gets 10x the worker time. With
    ``charge="runtime"`` a pop costs the job's run time / weight. The pop cannot know it yet, nor read rq's
    job hash (another cluster slot), so the push records the job's function (and a declared
    ``fair_cost=``, if any) in ``costs``, and the pop charges an *estimate*: the declared cost, else the
    tenant's recent mean run time of that function (``runtimes``, an exponential mean), else any
    tenant's, else any job's here. The charge is kept in ``charged`` until the job ends; then the worker
    *settles* it (fair_settle.lua, queued on rq's own after-job pipeline: no round trip of its own), moving
    the tenant's pass by (real cost - estimate) / weight. The real cost is the worker's measured time on the
    job (from its fetch to its after-job writes: rq's per-job bookkeeping is a few ms, as much as a short job
    runs, and is the job's tenant's; ``fair_router.rq_internals.jobclock``); a declared cost only when the
    queue trusts declared costs (``trust_cost``), so a wrong ``fair_cost`` dodges nothing. A tenant's mean
    goes with the settle of its last waiting job (the state stays bounded by the tenants active). A job
    whose worker died is settled by crash recovery with the time from its pop to its recovery; a parked
    job's charge is refunded (it did not run). Idle tenants bank nothing: the start tag is ``max(virtual
    time, kept pass)`` as for jobs, and an overcharge settled while a tenant is idle at the virtual time is
    dropped.

Listings
    ``get_job_ids`` (and ``jobs``, ``get_jobs``, job positions) replay the pops on one snapshot
    (:mod:`fair_router.fairqueue.serving_order`): the exact waiting set, in the order the jobs would be served if
    nothing more were pushed.

Claim-time concurrency limits
    A pop cannot read lease keys (other slots). When the weighted worker's slot is refused for a job
    of a FairQueue, it calls :meth:`FairQueue.park` (one script): the job goes back onto the list and to
    its place in its tenant's FIFO, and the tenant is *parked*: pops skip it, so other tenants are not
    blocked and no job is snoozed through the scheduler. A fair pop's step of the tenant's pass is taken
    back (the job did not run), so a tenant at its limit loses no turn per refusal. A worker that
    releases one of the tenant's slots unparks it in its fair queues. A park also ends by itself after
    ``lease_ttl``: a slot can free in a queue this worker does not serve, and a lease never outlives that
    bound. While only parked tenants' jobs wait, a worker blocks on the queue's *wake* list instead of
    rq's list (which would hand it the same parked job again at once): pushes of other tenants and
    unparks wake it; the wait is capped at the first park end and at ``STALLED_POLL`` seconds, so an id
    rq's internals push meanwhile is seen within that.

Popped but not started
    The pop records the job in ``inflight`` (pop time). The popping queue object acknowledges its
    previous jobs with its next pop (an rq worker runs each job to its end before it dequeues again),
    so ``inflight`` holds only jobs in the hands of workers. rq's maintenance, which every worker runs at
    start and every ``maintenance_interval``, calls our ``intermediate_queue.cleanup``: a job inflight
    for longer than ``recover_after`` seconds that is still *queued* and not in the StartedJobRegistry
    lost its worker between pop and start, and goes back to the front of its tenant's FIFO. (rq's own
    intermediate list is not used: it lives on another cluster slot and rq fails, not reruns, what it
    finds stuck there.)

Limits of compatibility, by design
    ``enqueue(..., unique=True)`` uses rq's own atomic script, which pushes the id; the job then joins its
    tenant's FIFO in a second call (until then it is a plain entry). Jobs the scheduler moves in
    (``enqueue_at/in``, retries with an interval) arrive plain: they are served in list order.

Known gaps (not by design)
    - A refused job's park uses its old FIFO place. If its tenant went idle and was refilled before
      the park lands, and a ``remove`` left a hole at exactly that place, the job lands among the
      newer jobs instead of at the front.
    - Recovery orders jobs of one tenant by ``enqueued_at``, which puts an ``at_front`` job after
      older ones.
    - Taking a fair choice that is not the list head costs an LINDEX and an LSET, O(list length / entries
      per listpack node): about 20-40 µs of Redis time per pop at 100,000 waiting jobs. rq's own LREM or
      LPUSH on the list shifts recorded positions; the next pops look around them, and one O(n) reindex
      resets them when the drift has grown past 128 entries.

Where each part lives (FairQueue, in :mod:`fair_router.fairqueue.queue`, is one class over rq's Queue that
delegates to them: it has them, it does not inherit them)
    - :mod:`fair_router.store.fair_store`: the ``FairStore`` interface (push, pop, park, unpark, hold, settle,
      remove, unmark: one atomic step each) and ``RedisFairStore``, the fair keys and their scripts;
    - :mod:`~fair_router.fairqueue.config`: configuration (prefix, tiers, charge), weights, and how a job
      becomes a push entry (tenant, weight, cost);
    - :mod:`~fair_router.fairqueue.pushing`: the fair pushes, the fairness mark, backlog caps;
    - :mod:`~fair_router.fairqueue.maintenance`: recovery of popped jobs (settlement is one store call);
    - :mod:`~fair_router.fairqueue.listing`: listings in serving order, with
      :mod:`~fair_router.fairqueue.serving_order`;
    - :mod:`fair_router.rq_internals.queue`: the base class ``RqQueueSeam``, everything that touches rq's
      internals (``_enqueue_job``, the push interception, ``dequeue_any``, the intermediate-queue hook),
      calling the hook methods FairQueue implements.
    This package's ``__init__`` imports nothing, so importing a part never runs the others.
"""
