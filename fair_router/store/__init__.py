"""Redis plumbing: the Lua script loader and wrappers (scripts live in the top-level lua/), cluster and replica
clients, outage and out-of-memory handling. Keys are built in fair_router.core.keys."""
