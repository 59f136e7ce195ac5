"""Settings: a YAML file plus ``FAIR_ROUTER_*`` environment overrides, validated whole at load by pydantic-settings, so
a typo fails at start-up naming the file, key path and reason. Every settings type is imported from here."""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, PrivateAttr, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as SourceError

from fair_router.config import location
from fair_router.config.errors import Loc, SettingsError, SettingsWarning, describe_errors
from fair_router.config.location import CONFIG_ENV, announce_source, default_config_path, first_time
from fair_router.config.sections import (
    Charge,
    ConcurrencyConfig,
    InterruptibleConfig,
    JobConfig,
    ObserveConfig,
    OrgConfig,
    RecoveryConfig,
    TiersConfig,
)
from fair_router.config.yamlfile import CheckedYamlSource
from fair_router.core.djangoenv import fair_router_setting
from fair_router.core.shards import family_of
from fair_router.core.tenancy import DEFAULT_TENANT_MAX_BYTES
from fair_router.core.validation import (
    MAX_JOBS,
    MAX_QUEUES,
    AtLeastOne,
    Duration,
    Prefix,
    QueueGroup,
    QueueName,
    RedisUrl,
    Replicas,
    TenantMaxBytes,
    Weight,
    at_most,
)

__all__ = ["CONFIG_ENV", "Charge", "ConcurrencyConfig", "InterruptibleConfig", "JobConfig", "ObserveConfig",
           "OrgConfig", "RecoveryConfig", "Settings", "SettingsError", "SettingsWarning", "TiersConfig",
           "announce_source", "default_config_path", "load_settings"]

