"""A job's start in a weighted worker: its tenant's start controls (:mod:`fair_router.controls.gate`: pause, with
``concurrency.enabled`` a slot, rates) decided by one script call, the start record, the end of the job's waiting
count, the runtime charge settled at its end. A job that may not start yet waits (parked in its FairQueue, or
deferred on a plain queue), never fails. How the check rides rq's job-start MULTI: docs/internals.md."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from redis import Redis
from redis.client import Pipeline
from rq import Queue
from rq.executions import Execution
from rq.job import Job
from rq.worker import WorkerStatus

from fair_router.config.settings import Settings
from fair_router.controls.gate import Admission, Lease, PendingStart, RateScope, Verdict
from fair_router.core.jobmeta import META_SYSTEM
from fair_router.core.tenancy import InvalidStoredTenant, stored_tenant, usable_tenant
from fair_router.fairqueue.queue import FairQueue
from fair_router.iteration.turns import turns_started
from fair_router.observe.recorder import StartRecorder
from fair_router.observe.waiting import WaitCounts
from fair_router.rq_internals.worker import JobNotStarted, RqWorkerSeam
from fair_router.workers.limiter import WorkerGate
from fair_router.workers.unparking import Unparker

HELD = {Verdict.AT_LIMIT: "concurrency_limit", Verdict.PAUSED: "paused", Verdict.RATE: "rate_limit",
        Verdict.RESERVED: "rate_limit", Verdict.ORG_LIMIT: "concurrency_limit", Verdict.ORG_PAUSED: "paused"}
"""The reason a plain queue's turned-away job records (:data:`META_HELD`), by the refusing verdict."""


class StartRefused(JobNotStarted):
    """A check riding rq's job-start MULTI refused the start: rq does not run the job, which is turned away."""

    def __init__(self, admission: Admission) -> None:
        super().__init__(f"start refused ({admission.status.name})")
        self.admission = admission


@dataclass
class StartRide:
    """One job's start check on rq's job-start MULTI: queued by ``on_start``, read by ``on_start_replies``."""

    tenant: str
    scopes: list[RateScope]
    fair: FairQueue | None  # the FairQueue the job came from: a refusal at the limit parks the tenant there
    paced: bool  # a fair queue's tenant with a rate of its own: its admitted start reports when the next may come
    pending: PendingStart | None = None
    unwait_at: int | None = None  # the place of the waiting count's end in the MULTI's replies
    leases: ExitStack = field(default_factory=ExitStack)  # keeps an admitted start's slot alive until its job ends


