"""Observability, the reading side: the dashboard, ``/metrics`` and ``fair-router demo``'s figures, all from one bounded
:class:`~fair_router.dashboard.model.Snapshot`. It reads every feature's state, so it sits on top beside the CLI; Flask
and prometheus-client are extras, imported on use."""
