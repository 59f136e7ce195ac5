"""A tier resolver importable as ``tier_resolvers:by_name`` (settings ``tiers.resolver``)."""


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