class StartGate:
    """The start part of a weighted worker (the seam's ``starts``)."""

    def __init__(self, worker: RqWorkerSeam, settings: Settings, gate: WorkerGate, state_connection: Redis,
                 fair_queues: list[FairQueue], start_recorder: StartRecorder | None, wait_counts: WaitCounts) -> None:
        self.worker, self.settings, self.gate, self.state_connection = worker, settings, gate, state_connection
        self.fair_queues, self.start_recorder, self.wait_counts = fair_queues, start_recorder, wait_counts
        self.unparker = Unparker(fair_queues, gate, worker.connection, settings)
        self.count_turns = settings.interruptible.count_turns
        self.rides = state_connection is worker.connection  # checks ride rq's MULTI (not on a Redis Cluster)
        self.ride: StartRide | None = None  # the start check riding rq's job-start MULTI of the job being started
        # (queue, tenant with a rate of its own, ms its next start is allowed): parked on the job start's MULTI
        self.rate_hold: tuple[FairQueue, str, int] | None = None

    def run(self, job: Job, queue: Queue, execute: Callable[[], None]) -> None:
        """Run the job (``execute``) if its tenant may start one now; else it waits, never failed. A job whose
        stored tenant is no tenant id fails at once (rq's failure path), and the worker goes on."""
        worker = self.worker
        try:
            tenant = stored_tenant(job.meta, self.settings.tenant_max_bytes)
        except InvalidStoredTenant as exc:  # rq's exception handlers log it, with the job
            worker.fail_unrun(job, queue, (type(exc), exc, exc.__traceback__))
            return
        if tenant is None or job.meta.get(META_SYSTEM):
            execute()  # no tenant, or a system job: tenant controls do not apply
            return
        # The job has left its queue: a SIGTERM while we check must wait for us (warm shutdown).
        worker.hold_warm_shutdown()
        scopes = self.gate.checks(tenant, job)
        if scopes and turns_started(job) and not self.count_turns:
            scopes = []  # a later turn of an interruptible job: rates count its first start only
        if scopes is None:
            execute()  # nothing can hold this start: no round trip spent on checks
            return
        fair = queue if isinstance(queue, FairQueue) else None
        paced = fair is not None and self.gate.own_rate(tenant, scopes, self.gate.org_of(job)[0])
        if self.rides:
            self._run_riding(job, queue, execute, StartRide(tenant, scopes, fair, paced))
            return
        # A Redis Cluster: the leases and rates live on the tenant's slot, rq's MULTI goes to rq's own, so the
        # check goes with the worker's state in a round trip of its own (a RedisCluster pipeline, each command to
        # its slot's node), and a paced tenant's report rides rq's MULTI (the fair queue shares rq's slot).
        with self.state_connection.pipeline(transaction=False) as pipe:
            worker.set_state(WorkerStatus.BUSY, pipeline=pipe)
            admission, lease = self.gate.acquire(tenant, job, scopes, reserve=fair is None, pipeline=pipe,
                                                 fair_queue=fair.name if fair else "")
        if admission.report and fair is not None and paced:
            self.rate_hold = (fair, tenant, admission.next_ms)  # on rq's job-start MULTI (on_start)
        if lease is not None:
            with self._kept_alive(lease):
                execute()
        elif admission.admitted:
            execute()
        else:
            self.turn_away(job, queue, tenant, admission)

    def _run_riding(self, job: Job, queue: Queue, execute: Callable[[], None], ride: StartRide) -> None:
        self.ride = ride
        try:
            with ride.leases:
                execute()
        except StartRefused as refused:
            self.turn_away(job, queue, ride.tenant, refused.admission)
        finally:
            self.ride = None

    def _kept_alive(self, lease: Lease) -> Any:
        """The slot kept alive until its job ends; its release unparks the tenant and sends the worker's
        after-job heartbeat in the same round trip (rq's own is then skipped as a repeat)."""
        return self.gate.limiter.keep_alive(lease, also=partial(self._slot_freed, lease),
                                            wake=partial(self.unparker.wake_parked, lease.tenant, lease.job_id))

    def _slot_freed(self, lease: Lease, pipe: Pipeline) -> None:
        self.unparker.unpark(lease.tenant, pipe, lease.job_id, lease.org)
        self.worker.heartbeat(pipeline=pipe)

    def on_start(self, job: Job, pipeline: Pipeline) -> None:
        """On rq's job-start MULTI: a riding check, the park of a tenant whose rate holds its next start, the
        start record and the end of a routed job's waiting count."""
        ride, ours = self.ride, pipeline if self.rides else None
        if ride is not None:
            ride.pending = self.gate.queue_check(ride.tenant, job, ride.scopes, ride.fair is None, pipeline,
                                                 ride.fair.name if ride.fair else "")
        if self.rate_hold is not None:
            queue, tenant, until_ms = self.rate_hold
            self.rate_hold = None
            queue.hold(tenant, until_ms, pipeline, paced=True)
        if self.start_recorder is not None and ride is not None:
            self.start_recorder.flush_due(pipeline)  # this start is gathered once admitted (on_start_replies)
        elif self.start_recorder is not None:
            # On a cluster the records' slot is not rq's: they are sent on their own, with the next flush.
            self.start_recorder.job_started(job, ours)
        if all(job.origin != queue.name for queue in self.fair_queues):  # a routed job stops counting waiting
            place = self.wait_counts.started(job, ours)
            if ride is not None:
                ride.unwait_at = place

    def on_start_replies(self, job: Job, execution: Execution, replies: list[Any]) -> None:
        """A riding check's verdict: admitted, its slot is kept alive and its start gathered; refused, the MULTI's
        start writes are undone (one round trip, on this rare path) and :class:`StartRefused` raised. A paced
        tenant's admitted start reports when its rate allows the next (its fair queue parked it at the pop): one
        round trip of its own, as EVALSHA, since that time is only known from this reply."""
        ride = self.ride
        if ride is None:
            return
        if ride.pending is None:
            raise RuntimeError("the start check was not queued on rq's job-start MULTI")
        admission, lease = self.gate.answer(ride.pending, replies)
        if admission.admitted:
            if lease is not None:
                ride.leases.enter_context(self._kept_alive(lease))
            if self.start_recorder is not None:
                self.start_recorder.note(job)
            if admission.report and ride.paced and ride.fair is not None:
                ride.fair.hold(ride.tenant, admission.next_ms, paced=True)
            return
        with self.worker.connection.pipeline() as pipe:
            self.worker.cleanup_execution(job, pipe, execution)
            if ride.unwait_at is not None:  # the job counts waiting again
                self.wait_counts.refused(job, replies[ride.unwait_at], pipe)
            pipe.execute()
        raise StartRefused(admission)

    def on_end(self, job: Job, queue: Queue, seconds: float, pipeline: Pipeline) -> None:
        """A FairQueue charging run time settles the job's charge, on rq's after-job writes."""
        if isinstance(queue, FairQueue) and queue.charge == "runtime":
            queue.settle(job.id, seconds, pipeline=pipeline)

    def on_turn_end(self, job: Job, queue: Queue, pipeline: Pipeline) -> None:
        """A later turn is no new start for rate limits (unless ``count_turns``): a fair queue that paced the
        tenant after this turn's start lets its next turn be taken at once."""
        if self.count_turns or not isinstance(queue, FairQueue):
            return
        tenant = usable_tenant(job.meta, queue.tenant_max_bytes)
        if tenant is not None:
            queue.unpark(tenant, pipeline=pipeline)

    def turn_away(self, job: Job, queue: Queue, tenant: str, admission: Admission) -> None:
        """The job may not start now (:func:`turn_away`); logged."""
        said = turn_away(self.gate, job, queue, tenant, admission)
        if said:
            self.worker.log.info("Worker %s: %s", self.worker.name, said)

    def flush_records(self, overdue: bool = False) -> None:
        """Send the gathered job starts from the worker process (a horse's are its own): all, or if ``overdue``."""
        if self.start_recorder is not None and not self.worker.is_horse:
            self.start_recorder.send_overdue() if overdue else self.start_recorder.send()


