"""``fair-router dashboard``: the live page and Prometheus ``/metrics`` (the dashboard extra)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from fair_router.commands.common import connect, load_or_exit
from fair_router.commands.failures import fail


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=9181, show_default=True, type=click.IntRange(1, 65535), help="Port to listen on.")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file (prefix, queues, tiers, observe).")
@click.option("--url", help="Redis URL.  [default: redis_url from settings]")
@click.option("--refresh", default=2.0, show_default=True, type=click.FloatRange(min=0.5),
              help="Seconds between two refreshes of the page.")
@click.option("--actions", is_flag=True,
              help="Turn on tenant actions (pause/resume); each needs the token in $FAIR_ROUTER_DASHBOARD_TOKEN.")
@click.option("--allowed-host", "allowed", multiple=True, metavar="NAME[:PORT]",
              help="A Host name clients use (repeatable). Needed when --host is beyond loopback; any other "
                   "Host gets 400.")
@click.option("--metrics-open", is_flag=True,
              help="Serve /metrics without the read token ($FAIR_ROUTER_DASHBOARD_READ_TOKEN).")
def dashboard(host: str, port: int, config: Path | None, url: str | None, refresh: float, actions: bool,
              allowed: tuple[str, ...], metrics_open: bool) -> None:
    """Serve the live dashboard at / and Prometheus metrics at /metrics (read-only unless --actions).

    With $FAIR_ROUTER_DASHBOARD_READ_TOKEN set, the page asks for it (sign-in form) and /api/* and /metrics
    take it as 'Authorization: Bearer <token>'. Needs the dashboard extra: pip install 'fair-router[dashboard]'.
    """
    try:
        import waitress  # noqa: F401  # the server, imported when serving: a missing one is reported here

        from fair_router.dashboard.app import MIN_TOKEN_LENGTH, READ_TOKEN_ENV, TOKEN_ENV, create_app, listen
    except ImportError as exc:
        fail(f"error: the dashboard needs Flask, prometheus-client and waitress ({exc}): "
             "pip install 'fair-router[dashboard]'")
    from fair_router.dashboard.guard import allowed_hosts, is_loopback
    from fair_router.workers.pool import redact_url

    token = os.environ.get(TOKEN_ENV) if actions else None
    if actions and (token is None or len(token) < MIN_TOKEN_LENGTH):
        fail(f"error: --actions needs a token of at least {MIN_TOKEN_LENGTH} characters in ${TOKEN_ENV}")
    read_token = os.environ.get(READ_TOKEN_ENV) or None
    if read_token is not None and len(read_token) < MIN_TOKEN_LENGTH:
        fail(f"error: ${READ_TOKEN_ENV} must be at least {MIN_TOKEN_LENGTH} characters, got "
             f"{len(read_token)}")
    try:
        hosts = allowed_hosts(host, allowed)
    except ValueError as exc:
        fail(f"error: {exc}")
    settings = load_or_exit(config)
    url = url or settings.redis_url
    connection = connect(url, ping=True, cluster=settings.redis_cluster)  # a bad URL exits 2, no Redis 1
    app = create_app(settings, connection, refresh, actions_token=token, read_token=read_token,
                     allowed_hosts=hosts, metrics_open=metrics_open)
    try:
        server = listen(app, host, port)
    except OSError as exc:  # the port in use, an address not on this machine, a name that does not resolve
        fail(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", 1)
    if not is_loopback(host) and read_token is None:
        warn_exposed(host, port)
    access = "read token" + (", /metrics open" if metrics_open else "") if read_token else "no read token"
    click.echo(f"fair-router dashboard: http://{host}:{port}/ (Prometheus: /metrics), Redis {redact_url(url)}, "
               f"prefix {settings.prefix}, {'tenant actions on (token)' if token else 'read-only'}, {access}, "
               f"hosts {', '.join(hosts)}; Ctrl-C stops it")
    server.run()


def warn_exposed(host: str, port: int) -> None:
    """One block on stderr that cannot be missed: tenant data is open to whoever reaches the port."""
    from fair_router.dashboard.app import READ_TOKEN_ENV

    rule = "!" * 78
    click.echo("\n".join((
        rule,
        f"WARNING: the dashboard listens on {host}:{port}, beyond loopback, WITHOUT a read token.",
        "Anyone who can reach this port (with an allowed Host) reads tenant ids, tiers, paused state and",
        "backlogs from the page, /api/snapshot and /metrics.",
        f"Set ${READ_TOKEN_ENV} (16+ characters) to require it; see docs/dashboard-security.md.",
        rule,
    )), err=True)