class Settings(BaseSettings):
    """All fair-router settings. Build with :func:`load_settings` to get file-aware error messages."""

    model_config = SettingsConfigDict(env_prefix="FAIR_ROUTER_", env_nested_delimiter="__", extra="forbid",
                                      yaml_file=None)

    # Each field's meaning: config.example.yaml (which lists them all) and docs/production-redis.md.
    redis_url: RedisUrl = "redis://localhost:6379/0"
    redis_cluster: bool = False  # redis_url names a node of a Redis Cluster (fair_router.store.cluster)
    redis_outage_grace: Duration = 60.0  # how long workers ride an unreachable Redis (fair_router.store.outage)
    replicas_to_wait: Replicas = 0  # replicas that acknowledge each enqueue (fair_router.store.replicas); 0: none
    replicas_timeout: Duration = 1.0
    prefix: Prefix = "fair_router"
    jobs: Annotated[dict[str, JobConfig], at_most(MAX_JOBS, "jobs")] = Field(default_factory=dict)
    queues: Annotated[dict[QueueName, Weight], at_most(MAX_QUEUES, "queues")] = Field(default_factory=dict)
    fair_queues: Annotated[list[QueueName], at_most(MAX_QUEUES, "fair queues")] = Field(
        default_factory=list)  # served as FairQueue by weighted workers
    throttled_queues: Literal["fair", "plain"] = "fair"  # the queues rules route to: by fair share, or FIFO
    fair_charge: Charge = "jobs"  # FairQueue fair share of jobs, or of worker time ("runtime")
    fair_trust_cost: bool = False  # charge="runtime": a job's declared fair_cost is its charge (else measured)
    pool: Annotated[dict[QueueGroup, AtLeastOne], at_most(MAX_QUEUES, "pool entries")] = Field(default_factory=dict)
    tenant_max_bytes: TenantMaxBytes = DEFAULT_TENANT_MAX_BYTES  # longest tenant id taken (bytes of UTF-8)
    tiers: TiersConfig = Field(default_factory=TiersConfig)
    # Organisations above tenants (fair_org=): an org's FairQueue weight against other orgs (default 1), its
    # concurrency, rate (with burst) and tier, checked at every start of its tenants' jobs.
    orgs: Annotated[dict[str, OrgConfig], at_most(MAX_JOBS, "orgs")] = Field(default_factory=dict)
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig)
    interruptible: InterruptibleConfig = Field(default_factory=InterruptibleConfig)
    observe: ObserveConfig = Field(default_factory=ObserveConfig)
    shard_urls: list[RedisUrl] = Field(default_factory=list)  # shard i lives on shard_urls[i % len]
    _source_file: Path | None = PrivateAttr(default=None)

    @property
    def source_file(self) -> Path | None:
        """The file these settings were loaded from; None when none was."""
        return self._source_file

    @model_validator(mode="after")
    def _every_target_served(self) -> Settings:
        """A queue jobs go to that no worker of these settings serves is an error: its jobs would wait forever."""
        served = self.served_queues()
        if served:
            missing = [(key, queue) for key, queue in self.queue_targets() if queue not in served]
            if missing:
                raise ValueError("; ".join(
                    f"{key} is {queue!r}, which has no weight in `queues:` and no group in `pool:`, so no worker "
                    f"started from these settings serves it (its jobs would wait forever): add it, e.g. "
                    f"`queues: {{{queue}: 1}}`" for key, queue in missing))
        tiers = set(self.tiers.concurrency)
        if unknown := [f"orgs[{org!r}].tier is {config.tier!r}, which is no tier of tiers.concurrency "
                       f"({', '.join(sorted(tiers))})" for org, config in self.orgs.items()
                       if config.tier is not None and config.tier not in tiers]:
            raise ValueError("; ".join(unknown))
        if not self.concurrency.enabled and (limited := sorted(org for org, config in self.orgs.items()
                                                               if config.concurrency is not None)):
            warnings.warn(SettingsWarning(f"orgs[{limited[0]!r}].concurrency is set but concurrency.enabled is false: "
                                          "org concurrency limits (as tenants') are enforced only with "
                                          "concurrency.enabled: true"), stacklevel=2)
        for warning in self._rising_weights():
            warnings.warn(SettingsWarning(warning), stacklevel=2)
        return self

    def served_queues(self) -> set[str]:
        """The queues workers started from these settings serve: `queues:` and the groups of `pool:`."""
        return set(self.queues) | {name for group in self.pool for name in group.split(",")}

    def queue_targets(self) -> list[tuple[str, str]]:
        """Every queue these settings send jobs to, with its key path: base queues, rule targets and fair queues."""
        targets: list[tuple[str, str]] = []
        for job_key, job in self.jobs.items():
            if job.queue:
                targets.append((f"jobs[{job_key!r}].queue", job.queue))
            for i, rule in enumerate(job.rules):
                if "{queue}" not in rule.queue or job.queue:
                    targets.append((f"jobs[{job_key!r}].rules[{i}].queue", rule.for_base(job.queue or "").queue))
        targets.extend((f"fair_queues[{i}]", name) for i, name in enumerate(self.fair_queues))
        return targets

    def _rising_weights(self) -> list[str]:
        """A later rule's queue should be polled no more often than the one before it: name one that is."""
        found = []
        for job_key, job in self.jobs.items():
            stages = [("its base queue", job.queue)] if job.queue else []
            stages += [(f"rules[{i}]", rule.for_base(job.queue or "").queue) for i, rule in enumerate(job.rules)]
            for (before, slower), (after, faster) in itertools.pairwise(stages):
                if slower in self.queues and faster in self.queues and _speed(self.queues[faster]) > _speed(
                        self.queues[slower]):
                    found.append(f"jobs[{job_key!r}]: {after} sends a heavier tenant to {faster!r} (weight "
                                 f"{self.queues[faster]}), polled more often than {slower!r} (weight "
                                 f"{self.queues[slower]}) of {before}: rules go from least to most restrictive, "
                                 "and a later rule's queue should get a lower weight")
        return found

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Precedence: explicit arguments, then the environment, then the YAML file (or Django's dict)."""
        return init_settings, env_settings, cls.file_source(settings_cls)

    @classmethod
    def file_source(cls, settings_cls: type[BaseSettings]) -> PydanticBaseSettingsSource:
        """The lowest layer: the YAML file (:func:`from_django`: Django's ``FAIR_ROUTER`` dict instead)."""
        return CheckedYamlSource(settings_cls, yaml_file=settings_cls.model_config.get("yaml_file")
                                 or default_config_path())

    def job(self, job_key: str) -> JobConfig:
        """Settings for one job key; an unconfigured job has no rules."""
        return self.jobs.get(job_key) or JobConfig()

    def weight(self, queue: str) -> float | Literal["strict"]:
        """Fetch weight of ``queue``; a shard queue not listed has its family's; queues not listed get 1."""
        member = family_of(queue)
        return self.queues.get(queue, self.queues.get(member[0], 1.0) if member else 1.0)

    def fair_queue_names(self) -> list[str]:
        """The FairQueues: ``fair_queues``, plus the rules' queues with ``throttled_queues: fair`` (the default)."""
        names = dict.fromkeys(self.fair_queues)
        if self.throttled_queues == "fair":
            names.update(dict.fromkeys(queue for key, queue in self.queue_targets() if ".rules[" in key))
        return list(names)

    def is_fair(self, queue: str) -> bool:
        """Whether ``queue`` is served as a FairQueue: one of :meth:`fair_queue_names` or a shard of one."""
        names = self.fair_queue_names()
        member = family_of(queue)
        return queue in names or (member is not None and member[0] in names)

    def shard_url(self, index: int) -> str:
        """The Redis of shard ``index``: ``shard_urls[index % len]``, or ``redis_url`` when none are set."""
        return self.shard_urls[index % len(self.shard_urls)] if self.shard_urls else self.redis_url

    def sharded_families(self, index: int | None = None) -> list[str]:
        """The queue families of the sharded job keys, in settings order; with ``index``, those having that shard."""
        families: dict[str, None] = {}
        for job in self.jobs.values():
            if job.shards is not None and (index is None or index < job.shards.count):
                families.update(dict.fromkeys(job.families()))
        return list(families)


def _speed(weight: float | Literal["strict"]) -> float:
    """A weight as how often its queue is polled: ``strict`` queues come before every weighted one."""
    return math.inf if weight == "strict" else float(weight)


class _Origins:
    """Which layer (arguments, variables, file) each setting came from; read only when validation failed."""

    ARGUMENTS = "load_settings() arguments"

    def __init__(self, settings_cls: type[BaseSettings], file: Path | None, overrides: dict[str, Any]) -> None:
        self.file = file
        env = EnvSettingsSource(settings_cls)
        with warnings.catch_warnings():  # the file read again, for error messages: without repeating its warnings
            warnings.simplefilter("ignore", SettingsWarning)
            from_file = CheckedYamlSource(settings_cls, yaml_file=file)() if file else {}
        self.layers: list[tuple[str, Any]] = [(self.ARGUMENTS, overrides), ("env", env()), (str(file), from_file)]
        prefix = env.env_prefix.lower()
        # Each variable by its key path, as pydantic-settings reads names (case-insensitively here).
        self.variables = {tuple(name.lower()[len(prefix):].split(env.env_nested_delimiter or "\0")): name
                          for name in sorted(os.environ)
                          if name.lower().startswith(prefix) and name.upper() != CONFIG_ENV}

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
        """The variable (or nested variables) that set the value at ``path``."""
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
    """Name the ``FAIR_ROUTER_*`` variables holding invalid JSON (pydantic-settings names only the top field)."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, json.JSONDecodeError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    prefix = Settings.model_config.get("env_prefix", "").lower()
    names = [name for name in sorted(os.environ) if name.lower().startswith(prefix) and os.environ[name] == cause.doc]
    if not names:
        return None
    shown = repr(cause.doc if len(cause.doc) <= 80 else cause.doc[:77] + "...")  # environment values: long JSON
    return (f"invalid fair-router settings: {' / '.join(names)}={shown} is not valid JSON "
            f"({cause.msg} at character {cause.pos}); complex values in FAIR_ROUTER_* variables are JSON")


def from_django(values: Any, name: str, overrides: dict[str, Any]) -> Settings:
    """Settings from Django's ``FAIR_ROUTER`` dict (the YAML file's keys) in the file's place, in a Django process
    (:mod:`fair_router.core.djangoenv` finds it; docs/django.md); variables and arguments override it."""
    if not isinstance(values, dict):
        raise SettingsError(f"{name} must be a dict of fair-router settings (the YAML file's keys), "
                            f"got {type(values).__name__}")

    class DjangoSettings(Settings):
        @classmethod
        def file_source(cls, settings_cls: type[BaseSettings]) -> PydanticBaseSettingsSource:
            return InitSettingsSource(settings_cls, init_kwargs=values)

    try:
        settings = DjangoSettings(**overrides)
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, f"{name} (or its FAIR_ROUTER_* environment override)",
                                            model=Settings)) from None
    if first_time(name):
        logging.getLogger("fair_router.settings").info("fair-router settings: %s (Django)", name)
    location.announce_mistyped_variables(Settings.model_fields)
    return settings


def load_settings(path: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Load settings from ``path`` (else ``$FAIR_ROUTER_CONFIG`` / ``./fair_router.yaml``, or Django's ``FAIR_ROUTER``)
    and the environment. Raises SettingsError naming the file or variable, the key path and the reason."""
    django = fair_router_setting() if path is None else None
    if django is not None:
        return from_django(*django, overrides)
    file = Path(path) if path is not None else default_config_path()
    if file is not None and not file.is_file():
        raise SettingsError(location.not_a_file(file, from_variable=path is None))
    source = f"{file} (or its FAIR_ROUTER_* environment override)" if file else "FAIR_ROUTER_* environment"

    class FileSettings(Settings):
        model_config = SettingsConfigDict(yaml_file=file)

    try:
        settings: Settings = FileSettings(**overrides)
    except SettingsError:  # from the file reader (fair_router.config.yamlfile), already naming the file
        raise
    except yaml.YAMLError as exc:
        raise SettingsError(f"{file}: malformed YAML: {exc}") from None
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, source, _Origins(FileSettings, file, overrides),
                                            model=Settings)) from None
    except SourceError as exc:  # pydantic-settings could not read a source: an environment variable, so far
        message = _bad_json(exc)
        if message is None:
            cause = exc.__cause__ or exc.__context__
            message = f"invalid fair-router settings in {source}: {exc}" + (f" ({cause})" if cause else "")
        raise SettingsError(message) from None
    except (TypeError, AttributeError, ValueError) as exc:  # a YAML list or scalar where a mapping belongs
        raise SettingsError(f"{file}: settings must be a YAML mapping of keys to values ({exc})") from None
    settings._source_file = file.resolve() if file is not None else None
    announce_source(file)
    location.announce_mistyped_variables(Settings.model_fields)
    return settings

