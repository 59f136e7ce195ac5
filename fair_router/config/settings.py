"""Settings: a YAML file plus ``FAIR_ROUTER_*`` environment overrides, validated by pydantic-settings.

The file comes from ``FAIR_ROUTER_CONFIG`` (default ``./fair_router.yaml`` when present); every key
can be overridden by ``FAIR_ROUTER_<KEY>`` with ``__`` for nesting and JSON for complex values.
Settings are validated whole at load, so a typo fails at start-up with the file, key path and reason
rather than silently routing nothing.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)
from pydantic_settings import SettingsError as SourceError

from fair_router.config.validation import (
    AtLeastOne,
    Duration,
    FairWeight,
    Prefix,
    QueueGroup,
    QueueName,
    RateField,
    TierName,
    Weight,
)
from fair_router.routing.rules import Rule

CONFIG_ENV = "FAIR_ROUTER_CONFIG"
DEFAULT_CONFIG = Path("fair_router.yaml")


class JobConfig(BaseModel):
    """Routing of one job function, keyed by its dotted path (``module.qualname``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    queue: QueueName | None = None
    rules: list[Rule] = Field(default_factory=list)
    rate: RateField | None = None  # starts per tenant of this job function, e.g. "10/s"
    burst: AtLeastOne | None = None  # starts allowed at once after a quiet spell (default 1)

    @model_validator(mode="after")
    def _burst_needs_rate(self) -> JobConfig:
        if self.burst is not None and self.rate is None:
            raise ValueError("burst is set without a rate: give rate too (e.g. rate: 10/s)")
        return self


ADR_LIMITS = {"free": 1, "pro": 3, "pro_plus": 3, "enterprise": 5}


def _resolver_path(value: object) -> object:
    """``package.module:function``, importable now, so a typo fails at load rather than per job."""
    if value is None:
        return None
    if not isinstance(value, str) or value.count(":") != 1:
        raise ValueError(f"resolver must be 'package.module:function', got {value!r}")
    module_name, _, attribute = value.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"resolver {value!r}: cannot import {module_name!r} ({exc})") from None
    if not callable(getattr(module, attribute, None)):
        raise ValueError(f"resolver {value!r}: {module_name} has no callable {attribute!r}")
    return value


class TiersConfig(BaseModel):
    """Plan tiers (Specvital ADR-10/16): which tiers get priority queues, how many jobs each may run
    at once, and their fair-queue weight. Built-in defaults are the ADR's own values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    default: TierName = "free"
    resolver: Annotated[str | None, BeforeValidator(_resolver_path)] = None
    priority: list[TierName] = Field(default_factory=lambda: ["pro", "pro_plus", "enterprise"])
    concurrency: dict[TierName, AtLeastOne] = Field(default_factory=lambda: dict(ADR_LIMITS))
    weights: dict[TierName, FairWeight] = Field(default_factory=dict)
    rate: dict[TierName, RateField] = Field(default_factory=dict)  # job starts per tenant, e.g. {free: 2/s}
    burst: dict[TierName, AtLeastOne] = Field(default_factory=dict)  # default 1
    max_backlog: dict[TierName, AtLeastOne] = Field(default_factory=dict)  # per fair queue

    @model_validator(mode="after")
    def _known_tiers(self) -> TiersConfig:
        known = set(self.concurrency)
        named = {*self.priority, *self.weights, *self.rate, *self.burst, *self.max_backlog, self.default}
        unknown = sorted(named - known)
        if unknown:
            raise ValueError(
                f"unknown tier(s) {', '.join(map(repr, unknown))}: tiers are the keys of tiers.concurrency "
                f"({', '.join(sorted(known))})"
            )
        return self

    def limit(self, tier: str) -> int:
        """Concurrent jobs allowed for ``tier`` (an unknown tier counts as the default tier)."""
        return self.concurrency.get(tier, self.concurrency[self.default])

    def weight(self, tier: str) -> float:
        """Fair-queue weight of ``tier`` (default 1)."""
        return self.weights.get(tier, 1.0)


class ConcurrencyConfig(BaseModel):
    """Fleet-wide per-tenant concurrency limits enforced by the weighted workers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    lease_ttl: Duration = 60.0
    snooze: Duration = 30.0
    jitter: Duration = 10.0


MIN_ABANDON_AFTER = 3.0
"""Weighted workers heartbeat a running job every ``abandon_after / 3`` seconds, in whole seconds (rq's
job-monitoring alarm counts whole seconds), so below 3 s a live job could be taken for abandoned."""


