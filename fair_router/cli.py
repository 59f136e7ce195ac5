"""The ``fair-router`` command group (console script ``fair_router.cli:main``); the commands live in
:mod:`fair_router.commands`, and every one fails with one line and an exit status (``--debug`` shows the traceback)."""

from __future__ import annotations

import click

from fair_router.commands.dashboard import dashboard
from fair_router.commands.demo import demo
from fair_router.commands.failures import DEBUG, FailingCleanly
from fair_router.commands.orgs import org
from fair_router.commands.queues import queue
from fair_router.commands.routing import check, stats
from fair_router.commands.tenants import tenant, tier
from fair_router.commands.why import tenant_why, why
from fair_router.commands.workers import pool, worker


@click.group(cls=FailingCleanly)
@click.option("--debug", is_flag=True, help="Show the traceback of a failure instead of one line.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """fair-router: fair multi-tenant background jobs for RQ."""
    ctx.meta[DEBUG] = debug


for command in (check, stats, tier, tenant, org, queue, demo, dashboard, worker, pool, why):
    main.add_command(command)
tenant.add_command(tenant_why)  # fair-router tenant why


if __name__ == "__main__":  # python -m fair_router.cli (the tests run the dashboard so)
    main()
