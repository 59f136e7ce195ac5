"""``fair-router check`` (the settings and their rules) and ``fair-router stats`` (a tenant's windows, or
the concurrency counters per tier)."""

from __future__ import annotations

import difflib
from pathlib import Path

import click

from fair_router.commands.checking import report, server_findings
from fair_router.commands.common import load_or_exit, router_for
from fair_router.commands.failures import fail
from fair_router.commands.workers import add_import_paths, path_option
from fair_router.config.crosscheck import job_key_findings
from fair_router.config.location import announce_mistyped_variables
from fair_router.config.settings import Settings, announce_source, default_config_path
from fair_router.core.durations import format_duration
from fair_router.core.rules import window_cap
from fair_router.routing.router import FairRouter, Route
from fair_router.workers.pool import redact_url


@click.command()
@click.argument("config", required=False, type=click.Path(path_type=Path))
@click.option("--ping", is_flag=True, help="Also connect to Redis: reachable (else exit 1), its version, tiers.")
@click.option("--deep", is_flag=True, help="Like --ping, and load every Lua script on that server.")
@path_option
def check(config: Path | None, ping: bool, deep: bool, paths: tuple[str, ...]) -> None:
    """Validate settings (CONFIG, else $FAIR_ROUTER_CONFIG / ./fair_router.yaml), print the rules, and check
    what breaks a deployment: queues no worker serves, job keys that do not import, unknown FAIR_ROUTER_*
    variables. Exit 2 on a bad setting, 1 if Redis is unreachable (--ping), 0 otherwise (warnings say so)."""
    add_import_paths(paths)  # job keys and the tier resolver import as in the workers
    file = config if config is not None else default_config_path()
    click.echo(f"settings:  {announce_source(file, log=False)}")
    announce_mistyped_variables(Settings.model_fields, log=False)  # reported below, as errors
    settings = load_or_exit(config)
    click.echo(f"redis_url: {redact_url(settings.redis_url)}\nprefix:    {settings.prefix}\n")
    rows = [("job key", "base queue", "#", "threshold", "per", "-> queue")]
    for job_key, job in settings.jobs.items():
        base = job.queue or "(decorator's)"
        if not job.rules:
            rows.append((job_key, base, "-", "", "", "(no rules)"))
        for i, rule in enumerate(job.rules, 1):
            rows.append((job_key if i == 1 else "", base if i == 1 else "", str(i), f"> {rule.threshold}",
                         format_duration(rule.per), rule.queue))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    if settings.queues:
        click.echo("\nqueue weights (strict first, in order; others by weight; unlisted = 1):")
        for name, weight in settings.queues.items():
            click.echo(f"  {name}: {weight if weight == 'strict' else f'{weight:g}'}")
    click.echo()
    report(settings, str(file) if file is not None else "FAIR_ROUTER_* environment",
           (lambda: server_findings(settings, deep)) if ping or deep else None)


@click.command()
@click.argument("job_key", required=False)
@click.argument("tenant", required=False)
@click.option("--limits", is_flag=True, help="Show per-tier concurrency counters and tier limits instead.")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def stats(job_key: str | None, tenant: str | None, limits: bool, config: Path | None) -> None:
    """Window counts of TENANT for JOB_KEY and where its next job would go (read-only); or --limits."""
    announce_source(config if config is not None else default_config_path(), log=False)
    settings = load_or_exit(config)
    router = router_for(settings)
    if limits:
        _print_limits(settings, router)
        return
    if job_key is None or tenant is None:
        raise click.UsageError("give JOB_KEY and TENANT, or --limits")
    if job_key not in settings.jobs:
        _known_or_exit(job_key, settings)
    job = settings.job(job_key)
    route = Route(job_key, job.queue or "default", tuple(job.rules))
    view = router.peek(route, tenant)
    click.echo(f"job key {job_key}, tenant {tenant!r}, base queue {route.queue}")
    if not route.rules:
        click.echo("no rules configured for this job key")
    cap = window_cap(route.rules) if route.rules else 0
    for rule, count in zip(route.rules, view.counts, strict=True):
        state = "MATCHES" if rule.matches(count) else "ok"
        shown = f"≥{count}" if count >= cap else str(count)
        click.echo(f"  {shown:>8} enqueued in last {format_duration(rule.per):<6} {rule.describe():<40} {state}")
    if any(count >= cap for count in view.counts):
        click.echo(f"  (≥{cap}: a window keeps only the newest {cap} enqueues, the largest threshold + 1, which "
                   "decides every rule; older ones in the period are not counted)")
    reason = f" (rule: {view.next_rule.describe()})" if view.next_rule else ""
    click.echo(f"next job would go to: {view.next_queue}{reason}")


def _known_or_exit(job_key: str, settings: Settings) -> None:
    """Exit unless a job key the settings do not name imports as a ``@fair_job`` function's path (else a typo)."""
    findings = [finding for finding in job_key_findings(job_key, f"job key {job_key!r}") if finding.level == "error"]
    if not findings and "." in job_key:
        return
    known = ", ".join(sorted(settings.jobs)) or "none"
    close = difflib.get_close_matches(job_key, list(settings.jobs), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    fail(f"error: job key {job_key!r} is not in the settings ({settings.source_file or 'no settings file'}) and "
         f"does not import as a @fair_job function{hint} (job keys in the settings: {known})", 1)


def _print_limits(settings: Settings, router: FairRouter) -> None:
    from fair_router.observe.counters import COUNTERS, TierCounters

    counters = TierCounters(router.connection, router.keys).read()
    state = "enabled" if settings.concurrency.enabled else "disabled (concurrency.enabled: false)"
    click.echo(f"concurrency limits: {state}; lease_ttl {format_duration(settings.concurrency.lease_ttl)}, "
               f"snooze {format_duration(settings.concurrency.snooze)} + up to "
               f"{format_duration(settings.concurrency.jitter)} jitter")
    click.echo(f"  {'tier':<14}{'limit':>6}{'priority':>10}" + "".join(f"{name:>11}" for name in COUNTERS))
    for tier in sorted({*settings.tiers.concurrency, *counters}):
        row = counters.get(tier, dict.fromkeys(COUNTERS, 0))
        priority = "yes" if tier in settings.tiers.priority else ""
        click.echo(f"  {tier:<14}{settings.tiers.limit(tier):>6}{priority:>10}"
                   + "".join(f"{row[name]:>11}" for name in COUNTERS))