class RecoveryConfig(BaseModel):
    """Bounded crash recovery (``fair_router.workers.recovery``): a started job whose worker sent no heartbeat for
    ``abandon_after`` is handed back as rq would (retried, else failed as abandoned) within that bound
    plus a few seconds, whatever rq's maintenance schedule and locks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    abandon_after: Duration = 60.0

    @field_validator("abandon_after")
    @classmethod
    def _long_enough(cls, value: float) -> float:
        if value < MIN_ABANDON_AFTER:
            raise ValueError(
                f"abandon_after must be at least {MIN_ABANDON_AFTER:g}s (workers heartbeat a running job every "
                f"abandon_after/3 in whole seconds), got {value:g}s"
            )
        return value


class ObserveConfig(BaseModel):
    """What workers record at each job start, and what the dashboard and ``/metrics`` show
    (:mod:`fair_router.observe`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    record: bool = True
    """Record each job's wait as a weighted worker starts it (rides rq's own job-start pipeline)."""
    top_tenants: Annotated[int, Field(ge=1, le=1000)] = 10
    """Tenants shown by name (dashboard rows, metric labels): the N with most jobs waiting or running; the
    rest are summed under ``_other``."""
    tenants_per_minute: Annotated[int, Field(ge=1)] = 500
    """Tenants that get a record of their own in any one minute; starts of further tenants that minute are
    recorded under ``_other``. Bounds the records' memory whatever the number of tenants."""
    retention: Duration = 7200.0
    """A tenant's record expires this long after its last start (its cumulative counts then start again
    from zero, which Prometheus reads as a counter reset). At least 62 minutes: the 60-minute figures
    need them."""
    flush_interval: Duration = 1.0
    """A worker gathers its job starts in memory and sends them at most once per this interval, on the
    pipeline rq sends as a job starts (also when it stops, and from an idle or busy worker's heartbeat once
    they are twice this old). A worker killed outright loses up to this much of its records. At most 60s."""

    @field_validator("retention")
    @classmethod
    def _long_enough(cls, value: float) -> float:
        if value < 62 * 60:
            raise ValueError(f"retention must be at least 62m (the 60-minute wait figures need it), got {value:g}s")
        return value

    @field_validator("flush_interval")
    @classmethod
    def _short_enough(cls, value: float) -> float:
        if value > 60:
            raise ValueError(f"flush_interval must be at most 60s (the dashboard's figures lag by up to twice it), "
                             f"got {value:g}s")
        return value


def default_config_path() -> Path | None:
    """The YAML file to read: ``$FAIR_ROUTER_CONFIG``, else ``./fair_router.yaml`` if it exists."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        return Path(named)
    return DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None


Charge = Literal["jobs", "runtime"]
"""What a FairQueue's fair share divides: jobs (each pop costs its tenant 1 / weight), or worker time (a pop
costs the job's run time / weight: estimated at the pop, settled with the measured time when it ends)."""


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


class SettingsError(ValueError):
    """Settings that cannot be used; the message names the file or variable, the key path and the reason."""


Loc = tuple[int | str, ...]
"""Where a value sits in the settings, as pydantic reports it: ``("jobs", "a.b", "rules", 0, "per")``."""


def _location(loc: Loc) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part == "[key]":
            path += " (the key)"
        elif not re.fullmatch(r"[A-Za-z0-9_\-]+", part):
            path += f"[{part!r}]"
        else:
            path += f".{part}" if path else part
    return path or "(top level)"


def describe_errors(error: ValidationError, source: str, origin: Callable[[Loc], str | None] | None = None) -> str:
    """Render a pydantic ValidationError as ``key.path: reason (got value)`` lines. ``origin`` names where
    the value at a path came from (a file, a variable) and prefixes its line; lines it cannot place fall
    back to ``source``, named in the heading."""
    lines = []
    placed = True
    for item in error.errors():
        loc = tuple(p for p in item["loc"] if p not in ("function-after", "function-before"))
        reason = item["msg"].removeprefix("Value error, ")
        got = "" if item["type"] in ("missing", "value_error") else f" (got {item['input']!r})"
        label = origin(loc) if origin is not None else None
        placed = placed and label is not None
        where = f"{_location(loc)}: " if loc or label else ""  # a single argument has no key path
        lines.append(f"  {label + ': ' if label else ''}{where}{reason}{got}")
    heading = "invalid fair-router settings:" if placed and lines else f"invalid fair-router settings in {source}:"
    return "\n".join([heading, *lines])


T = TypeVar("T")


def validated(adapter: TypeAdapter[T], value: object, source: str) -> T:
    """``value`` checked by ``adapter`` (built on :mod:`fair_router.config.validation`'s types) where it is given
    outside the settings: a constructor argument or a CLI option. Raises SettingsError naming ``source``
    (e.g. ``FairRouter(prefix=...)``), the key when ``value`` is a mapping, the reason and the value."""
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, source)) from None


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
