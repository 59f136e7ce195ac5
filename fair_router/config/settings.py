"""Settings: a YAML file plus ``FAIR_ROUTER_*`` environment overrides, validated by pydantic-settings.

The file comes from ``FAIR_ROUTER_CONFIG`` (default ``./fair_router.yaml`` when present); every key
can be overridden by ``FAIR_ROUTER_<KEY>`` with ``__`` for nesting and JSON for complex values.
Settings are validated whole at load, so a typo fails at start-up with the file, key path and reason
rather than silently routing nothing.

This module is the model and its loading (where each value came from, for the error message). The sections
are in :mod:`fair_router.config.sections` and the error rendering in :mod:`fair_router.config.errors`; both
are re-exported here, so every settings type is imported from this one place.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)
from pydantic_settings import SettingsError as SourceError

from fair_router.config.errors import Loc, SettingsError, describe_errors, validated
from fair_router.config.sections import (
    ADR_LIMITS,
    MIN_ABANDON_AFTER,
    Charge,
    ConcurrencyConfig,
    InterruptibleConfig,
    JobConfig,
    ObserveConfig,
    RecoveryConfig,
    TiersConfig,
)
from fair_router.config.validation import AtLeastOne, Prefix, QueueGroup, QueueName, Weight

__all__ = [
    "ADR_LIMITS",
    "CONFIG_ENV",
    "DEFAULT_CONFIG",
    "MIN_ABANDON_AFTER",
    "Charge",
    "ConcurrencyConfig",
    "InterruptibleConfig",
    "JobConfig",
    "Loc",
    "ObserveConfig",
    "RecoveryConfig",
    "Settings",
    "SettingsError",
    "TiersConfig",
    "default_config_path",
    "describe_errors",
    "load_settings",
    "validated",
]

CONFIG_ENV = "FAIR_ROUTER_CONFIG"
DEFAULT_CONFIG = Path("fair_router.yaml")


def default_config_path() -> Path | None:
    """The YAML file to read: ``$FAIR_ROUTER_CONFIG``, else ``./fair_router.yaml`` if it exists."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        return Path(named)
    return DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None


