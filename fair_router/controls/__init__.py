"""Tenant controls at job start: concurrency slots, rate limits, pauses, backlog caps."""
