"""The ``fair-router`` command: check settings, inspect tenant windows, run the demo."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import click
from pydantic import TypeAdapter, ValidationError
from redis import Redis

from fair_router.config.durations import format_duration
from fair_router.config.settings import Settings, SettingsError, load_settings
from fair_router.config.validation import AtLeastOne, FairWeight, RateField
from fair_router.controls.rates import Rate
from fair_router.routing.router import FairRouter, Route


def _settings(config: Path | None) -> Settings:
    try:
        return load_settings(config)
    except SettingsError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)


@click.group()
def main() -> None:
    """fair-router: fair multi-tenant background jobs for RQ."""


@main.command()
@click.argument("config", required=False, type=click.Path(path_type=Path))
def check(config: Path | None) -> None:
    """Validate settings (CONFIG, else $FAIR_ROUTER_CONFIG / ./fair_router.yaml) and print the rules."""
    settings = _settings(config)
    click.echo(f"redis_url: {settings.redis_url}\nprefix:    {settings.prefix}\n")
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
    click.echo("\nsettings OK")


@main.command()
@click.argument("job_key", required=False)
@click.argument("tenant", required=False)
@click.option("--limits", is_flag=True, help="Show per-tier concurrency counters and tier limits instead.")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def stats(job_key: str | None, tenant: str | None, limits: bool, config: Path | None) -> None:
    """Window counts of TENANT for JOB_KEY and where its next job would go (read-only); or --limits."""
    settings = _settings(config)
    router = _router(settings)
    if limits:
        _print_limits(settings, router)
        return
    if job_key is None or tenant is None:
        raise click.UsageError("give JOB_KEY and TENANT, or --limits")
    job = settings.job(job_key)
    route = Route(job_key, job.queue or "default", tuple(job.rules))
    view = router.peek(route, tenant)
    click.echo(f"job key {job_key}, tenant {tenant!r}, base queue {route.queue}")
    if not route.rules:
        click.echo("no rules configured for this job key")
    for rule, count in zip(route.rules, view.counts, strict=True):
        state = "MATCHES" if rule.matches(count) else "ok"
        click.echo(f"  {count:>8} enqueued in last {format_duration(rule.per):<6} {rule.describe():<40} {state}")
    reason = f" (rule: {view.next_rule.describe()})" if view.next_rule else ""
    click.echo(f"next job would go to: {view.next_queue}{reason}")


def _router(settings: Settings) -> FairRouter:
    return FairRouter(Redis.from_url(settings.redis_url), prefix=settings.prefix, tiers=settings.tiers)


def _print_limits(settings: Settings, router: FairRouter) -> None:
    from fair_router.controls.concurrency import COUNTERS, ConcurrencyLimiter

    limiter = ConcurrencyLimiter(router.connection, router.keys, router.tiers, settings.concurrency)
    counters = limiter.counters()
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


@main.group()
def tier() -> None:
    """Read or set a tenant's plan tier (stored in Redis; used when no tiers.resolver is set)."""


@tier.command("set")
@click.argument("tenant")
@click.argument("tier_name", metavar="TIER")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def tier_set(tenant: str, tier_name: str, config: Path | None) -> None:
    """Put TENANT on TIER."""
    router = _router(_settings(config))
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
    settings = _settings(config)
    router = _router(settings)
    name = router.get_tier(tenant)
    kind = "priority" if name in settings.tiers.priority else "default"
    click.echo(f"{tenant}: {name} (queue class {kind}, {settings.tiers.limit(name)} at once)")


@main.group()
def tenant() -> None:
    """Per-tenant controls: overrides of the tier's values, pause and resume, and what is in effect."""


