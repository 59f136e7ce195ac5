"""``fair-router org ...``: an organisation's weight override (beats the settings' ``orgs:``) and what is in
effect, with its tenants waiting in each fair queue."""

from __future__ import annotations

from pathlib import Path

import click

from fair_router.commands.common import FAIR_WEIGHT, load_or_exit, router_for
from fair_router.config.settings import Settings


@click.group()
def org() -> None:
    """Per-organisation controls (fair_org=): its weight against other orgs, and its tenants waiting."""


@org.command("set")
@click.argument("org_id", metavar="ORG")
@click.option("--weight", type=FAIR_WEIGHT, help="Fair-queue weight against other orgs (beats orgs.<ORG>.weight).")
@click.option("--reset", is_flag=True, help="Drop its earlier override first.")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def org_set(org_id: str, weight: float | None, reset: bool, config: Path | None) -> None:
    """Override ORG's weight; every producer's pushes carry it within 5 s."""
    settings = load_or_exit(config)
    router_for(settings).tenants.set_org(org_id, weight=weight, reset=reset)
    _show_org(settings, org_id)


@org.command("show")
@click.argument("org_id", metavar="ORG")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def org_show(org_id: str, config: Path | None) -> None:
    """ORG's weight and where it comes from, and its tenants waiting in each fair queue with their counts."""
    _show_org(load_or_exit(config), org_id)


def _show_org(settings: Settings, org_id: str) -> None:
    router = router_for(settings)
    profile = router.tenants.org(org_id, settings.orgs)
    source = {"override": " (override)", "settings": " (settings orgs:)", "default": " (default)"}[profile.source]
    click.echo(f"org {profile.org!r}")
    click.echo(f"  weight      {profile.weight:g}{source}")
    waiting = router.tenants.org_jobs(org_id)
    for queue, tenants in waiting.items():
        listed = ", ".join(f"{tenant} {count}" for tenant, count in tenants.items())
        click.echo(f"  waiting     {sum(tenants.values())} in {queue}: {listed}")
    if not waiting:
        click.echo("  waiting     none in any fair queue")
