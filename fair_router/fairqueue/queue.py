"""FairQueue: an ``rq.Queue`` whose workers take jobs by weighted fair share across tenants.

The design is explained in the docstring of :mod:`fair_router.fairqueue`; this module composes the parts
(one concern each) into the public class."""

from __future__ import annotations

from fair_router.fairqueue.listing import FairListing
from fair_router.fairqueue.maintenance import FairMaintenance
from fair_router.fairqueue.popping import FairPopping
from fair_router.fairqueue.pushing import FairPushing


class FairQueue(FairPushing, FairPopping, FairMaintenance, FairListing):
    """An rq Queue with per-tenant FIFOs served by weighted fair share (see :mod:`fair_router.fairqueue`).

    ``FairQueue(name, connection=None, *, prefix=None, tiers=None, settings=None, recover_after=None,
    charge=None, trust_cost=None, **rq_options)``. Its parts: pushing (:class:`FairPushing`), popping
    (:class:`FairPopping`), maintenance (:class:`FairMaintenance`), rq's view (:class:`FairListing`), on
    :class:`~fair_router.fairqueue.base.FairQueueBase` (configuration) and
    :class:`~fair_router.rq_internals.queue.RqQueueSeam` (rq's internal entry points, calling their hooks).
    """
