"""Observability, the writing side: the start records workers write (:mod:`.recorder`), event and per-tier counters,
and the wait buckets. It sits low, so the fair queue and workers record without importing the reading side,
:mod:`fair_router.dashboard`."""
