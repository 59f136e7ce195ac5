"""Enqueue-time routing: the router (route.lua records each enqueue in its tenant's window and picks the
rule's queue), the @fair_job decorator, and shard placement."""
