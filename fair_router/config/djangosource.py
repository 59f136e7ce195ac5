"""Settings from Django's ``FAIR_ROUTER`` setting (a dict with the YAML file's keys), read by ``load_settings``
in a Django process in place of the file (:mod:`fair_router.core.djangoenv` finds it; docs/django.md)."""

from __future__ import annotations

import logging
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource

from fair_router.config.errors import SettingsError, describe_errors
from fair_router.config.location import first_time

S = TypeVar("S", bound=BaseSettings)


def from_django(settings_cls: type[S], values: Any, name: str, overrides: dict[str, Any]) -> S:
    """``settings_cls`` from Django's ``FAIR_ROUTER`` dict in the file's place (variables and arguments override it)."""
    if not isinstance(values, dict):
        raise SettingsError(f"{name} must be a dict of fair-router settings (the YAML file's keys), "
                            f"got {type(values).__name__}")

    class DjangoSettings(settings_cls):  # type: ignore[valid-type,misc]
        @classmethod
        def file_source(cls, settings_cls: type[BaseSettings]) -> PydanticBaseSettingsSource:
            return InitSettingsSource(settings_cls, init_kwargs=values)

    try:
        settings: S = DjangoSettings(**overrides)
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, f"{name} (or its FAIR_ROUTER_* environment override)")) from None
    if first_time(name):
        logging.getLogger("fair_router.settings").info("fair-router settings: %s (Django)", name)
    return settings
