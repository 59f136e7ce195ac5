"""The ground floor: fair-router's shared vocabulary (tenants, job meta keys, rules, rates, durations, validated types,
profiles, shards, keys). It imports nothing of fair-router's above it, so a word means the same on every floor."""
