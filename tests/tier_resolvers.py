"""A tier resolver importable as ``tier_resolvers:by_name`` (settings ``tiers.resolver``)."""


def by_name(tenant: str) -> str | None:
    """Tenants named ``ent-*`` are enterprise, ``pro-*`` pro; everyone else unknown (-> default tier)."""
    if tenant.startswith("ent-"):
        return "enterprise"
    if tenant.startswith("pro-"):
        return "pro"
    return None
