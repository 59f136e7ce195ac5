"""What every ``fair-router`` command shares: its settings (or a clear error and exit status 2), a router
on them, and option types validated exactly as the settings they override."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from pydantic import TypeAdapter, ValidationError
from redis import Redis

from fair_router.config.settings import Settings, SettingsError, load_settings
from fair_router.config.validation import AtLeastOne, FairWeight, RateField
from fair_router.routing.router import FairRouter


def load_or_exit(config: Path | None) -> Settings:
    """The settings from ``config`` (else the default file and the environment); invalid ones are printed
    with their file, key and reason, and the command exits with status 2 rather than a traceback."""
    try:
        return load_settings(config)
    except SettingsError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)


def router_for(settings: Settings) -> FairRouter:
    """A router on the settings' Redis, prefix and tiers: the commands read and write what workers use."""
    return FairRouter(Redis.from_url(settings.redis_url), prefix=settings.prefix, tiers=settings.tiers)


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
