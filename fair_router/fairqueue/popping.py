"""How jobs leave a FairQueue: one ``lua/fair_pop.lua`` call per pop (the list head if rq pushed it, else the
stride choice), and its undo for a tenant at its concurrency limit, :meth:`FairPopping.park`. rq's worker
reaches :meth:`FairPopping.pop_fair` through ``dequeue_any`` in
:class:`~fair_router.rq_internals.queue.RqQueueSeam`; the design is explained in :mod:`fair_router.fairqueue`."""

from __future__ import annotations

import time
from typing import Any

from redis.client import Pipeline
from rq.job import Job

from fair_router.fairqueue.base import FairQueueBase
from fair_router.store.fair_scripts import FairHoldScript, FairParkScript, FairPopScript, FairUnparkScript, PopResult


class FairPopping(FairQueueBase):
    """The dequeue side of a FairQueue: fair pops, and parking tenants at their concurrency limit."""

    def pop_fair(self, given: str = "") -> PopResult:
        """Seam hook: one pop script call. ``given``: an entry already taken off rq's list by BLPOP. The
        jobs this object handed out before are acknowledged with it (an rq worker runs each job to its end
        before it dequeues again)."""
        acks, self._handed_out = list(self._handed_out), {}
        result = self._script(FairPopScript)(self.fair_keys, given, acks, "", self.charge == "runtime",
                                             self.claim_ms).run()
        if result.job_id is not None:
            self._handed_out[result.job_id] = result.seq
        return result

    def pop_job_id(self) -> str | None:
        """The next job id by fair share (non-blocking)."""
        return self.pop_fair().job_id

    @property
    def wake_key(self) -> str:
        """Seam hook: the list workers block on while only parked tenants' jobs wait (pushes of other
        tenants and unparks fill it)."""
        return self.fair_keys.wake

    @property
    def claim_ms(self) -> int:
        """How long a limited tenant's popped job counts against its limit here without a release: the lease
        of its slot (lua/lib/claims.lua)."""
        return max(1, round(self._loaded().concurrency.lease_ttl * 1000))

    def park(self, job: Job, tenant: str, seconds: float, limit: int | None = None) -> None:
        """``tenant`` is at its concurrency limit: put ``job`` back in its FIFO and skip the tenant until
        :meth:`unpark` or for ``seconds`` at most. When ``job`` came from this object's latest pop by a fair
        choice, it goes back to its own place (jobs refused at once keep their order) and the tenant's pass
        gets that pop's step back: a refusal costs it no turn. Otherwise it goes to the front. ``limit``: the
        tenant's concurrency limit (0 none, None not known), from then on mirrored here so that a pop parks the
        tenant when it reaches it, rather than handing out a job the start would refuse."""
        until_ms = int((time.time() + seconds) * 1000)
        seq = self._handed_out.pop(job.id, None)
        self._script(FairParkScript)(
            self.fair_keys, job.id, self.tenant_key(tenant), self.weight(tenant), until_ms, seq, limit
        ).run()

    def unpark(self, tenant: str, pipeline: Pipeline | None = None, job_id: str = "", limit: int | None = None) -> Any:
        """One of ``tenant``'s slots was released (by ``job_id``, whose claim here ends; ``limit``: the tenant's
        limit, 0 none, None not known): below its limit it may be served here again (one worker is woken)."""
        call = self._script(FairUnparkScript)(self.fair_keys, self.tenant_key(tenant), job_id, limit)
        return call.run_or_queue(pipeline)

    def hold(self, tenant: str, until_ms: int, pipeline: Pipeline | None = None, paced: bool = False) -> Any:
        """``tenant`` may start no job before ``until_ms`` (epoch ms): pops skip it until then or an
        :meth:`unpark`, so none hands out a job its start would refuse. ``paced``: a start of the tenant, which
        has a rate of its own, was admitted and its rate allows the next at ``until_ms`` (0: at once); pops
        then park it after each take until the next such report (lua/lib/claims.lua)."""
        call = self._script(FairHoldScript)(self.fair_keys, self.tenant_key(tenant), until_ms, paced)
        return call.run_or_queue(pipeline)