class Validated(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on, plain before
    """A click parameter checked by one of :mod:`fair_router.config.validation`'s types, through a pydantic
    TypeAdapter: an option takes exactly what the setting it overrides takes, with the same message."""

    def __init__(self, annotated: Any, name: str) -> None:
        self.adapter: TypeAdapter[Any] = TypeAdapter(annotated)
        self.name = name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):  # already converted (a default, or a value given in code)
            return value
        try:
            return self.adapter.validate_python(value)
        except ValidationError as exc:
            self.fail("; ".join(error["msg"].removeprefix("Value error, ")
                                + ("" if error["type"] == "value_error" else f" (got {value!r})")
                                for error in exc.errors()), param, ctx)


COUNT = Validated(AtLeastOne, "count")
FAIR_WEIGHT = Validated(FairWeight, "weight")
RATE = Validated(RateField, "rate")


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
    settings = _settings(config)
    _router(settings).set_tenant(tenant_id, limit=limit, weight=weight, rate=rate, burst=burst,
                                 max_backlog=max_backlog, reset=reset)
    _show_tenant(settings, tenant_id)


@tenant.command("show")
@click.argument("tenant_id", metavar="TENANT")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def tenant_show(tenant_id: str, config: Path | None) -> None:
    """TENANT's tier, effective limit, weight, rate and backlog cap, running and waiting jobs, paused or not."""
    _show_tenant(_settings(config), tenant_id)


@tenant.command("pause")
@click.argument("tenant_id", metavar="TENANT")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def tenant_pause(tenant_id: str, config: Path | None) -> None:
    """No job of TENANT starts until resume (its jobs wait; running ones finish; system jobs run)."""
    _router(_settings(config)).pause(tenant_id)
    click.echo(f"{tenant_id}: paused")


@tenant.command("resume")
@click.argument("tenant_id", metavar="TENANT")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def tenant_resume(tenant_id: str, config: Path | None) -> None:
    """TENANT's jobs may start again."""
    _router(_settings(config)).resume(tenant_id)
    click.echo(f"{tenant_id}: resumed")


def _show_tenant(settings: Settings, tenant_id: str) -> None:
    router = _router(settings)
    profile = router.tenant(tenant_id)
    own = set(profile.overrides.fields())

    def mark(name: str) -> str:
        return " (override)" if name in own else ""

    rate = f"{profile.rate}, burst {profile.burst}" if profile.rate else "unlimited"
    cap = profile.max_backlog if profile.max_backlog is not None else "none"
    click.echo(f"tenant {tenant_id!r}: tier {profile.tier}{' (PAUSED)' if router.paused(tenant_id) else ''}")
    click.echo(f"  limit       {profile.limit} at once{mark('limit')}"
               f"{'' if settings.concurrency.enabled else ' (concurrency.enabled is off)'}")
    click.echo(f"  weight      {profile.weight:g}{mark('weight')}")
    click.echo(f"  rate        {rate}{mark('rate') or mark('burst')}")
    click.echo(f"  max_backlog {cap}{mark('max_backlog')}")
    running, waiting = router.tenant_jobs(tenant_id)
    click.echo(f"  running     {running}")
    for queue, count in waiting.items():
        click.echo(f"  waiting     {count} in {queue}")
    if not waiting:
        click.echo("  waiting     none in any fair queue")


@main.command()
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=Path("fair-router-demo.png"),
              show_default=True, help="Where to draw per-tenant wait distributions (PNG; needs matplotlib).")
