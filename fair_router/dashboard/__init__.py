"""Observability, the reading side: what the dashboard, ``/metrics`` and ``fair-router stats`` show.

- :mod:`~fair_router.dashboard.reader` and :mod:`~fair_router.dashboard.model`: one bounded, pipelined read
  of everything the views show (a :class:`~fair_router.dashboard.model.Snapshot`), from the records of
  :mod:`fair_router.observe`, the queues and the routers' counters;
- :mod:`~fair_router.dashboard.queueread`: per-queue figures, shard servers included;
- :mod:`~fair_router.dashboard.iterations`: interruptible jobs in progress;
- :mod:`~fair_router.dashboard.collector`: the Prometheus collector (``/metrics``; prometheus-client, an extra);
- :mod:`~fair_router.dashboard.app`: the live page (Flask, an extra), also a mountable blueprint, and its
  access rules in :mod:`~fair_router.dashboard.guard`;
- :mod:`~fair_router.dashboard.text`: the same figures as text, for ``fair-router demo``.

It reads every feature's state (routing's counters, fair queues, tenant controls), so it sits on top,
beside the CLI. Submodules are imported on use: Flask and prometheus-client are extras.
"""
