"""The ``fair-router`` commands, one module per concern; :mod:`fair_router.cli` adds them to its group, so no command
imports the group (no import cycle)."""
