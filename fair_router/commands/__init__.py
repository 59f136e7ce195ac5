"""The ``fair-router`` commands, one module per concern; :mod:`fair_router.cli` adds them to its group.

- :mod:`~fair_router.commands.common`: settings loading for a command, the router, validated option types;
- :mod:`~fair_router.commands.routing`: ``check`` (settings and rules) and ``stats`` (windows, limits);
- :mod:`~fair_router.commands.tenants`: ``tier get|set`` and ``tenant set|show|pause|resume``;
- :mod:`~fair_router.commands.workers`: ``worker`` and ``pool``;
- :mod:`~fair_router.commands.dashboard`: ``dashboard`` (the live page and ``/metrics``);
- :mod:`~fair_router.commands.demo`: ``demo`` (the flood scenario).

They live apart from :mod:`fair_router.cli` (not in a ``cli/`` package of their own) so that the group
imports its commands and no command imports the group: no import cycle (tests/test_imports.py).
"""
