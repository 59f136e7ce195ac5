"""``fair-router tier ...`` (a tenant's plan tier) and ``fair-router tenant ...`` (its overrides, pause and
resume, and what is in effect)."""

from __future__ import annotations

from pathlib import Path

import click
from rq import Queue

from fair_router.commands.common import COUNT, FAIR_WEIGHT, RATE, load_or_exit, router_for
from fair_router.config.settings import Settings
from fair_router.controls.orgs import tenant_orgs
from fair_router.core.keys import encode
from fair_router.core.rates import Rate
from fair_router.dashboard.iterations import known_queues, running_iterations
from fair_router.dashboard.reader import plain_waiting, reconciled
from fair_router.fairqueue.reconcile import RECONCILE_BOUND, fair_queues
from fair_router.observe.waitcheck import WaitingReconciler, routed_job_keys
from fair_router.routing.router import FairRouter


@click.group()
def tier() -> None:
    """Read or set a tenant's plan tier (stored in Redis; used when no tiers.resolver is set)."""


@tier.command("set")
@click.argument("tenant")
@click.argument("tier_name", metavar="TIER")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def tier_set(tenant: str, tier_name: str, config: Path | None) -> None:
    """Put TENANT on TIER."""
    router = router_for(load_or_exit(config))
    tenant = router.tenant_id(tenant)  # a bad tenant id is its own error, not TIER's
    try:
        router.set_tier(tenant, tier_name)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="TIER") from None
    click.echo(f"{tenant}: {tier_name}")


@tier.command("get")
@click.argument("tenant")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def tier_get(tenant: str, config: Path | None) -> None:
    """Print TENANT's tier and what it means."""
    settings = load_or_exit(config)
    router = router_for(settings)
    name = router.get_tier(tenant)
    kind = "priority" if name in settings.tiers.priority else "default"
    click.echo(f"{tenant}: {name} (queue class {kind}, {settings.tiers.limit(name)} at once)")


@click.group()
def tenant() -> None:
    """Per-tenant controls: overrides of the tier's values, pause and resume, and what is in effect."""


@tenant.command("set")
@click.argument("tenant_id", metavar="TENANT")
@click.option("--limit", type=COUNT, help="Jobs it may run at once (beats tiers.concurrency).")
@click.option("--weight", type=FAIR_WEIGHT, help="Fair-queue weight (beats tiers.weights).")
@click.option("--rate", type=RATE, help="Job starts per unit: N/s, N/m or N/h (beats tiers.rate).")
@click.option("--burst", type=COUNT, help="Starts allowed at once with its rate (beats tiers.burst).")
@click.option("--max-backlog", type=COUNT, help="Waiting jobs per fair queue (beats max_backlog).")
@click.option("--reset", is_flag=True, help="Drop its earlier overrides first.")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def tenant_set(tenant_id: str, limit: int | None, weight: float | None, rate: Rate | None, burst: int | None,
               max_backlog: int | None, reset: bool, config: Path | None) -> None:
    """Override TENANT's tier values; every worker and producer uses them within 5 s."""
    settings = load_or_exit(config)
    router_for(settings).set_tenant(tenant_id, limit=limit, weight=weight, rate=rate, burst=burst,
                                 max_backlog=max_backlog, reset=reset)
    _show_tenant(settings, tenant_id)


@tenant.command("show")
@click.argument("tenant_id", metavar="TENANT")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def tenant_show(tenant_id: str, config: Path | None) -> None:
    """TENANT's tier, effective limit, weight, rate and backlog cap, running and waiting jobs, paused or not,
    and its interruptible jobs running (cursor, turns, items)."""
    _show_tenant(load_or_exit(config), tenant_id)


for _action, _help in (("pause", "No job of TENANT starts until resume (its jobs wait; running ones finish; system "
                                  "jobs run)."), ("resume", "TENANT's jobs may start again.")):

    @tenant.command(_action, help=_help)
    @click.argument("tenant_id", metavar="TENANT")
    @click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
    def _pause_or_resume(tenant_id: str, config: Path | None, action: str = _action) -> None:
        getattr(router_for(load_or_exit(config)), action)(tenant_id)
        click.echo(f"{tenant_id}: {action}d")


