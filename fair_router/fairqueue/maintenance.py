"""Keeping a FairQueue's books after pops: a runtime charge settled when its job ends
(``lua/fair_settle.lua``), and jobs popped but never started (their worker died in between) given back to
their tenant's FIFO. rq's worker maintenance reaches :meth:`FairMaintenance.recover` through the
intermediate-queue hook of :class:`~fair_router.rq_internals.queue.RqQueueSeam`; crash recovery
(:mod:`fair_router.workers.recovery`) calls both."""

from __future__ import annotations

import time
from typing import Any, cast

from redis.client import Pipeline
from rq.exceptions import NoSuchJobError
from rq.job import JobStatus
from rq.utils import as_text

from fair_router.fairqueue.base import FairQueueBase
from fair_router.observe.events import count_event
from fair_router.store.fair_scripts import FairPushScript, FairSettleScript


class FairMaintenance(FairQueueBase):
    """Settling runtime charges and recovering jobs whose worker died between pop and start."""

    def settle(self, job_id: str, seconds: float | None, pipeline: Pipeline | None = None) -> Any:
        """charge="runtime": the job ran ``seconds`` (None: its worker died; charged from its pop until now).
        Replaces its pop's estimated charge with the real cost; a no-op for a job with no charge pending.
        The weighted workers queue this on rq's own after-job pipeline (``pipeline``)."""
        return self._script(FairSettleScript)(self.fair_keys, job_id, seconds, self.trust_cost).run_or_queue(pipeline)

    def recover(self, older_than: float | None = None) -> list[str]:
        """Seam hook (rq's maintenance): give back jobs popped more than ``older_than`` (default
        ``recover_after``) seconds ago that never started (their worker died between pop and start). Returns
        their ids."""
        grace = self.recover_after if older_than is None else older_than
        cutoff = int((time.time() - grace) * 1000)
        keys = self.fair_keys
        popped = cast(list[tuple[bytes, float]],
                      self.connection.zrangebyscore(keys.inflight, "-inf", cutoff, withscores=True))
        if not popped:
            return []
        started = set(self.started_job_registry.get_job_ids(cleanup=False))
        lost, recovered, done = [], [], []
        for raw, popped_ms in popped:
            job_id = as_text(raw)
            try:
                job = self.job_class.fetch(job_id, connection=self.connection, serializer=self.serializer)
            except NoSuchJobError:
                done.append(job_id)
                continue
            requeued = job.enqueued_at is not None and job.enqueued_at.timestamp() * 1000 > popped_ms
            if (job.get_status(refresh=False) != JobStatus.QUEUED or job_id in started or job.origin != self.name
                    or requeued):
                # It started (rq handles it from there), moved on, or rq already queued it again since the
                # pop (its maintenance retried a started job whose worker died): no second entry.
                done.append(job_id)
                continue
            lost.append(job)
        # Each goes back to the front of its tenant's FIFO: the newest first, so a tenant's jobs keep their order.
        lost.sort(key=lambda job: job.enqueued_at.timestamp() if job.enqueued_at else 0.0, reverse=True)
        for job in lost:
            self.settle(job.id, None)  # its worker held it from the pop until now (charge="runtime")
            if self._script(FairPushScript)(keys, [self._entry(job.id, job, True, from_inflight=True)]).run():
                recovered.append(job.id)
        if done:
            self.connection.zrem(keys.inflight, *done)
        if recovered:
            count_event(self.connection, self.prefix_keys, "recovered", self.name, len(recovered))
        return recovered
