"""The ``fair-router`` commands, one module per concern; :mod:`fair_router.cli` adds them to its group (no cycle)."""
