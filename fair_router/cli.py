"""The ``fair-router`` command: check settings, inspect tenant windows, run the demo.

This module is the group (the console script ``fair_router.cli:main``); each command lives with the others
of its concern in :mod:`fair_router.commands` and is added here.
"""

from __future__ import annotations

import click

from fair_router.commands.dashboard import dashboard
from fair_router.commands.demo import demo
from fair_router.commands.queues import queue
from fair_router.commands.routing import check, stats
from fair_router.commands.tenants import tenant, tier
from fair_router.commands.workers import pool, worker


@click.group()
def main() -> None:
    """fair-router: fair multi-tenant background jobs for RQ."""


for command in (check, stats, tier, tenant, queue, demo, dashboard, worker, pool):
    main.add_command(command)


if __name__ == "__main__":  # python -m fair_router.cli (the tests run the dashboard so)
    main()
