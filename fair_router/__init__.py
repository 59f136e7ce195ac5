"""fair-router: fair multi-tenant background jobs for RQ on Redis.

Public API (documented in docs/api.md):

- :class:`FairRouter` — records enqueues per tenant and routes jobs to throttled queues.
- :class:`Rule` — one throttle rule: more than ``threshold`` enqueues ``per`` window -> ``queue``.
- :func:`fair_job` — decorator adding tenant-routed ``delay``/``enqueue*`` to a job function (which stays a
  plain function rq enqueues as before; typed as :class:`FairJobFunction`, its methods held by a :class:`FairJob`).
- :class:`Settings`, :func:`load_settings` — YAML + environment configuration.
- :class:`SettingsError` — raised for invalid settings, naming file, key path and reason.
- :class:`FairQueue` — an rq Queue that serves tenants by weighted fair share.
- :class:`WeightedWorker`, :class:`WeightedSimpleWorker` — rq workers with weighted fetch order
  and fewer Redis round trips between jobs.
- :class:`TenantBacklogFull` — an enqueue would pass a tenant's backlog cap in a FairQueue.
- :class:`InvalidTenant` — a tenant id that is empty or longer than ``tenant_max_bytes`` (a ValueError).
- :class:`Shards`, :func:`shards_of` — shuffle-sharding: the shards dealt to each tenant.
- :class:`RedisUnavailable` — an enqueue could not reach Redis after the client's retries.
- :class:`ReplicasNotAcknowledged` — fewer replicas than ``replicas_to_wait`` acknowledged an enqueue.
- :func:`interruptible` — a generator job function that runs in turns, giving up its worker at checkpoints.
- :func:`explain` — why a job waits: an :class:`Explanation` with one :class:`Reason` and its facts (docs/why.md).
- :func:`explain_tenant` — why a tenant's jobs are slow: a :class:`TenantExplanation` (:class:`TenantReason`).
- :class:`RqVersionError` — raised by ``import fair_router`` when the installed rq is not a supported one
  (``FAIR_ROUTER_SKIP_RQ_CHECK=1``: a :class:`RqVersionWarning` instead).
"""

# First, before any module that subclasses rq's classes: the guard's import checks the installed rq (it runs
# check_installed_rq()) and refuses one fair-router was not tested with.
from fair_router.rq_internals.guard import RqVersionError, RqVersionWarning

# isort: split
import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fair_router.config.errors import SettingsError
    from fair_router.config.settings import Settings, load_settings
    from fair_router.controls.backlog import TenantBacklogFull
    from fair_router.controls.orgs import OrgProfile
    from fair_router.core.rules import Rule
    from fair_router.core.shards import Shards, shards_of
    from fair_router.core.tenancy import InvalidTenant
    from fair_router.fairqueue.queue import FairQueue
    from fair_router.iteration.decorator import interruptible
    from fair_router.observe.why import Explanation, Reason, explain
    from fair_router.routing.decorator import FairJob, FairJobFunction, fair_job
    from fair_router.routing.router import FairRouter
    from fair_router.routing.tenant_why import TenantExplanation, TenantReason, explain_tenant
    from fair_router.store.outage import RedisUnavailable
    from fair_router.store.replicas import ReplicasNotAcknowledged
    from fair_router.workers.weighted import WeightedSimpleWorker, WeightedWorker

HOMES = {
    "Explanation": "fair_router.observe.why",
    "FairJob": "fair_router.routing.decorator",
    "FairJobFunction": "fair_router.routing.decorator",
    "FairQueue": "fair_router.fairqueue.queue",
    "FairRouter": "fair_router.routing.router",
    "InvalidTenant": "fair_router.core.tenancy",
    "OrgProfile": "fair_router.controls.orgs",
    "Reason": "fair_router.observe.why",
    "RedisUnavailable": "fair_router.store.outage",
    "ReplicasNotAcknowledged": "fair_router.store.replicas",
    "Rule": "fair_router.core.rules",
    "Settings": "fair_router.config.settings",
    "SettingsError": "fair_router.config.errors",
    "Shards": "fair_router.core.shards",
    "TenantBacklogFull": "fair_router.controls.backlog",
    "TenantExplanation": "fair_router.routing.tenant_why",
    "TenantReason": "fair_router.routing.tenant_why",
    "WeightedSimpleWorker": "fair_router.workers.weighted",
    "WeightedWorker": "fair_router.workers.weighted",
    "explain": "fair_router.observe.why",
    "explain_tenant": "fair_router.routing.tenant_why",
    "fair_job": "fair_router.routing.decorator",
    "interruptible": "fair_router.iteration.decorator",
    "load_settings": "fair_router.config.settings",
    "shards_of": "fair_router.core.shards",
}
"""The module each public name lives in, imported when the name is first read (:func:`__getattr__`)."""


def __getattr__(name: str) -> object:
    """A public name, imported from its home on first use (PEP 562). Why: a work horse imports the module of
    each job it runs, and ``from fair_router import fair_job`` should cost about what rq's ``@job`` does,
    not pydantic, pydantic-settings and every class of the package (docs/benchmarks.md, import cost)."""
    if name not in HOMES:
        raise AttributeError(f"module 'fair_router' has no attribute {name!r}")
    value = getattr(importlib.import_module(HOMES[name]), name)
    globals()[name] = value  # read once: later reads are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *HOMES])


__all__ = [
    "Explanation",
    "FairJob",
    "FairJobFunction",
    "FairQueue",
    "FairRouter",
    "InvalidTenant",
    "OrgProfile",
    "Reason",
    "RedisUnavailable",
    "ReplicasNotAcknowledged",
    "RqVersionError",
    "RqVersionWarning",
    "Rule",
    "Settings",
    "SettingsError",
    "Shards",
    "TenantBacklogFull",
    "TenantExplanation",
    "TenantReason",
    "WeightedSimpleWorker",
    "WeightedWorker",
    "explain",
    "explain_tenant",
    "fair_job",
    "interruptible",
    "load_settings",
    "shards_of",
]
