"""The worker seam's hooks for interruptible iteration (:mod:`fair_router.iteration`), implemented for the
weighted workers: the job and its worker meet in the process's :data:`~fair_router.iteration.turns.HOST`."""

from __future__ import annotations

from redis.client import Pipeline
from rq import Queue
from rq.job import Job

from fair_router.core.tenancy import usable_tenant
from fair_router.fairqueue.queue import FairQueue
from fair_router.iteration.turns import HOST, is_turn_end
from fair_router.rq_internals.worker import RqWorkerSeam


class InterruptibleTurns(RqWorkerSeam):
    """The seam's hooks for interruptible iteration (:mod:`fair_router.iteration`): the job and its worker
    meet in the process's :data:`~fair_router.iteration.turns.HOST`."""

    def is_turn_end(self, return_value: object) -> bool:
        """An interruptible job returned at the end of a turn: the seam queues it again."""
        return is_turn_end(return_value)

    def host_turns(self, active: bool, stop: bool) -> None:
        """Interruptible jobs run by this process may end turns (and stop at once if ``stop``)."""
        HOST.hosting(active, stop)

    def stop_turns(self) -> None:
        """Warm shutdown: the running interruptible job stops at its next checkpoint."""
        HOST.stop = True

    count_turns = False
    """Whether a later turn counts as a start for rate limits (setting ``interruptible.count_turns``)."""

    def turn_ended(self, job: Job, queue: Queue, pipeline: Pipeline) -> None:
        """A later turn is no new start for rate limits (unless ``count_turns``): a fair queue that paced the
        tenant after this turn's start lets the next turn be taken without waiting for the tenant's rate (its
        other jobs are still held by the rate when they start)."""
        if self.count_turns or not isinstance(queue, FairQueue):
            return
        tenant = usable_tenant(job.meta, queue.tenant_max_bytes)
        if tenant is not None:
            queue.unpark(tenant, pipeline=pipeline)
