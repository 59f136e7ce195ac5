"""Tier resolvers importable as ``tier_resolvers:<name>`` (settings ``tiers.resolver``)."""

from collections.abc import Callable


def by_name(tenant: str) -> str | None:
    """Tenants named ``ent-*`` are enterprise, ``pro-*`` pro; everyone else unknown (-> default tier)."""
    if tenant.startswith("ent-"):
        return "enterprise"
    if tenant.startswith("pro-"):
        return "pro"
    return None


TABLE: dict[str, str] = {}
"""What :func:`from_table` answers; a test changes it to change a tenant's tier behind the cache's back."""


def from_table(tenant: str) -> str | None:
    """The tier ``TABLE`` names for ``tenant`` (``tier_resolvers:from_table``)."""
    return TABLE.get(tenant)


DURING_READ: list[Callable[[], None]] = []
"""Work :func:`interleaved` runs (once) as a TierBook reads a profile: what another thread does meanwhile."""


def interleaved(tenant: str) -> str | None:
    """No tier (``tier_resolvers:interleaved``); first runs what a test queued in ``DURING_READ``."""
    while DURING_READ:
        DURING_READ.pop()()
    return None