def turn_away(gate: WorkerGate, job: Job, queue: Queue, tenant: str, admission: Admission) -> str | None:
    """The job may not start now: in a FairQueue it goes back to its tenant's FIFO and the tenant is parked
    (skipped by pops) for as long as the refusing control says, its cause noted (:meth:`Keys.park_cause`); on a
    plain queue it is deferred through rq's scheduler (to its reserved token's time for a rate, after the snooze
    otherwise), with the reason in its meta (:data:`META_HELD`, in the job save the deferral makes anyway).
    Returns what the worker logs (None: not a refusal, nothing done)."""
    limiter, refusal = gate.limiter, gate.refusal(admission)
    if refusal is None:
        return None
    held = HELD.get(admission.status, "")
    if isinstance(queue, FairQueue):
        seconds = refusal.park_seconds
        # why, for explain: one SET, expiring with the park, on the round trip that sends the counts below
        cause = partial(_note_cause, limiter.keys.park_cause(tenant, queue.name), held, seconds)
        org, org_profile = gate.org_of(job)
        limit = limiter.tiers.profile(tenant, org).limit if gate.slots else None
        org_limit = (org_profile.limit or 0) if gate.slots and org_profile is not None else None
        queue.park(job, tenant, seconds, limit, at_ms=refusal.until_ms, org_limit=org_limit,
                   org_full=refusal.org_release and admission.status == Verdict.ORG_LIMIT)
        # Counted now (one round trip, on this rare path): a worker serving only other tenants' jobs
        # next may send no round trip through the limiter for a long while.
        limiter.tally.add(limiter.tiers.tier(tenant, org), "parked")
        if refusal.until_release:
            # The refusal recorded this queue for the next release (Keys.parked_in, or the org's). If a release
            # took the record before our park landed, its unpark may have come first and found nothing parked:
            # then the park is ended here. Otherwise the release that takes it comes after the park, and ends it.
            if not limiter.parked_in(tenant, queue.name, also=cause, org=org, org_release=refusal.org_release):
                queue.unpark(tenant, limit=limit, org=org, org_limit=org_limit)
        else:
            limiter.flush(also=cause)
        return f"{tenant} is {refusal.why}; job {job.id} back in {queue.name}, tenant parked for up to {seconds:.3f} s"
    if refusal.until_ms is not None:
        when = gate.defer_until(job, queue, refusal.until_ms, held)
    else:
        when = limiter.snooze(job, queue, limiter.tiers.tier(tenant, gate.org_of(job)[0]), held)
    return f"{tenant} is {refusal.why}; job {job.id} deferred until {when}"


def _note_cause(key: str, held: str, seconds: float, pipe: Pipeline) -> None:
    """A fair queue's park cause (:meth:`Keys.park_cause`), for as long as the park."""
    pipe.set(key, held, px=max(1, math.ceil(seconds * 1000)))
