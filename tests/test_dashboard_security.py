"""The dashboard when exposed: the ``Host`` allowlist, the security headers, the read token and
the start-up checks, through real HTTP requests (``http.client``) to ``fair-router dashboard`` running as its
own process (waitress) on a real Redis; the Flask test client only where a browser-less detail is checked
(an expired sign-in, the blueprint mounted in another app)."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import terminate, write_settings
from flask import Flask
from itsdangerous import TimestampSigner
from redis import Redis
from worker_jobs import noop

from fair_router import FairQueue, Settings
from fair_router.dashboard.app import READ_TOKEN_ENV, TOKEN_ENV, create_app, create_blueprint
from fair_router.dashboard.guard import SESSION_SECONDS, allowed_hosts, split_host
from fair_router.dashboard.reader import SnapshotReader
from fair_router.demo.redis_server import RedisServer

PREFIX = "exposed"
READ_TOKEN = "read-token-for-the-tests-0123"
ACTIONS_TOKEN = "actions-token-for-the-tests-4567"
HEADERS = {"x-frame-options": "DENY", "x-content-type-options": "nosniff", "referrer-policy": "no-referrer"}


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    port: int
    proc: subprocess.Popen[bytes]
    stderr: Path

    def request(self, path: str, host: str | None = None, method: str = "GET", body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Reply:
        """One real HTTP request to the server on 127.0.0.1, with ``Host`` as given (default: 127.0.0.1:port)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.putrequest(method, path, skip_host=True)
            connection.putheader("Host", host if host is not None else f"127.0.0.1:{self.port}")
            for name, value in (headers or {}).items():
                connection.putheader(name, value)
            connection.putheader("Content-Length", str(len(body or b"")))
            connection.endheaders(body)
            response = connection.getresponse()
            return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        finally:
            connection.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def config(redis_server: RedisServer, conn: Redis, tmp_path: Path) -> Path:
    """A settings file on the test Redis with one fair queue where tenant ``acme`` has jobs waiting."""
    path = write_settings(tmp_path, {"redis_url": redis_server.url, "prefix": PREFIX, "queues": {"fq": 1},
                                     "fair_queues": ["fq"]})
    settings = Settings(prefix=PREFIX, fair_queues=["fq"], queues={"fq": 1})
    queue = FairQueue("fq", connection=conn, settings=settings)
    for _ in range(3):
        queue.enqueue(noop, fair_tenant="acme")
    return path


