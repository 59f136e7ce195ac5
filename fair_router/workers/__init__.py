"""The weighted workers: fetch order, tenant controls at job start, crash recovery, the process pool (rq's
internals they rely on: fair_router.rq_internals.worker)."""
