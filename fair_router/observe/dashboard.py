"""The live dashboard (Flask, the ``dashboard`` extra): ``/`` (the page), ``/api/snapshot`` (its data, JSON)
and ``/metrics`` (Prometheus text), all from one :class:`SnapshotReader`.

``fair-router dashboard`` serves :func:`create_app`. To add the page to an existing Flask app, or beside
rq-dashboard, mount :func:`create_blueprint` under any prefix::

    from fair_router.observe.dashboard import create_blueprint
    from fair_router.observe.reader import SnapshotReader
    app.register_blueprint(create_blueprint(SnapshotReader(redis, settings)), url_prefix="/fair")

The page is read-only: no route changes anything (there are no tenant actions yet; when there are, they
will need a flag and a token). It fetches ``api/snapshot`` every ``refresh`` seconds and redraws itself
with its own script and an inline SVG chart: nothing is loaded from another site, so it works offline.
Each page load and each refresh costs one snapshot: a few pipelined round trips bounded by the top N.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Flask, Response, jsonify, render_template
from prometheus_client import CONTENT_TYPE_LATEST
from redis import Redis

from fair_router.observe.collector import metrics_text
from fair_router.observe.reader import SnapshotReader
from fair_router.settings import Settings, load_settings

DEFAULT_REFRESH = 2.0
"""Seconds between two refreshes of the page."""


def create_blueprint(reader: SnapshotReader, refresh: float = DEFAULT_REFRESH, name: str = "fair_router") -> Blueprint:
    """The dashboard's routes (``/``, ``/api/snapshot``, ``/metrics``) as a blueprint; ``name`` must be unique
    within the app (mount two deployments under two names and prefixes)."""
    if not refresh > 0:
        raise ValueError(f"refresh must be a positive number of seconds, got {refresh!r}")
    # Assets under /assets, not /static: mounted without a prefix, the host app's own /static route would
    # shadow them.
    blueprint = Blueprint(name, __name__, template_folder="templates", static_folder="static",
                          static_url_path="/assets")

    @blueprint.get("/")
    def index() -> str:
        snapshot = reader.snapshot().to_json()
        return render_template("fair_router/dashboard.html", snapshot=snapshot, refresh=refresh,
                               prefix=reader.settings.prefix)

    @blueprint.get("/api/snapshot")
    def api_snapshot() -> Response:
        return jsonify(reader.snapshot().to_json())

    @blueprint.get("/metrics")
    def metrics() -> Response:
        return Response(metrics_text(reader), mimetype=CONTENT_TYPE_LATEST)

    return blueprint


def create_app(
    settings: Settings | None = None,
    connection: Redis | None = None,
    refresh: float = DEFAULT_REFRESH,
    queues: list[str] | None = None,
) -> Flask:
    """A Flask app serving the dashboard at ``/``; settings and connection default to the settings file and
    its ``redis_url`` (so ``gunicorn 'fair_router.observe.dashboard:create_app()'`` works)."""
    settings = settings or load_settings()
    connection = connection or Redis.from_url(settings.redis_url)
    app = Flask(__name__, static_folder=None)
    app.register_blueprint(create_blueprint(SnapshotReader(connection, settings, queues=queues), refresh))
    return app


def serve(app: Flask, host: str, port: int, **options: Any) -> None:
    """Serve ``app`` with werkzeug's threaded server (fine for a read-only page and a scrape every few
    seconds; put it behind gunicorn for more)."""
    from werkzeug.serving import run_simple

    run_simple(host, port, app, threaded=True, **options)
