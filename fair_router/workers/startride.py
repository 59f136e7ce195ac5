"""A job start's tenant checks riding rq's job-start MULTI, so a checked start costs no round trip of its own.

Without it a checked start is two round trips before the job runs: the check (with the worker's "busy" write),
then rq's job-start MULTI (the execution, the busy state, the start record, the end of the job's waiting
count). On a standalone Redis the check is queued on that MULTI instead and its verdict read from the
MULTI's replies before the job runs. A refused start then undoes what the MULTI wrote for a start that did not
happen: rq's execution (its StartedJobRegistry entry) is deleted, the job's waiting count restored, and its
start record was never gathered (it is gathered only once admitted). Refusals are the rare path: a fair
queue's pop skips tenants at their limits, so its starts are refused only on a race; a plain queue's refused
job is deferred anyway, one round trip more.

It does not ride on a Redis Cluster (the checks' keys are on the tenant's slot, not rq's), nor for a fair
queue's tenant with a rate of its own, whose next allowed start (known from the verdict) parks it on the
same MULTI.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from redis.client import Pipeline
from rq.job import Job

from fair_router.controls.concurrency import Lease
from fair_router.controls.gate import PendingStart, TenantGate
from fair_router.observe.waiting import WaitCounts
from fair_router.rq_internals.worker import JobNotStarted
from fair_router.store.scripts import Admission, RateScope


class StartRefused(JobNotStarted):
    """A riding check refused the start: rq does not run the job, which is turned away."""

    def __init__(self, admission: Admission) -> None:
        super().__init__(f"start refused ({admission.status.name})")
        self.admission = admission


@dataclass
class StartRide:
    """One job's start check on rq's job-start MULTI: queued by ``job_started``, read by ``job_start_replied``."""

    tenant: str
    scopes: list[RateScope]
    reserve: bool
    fair_queue: str = ""  # the FairQueue the job came from ('' none): a refusal at the limit parks it there
    pending: PendingStart | None = None
    unwait_at: int | None = None  # the place of the waiting count's end in the MULTI's replies
    leases: ExitStack = field(default_factory=ExitStack)  # keeps an admitted start's slot alive until its job ends

    def queue(self, gate: TenantGate, job: Job, pipeline: Pipeline) -> None:
        """Queue the check on rq's job-start MULTI."""
        self.pending = gate.queue_check(self.tenant, job, self.scopes, self.reserve, pipeline, self.fair_queue)

    def answer(self, gate: TenantGate, replies: list[Any]) -> tuple[Admission, Lease | None]:
        """The verdict, from the MULTI's replies."""
        if self.pending is None:
            raise RuntimeError("the start check was not queued on rq's job-start MULTI")
        return gate.answer(self.pending, replies)

    def undo(self, job: Job, replies: list[Any], wait_counts: WaitCounts, pipeline: Pipeline) -> None:
        """Queue on ``pipeline`` what undoes the MULTI's start writes that are ours (rq's execution is the
        caller's): the job counts waiting again."""
        if self.unwait_at is not None:
            wait_counts.refused(job, replies[self.unwait_at], pipeline)
