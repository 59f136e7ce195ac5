"""Where settings come from: the search for the settings file, and the one log line per process naming what was read."""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from fair_router.core.djangoenv import SETTING, django_settings

CONFIG_ENV = "FAIR_ROUTER_CONFIG"
ENV_PREFIX = "FAIR_ROUTER_"
OTHER_VARIABLES = {"CONFIG", "DASHBOARD_TOKEN", "DASHBOARD_READ_TOKEN", "SKIP_RQ_CHECK"}  # not settings
"""``FAIR_ROUTER_<name>`` variables that are not settings but are read elsewhere."""
DEFAULT_CONFIG = Path("fair_router.yaml")
PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")
"""A directory holding one of these is a project's root: the search for ``fair_router.yaml`` stops there."""


def default_config_path(start: Path | None = None) -> Path | None:
    """The YAML file to read: ``$FAIR_ROUTER_CONFIG``, else the first ``fair_router.yaml`` in ``start`` or its parents
    up to the project's root (a process started in a subdirectory reads the project's file), else None."""
    named = os.environ.get(CONFIG_ENV)
    if named:
        return Path(named)
    here = (start or Path.cwd()).resolve()
    for folder in config_search_path(start):
        candidate = folder / DEFAULT_CONFIG
        if candidate.is_file():
            return DEFAULT_CONFIG if folder == here and start is None else candidate
    return None


def not_a_file(file: Path, from_variable: bool) -> str:
    """Why the settings file ``file`` (from ``$FAIR_ROUTER_CONFIG`` when ``from_variable``) cannot be read; the fix."""
    what = "is a directory" if file.is_dir() else "not found"
    if from_variable:
        return (f"fair-router settings file {what}: {file} (from ${CONFIG_ENV}); point ${CONFIG_ENV} at a YAML file, "
                f"or unset it to use the {DEFAULT_CONFIG} of the working directory or its parents")
    return f"fair-router settings file {what}: {file}; give the path of a YAML file"


def config_search_path(start: Path | None = None) -> list[Path]:
    """The directories :func:`default_config_path` looks in, nearest first."""
    folder = (start or Path.cwd()).resolve()
    looked = [folder]
    while not any((folder / marker).exists() for marker in PROJECT_MARKERS) and folder.parent != folder:
        folder = folder.parent
        looked.append(folder)
    return looked


_SAID: set[str] = set()
"""The settings sources this process has logged: each is said once, not at every load."""


def first_time(said: str) -> bool:
    """True the first time this process says ``said`` (a settings source), False after."""
    if said in _SAID:
        return False
    _SAID.add(said)
    return True


def describe_source(file: Path | None) -> str:
    """Where settings come from, for logs and ``fair-router check``: the file, or that none was found."""
    if file is not None:
        return f"{file.resolve()}" + (f" (from ${CONFIG_ENV})" if os.environ.get(CONFIG_ENV) else "")
    looked = config_search_path()
    said = (f"none found (${CONFIG_ENV} is not set, and there is no {DEFAULT_CONFIG} in {looked[0]} or its parents "
            f"up to {looked[-1]}): defaults and FAIR_ROUTER_* variables only, so no job key has rules")
    if os.environ.get("DJANGO_SETTINGS_MODULE") and django_settings() is None:  # fair-router's commands, say
        said += (f"; $DJANGO_SETTINGS_MODULE is set, but Django's {SETTING} is read only in a process that runs "
                 f"Django: point ${CONFIG_ENV} at a YAML file with the same keys")
    return said


def announce_source(file: Path | None, log: bool = True) -> str:
    """Log once per process which settings file was read (or warn none was); ``log=False`` only marks it said."""
    said = describe_source(file)
    if not first_time(said) or not log:
        return said
    unset = file is None and not any(name.startswith("FAIR_ROUTER_") for name in os.environ)
    logging.getLogger("fair_router.settings").log(logging.WARNING if unset else logging.INFO,
                                                  "fair-router settings: %s", said)
    return said


def variable_names(settings: Iterable[str]) -> set[str]:
    """The ``<name>`` of every ``FAIR_ROUTER_<name>`` variable read: each setting's, upper-case, and the others'."""
    return {name.upper() for name in settings} | OTHER_VARIABLES


def unread_variables(environ: Iterable[str], known: set[str]) -> list[tuple[str, str, str | None]]:
    """Each ``FAIR_ROUTER_*`` variable of ``environ`` whose name is not in ``known``: (the variable, the name it
    gives, the variable meant when that name is close to a known one: a typo)."""
    found: list[tuple[str, str, str | None]] = []
    for variable in sorted(environ):
        head = variable[len(ENV_PREFIX):].split("__", 1)[0].upper()
        if not variable.startswith(ENV_PREFIX) or head in known:
            continue
        close = difflib.get_close_matches(head, sorted(known), n=1, cutoff=0.75)
        meant = ENV_PREFIX + close[0] + variable[len(ENV_PREFIX) + len(head):] if close else None
        found.append((variable, head, meant))
    return found


def announce_mistyped_variables(settings: Iterable[str], log: bool = True) -> None:
    """Log once per process each ``FAIR_ROUTER_*`` variable no setting reads, close to one's name (a typo leaving it at
    its default); ``log=False`` only marks them said (``fair-router check`` prints them as errors)."""
    for variable, _, meant in unread_variables(os.environ, variable_names(settings)):
        if meant is not None and first_time(f"{variable} -> {meant}") and log:
            logging.getLogger("fair_router.settings").warning("fair-router settings: %s: unknown variable, ignored by "
                                                              "every setting; did you mean %s?", variable, meant)