def _show_tenant(settings: Settings, tenant_id: str) -> None:
    router = router_for(settings)
    orgs = tenant_orgs(router.rq_connection, router.keys, router.tenant_id(tenant_id))  # where it waits under one
    profile = router.tenant(tenant_id, next(iter(orgs.values()), None))  # one org per tenant
    own = set(profile.overrides.fields())

    def mark(name: str) -> str:
        return " (override)" if name in own else ""

    rate = f"{profile.rate}, burst {profile.burst}" if profile.rate else "unlimited"
    cap = profile.max_backlog if profile.max_backlog is not None else "none"
    since = router.tenants.paused_since(tenant_id)
    paused = f" (PAUSED since {since:%Y-%m-%d %H:%M:%S}Z)" if since else " (PAUSED)" if router.paused(tenant_id) else ""
    source = profile.tier_source + ("'s" if profile.tier_source.startswith("org ") else "")
    click.echo(f"tenant {tenant_id!r}: tier {profile.tier} ({source}){paused}")
    if orgs:
        click.echo("  org         " + ", ".join(f"{name} (in {queue})" for queue, name in orgs.items()))
    click.echo(f"  limit       {profile.limit} at once{mark('limit')}"
               f"{'' if settings.concurrency.enabled else ' (concurrency.enabled is off)'}")
    click.echo(f"  weight      {profile.weight:g}{mark('weight')}")
    click.echo(f"  rate        {rate}{mark('rate') or mark('burst')}")
    click.echo(f"  max_backlog {cap}{mark('max_backlog')}")
    approximate, routed = reconciled_counts(router, settings, router.tenant_id(tenant_id))
    running, waiting = router.tenant_jobs(tenant_id)
    click.echo(f"  running     {running}")
    for queue, count in [*waiting.items(), *routed.items()]:
        kind = " (routed plain queue)" if queue in routed else ""
        note = (f" (approximate: more than {RECONCILE_BOUND} entries waiting there, not compared with rq's list)"
                if queue in approximate else "")
        click.echo(f"  waiting     {count} in {queue}{kind}{note}")
    if not waiting and not routed:
        click.echo("  waiting     none in any fair queue or routed plain queue")
    for it in running_iterations(router.connection, known_queues(router.connection), tenant_id,
                                 router.tenant_max_bytes):
        click.echo(f"  iterating   job {it.job_id} in {it.queue} ({it.func}): cursor {it.cursor}, "
                   f"turn {it.turns}, {it.items} items")


def reconciled_counts(router: FairRouter, settings: Settings, tenant: str) -> tuple[set[str], dict[str, int]]:
    """The approximate queues, and ``tenant``'s jobs waiting per routed plain queue, the counts reconciled first with
    rq's lists (rq's own cancels, deletes and requeues change them without our code)."""
    names = known_queues(router.rq_connection)
    fair = fair_queues(router.rq_connection, settings, names)
    plain = [name for name in names if name not in {queue.name for queue in fair}]
    job_keys = routed_job_keys(router.connection, router.keys, [key for key, job in settings.jobs.items() if job.rules])
    approximate = reconciled(fair, WaitingReconciler(router.connection, router.keys, router.rq_connection,
                                                     tenant_max_bytes=settings.tenant_max_bytes), names, job_keys)
    with router.connection.pipeline(transaction=False) as pipe:
        for job_key in job_keys:
            pipe.hgetall(router.keys.waiting(job_key)[0])
        counts = pipe.execute()
    with router.rq_connection.pipeline(transaction=False) as pipe:
        for queue in plain:
            pipe.llen(Queue.redis_queue_namespace_prefix + queue)
        lengths = dict(zip(plain, pipe.execute(), strict=True))
    wanted = encode(tenant)
    waiting = plain_waiting(counts, lengths)  # an empty list has nothing waiting, whatever counts were left
    return approximate, {queue: tenants[wanted] for queue, tenants in waiting.items() if wanted in tenants}
