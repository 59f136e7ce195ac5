"""Tenant controls: at job start (pause, concurrency slot, rate: a pipeline of :class:`StartControl`s run by
:mod:`fair_router.controls.gate`), at enqueue (backlog caps, decided with the push in ``lua/fair_push.lua``:
:mod:`fair_router.controls.backlog`), and the admin that sets them per tenant (:mod:`fair_router.controls.admin`).
They import the vocabulary and the store's scripts, never ``observe`` or ``workers``."""
