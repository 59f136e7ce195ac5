"""fair-router: fair multi-tenant background jobs for RQ on Redis. The public API is :data:`__all__`, documented
in docs/api.md; each name is imported from its module (:data:`HOMES`) when first read.
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
