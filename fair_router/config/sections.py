"""The settings' sections, one pydantic model each; :class:`~fair_router.config.settings.Settings` holds and re-exports
them."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from fair_router.core.rules import Rule, shadowed
from fair_router.core.shards import Shards
from fair_router.core.validation import (
    MAX_RULES,
    MAX_TIERS,
    AtLeastOne,
    Duration,
    FairWeight,
    QueueName,
    RateField,
    TierName,
    at_most,
)


class JobConfig(BaseModel):
    """Routing of one job function, keyed by its dotted path (``module.qualname``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queue: QueueName | None = None
    rules: Annotated[list[Rule], at_most(MAX_RULES, "rules per job")] = Field(default_factory=list)
    rate: RateField | None = None  # starts per tenant of this job function, e.g. "10/s"
    burst: AtLeastOne | None = None  # starts allowed at once after a quiet spell (default 1)
    shards: Shards | None = None  # shuffle-sharding: {count: 8, per_tenant: 2}

    @model_validator(mode="after")
    def _consistent(self) -> JobConfig:
        if self.burst is not None and self.rate is None:
            raise ValueError("burst is set without a rate: give rate too (e.g. rate: 10/s)")
        rules = self.rules  # a rule that can never be the last match: name the later rule that always wins, the fix
        if problems := [f"rules[{i}] ({rules[i].describe()}) never applies: rules[{j}] ({rules[j].describe()}) "
                        "matches whenever it does, and the last matching rule wins; list rules from least to most "
                        "restrictive (each later rule needs a shorter window or a higher threshold than every earlier "
                        "one)" for i, j in shadowed(rules)]:
            raise ValueError("; ".join(problems))
        return self

    def families(self) -> list[str]:
        """The queue families this job key routes to: its base queue (``default`` when unset), then its rules'."""
        base = self.queue or "default"
        return [base, *(rule.for_base(base).queue for rule in self.rules)]


class OrgConfig(BaseModel):
    """One organisation's settings (``orgs: {<org>: {weight: N, concurrency: N, rate: "100/m", tier: pro}}``): its
    share against other orgs in a FairQueue, and the limits every job of its tenants passes at its start, across
    all of them (its tier's ``tiers.concurrency``/``rate`` where it sets none of its own)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    weight: FairWeight = 1.0
    concurrency: AtLeastOne | None = None  # jobs of the org's tenants running at once, across every worker
    rate: RateField | None = None  # job starts of the org's tenants, e.g. "100/m"
    burst: AtLeastOne | None = None  # starts allowed at once after a quiet spell (default 1)
    tier: TierName | None = None  # a tier of `tiers:`: the org's concurrency and rate where it sets none

    @model_validator(mode="after")
    def _burst_needs_rate(self) -> OrgConfig:
        if self.burst is not None and self.rate is None and self.tier is None:
            raise ValueError("burst is set without a rate: give rate too (e.g. rate: 100/m)")
        return self

    def configured_limit(self, tiers: TiersConfig | None) -> tuple[int | None, str]:
        """The org's concurrency limit from the settings, with its source: its own (``"settings"``), else its
        tier's (``"tier <name>"``), else ``(None, "none")``; an override (``org set``) beats both."""
        if self.concurrency is not None:
            return self.concurrency, "settings"
        if tiers is not None and self.tier in tiers.concurrency:
            return tiers.concurrency[self.tier], f"tier {self.tier}"
        return None, "none"


ADR_LIMITS = {"free": 1, "pro": 3, "pro_plus": 3, "enterprise": 5}


def _resolver_path(value: object) -> object:
    """``package.module:function``, importable now, so a typo fails at load rather than per job."""
    if value is None:
        return None
    if not isinstance(value, str) or value.count(":") != 1:
        raise ValueError(f"resolver must be 'package.module:function', got {value!r}")
    module_name, _, attribute = value.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"resolver {value!r}: cannot import {module_name!r} ({exc})") from None
    if not callable(getattr(module, attribute, None)):
        raise ValueError(f"resolver {value!r}: {module_name} has no callable {attribute!r}")
    return value


