"""Enqueue-time routing: throttle rules, the window router, the decorator, tenancy and tiers."""
