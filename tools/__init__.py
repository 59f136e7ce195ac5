"""Developer tools run from a checkout (not shipped in the wheel): ``python -m tools.build_lua`` (``make lua``)."""
