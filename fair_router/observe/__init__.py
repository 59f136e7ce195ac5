"""Observability, the writing side: what workers record at each job start and the counters they keep.

- :mod:`~fair_router.observe.recorder`: the start record (a tenant's waits), queued on rq's own job-start
  pipeline by the weighted workers;
- :mod:`~fair_router.observe.events`: event counters (fair jobs recovered, ...);
- :mod:`~fair_router.observe.buckets`: the log-spaced wait buckets and percentile estimates.

It sits low (on the ground floor and the script wrappers only), so the fair queue and the workers can
record without importing what reads the records back: that is :mod:`fair_router.dashboard` (the
snapshot reader, ``/metrics`` and the live page), which sits on top, beside the CLI.
"""
