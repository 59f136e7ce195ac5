"""The live dashboard (Flask): ``/``, ``/api/snapshot``, ``/api/why/job|tenant`` and ``/metrics`` from one
:class:`SnapshotReader`;
:func:`create_blueprint` mounts it in another app. Security: docs/dashboard-security.md."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Flask, Response, abort, jsonify, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from prometheus_client import CONTENT_TYPE_LATEST
from redis import Redis
from werkzeug.wrappers import Response as WerkzeugResponse

from fair_router.config.settings import Settings, load_settings
from fair_router.dashboard.collector import metrics_text
from fair_router.dashboard.guard import LOOPBACK_NAMES, HostAllowlist, ReadAccess, secure_headers
from fair_router.dashboard.reader import SnapshotReader
from fair_router.dashboard.why import MAX_JOB_ID_LENGTH, job_answer, tenant_answer
from fair_router.routing.router import FairRouter
from fair_router.store.cluster import connections_for

if TYPE_CHECKING:  # waitress is imported when serving only: mounting the blueprint does not need it
    from waitress.server import BaseWSGIServer, MultiSocketServer

DEFAULT_REFRESH = 2.0
"""Seconds between two refreshes of the page."""
TOKEN_ENV = "FAIR_ROUTER_DASHBOARD_TOKEN"
"""Environment variable the CLI reads the actions token from (a token on the command line would show in ps)."""
READ_TOKEN_ENV = "FAIR_ROUTER_DASHBOARD_READ_TOKEN"
"""Environment variable the CLI reads the read token from."""
MIN_TOKEN_LENGTH = 16
"""Shortest token (actions or read) accepted: a guessable token would make it pointless."""
ACTIONS = ("pause", "resume")


def create_blueprint(reader: SnapshotReader, refresh: float = DEFAULT_REFRESH, name: str = "fair_router",
                     actions_token: str | None = None, read_token: str | None = None,
                     metrics_open: bool = False) -> Blueprint:
    """The dashboard's routes as a blueprint (``name`` unique within the app). ``actions_token`` turns on the tenant
    actions (``POST /api/tenant/<pause|resume>``); ``read_token`` guards every route but the assets (``metrics_open``:
    except ``/metrics``). The ``Host`` check is the app's (:class:`~fair_router.dashboard.guard.HostAllowlist`)."""
    if not refresh > 0:
        raise ValueError(f"refresh must be a positive number of seconds, got {refresh!r}")
    for kind, token, env in (("actions", actions_token, TOKEN_ENV), ("read", read_token, READ_TOKEN_ENV)):
        if token is not None and len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(f"the dashboard's {kind} token must be at least {MIN_TOKEN_LENGTH} characters "
                             f"(${env}), got {len(token)}")
    # Assets under /assets, not /static: mounted without a prefix, the host app's own /static route would
    # shadow them.
    blueprint = Blueprint(name, __name__, template_folder="templates", static_folder="static",
                          static_url_path="/assets")
    blueprint.after_request(secure_headers)
    access = ReadAccess(read_token, f"{name}_session") if read_token else None

    def refused() -> ResponseReturnValue:
        """401 with the scheme to use: a scraper or script learns it needs the bearer token."""
        return (jsonify({"error": f"this dashboard needs its read token (${READ_TOKEN_ENV}) as 'Authorization: Bearer "
                                  "<token>'"}), 401, {"WWW-Authenticate": 'Bearer realm="fair-router dashboard"'})

    def sign_in_form(status: int, wrong: bool = False) -> tuple[str, int]:
        return render_template("fair_router/sign_in.html", prefix=reader.settings.prefix, wrong=wrong), status

    @blueprint.get("/")
    def index() -> str | tuple[str, int]:
        if access is not None and not access.allows(request):
            return sign_in_form(401)
        snapshot = reader.snapshot().to_json()
        actions = url_for(".api_tenant", action="pause").rpartition("/")[0] if actions_token else None
        return render_template("fair_router/dashboard.html", snapshot=snapshot, refresh=refresh,
                               prefix=reader.settings.prefix, actions=actions, signed_in=access is not None,
                               max_job_id=MAX_JOB_ID_LENGTH)

    @blueprint.get("/api/snapshot")
    def api_snapshot() -> ResponseReturnValue:
        if access is not None and not access.allows(request):
            return refused()
        return jsonify(reader.snapshot().to_json())

    @blueprint.get("/api/why/<kind>")
    def api_why(kind: str) -> ResponseReturnValue:
        """Why a job waits (``job?id=``) or a tenant's jobs are slow (``tenant?id=``): read-only."""
        if access is not None and not access.allows(request):
            return refused()
        if kind not in ("job", "tenant"):
            abort(404)
        given = request.args.get("id", "")
        body, status = job_answer(reader, given) if kind == "job" else tenant_answer(reader, given)
        return jsonify(body), status

    @blueprint.get("/metrics")
    def metrics() -> ResponseReturnValue:
        if access is not None and not metrics_open and not access.allows(request):
            return refused()
        return Response(metrics_text(reader), mimetype=CONTENT_TYPE_LATEST)

    if access is not None:
        read_access = access

        @blueprint.post("/sign-in")
        def sign_in() -> WerkzeugResponse | tuple[str, int]:
            """The page's sign-in form (a plain POST, no script): right token -> the cookie, back to the page."""
            if not read_access.token_matches(request.form.get("token", "")):
                return sign_in_form(403, wrong=True)
            response = redirect(url_for(".index"), code=303)
            read_access.sign_in(response, path=url_for(".index"), secure=request.is_secure)
            return response

        @blueprint.post("/sign-out")
        def sign_out() -> WerkzeugResponse:
            response = redirect(url_for(".index"), code=303)
            read_access.sign_out(response, path=url_for(".index"))
            return response

    if actions_token is not None:
        expected = f"Bearer {actions_token}".encode()
        router = FairRouter(reader.connection, prefix=reader.settings.prefix,
                            tenant_max_bytes=reader.settings.tenant_max_bytes)

        @blueprint.post("/api/tenant/<action>")
        def api_tenant(action: str) -> ResponseReturnValue:
            """Pause or resume one tenant (``{"tenant": id}``), with the bearer token."""
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                abort(403)
            if action not in ACTIONS:
                abort(404)
            body = request.get_json(silent=True)
            given_tenant = body.get("tenant") if isinstance(body, dict) else None
            try:  # a str or int id within tenant_max_bytes, as everywhere (fair_router.core.tenancy)
                tenant = router.tenant_id(given_tenant)
            except (TypeError, ValueError) as exc:
                return jsonify({"error": f'the body must be {{"tenant": "<tenant id>"}}: {exc}'}), 400
            getattr(router, action)(tenant)
            return jsonify({"tenant": tenant, "paused": router.paused(tenant)})

    return blueprint


