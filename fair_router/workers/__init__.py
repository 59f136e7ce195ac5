"""The weighted workers: fetch order, tenant controls at job start, crash recovery and the process pool."""