@click.option("--no-plot", is_flag=True, help="Do not draw the plot.")
@click.option("--quick", is_flag=True, help="A smaller flood (500 greedy jobs, 10 small tenants).")
def demo(plot: Path, no_plot: bool, quick: bool) -> None:
    """Routing, the flood scenario (FIFO, router, fair queue) on real workers, with what the dashboard shows
    halfway through each flood, then mixed job lengths (job vs runtime charging); writes the wait plot unless
    --no-plot.

    Uses $REDIS_URL / $FAIR_ROUTER_REDIS_URL, else a private redis-server.
    """
    from fair_router.demo.flood import MODES, FloodParams, MixedParams
    from fair_router.demo.run import (
        demo_redis,
        print_flood,
        print_routing,
        print_worker_time,
        run_flood_demo,
        run_routing_demo,
        run_worker_time_demo,
    )

    params = FloodParams(greedy_jobs=500, small_tenants=10) if quick else FloodParams()
    mixed = MixedParams(long_jobs=20, short_jobs=200) if quick else MixedParams(long_jobs=40, short_jobs=400)
    with demo_redis() as (connection, url):
        print_routing(run_routing_demo(connection))
        report = run_flood_demo(connection, url, params, MODES)
        worker_time = run_worker_time_demo(connection, url, mixed)
    print_flood(report)
    click.echo("\n== worker-time share: job-count charging vs runtime charging (FairQueue charge=) ==")
    print_worker_time(worker_time)
    if no_plot:
        return
    if importlib.util.find_spec("matplotlib") is None:
        click.echo("\nplot not written: it needs matplotlib (pip install 'fair-router[plot]'; or pass --no-plot)")
        return
    from fair_router.demo.plot import plot_waits

    plot_waits(report, plot)
    click.echo(f"\nplot written to {plot}")


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=9181, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file (prefix, queues, tiers, observe).")
@click.option("--url", help="Redis URL.  [default: redis_url from settings]")
@click.option("--refresh", default=2.0, show_default=True, type=click.FloatRange(min=0.5),
              help="Seconds between two refreshes of the page.")
@click.option("--actions", is_flag=True,
              help="Turn on tenant actions (pause/resume); each needs the token in $FAIR_ROUTER_DASHBOARD_TOKEN.")
def dashboard(host: str, port: int, config: Path | None, url: str | None, refresh: float, actions: bool) -> None:
    """Serve the live dashboard at / and Prometheus metrics at /metrics (read-only unless --actions).

    Needs the dashboard extra: pip install 'fair-router[dashboard]'.
    """
    from redis.exceptions import RedisError

    try:
        from fair_router.observe.dashboard import create_app, serve
    except ImportError as exc:
        click.echo(f"error: the dashboard needs Flask and prometheus-client ({exc}): "
                   "pip install 'fair-router[dashboard]'", err=True)
        sys.exit(2)
    from fair_router.observe.dashboard import MIN_TOKEN_LENGTH, TOKEN_ENV
    from fair_router.workers.pool import redact_url

    token = os.environ.get(TOKEN_ENV) if actions else None
    if actions and (token is None or len(token) < MIN_TOKEN_LENGTH):
        click.echo(f"error: --actions needs a token of at least {MIN_TOKEN_LENGTH} characters in ${TOKEN_ENV}",
                   err=True)
        sys.exit(2)
    settings = _settings(config)
    url = url or settings.redis_url
    try:
        connection = Redis.from_url(url, socket_connect_timeout=5)
        connection.ping()
    except (RedisError, ValueError) as exc:
        click.echo(f"error: cannot reach Redis at {redact_url(url)}: {exc}", err=True)
        sys.exit(2)
    click.echo(f"fair-router dashboard: http://{host}:{port}/ (Prometheus: /metrics), Redis {redact_url(url)}, "
               f"prefix {settings.prefix}, {'tenant actions on (token)' if token else 'read-only'}; Ctrl-C stops it")
    serve(create_app(settings, connection, refresh, actions_token=token), host, port)


