"""A tenant's profile: its tier's values with its own overrides on top (value types only; ``controls.tiers`` builds
them)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from fair_router.core.rates import Rate
from fair_router.core.validation import AtLeastOne, FairWeight, RateField

PRIORITY, DEFAULT, SCHEDULED = "priority", "default", "scheduled"
"""The three queue classes a job can be routed to by tier (``TierBook.queue_class``)."""


class TenantOverrides(BaseModel):
    """One tenant's own values, beating its tier's (None: the tier's value applies)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    limit: AtLeastOne | None = None
    weight: FairWeight | None = None
    rate: RateField | None = None
    burst: AtLeastOne | None = None
    max_backlog: AtLeastOne | None = None

    def fields(self) -> dict[str, str]:
        """The values set, as the strings stored in Redis."""
        return {name: str(value) for name, value in self.model_dump(exclude_none=True, mode="json").items()}


@dataclass(frozen=True)
class TenantProfile:
    """The values in effect for one tenant: its tier's, with its overrides on top."""

    tier: str
    limit: int
    weight: float
    rate: Rate | None
    burst: int
    max_backlog: int | None
    overrides: TenantOverrides
    paused: bool = False  # as of the lookup (cached like the rest; the start script reads the flag itself)
    tier_source: str = "own"  # "own" (tier map, resolver), "org <org>" (its org's), "default" (tiers.default)
