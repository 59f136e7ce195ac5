"""Tenant controls: at job start (pause, concurrency slot, rate: a pipeline of :class:`StartControl`, see
:mod:`fair_router.controls.pipeline`) and at enqueue (backlog caps, decided with the push in
``lua/fair_push.lua``: :mod:`fair_router.controls.backlog`).

Layering: controls import the vocabulary (keys, tiers, rates, job meta) and the store's scripts, never
``observe`` or ``workers``; their counts go to a :class:`~fair_router.controls.pipeline.Tally` the workers
give them (``observe.counters.TierCounters``)."""
