"""``fair-router org ...``: an organisation's weight and limit overrides (beat the settings' ``orgs:``), its pause,
and what is in effect, with its tenants waiting in each fair queue."""

from __future__ import annotations

from pathlib import Path

import click

from fair_router.commands.common import COUNT, FAIR_WEIGHT, RATE, load_or_exit, router_for
from fair_router.config.settings import Settings
from fair_router.core.rates import Rate


@click.group()
def org() -> None:
    """Per-organisation controls (fair_org=): its weight against other orgs, its limits, its pause, and its tenants
    waiting."""


@org.command("set")
@click.argument("org_id", metavar="ORG")
@click.option("--weight", type=FAIR_WEIGHT, help="Fair-queue weight against other orgs (beats orgs.<ORG>.weight).")
@click.option("--concurrency", type=COUNT, help="Jobs of its tenants running at once (beats orgs.<ORG>.concurrency).")
@click.option("--rate", type=RATE, help="Job starts of its tenants per unit: N/s, N/m or N/h (beats orgs.<ORG>.rate).")
@click.option("--burst", type=COUNT, help="Starts allowed at once with its rate (beats orgs.<ORG>.burst).")
@click.option("--tier", help="Its tier (beats orgs.<ORG>.tier): its limits', and its tenants' without a tier.")
@click.option("--reset", is_flag=True, help="Drop its earlier overrides first.")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def org_set(org_id: str, weight: float | None, concurrency: int | None, rate: Rate | None, burst: int | None,
            tier: str | None, reset: bool, config: Path | None) -> None:
    """Override ORG's weight, limits and tier; every producer and worker uses them within 5 s."""
    settings = load_or_exit(config)
    try:
        router_for(settings).tenants.set_org(org_id, weight=weight, reset=reset, concurrency=concurrency, rate=rate,
                                             burst=burst, tier=tier)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--tier") from None
    _show_org(settings, org_id)


@org.command("show")
@click.argument("org_id", metavar="ORG")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def org_show(org_id: str, config: Path | None) -> None:
    """ORG's weight and limits and where they come from, whether it is paused, and its tenants waiting in each
    fair queue with their counts."""
    _show_org(load_or_exit(config), org_id)


@org.command("pause")
@click.argument("org_id", metavar="ORG")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def org_pause(org_id: str, config: Path | None) -> None:
    """No job of ORG's tenants starts until `org resume` (running jobs finish; nothing is failed or lost)."""
    settings = load_or_exit(config)
    router_for(settings).tenants.pause_org(org_id)
    _show_org(settings, org_id)


@org.command("resume")
@click.argument("org_id", metavar="ORG")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def org_resume(org_id: str, config: Path | None) -> None:
    """ORG's tenants' jobs start again; its tenants waiting in fair queues are served at once."""
    settings = load_or_exit(config)
    router_for(settings).tenants.resume_org(org_id)
    _show_org(settings, org_id)


SOURCES = {"override": " (override)", "settings": " (settings orgs:)", "default": " (default)", "none": ""}


def _show_org(settings: Settings, org_id: str) -> None:
    router = router_for(settings)
    profile = router.tenants.org(org_id, settings.orgs, settings.tiers)
    click.echo(f"org {profile.org!r}")
    click.echo(f"  weight      {profile.weight:g}{SOURCES[profile.source]}")
    if profile.tier is not None:
        click.echo(f"  tier        {profile.tier}{SOURCES[profile.tier_source]}")
    limit = "none" if profile.limit is None else str(profile.limit)
    click.echo(f"  concurrency {limit}{SOURCES.get(profile.limit_source, f' ({profile.limit_source})')}")
    rate = "none" if profile.rate is None else f"{profile.rate} (burst {profile.burst})"
    click.echo(f"  rate        {rate}{SOURCES.get(profile.rate_source, f' ({profile.rate_source})')}")
    since = router.tenants.org_paused_since(org_id)
    click.echo(f"  paused      {'since ' + since.isoformat() if since else 'no'}")
    waiting = router.tenants.org_jobs(org_id)
    for queue, tenants in waiting.items():
        listed = ", ".join(f"{tenant} {count}" for tenant, count in tenants.items())
        click.echo(f"  waiting     {sum(tenants.values())} in {queue}: {listed}")
    if not waiting:
        click.echo("  waiting     none in any fair queue")
