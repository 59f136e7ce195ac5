"""The live dashboard (Flask, the ``dashboard`` extra): ``/`` (the page), ``/api/snapshot`` (its data, JSON)
and ``/metrics`` (Prometheus text), all from one :class:`SnapshotReader`.

``fair-router dashboard`` serves :func:`create_app`. To add the page to an existing Flask app, or beside
rq-dashboard, mount :func:`create_blueprint` under any prefix::

    from fair_router.observe.dashboard import create_blueprint
    from fair_router.observe.reader import SnapshotReader
    app.register_blueprint(create_blueprint(SnapshotReader(redis, settings)), url_prefix="/fair")

The page is read-only by default: no route changes anything. Tenant actions (pause and resume, through
``FairRouter.pause`` / ``resume``) exist only when the app is built with an ``actions_token`` (the CLI's
``--actions`` flag with ``$FAIR_ROUTER_DASHBOARD_TOKEN``): then ``POST api/tenant/pause|resume`` with
``{"tenant": ...}`` and ``Authorization: Bearer <token>`` acts, anything else gets 403.

The page fetches ``api/snapshot`` every ``refresh`` seconds and redraws itself with its own script and an
inline SVG chart: nothing is loaded from another site, so it works offline.
Each page load and each refresh costs one snapshot: a few pipelined round trips bounded by the top N.
"""

from __future__ import annotations

import hmac
from typing import Any

from flask import Blueprint, Flask, Response, abort, jsonify, render_template, request, url_for
from prometheus_client import CONTENT_TYPE_LATEST
from redis import Redis

from fair_router.config.settings import Settings, load_settings
from fair_router.observe.collector import metrics_text
from fair_router.observe.reader import SnapshotReader
from fair_router.routing.router import FairRouter

DEFAULT_REFRESH = 2.0
"""Seconds between two refreshes of the page."""
TOKEN_ENV = "FAIR_ROUTER_DASHBOARD_TOKEN"
"""Environment variable the CLI reads the actions token from (a token on the command line would show in ps)."""
MIN_TOKEN_LENGTH = 16
"""Shortest actions token accepted: a guessable token would make the flag pointless."""
ACTIONS = ("pause", "resume")


def create_blueprint(
    reader: SnapshotReader,
    refresh: float = DEFAULT_REFRESH,
    name: str = "fair_router",
    actions_token: str | None = None,
) -> Blueprint:
    """The dashboard's routes (``/``, ``/api/snapshot``, ``/metrics``) as a blueprint; ``name`` must be unique
    within the app (mount two deployments under two names and prefixes). ``actions_token``: turn the tenant
    actions on (``POST /api/tenant/<pause|resume>``), each request needing this bearer token; None (the
    default) keeps the dashboard read-only, without those routes."""
    if not refresh > 0:
        raise ValueError(f"refresh must be a positive number of seconds, got {refresh!r}")
    if actions_token is not None and len(actions_token) < MIN_TOKEN_LENGTH:
        raise ValueError(f"the dashboard's actions token must be at least {MIN_TOKEN_LENGTH} characters "
                         f"(${TOKEN_ENV}), got {len(actions_token)}")
    # Assets under /assets, not /static: mounted without a prefix, the host app's own /static route would
    # shadow them.
    blueprint = Blueprint(name, __name__, template_folder="templates", static_folder="static",
                          static_url_path="/assets")

    @blueprint.get("/")
    def index() -> str:
        snapshot = reader.snapshot().to_json()
        actions = url_for(".api_tenant", action="pause").rpartition("/")[0] if actions_token else None
        return render_template("fair_router/dashboard.html", snapshot=snapshot, refresh=refresh,
                               prefix=reader.settings.prefix, actions=actions)

    @blueprint.get("/api/snapshot")
    def api_snapshot() -> Response:
        return jsonify(reader.snapshot().to_json())

    @blueprint.get("/metrics")
    def metrics() -> Response:
        return Response(metrics_text(reader), mimetype=CONTENT_TYPE_LATEST)

    if actions_token is not None:
        expected = f"Bearer {actions_token}".encode()
        router = FairRouter(reader.connection, prefix=reader.settings.prefix,
                            tenant_max_bytes=reader.settings.tenant_max_bytes)

        @blueprint.post("/api/tenant/<action>")
        def api_tenant(action: str) -> Response:
            """Pause or resume one tenant (``{"tenant": id}``), with the bearer token."""
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                abort(403)
            if action not in ACTIONS:
                abort(404)
            body = request.get_json(silent=True)
            given_tenant = body.get("tenant") if isinstance(body, dict) else None
            try:  # a str or int id within tenant_max_bytes, as everywhere (fair_router.routing.tenancy)
                tenant = router.tenant_id(given_tenant)
            except (TypeError, ValueError) as exc:
                refused = jsonify({"error": f'the body must be {{"tenant": "<tenant id>"}}: {exc}'})
                refused.status_code = 400
                return refused
            getattr(router, action)(tenant)
            return jsonify({"tenant": tenant, "paused": router.paused(tenant)})

    return blueprint


def create_app(
    settings: Settings | None = None,
    connection: Redis | None = None,
    refresh: float = DEFAULT_REFRESH,
    queues: list[str] | None = None,
    actions_token: str | None = None,
) -> Flask:
    """A Flask app serving the dashboard at ``/``; settings and connection default to the settings file and
    its ``redis_url`` (so ``gunicorn 'fair_router.observe.dashboard:create_app()'`` works). Read-only unless
    ``actions_token`` is given (see :func:`create_blueprint`)."""
    settings = settings or load_settings()
    connection = connection or Redis.from_url(settings.redis_url)
    app = Flask(__name__, static_folder=None)
    app.register_blueprint(create_blueprint(SnapshotReader(connection, settings, queues=queues), refresh,
                                            actions_token=actions_token))
    return app


def serve(app: Flask, host: str, port: int, **options: Any) -> None:
    """Serve ``app`` with werkzeug's threaded server (fine for a read-only page and a scrape every few
    seconds; put it behind gunicorn for more)."""
    from werkzeug.serving import run_simple

    run_simple(host, port, app, threaded=True, **options)
