"""Checks across settings that each validate alone but break a deployment together (``fair-router check``): a rule's
queue no worker serves, a job key naming no function, a ``FAIR_ROUTER_*`` variable no setting reads. Each finding is an
error (exit 2) or a warning, naming where the value is."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

from fair_router.config.location import unread_variables, variable_names
from fair_router.config.settings import CONFIG_ENV, Settings


@dataclass(frozen=True)
class Finding:
    """One problem: ``where`` is the file and key path (or the variable), ``message`` says what and why."""

    level: Literal["error", "warning"]
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.level}: {self.where}: {self.message}"


def cross_check(settings: Settings, source: str) -> list[Finding]:
    """Every cross-reference problem of ``settings``, loaded from ``source`` (a file, or the environment)."""
    findings = []
    if not settings.served_queues() and settings.queue_targets():
        findings.append(Finding("warning", f"{source}: queues", "no `queues:` and no `pool:`: `fair-router worker` "
                                "and `pool` have no queues to serve, so every worker must name its queues"))
    for job_key in settings.jobs:
        findings.extend(job_key_findings(job_key, f"{source}: jobs[{job_key!r}]"))
    return findings


def job_key_findings(job_key: str, where: str) -> Iterator[Finding]:
    """A job key must name a ``@fair_job`` function by its dotted path, or its rules never apply."""
    module_name, attributes, failure = _import_prefix(job_key)
    if module_name is None:
        if "." not in job_key:
            yield Finding("warning", where, f"job key {job_key!r} is not a dotted path: its rules apply only to "
                          f"a @fair_job(job_key={job_key!r})")
        else:
            yield Finding("error", where, f"job key {job_key!r} does not import ({failure}): its rules would "
                          "never apply. Give the function's module.qualname, and run check where the "
                          "workers run (or with --path)")
        return
    obj: object = importlib.import_module(module_name)
    for i, name in enumerate(attributes):
        parent, obj = obj, getattr(obj, name, None)
        if obj is None:
            found = ".".join([module_name, *attributes[:i]])
            close = difflib.get_close_matches(name, [n for n in dir(parent) if not n.startswith("_")], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            yield Finding("error", where, f"job key {job_key!r} does not import: {found} has no {name!r}"
                          f"{hint}; its rules would never apply")
            return
    declared = getattr(obj, "job_key", None)
    if declared is None:
        yield Finding("warning", where, f"{job_key} is not a @fair_job function: its rules apply only to jobs "
                      "enqueued through @fair_job or FairRouter")
    elif declared != job_key:
        yield Finding("error", where, f"{job_key} is a @fair_job whose job_key is {declared!r}: its windows "
                      f"and rules go by {declared!r}, so these rules never apply")


def _import_prefix(dotted: str) -> tuple[str | None, list[str], str]:
    """The longest importable module prefix of ``dotted``, the names after it, and why none imports."""
    parts = dotted.split(".")
    failure = ""
    for end in range(len(parts) - 1, 0, -1):
        name = ".".join(parts[:end])
        try:
            module: ModuleType = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name + ".").startswith(exc.name + "."):  # this module (or a parent) is missing
                failure = str(exc)
                continue
            return None, [], f"importing {name} raised {type(exc).__name__}: {exc}"
        except Exception as exc:  # the module exists but raises on import: that is the finding
            return None, [], f"importing {name} raised {type(exc).__name__}: {exc}"
        return module.__name__, parts[end:], ""
    return None, [], failure or f"no module in {dotted!r}"


def unknown_variables(environ: Mapping[str, str]) -> list[Finding]:
    """``FAIR_ROUTER_*`` variables no setting reads: an error when close to a setting's name (a typo), else warnings."""
    known = variable_names(Settings.model_fields)
    findings = []
    for variable, head, meant in unread_variables(environ, known):
        value = environ[variable]
        shown = value if len(value) <= 40 else value[:37] + "..."
        if meant is not None:
            findings.append(Finding("error", variable, f"unknown variable (value {shown!r}), ignored by every "
                                    f"setting; did you mean {meant}?"))
        else:
            findings.append(Finding("warning", variable, f"unknown variable (value {shown!r}): no setting is "
                                    f"named {head.lower()!r} (known: {', '.join(sorted(known))}; {CONFIG_ENV} names "
                                    "the file)"))
    return findings
