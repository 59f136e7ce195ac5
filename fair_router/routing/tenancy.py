"""Finding a job's tenant: explicit ``fair_tenant=`` first, then the job's tenant callable.

A job without a tenant is not an error worth failing an enqueue for (it still runs, unthrottled, on
its base queue), but it is almost always a bug, so it is logged, at most once a minute per job.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

logger = logging.getLogger("fair_router")

TenantFunc = Callable[..., object]
"""Called with the job's own arguments; returns the tenant id (str or int), or None."""


class TenantResolver:
    """Resolve the tenant of one job function: explicit, else callable, else None (warned)."""

    def __init__(self, job_key: str, func: TenantFunc | None, warn_every: float = 60.0) -> None:
        self.job_key = job_key
        self.func = func
        self.warn_every = warn_every
        self._last_warning = float("-inf")

    def resolve(self, explicit: object, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        """The tenant id as a string, or None after a rate-limited warning."""
        if explicit is not None:
            return _as_tenant(explicit)
        if self.func is None:
            self._warn("no tenant callable and no fair_tenant= given")
            return None
        try:
            tenant = _as_tenant(self.func(*args, **kwargs))
        except Exception as exc:
            self._warn(f"tenant callable raised {exc!r}")
            return None
        if tenant is None:
            self._warn("tenant callable returned no tenant")
        return tenant

    def _warn(self, reason: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= self.warn_every:
            self._last_warning = now
            logger.warning("%s: %s; enqueued to its base queue without throttling", self.job_key, reason)


def _as_tenant(value: object) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return str(value)
    raise TypeError(f"tenant must be a str or int, got {type(value).__name__} {value!r}")
