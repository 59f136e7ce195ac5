"""``fair-router dashboard``: the live page and Prometheus ``/metrics`` (the dashboard extra)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from redis import Redis

from fair_router.commands.common import load_or_exit


@click.command()
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
    settings = load_or_exit(config)
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