def create_app(settings: Settings | None = None, connection: Redis | None = None, refresh: float = DEFAULT_REFRESH,
               queues: list[str] | None = None, actions_token: str | None = None, read_token: str | None = None,
               allowed_hosts: Iterable[str] = LOOPBACK_NAMES, metrics_open: bool = False) -> Flask:
    """A Flask app serving the dashboard at ``/``; settings and connection default to the settings file (so ``gunicorn
    'fair_router.dashboard.app:create_app()'`` works). Tokens as in :func:`create_blueprint`; ``allowed_hosts``: the
    ``Host`` names answered (default loopback), any other gets 400."""
    settings = settings or load_settings()
    connection = connection or connections_for(settings.redis_url, settings.redis_cluster).state
    app = Flask(__name__, static_folder=None)
    app.register_blueprint(create_blueprint(SnapshotReader(connection, settings, queues=queues), refresh,
                                            actions_token=actions_token, read_token=read_token,
                                            metrics_open=metrics_open))
    app.after_request(secure_headers)  # the app's own responses too (404, 405)
    app.wsgi_app = HostAllowlist(app.wsgi_app, allowed_hosts)  # type: ignore[method-assign]
    return app


def listen(app: Flask, host: str, port: int, threads: int = 8,
           **options: Any) -> BaseWSGIServer | MultiSocketServer:
    """A waitress server bound to ``host:port``, not yet serving: a port in use raises OSError first."""
    from waitress.server import create_server

    logging.basicConfig()  # waitress logs its warnings (e.g. a deep task queue) through logging
    return create_server(app, host=host, port=port, threads=threads, ident="fair-router", **options)
