"""What becomes of a job whose start its tenant's controls refused: it waits, never fails."""

from __future__ import annotations

from rq import Queue
from rq.job import Job

from fair_router.controls.gate import TenantGate
from fair_router.fairqueue.queue import FairQueue
from fair_router.store.scripts import Admission


def turn_away(gate: TenantGate, job: Job, queue: Queue, tenant: str, admission: Admission) -> str | None:
    """The job may not start now: in a FairQueue it goes back to its tenant's FIFO and the tenant is
    parked (skipped by pops, so other tenants flow and nothing churns) for as long as the refusing
    control says (until a slot frees, its next rate token falls due, or it is resumed); on a plain queue
    it is deferred through rq's scheduler (to the exact time of its reserved token for a rate, after the
    snooze otherwise). Returns what the worker logs (None: not a refusal, nothing done)."""
    limiter, refusal = gate.limiter, gate.refusal(tenant, job, admission)
    if refusal is None:  # not a refusal: nothing to turn away
        return None
    if isinstance(queue, FairQueue):
        seconds = refusal.park_seconds
        limit = limiter.tiers.profile(tenant).limit if gate.slots else None
        queue.park(job, tenant, seconds, limit, at_ms=refusal.until_ms)
        # Counted now (one round trip, on this rare path): a worker serving only other tenants' jobs
        # next may send no round trip through the limiter for a long while.
        limiter.count(limiter.tiers.tier(tenant), "parked")
        if refusal.until_release:
            # The refusal recorded this queue for the next release (Keys.parked_in). If a release took the
            # record before our park landed, its unpark may have come first and found nothing parked: then the
            # park is ended here. Otherwise the release that takes it comes after the park, and ends it.
            if not limiter.parked_in(tenant, queue.name):
                queue.unpark(tenant, limit=limit)
        else:
            limiter.flush()
        return f"{tenant} is {refusal.why}; job {job.id} back in {queue.name}, tenant parked for up to {seconds:.3f} s"
    if refusal.until_ms is not None:
        when = gate.defer_until(job, queue, refusal.until_ms)
    else:
        when = limiter.snooze(job, queue, limiter.tiers.tier(tenant))
    return f"{tenant} is {refusal.why}; job {job.id} deferred until {when}"
