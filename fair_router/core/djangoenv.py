"""Django, when something already imported and configured it (this module never imports Django): enqueues inside a
transaction wait for its commit, and settings may come from ``settings.FAIR_ROUTER`` (docs/django.md)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

logger = logging.getLogger("fair_router")

SETTING = "FAIR_ROUTER"
"""The Django setting holding fair-router's settings: a dict with the same keys as the YAML file."""


def django_settings() -> Any | None:
    """Django's settings object when this process runs Django (imported and configured), else None."""
    if "django.conf" not in sys.modules:
        return None
    from django.conf import settings

    return settings if settings.configured else None


def fair_router_setting() -> tuple[dict[str, Any], str] | None:
    """Django's ``FAIR_ROUTER`` setting and a name for it in error messages, when Django runs and sets it."""
    settings = django_settings()
    value = None if settings is None else getattr(settings, SETTING, None)
    if value is None:
        return None
    module = getattr(settings, "SETTINGS_MODULE", None) or "Django settings"
    return value, f"{module}.{SETTING}"


def commit_mode() -> str:
    """django-rq's commit mode (its ``RQ["COMMIT_MODE"]``, validated by django-rq), else ``"on_db_commit"``."""
    try:
        from django_rq.queues import get_commit_mode
    except ImportError:
        return "on_db_commit"
    return str(get_commit_mode())


def commit_hook() -> Callable[[Callable[[], object], str], None] | None:
    """Where an enqueue made now must wait: ``schedule(run, what)`` that runs it at commit (or request end), or None to
    enqueue now."""
    if django_settings() is None:
        return None
    mode = commit_mode()
    if mode == "request_finished":
        return _after_request
    if mode == "auto":
        return None
    from django.db import transaction

    return _on_commit if transaction.get_connection().in_atomic_block else None


def _on_commit(run: Callable[[], object], what: str) -> None:
    from django.db import transaction

    transaction.on_commit(_logged(run, what))


def _after_request(run: Callable[[], object], what: str) -> None:
    from django_rq import thread_queue

    # django-rq's queue of delayed enqueues calls each entry's original_enqueue_call() when the request ends
    thread_queue.add(SimpleNamespace(original_enqueue_call=_logged(run, what)), (), {})  # type: ignore[arg-type]


def _logged(run: Callable[[], object], what: str) -> Callable[[], None]:
    """``run``, its failure logged rather than raised into Django's commit (which would skip the other hooks)."""

    def hook() -> None:
        try:
            run()
        except Exception as exc:
            logger.error("fair-router: %s was NOT enqueued when its transaction committed: %s: %s",
                         what, type(exc).__name__, exc, exc_info=True)

    return hook