@main.command()
@click.argument("queues", nargs=-1)
@click.option("--config", type=click.Path(path_type=Path), help="Settings file; `queues:` holds the weights.")
@click.option("--url", help="Redis URL.  [default: redis_url from settings]")
@click.option("--burst", is_flag=True, help="Quit when the queues are empty.")
@click.option("--name", help="Worker name.  [default: random]")
@click.option("--logging-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False))
@click.option("--max-jobs", type=click.IntRange(min=1), help="Quit after this many jobs.")
@click.option("--with-scheduler/--without-scheduler", default=True, show_default=True,
              help="Also run rq's scheduler, so enqueue_in/enqueue_at jobs are moved to their queues.")
def worker(queues: tuple[str, ...], config: Path | None, url: str | None, burst: bool, name: str | None,
           logging_level: str, max_jobs: int | None, with_scheduler: bool) -> None:
    """Run one weighted worker on QUEUES (default: every queue listed under `queues:` in the settings).

    The same as `rq worker -w fair_router.WeightedWorker QUEUES`, with URL and weights from the settings.
    """
    from redis.exceptions import RedisError

    from fair_router.workers.weighted import WeightedWorker

    settings = _settings(config)
    names = list(queues) or list(settings.queues)
    if not names:
        click.echo("error: no queues to work on: name them (fair-router worker default low) or list them "
                   "under `queues:` in the settings", err=True)
        sys.exit(2)
    try:
        connection = Redis.from_url(url or settings.redis_url)
        rq_worker = WeightedWorker(names, connection=connection, name=name, settings=settings)  # --config's
    except (RedisError, ValueError) as exc:
        click.echo(f"error: cannot start the worker: {exc}", err=True)
        sys.exit(2)
    rq_worker.work(burst=burst, logging_level=logging_level.upper(), max_jobs=max_jobs,
                   with_scheduler=with_scheduler)


@main.command()
@click.option("--config", type=click.Path(path_type=Path), help="Settings file (`pool:`); workers get it too.")
@click.option("--url", help="Redis URL.  [default: redis_url from settings]")
@click.option("--worker-class", "-w", default="fair_router.WeightedWorker", show_default=True,
              help="rq worker class every worker runs (dotted path).")
@click.option("--logging-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False))
@click.option("--with-scheduler", is_flag=True, help="Run rq's scheduler in exactly one of the workers.")
@click.option("--grace", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds a stopping worker may finish its job before it is cold-stopped.")
def pool(config: Path | None, url: str | None, worker_class: str, logging_level: str, with_scheduler: bool,
         grace: float) -> None:
    """Run the workers per queue group set in `pool:`; restart dead ones; stop all on SIGINT/SIGTERM.

    Unlike `rq worker-pool` (N identical workers on the same queues), each queue group gets its own
    number of workers, e.g. `pool: {analysis_priority: 5, analysis_default: 3, "scheduled,maint": 2}`.
    """
    import logging

    from redis.exceptions import RedisError
    from rq.utils import import_worker_class

    from fair_router.workers.pool import WorkerPool, redact_url

    settings = _settings(config)
    if not settings.pool:
        click.echo("error: no workers to run: `pool:` is empty. Set it in the settings file, e.g.\n"
                   "  pool:\n    default: 2\n    default_throttled,default_superslow: 1\n"
                   "or in the environment: FAIR_ROUTER_POOL='{\"default\": 2}'", err=True)
        sys.exit(2)
    url = url or settings.redis_url
    try:
        import_worker_class(worker_class)
    except (ImportError, ValueError) as exc:
        click.echo(f"error: cannot use worker class {worker_class!r}: {exc}", err=True)
        sys.exit(2)
    try:
        Redis.from_url(url, socket_connect_timeout=5).ping()
    except (RedisError, ValueError) as exc:
        click.echo(f"error: cannot reach Redis at {redact_url(url)}: {exc}", err=True)
        sys.exit(2)
    logging.basicConfig(level=logging_level.upper(), format="%(asctime)s fair-router pool: %(message)s",
                        datefmt="%H:%M:%S")
    workers = WorkerPool(settings.pool, url, worker_class=worker_class, logging_level=logging_level.upper(),
                         with_scheduler=with_scheduler, grace=grace,
                         env={"FAIR_ROUTER_CONFIG": str(config.resolve())} if config else None)
    click.echo(workers.describe())
    sys.exit(workers.run())


if __name__ == "__main__":  # python -m fair_router.cli (the tests run the dashboard so)
    main()
