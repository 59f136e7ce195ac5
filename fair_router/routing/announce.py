"""Which job keys have routed counters: each router adds a job key it routes to a set that readers
(``fair_router.observe``) list the counters from, with the routing call, at most once a minute per key."""

from __future__ import annotations

import time

from redis.client import Pipeline

from fair_router.core.keys import Keys
from fair_router.routing.placement import Route

ANNOUNCE_EVERY = 60.0
"""Seconds between two additions of a job key to the set of routed job keys (fair_router.observe)."""


class Announcer:
    """Remembers when this process last announced each job key."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self._announced: dict[str, float] = {}  # job key -> when this router last added it to observe_job_keys

    def due(self, route: Route) -> bool:
        """Whether a routed enqueue of ``route`` adds its job key to the set (:meth:`announce`): the first time,
        then every ANNOUNCE_EVERY seconds, so a Redis that lost it learns it back."""
        announced = self._announced.get(route.job_key)
        return bool(route.rules) and (announced is None or time.monotonic() - announced >= ANNOUNCE_EVERY)

    def announce(self, route: Route, pipe: Pipeline) -> None:
        """Queue the addition of the job key on ``pipe``, with the routing call."""
        pipe.sadd(self.keys.observe_job_keys(), route.job_key)
        self._announced[route.job_key] = time.monotonic()
