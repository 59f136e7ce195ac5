"""Redis: the one key builder, and the Lua script wrappers (scripts live in the top-level lua/)."""
