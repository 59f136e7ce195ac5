"""Observability, the reading side: the dashboard, ``/metrics`` and ``fair-router demo``'s figures, from one
bounded :class:`~fair_router.dashboard.model.Snapshot`; Flask and prometheus-client are extras, imported on use."""