class Settings(BaseSettings):
    """All fair-router settings. Build with :func:`load_settings` to get file-aware error messages."""

    model_config = SettingsConfigDict(
        env_prefix="FAIR_ROUTER_", env_nested_delimiter="__", extra="forbid", yaml_file=None
    )

    redis_url: str = "redis://localhost:6379/0"
    prefix: Prefix = "fair_router"
    jobs: dict[str, JobConfig] = Field(default_factory=dict)
    queues: dict[QueueName, Weight] = Field(default_factory=dict)
    fair_queues: list[QueueName] = Field(default_factory=list)  # served as FairQueue by weighted workers
    fair_charge: Charge = "jobs"  # FairQueue fair share of jobs, or of worker time ("runtime")
    fair_trust_cost: bool = False  # charge="runtime": a job's declared fair_cost is its charge (else measured)
    pool: dict[QueueGroup, AtLeastOne] = Field(default_factory=dict)
    tiers: TiersConfig = Field(default_factory=TiersConfig)
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig)
    interruptible: InterruptibleConfig = Field(default_factory=InterruptibleConfig)
    observe: ObserveConfig = Field(default_factory=ObserveConfig)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Precedence: explicit arguments, then the environment, then the YAML file."""
        yaml_file = settings_cls.model_config.get("yaml_file") or default_config_path()
        return init_settings, env_settings, YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file)

    def job(self, job_key: str) -> JobConfig:
        """Settings for one job key; an unconfigured job has no rules."""
        return self.jobs.get(job_key) or JobConfig()

    def weight(self, queue: str) -> float | Literal["strict"]:
        """Fetch weight of ``queue``; queues not listed get 1."""
        return self.queues.get(queue, 1.0)


def _shorten(value: str, limit: int = 80) -> str:
    """``value`` quoted, cut to about ``limit`` characters (environment values can be long JSON)."""
    return repr(value if len(value) <= limit else value[: limit - 3] + "...")


class _Origins:
    """Which layer each setting came from: ``load_settings`` arguments, then ``FAIR_ROUTER_*`` variables,
    then the file, merged as pydantic-settings merges its sources (mappings key by key; anything else,
    lists included, replaced whole by the higher layer). Read again only when validation failed."""

    ARGUMENTS = "load_settings() arguments"

    def __init__(self, settings_cls: type[BaseSettings], file: Path | None, overrides: dict[str, Any]) -> None:
        self.file = file
        env = EnvSettingsSource(settings_cls)
        self.layers: list[tuple[str, Any]] = [
            (self.ARGUMENTS, overrides),
            ("env", env()),
            (str(file), YamlConfigSettingsSource(settings_cls, yaml_file=file)() if file else {}),
        ]
        prefix = env.env_prefix.lower()
        # Each variable by its key path, as pydantic-settings reads names (case-insensitively here).
        self.variables = {
            tuple(name.lower()[len(prefix):].split(env.env_nested_delimiter or "\0")): name
            for name in sorted(os.environ)
            if name.lower().startswith(prefix) and name.upper() != CONFIG_ENV
        }

    def __call__(self, loc: Loc) -> str | None:
        """The file, variable(s) or arguments the value at ``loc`` came from, joined by '+' when merged."""
        nodes = [(name, data) for name, data in self.layers if data]
        depth = 0
        for part in loc:
            found = [(name, node[part]) for name, node in nodes if _has(node, part)]
            if not found:
                break  # a pseudo-location such as a dict key's "[key]": the value so far is the one
            depth += 1
            if isinstance(found[0][1], dict):  # merged with the lower layers' mappings, replacing the rest
                nodes = [(name, node) for name, node in found if isinstance(node, dict)]
            else:
                nodes = found[:1]
        if depth == 0:
            return None
        return " + ".join(self._variables(loc[:depth]) if name == "env" else name for name, _ in nodes)

    def _variables(self, path: Loc) -> str:
        """The variable that set ``path`` (the deepest whose key path leads to it), or the several nested
        variables that together built the mapping at ``path``."""
        wanted = tuple(str(part).lower() for part in path)
        holders = [key for key in self.variables if wanted[: len(key)] == key]
        if holders:
            return self.variables[max(holders, key=len)]
        return " + ".join(name for key, name in self.variables.items() if key[: len(wanted)] == wanted)


def _has(node: Any, part: int | str) -> bool:
    if isinstance(node, dict):
        return part in node
    return isinstance(node, list) and isinstance(part, int) and -len(node) <= part < len(node)


def _bad_json(exc: SourceError) -> str | None:
    """pydantic-settings reports a ``FAIR_ROUTER_*`` value that is not valid JSON against the top-level
    field only: name the variable(s) holding that value, the value and the JSON error instead."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, json.JSONDecodeError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    prefix = Settings.model_config.get("env_prefix", "").lower()
    names = [name for name in sorted(os.environ) if name.lower().startswith(prefix) and os.environ[name] == cause.doc]
    if not names:
        return None
    return (f"invalid fair-router settings: {' / '.join(names)}={_shorten(cause.doc)} is not valid JSON "
            f"({cause.msg} at character {cause.pos}); complex values in FAIR_ROUTER_* variables are JSON")


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Load settings from ``path`` (else ``$FAIR_ROUTER_CONFIG`` / ``./fair_router.yaml``) and the environment.

    Raises SettingsError naming the file or environment variable, the key path and the reason when
    anything is invalid.
    """
    file = Path(path) if path is not None else default_config_path()
    if file is not None and not file.is_file():
        raise SettingsError(f"fair-router settings file not found: {file}")
    source = f"{file} (or its FAIR_ROUTER_* environment override)" if file else "FAIR_ROUTER_* environment"

    class FileSettings(Settings):
        model_config = SettingsConfigDict(yaml_file=file)

    try:
        return FileSettings(**overrides)
    except yaml.YAMLError as exc:
        raise SettingsError(f"{file}: malformed YAML: {exc}") from None
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, source, _Origins(FileSettings, file, overrides))) from None
    except SourceError as exc:  # pydantic-settings could not read a source: an environment variable, so far
        message = _bad_json(exc)
        if message is None:
            cause = exc.__cause__ or exc.__context__
            message = f"invalid fair-router settings in {source}: {exc}" + (f" ({cause})" if cause else "")
        raise SettingsError(message) from None
    except (TypeError, AttributeError, ValueError) as exc:  # a YAML list or scalar where a mapping belongs
        raise SettingsError(f"{file}: settings must be a YAML mapping of keys to values ({exc})") from None
