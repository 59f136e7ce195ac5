"""Redis plumbing: the Lua script loader and wrappers, cluster and replica clients, outages and out-of-memory."""
