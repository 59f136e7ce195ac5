"""The ``job.meta`` keys fair-router writes and reads; on the ground floor because producers write them and workers read
them, and defining them on either side made ``router`` and ``fairqueue`` import each other."""

from __future__ import annotations

META_TENANT = "fair_tenant"
"""The job's tenant (a string), or None for a job routed without one."""

META_RULE = "fair_rule"
"""The throttle rule that routed the job, as a dict (``Rule.model_dump()``), or None when unthrottled."""

META_SYSTEM = "fair_system"
"""True on a system job: never throttled, limited, paused or parked."""

META_RATE = "fair_rate"
"""The job function's rate limit (job key, rate, burst), checked when a worker takes the job."""

META_COST = "fair_cost"
"""A job's declared cost in seconds (``enqueue(..., fair_cost=)``, charge="runtime")."""

META_WAITING = "fair_waiting"
"""The job key under whose waiting counts a routed job waits in a plain queue (its start takes its count back)."""

META_SHARD = "fair_shard"
"""The shard a sharded job key's job was placed on (its queue is ``<family>_shard<i>``)."""

META_HELD = "fair_held"
"""Why a worker turned a plain queue's job away and deferred it: ``{"reason": "concurrency_limit" | "paused" |
"rate_limit", "until": epoch seconds}`` (the ScheduledJobRegistry's time), written by the deferral's own save."""