class TiersConfig(BaseModel):
    """Plan tiers: priority queues, concurrency limits and fair-queue weights (defaults ``ADR_LIMITS``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: TierName = "free"
    resolver: Annotated[str | None, BeforeValidator(_resolver_path)] = None
    priority: list[TierName] = Field(default_factory=lambda: ["pro", "pro_plus", "enterprise"])
    concurrency: Annotated[dict[TierName, AtLeastOne], at_most(MAX_TIERS, "tiers")] = Field(
        default_factory=lambda: dict(ADR_LIMITS))
    weights: dict[TierName, FairWeight] = Field(default_factory=dict)
    rate: dict[TierName, RateField] = Field(default_factory=dict)  # job starts per tenant, e.g. {free: 2/s}
    burst: dict[TierName, AtLeastOne] = Field(default_factory=dict)  # default 1
    max_backlog: dict[TierName, AtLeastOne] = Field(default_factory=dict)  # per fair queue

    @model_validator(mode="after")
    def _known_tiers(self) -> TiersConfig:
        known = set(self.concurrency)
        named = {*self.priority, *self.weights, *self.rate, *self.burst, *self.max_backlog, self.default}
        if unknown := sorted(named - known):
            raise ValueError(f"unknown tier(s) {', '.join(map(repr, unknown))}: tiers are the keys of "
                             f"tiers.concurrency ({', '.join(sorted(known))})")
        return self

    def limit(self, tier: str) -> int:
        """Concurrent jobs allowed for ``tier`` (an unknown tier counts as the default tier)."""
        return self.concurrency.get(tier, self.concurrency[self.default])

    def weight(self, tier: str) -> float:
        """Fair-queue weight of ``tier`` (default 1)."""
        return self.weights.get(tier, 1.0)


class ConcurrencyConfig(BaseModel):
    """Fleet-wide per-tenant concurrency limits enforced by the weighted workers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    lease_ttl: Duration = 60.0
    snooze: Duration = 30.0
    jitter: Duration = 10.0


def _bounded(name: str, fits: Callable[[float], bool], rule: str) -> AfterValidator:
    """A duration check: ``fits`` or a ValueError saying ``name must be <rule>, got <value>s``."""

    def check(value: float) -> float:
        if not fits(value):
            raise ValueError(f"{name} must be {rule}, got {value:g}s")
        return value

    return AfterValidator(check)


MIN_ABANDON_AFTER = 3.0
"""Heartbeats come every ``abandon_after / 3`` whole seconds, so below 3 s a live job could look abandoned."""


class RecoveryConfig(BaseModel):
    """Bounded crash recovery: a job without a heartbeat for ``abandon_after`` is handed back as rq would."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    abandon_after: Annotated[Duration, _bounded(
        "abandon_after", lambda value: value >= MIN_ABANDON_AFTER, f"at least {MIN_ABANDON_AFTER:g}s (workers "
        "heartbeat a running job every abandon_after/3 in whole seconds)")] = 60.0


class InterruptibleConfig(BaseModel):
    """Interruptible iteration: long generator jobs that give up their worker at checkpoints and take turns."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_resumes: Annotated[int, Field(ge=0)] = 5
    """Times crash recovery resumes an abandoned interruptible job from its cursor before handing it back."""
    count_turns: bool = False
    """Rate limits count every turn of an interruptible job as a start (else only its first turn)."""


class ObserveConfig(BaseModel):
    """What workers record at each job start, and what the dashboard and ``/metrics`` show."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    record: bool = True
    """Record each job's wait as a weighted worker starts it (rides rq's own job-start pipeline)."""
    top_tenants: Annotated[int, Field(ge=1, le=1000)] = 10
    """Tenants shown by name (most waiting or running); the rest are summed under ``_other``."""
    tenants_per_minute: Annotated[int, Field(ge=1)] = 500
    """Tenants with a record of their own per minute (others go to ``_other``): bounds the records' memory."""
    retention: Annotated[Duration, _bounded("retention", lambda value: value >= 62 * 60,
                                            "at least 62m (the 60-minute wait figures need it)")] = 7200.0
    """A record expires this long after its last start; at least 62 minutes, for the 60-minute figures."""
    flush_interval: Annotated[Duration, _bounded("flush_interval", lambda value: value <= 60, "at most 60s (the "
                                                 "dashboard's figures lag by up to twice it)")] = 1.0
    """A worker sends its start records at most once per this interval (at most 60s), the most a kill loses."""


Charge = Literal["jobs", "runtime"]
"""What a fair share divides: jobs (a pop costs 1 / weight) or worker time (run time / weight, settled at the end)."""
