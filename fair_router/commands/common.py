"""What every ``fair-router`` command shares: its settings (or exit status 2), its recorded Redis connection, a router,
and option types validated as the settings they override."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from pydantic import TypeAdapter, ValidationError
from redis import Redis

from fair_router.commands.failures import BadInput, remember_redis
from fair_router.config.settings import Settings, SettingsWarning, load_settings
from fair_router.core.validation import AtLeastOne, FairWeight, RateField
from fair_router.routing.router import FairRouter
from fair_router.store.cluster import ClusterSetupError, connections_for
from fair_router.workers.pool import redact_url

CONNECT_TIMEOUT = 5.0
"""Seconds a command waits for Redis to accept its connection: an unreachable host fails in seconds."""


def load_or_exit(config: Path | None) -> Settings:
    """The settings from ``config`` (else the default file and environment); invalid: SettingsError (exit 2)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SettingsWarning)
        settings = load_settings(config)
    for warning in caught:
        if issubclass(warning.category, SettingsWarning):
            click.echo(f"warning: {warning.message}", err=True)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    remember_redis(settings.redis_url)
    return settings


def connect(url: str, ping: bool = False, cluster: bool = False) -> Redis:
    """A client of the Redis at ``url`` (recorded for error messages); ``ping`` checks it answers now, so a long-running
    command fails at start. A bad URL, or with ``cluster`` an untagged ``RQ_KEY_PREFIX``, is bad input (status 2)."""
    remember_redis(url)
    try:
        connection = connections_for(url, cluster, socket_connect_timeout=CONNECT_TIMEOUT).state
    except ClusterSetupError as exc:
        raise BadInput(str(exc)) from None
    except ValueError as exc:
        raise BadInput(f"invalid Redis URL {redact_url(url)}: {exc}") from None
    if ping:
        connection.ping()
    return connection


def router_for(settings: Settings) -> FairRouter:
    """A router on the settings' Redis, prefix and tiers: the commands read and write what workers use."""
    return FairRouter(connect(settings.redis_url, cluster=settings.redis_cluster), prefix=settings.prefix,
                      tiers=settings.tiers, tenant_max_bytes=settings.tenant_max_bytes, orgs=settings.orgs)


class Validated(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on, plain before
    """A click parameter checked by a :mod:`fair_router.core.validation` type, as the setting it overrides."""

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
