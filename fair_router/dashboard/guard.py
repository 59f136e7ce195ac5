"""What makes the dashboard safe to expose (docs/dashboard-security.md): a ``Host`` allowlist against DNS rebinding,
strict security headers, and an optional read token whose sign-in cookie is an expiring HMAC, never the token."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from typing import TYPE_CHECKING

from itsdangerous import BadSignature, TimestampSigner

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment
    from flask import Request
    from werkzeug.wrappers import Response

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
"""The names a browser on the same machine uses for a dashboard bound to loopback."""
SESSION_SECONDS = 12 * 3600
"""How long one sign-in lasts."""
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Frame-Options": "DENY",
                    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}
"""On every response. ``no-store``: tenant data should not stay in shared or disk caches."""


def is_loopback(host: str) -> bool:
    """Whether a listen address reaches only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def split_host(value: str) -> tuple[str, str | None]:
    """``Host`` header -> (lower-case name, port or None); IPv6 keeps its brackets, a trailing dot is dropped."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value.partition("]")
        name += "]"
        if rest and not rest.startswith(":"):
            return value, None  # junk after the brackets: a name that matches nothing
        port = rest[1:] or None
    elif value.count(":") == 1:
        name, _, port_text = value.partition(":")
        port = port_text
    else:
        name, port = value, None
    return name.rstrip("."), port


def allowed_hosts(bind: str, extra: Iterable[str]) -> list[str]:
    """The ``Host`` names a dashboard bound to ``bind`` answers: loopback names and ``extra`` on loopback; only
    ``extra`` (at least one) otherwise, since only the operator knows the public name."""
    extra = list(extra)
    for host in extra:
        name, port = split_host(host)
        if not name or (port is not None and not port.isdigit()) or any(c in name for c in "/ @?#"):
            raise ValueError(f"--allowed-host {host!r} is not a host name (like dash.example.com, 10.0.0.5, "
                             f"[fd00::5] or dash.example.com:8443)")
    if is_loopback(bind):
        return [*LOOPBACK_NAMES, *extra]
    if not extra:
        raise ValueError(f"the dashboard listens on {bind}, beyond loopback: give the host name(s) clients use "
                         f"with --allowed-host (e.g. --allowed-host dash.example.com); any other Host gets 400")
    return extra


class HostAllowlist:
    """WSGI middleware refusing (400) a request whose ``Host`` is not allowed (an entry without port: any port)."""

    def __init__(self, app: WSGIApplication, hosts: Iterable[str]) -> None:
        self.app = app
        self.allowed = {split_host(host) for host in hosts}
        if not self.allowed:
            raise ValueError("the dashboard's host allowlist is empty: no request could reach it")

    def allows(self, header: str | None) -> bool:
        if not header:
            return False
        name, port = split_host(header)
        if port is not None and not port.isdigit():
            return False
        return (name, None) in self.allowed or (port is not None and (name, port) in self.allowed)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if self.allows(environ.get("HTTP_HOST")):
            return self.app(environ, start_response)
        body = b"400 Bad Request: this Host is not allowed (fair-router dashboard --allowed-host)\n"
        start_response("400 Bad Request", [("Content-Type", "text/plain; charset=utf-8"),
                                           ("Content-Length", str(len(body))), *SECURITY_HEADERS.items()])
        return [body]


def secure_headers(response: Response) -> Response:
    """Flask ``after_request`` hook: :data:`SECURITY_HEADERS`, unless the response set its own."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


class ReadAccess:
    """The read token's checks: a bearer header, or the sign-in cookie (named ``cookie``)."""

    def __init__(self, token: str, cookie: str) -> None:
        self.expected = f"Bearer {token}".encode()
        self.token = token.encode()
        self.cookie = cookie
        self.signer = TimestampSigner(token, salt="fair-router dashboard sign-in")

    def token_matches(self, given: str) -> bool:
        """The sign-in form's check, in constant time."""
        return hmac.compare_digest(given.encode(), self.token)

    def bearer(self, request: Request) -> bool:
        return hmac.compare_digest(request.headers.get("Authorization", "").encode(), self.expected)

    def signed_in(self, request: Request) -> bool:
        value = request.cookies.get(self.cookie)
        if not value:
            return False
        try:
            self.signer.unsign(value, max_age=SESSION_SECONDS)
        except BadSignature:  # also SignatureExpired, its subclass
            return False
        return True

    def allows(self, request: Request) -> bool:
        return self.bearer(request) or self.signed_in(request)

    def sign_in(self, response: Response, path: str, secure: bool) -> None:
        """Set the cookie: HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it)."""
        response.set_cookie(self.cookie, self.signer.sign(b"reader").decode(), max_age=SESSION_SECONDS,
                            path=path, secure=secure, httponly=True, samesite="Strict")

    def sign_out(self, response: Response, path: str) -> None:
        response.delete_cookie(self.cookie, path=path, httponly=True, samesite="Strict")

