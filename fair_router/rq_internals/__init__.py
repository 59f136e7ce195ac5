"""rq internals fair-router touches: every rq member that is not public API lives in this package; each, and what
breaks if rq changes it: :mod:`~fair_router.rq_internals.members` and docs/compatibility.md."""
