"""Runs rq's own test suite against fair-router's classes: ``python -m compat.run [VARIANT...]``."""
