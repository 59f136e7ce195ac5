"""Observability, the reading side: dashboard, ``/metrics``, demo figures (Flask, prometheus-client: extras, on use)."""
