"""Observability: what workers record at each job start, and what reads it back.

- :mod:`~fair_router.observe.recorder`: the start record (a tenant's waits), queued on rq's own job-start
  pipeline by the weighted workers;
- :mod:`~fair_router.observe.events`: event counters (fair jobs recovered, ...);
- :mod:`~fair_router.observe.reader` and :mod:`~fair_router.observe.model`: one bounded, pipelined read of
  everything the views show (a :class:`~fair_router.observe.model.Snapshot`);
- :mod:`~fair_router.observe.buckets`: the log-spaced wait buckets and percentile estimates;
- :mod:`~fair_router.observe.collector`: the Prometheus collector (``/metrics``; prometheus-client, an extra);
- :mod:`~fair_router.observe.dashboard`: the live page (Flask, an extra), also a mountable blueprint;
- :mod:`~fair_router.observe.text`: the same figures as text, for ``fair-router demo``.

Submodules are imported on use: the recorder sits on the worker's hot path and needs neither Flask nor
prometheus-client.
"""