def run_dashboard(config: Path, tmp_path: Path, *args: str, env: dict[str, str] | None = None,
                  ) -> subprocess.Popen[bytes]:
    environ = {k: v for k, v in os.environ.items() if k not in (READ_TOKEN_ENV, TOKEN_ENV)}
    stderr = (tmp_path / "dashboard.err").open("wb")
    return subprocess.Popen([sys.executable, "-m", "fair_router.cli", "dashboard", "--config", str(config), *args],
                            env={**environ, "FAIR_ROUTER_CONFIG": str(config), **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=stderr)


@pytest.fixture
def dashboard(config: Path, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Starts ``fair-router dashboard`` with the given arguments (and environment); waits until it listens."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Server:
        port = free_port()
        proc = run_dashboard(config, tmp_path, "--port", str(port), *args, env=env)
        started.append(proc)
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "dashboard.err").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return Server(port, proc, tmp_path / "dashboard.err")
            except OSError:
                assert time.monotonic() < deadline, "the dashboard did not listen within 60 s"
                time.sleep(0.1)

    yield start
    for proc in started:
        terminate(proc, grace=10)


def assert_secured(reply: Reply) -> None:
    for name, value in HEADERS.items():
        assert reply.headers.get(name) == value, (name, reply.headers)
    csp = reply.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "style-src 'self';" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp


def test_on_loopback_only_loopback_names_are_answered_and_every_response_has_the_headers(
    dashboard: Callable[..., Server],
) -> None:
    server = dashboard()
    refused = server.request("/api/snapshot", host="attacker.example")  # a DNS-rebinding page's request
    assert refused.status == 400 and b"acme" not in refused.body
    assert_secured(refused)
    for host in ("attacker.example:80", f"127.0.0.1.attacker.example:{server.port}", "", "localhost@evil",
                 "[::1]evil", "localhost:http", f"127.0.0.1:{server.port}:1"):
        assert server.request("/", host=host).status == 400, host
    for host in (f"127.0.0.1:{server.port}", "localhost", f"LOCALHOST:{server.port}", f"[::1]:{server.port}"):
        page = server.request("/", host=host)
        assert page.status == 200 and b'id="tenants"' in page.body, host
        assert_secured(page)
    data = server.request("/api/snapshot")
    assert data.status == 200 and "acme" in {row["tenant"] for row in json.loads(data.body)["tenants"]}
    for path, status in (("/api/snapshot", 200), ("/metrics", 200), ("/assets/dashboard.js", 200),
                         ("/assets/dashboard.css", 200), ("/nothing-here", 404)):
        reply = server.request(path)
        assert reply.status == status, path
        assert_secured(reply)
    # No inline script, style or event handler left for the CSP to block (the JSON data block runs no code).
    scripts = re.findall(rb"<script[^>]*>", page.body)
    assert scripts and all(b" src=" in tag or b'type="application/json"' in tag for tag in scripts), scripts
    assert not re.search(rb"<[^>]+\s(on[a-z]+|style)=", page.body)
    assert server.request("/").headers["server"] == "fair-router"  # waitress, not werkzeug's dev server
    assert b"WARNING" not in server.stderr.read_bytes()


def test_beyond_loopback_the_dashboard_needs_an_allowed_host_and_warns_without_a_read_token(
    config: Path, tmp_path: Path, dashboard: Callable[..., Server],
) -> None:
    refused = run_dashboard(config, tmp_path, "--host", "0.0.0.0", "--port", str(free_port()))
    assert refused.wait(60) == 2
    err = (tmp_path / "dashboard.err").read_text()
    assert "--allowed-host" in err and "0.0.0.0" in err and "Traceback" not in err, err
    bad = run_dashboard(config, tmp_path, "--allowed-host", "http://dash.test/", "--port", str(free_port()))
    assert bad.wait(60) == 2 and "is not a host name" in (tmp_path / "dashboard.err").read_text()

    server = dashboard("--host", "0.0.0.0", "--allowed-host", "dash.test", "--allowed-host", "10.1.2.3:8443")
    assert server.request("/", host="dash.test").status == 200
    assert server.request("/", host=f"dash.test:{server.port}").status == 200  # no port given: any port
    assert server.request("/", host="10.1.2.3:8443").status == 200
    for host in ("10.1.2.3", "10.1.2.3:8080", f"127.0.0.1:{server.port}", "localhost", "attacker.example"):
        assert server.request("/", host=host).status == 400, host  # only the names given
    err = server.stderr.read_text()
    assert "WARNING" in err and "WITHOUT a read token" in err and READ_TOKEN_ENV in err, err


def test_the_read_token_guards_api_metrics_and_the_page_through_a_sign_in_cookie(
    dashboard: Callable[..., Server],
) -> None:
    server = dashboard("--host", "0.0.0.0", "--allowed-host", "dash.test", "--actions",
                       env={READ_TOKEN_ENV: READ_TOKEN, TOKEN_ENV: ACTIONS_TOKEN})
    assert "WARNING" not in server.stderr.read_text()  # exposed, but with a read token

    def get(path: str, **headers: str) -> Reply:
        return server.request(path, host="dash.test", headers=headers)

    for path in ("/api/snapshot", "/metrics"):
        for headers in ({}, {"Authorization": "Bearer wrong-token-of-the-same-len"}, {"Authorization": READ_TOKEN},
                        {"Authorization": f"Bearer {ACTIONS_TOKEN}"}):
            reply = get(path, **headers)
            assert reply.status == 401 and b"acme" not in reply.body, (path, headers)
            assert reply.headers["www-authenticate"].startswith("Bearer")
        ok = get(path, Authorization=f"Bearer {READ_TOKEN}")
        assert ok.status == 200 and b"acme" in ok.body, path
    assert get("/assets/dashboard.js").status == 200  # the assets hold no data

    form = get("/")
    assert form.status == 401 and b'name="token"' in form.body and b"acme" not in form.body
    assert_secured(form)

    def sign_in(token: str) -> Reply:
        return server.request("/sign-in", host="dash.test", method="POST",
                              body=urllib.parse.urlencode({"token": token}).encode(),
                              headers={"Content-Type": "application/x-www-form-urlencoded"})

    wrong = sign_in(ACTIONS_TOKEN)
    assert wrong.status == 403 and "set-cookie" not in wrong.headers and b"not the token" in wrong.body
    signed = sign_in(READ_TOKEN)
    assert signed.status == 303 and signed.headers["location"] == "/"
    cookie = signed.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"httponly", "samesite", "max-age", "path"} <= attributes and "SameSite=Strict" in cookie
    pair = cookie.split(";")[0]
    assert READ_TOKEN not in cookie and pair.startswith("fair_router_session=")

    page = get("/", Cookie=pair)
    assert page.status == 200 and b'id="tenants"' in page.body and b"sign out" in page.body
    assert get("/api/snapshot", Cookie=pair).status == 200
    name, _, value = pair.partition("=")
    assert get("/api/snapshot", Cookie=f"{name}={value[:-2]}xx").status == 401  # a forged signature

    # The actions token stays separate: the read token does not act, the actions token does.
    pause = {"Content-Type": "application/json"}
    body = json.dumps({"tenant": "acme"}).encode()
    for token, status in ((READ_TOKEN, 403), (ACTIONS_TOKEN, 200)):
        reply = server.request("/api/tenant/pause", host="dash.test", method="POST", body=body,
                               headers={**pause, "Authorization": f"Bearer {token}"})
        assert reply.status == status, token
    out = server.request("/sign-out", host="dash.test", method="POST", headers={"Cookie": pair})
    assert out.status == 303 and "max-age=0" in out.headers["set-cookie"].lower()


