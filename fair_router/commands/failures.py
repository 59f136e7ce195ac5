"""How a ``fair-router`` command fails: one line naming what failed and where, and exit status 1 (could not do its work)
or 2 (bad input); a traceback only with ``--debug``. Commands raise; :class:`FailingCleanly` maps the exception."""

from __future__ import annotations

from typing import Any, NoReturn

import click
from pydantic import ValidationError
from redis.exceptions import AuthenticationError, RedisError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from fair_router.config.errors import SettingsError
from fair_router.core.tenancy import InvalidTenant
from fair_router.workers.pool import redact_url

DEBUG = "fair_router.debug"
"""``ctx.meta`` key: ``--debug`` was given (exceptions propagate with their traceback)."""
REDIS = "fair_router.redis"
"""``ctx.meta`` key: the (redacted) URL of the Redis the command uses, for messages."""
MAX_MESSAGE = 500
"""Characters of an exception's text shown in a one-line error."""


class BadInput(ValueError):
    """Input the command cannot use (exit status 2), with the message to print."""


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``message`` on stderr and exit with ``code`` (2: bad input, 1: could not do the work)."""
    click.echo(message, err=True)
    raise SystemExit(code)


def remember_redis(url: str) -> None:
    """Record the Redis URL the running command uses, for its error messages."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.find_root().meta[REDIS] = redact_url(url)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "..."


def describe(exc: Exception, where: str | None) -> tuple[int, str]:
    """The exit status and one-line message of a command's failure ``exc``; ``where``: its Redis URL."""
    at = f" at {where}" if where else ""
    if isinstance(exc, AuthenticationError) or (
            isinstance(exc, ResponseError) and str(exc).startswith(("NOAUTH", "WRONGPASS", "NOPERM"))):
        return 1, f"error: Redis{at} refused the credentials: {_one_line(exc)} (give them in the URL: " \
                  "redis://:password@host:port/0)"
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError)):
        return 1, f"error: cannot reach Redis{at}: {_one_line(exc)}"
    if isinstance(exc, ResponseError) and str(exc).startswith(("MOVED", "ASK", "CLUSTERDOWN", "CROSSSLOT")):
        return 1, f"error: Redis{at} is a Redis Cluster node ({_one_line(exc)}): the fair-router commands " \
                  "need a standalone Redis URL"
    if isinstance(exc, RedisError):
        return 1, f"error: Redis{at} failed: {type(exc).__name__}: {_one_line(exc)}"
    if isinstance(exc, SettingsError):
        return 2, str(exc)
    if isinstance(exc, (BadInput, InvalidTenant)):
        return 2, f"error: {_one_line(exc)}"
    if isinstance(exc, ValidationError):
        return 2, "error: " + "; ".join(_one_line(ValueError(e["msg"])) for e in exc.errors())
    return 1, f"error: {type(exc).__name__}: {_one_line(exc)} (fair-router --debug shows the traceback)"


class FailingCleanly(click.Group):
    """A click group whose commands fail with one line and an exit status; ``--debug`` lets the exception through."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as exc:
            if ctx.meta.get(DEBUG):
                raise
            code, message = describe(exc, ctx.meta.get(REDIS))
            click.echo(message, err=True)
            ctx.exit(code)
