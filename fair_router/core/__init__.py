"""The ground floor: fair-router's shared vocabulary.

Tenants and their encoding (``tenancy``), the ``job.meta`` keys (``jobmeta``), throttle rules (``rules``),
rates (``rates``), durations (``durations``), the validated field types (``validation``), tenant profiles
(``profiles``), the shard deal (``shards``) and the one key builder (``keys``). Every feature package
(config, store, controls, fairqueue, routing, iteration, observe, workers, commands) imports from here;
this package imports nothing of fair-router's above it, so a word means the same on every floor.
"""