def test_metrics_can_be_left_open_and_short_read_tokens_are_refused(
    config: Path, tmp_path: Path, dashboard: Callable[..., Server],
) -> None:
    server = dashboard("--metrics-open", env={READ_TOKEN_ENV: READ_TOKEN})
    assert server.request("/metrics").status == 200
    assert server.request("/api/snapshot").status == 401
    assert server.request("/").status == 401
    short = run_dashboard(config, tmp_path, "--port", str(free_port()), env={READ_TOKEN_ENV: "short"})
    assert short.wait(60) == 2
    err = (tmp_path / "dashboard.err").read_text()
    assert READ_TOKEN_ENV in err and "at least 16" in err and "Traceback" not in err


def test_a_sign_in_expires_and_the_blueprint_mounted_elsewhere_keeps_the_guards(
    conn: Redis, config: Path, isolated_settings: None,
) -> None:
    settings = Settings(prefix=PREFIX, fair_queues=["fq"], queues={"fq": 1})
    host = Flask("host")
    host.register_blueprint(create_blueprint(SnapshotReader(conn, settings), read_token=READ_TOKEN),
                            url_prefix="/fair")
    client = host.test_client()
    assert client.get("/fair/api/snapshot").status_code == 401
    signed = client.post("/fair/sign-in", data={"token": READ_TOKEN})
    assert signed.status_code == 303 and signed.headers["Location"] == "/fair/"
    assert "Path=/fair/" in signed.headers["Set-Cookie"]
    page = client.get("/fair/")
    assert page.status_code == 200 and page.headers["X-Frame-Options"] == "DENY"

    class Past(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(time.time()) - SESSION_SECONDS - 5

    stale = Past(READ_TOKEN, salt="fair-router dashboard sign-in").sign(b"reader").decode()
    expired = host.test_client()
    expired.set_cookie("fair_router_session", stale, path="/fair/")
    assert expired.get("/fair/api/snapshot").status_code == 401

    with pytest.raises(ValueError, match="read token must be at least 16"):
        create_app(settings, conn, read_token="short")
    plain = create_app(settings, conn).test_client()  # no read token: as before, open on loopback
    assert plain.get("/api/snapshot").status_code == 200
    assert plain.get("/", headers={"Host": "attacker.example"}).status_code == 400


def test_host_names_are_parsed_and_checked() -> None:
    assert split_host("[::1]:9181") == ("[::1]", "9181")
    assert split_host("Dash.Example.COM.") == ("dash.example.com", None)
    assert split_host("dash.test:8443") == ("dash.test", "8443")
    assert split_host("[::1]") == ("[::1]", None) and split_host("[::1]x") == ("[::1]x", None)
    assert allowed_hosts("127.0.0.1", []) == ["localhost", "127.0.0.1", "[::1]"]
    assert allowed_hosts("::1", ["dash.test"])[-1] == "dash.test"
    assert allowed_hosts("0.0.0.0", ["dash.test"]) == ["dash.test"]
    for bind in ("0.0.0.0", "::", "10.0.0.5", "dash.test"):
        with pytest.raises(ValueError, match="--allowed-host"):
            allowed_hosts(bind, [])
    for bad in ("http://x", "a b", "x:port", "user@x", ""):
        with pytest.raises(ValueError, match="is not a host name"):
            allowed_hosts("127.0.0.1", [bad])


def test_a_port_in_use_is_one_clear_line_and_exit_1(config: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_dashboard(config, tmp_path, "--port", str(port))
        assert proc.wait(60) == 1
    err = (tmp_path / "dashboard.err").read_text()
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
