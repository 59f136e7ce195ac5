"""rq internals fair-router touches: every rq member that is not public API, or whose code is copied, lives in this
package (the queue seam ``queue.py``, the worker seam ``worker.py``, crash recovery's view of rq's registry
``registry.py``, interruptible turns' seam ``turns.py``). Each member, why it is touched and what breaks if rq
changes it: :mod:`fair_router.rq_internals.members` (checked at import by :mod:`~fair_router.rq_internals.guard`)
and docs/compatibility.md. Upgrading rq means checking these modules against it and running ``python -m
compat.run`` (rq's own suite with our classes substituted)."""
