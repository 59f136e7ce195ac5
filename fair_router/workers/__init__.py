"""The weighted workers: fetch order, lean bookkeeping, crash recovery, the process pool."""
