"""The import-time check of the installed rq (``import fair_router`` runs it first): its version within the tested
range and every member of :data:`~fair_router.rq_internals.members.MEMBERS` present with its shape."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import warnings
from collections.abc import Iterable
from typing import Any

from fair_router.rq_internals.members import ATTRIBUTE, MEMBERS, PROPERTY, RqMember

RQ_TESTED_MINORS: tuple[tuple[int, int], ...] = ((3, 0),)
"""The rq minor versions CI has run rq's own test suite against with our classes (``compat/``); consecutive.
Raised with each new rq minor that passes (``python -m compat.run --rq newest``), with pyproject's pin."""

RQ_LOWEST, RQ_BEYOND = RQ_TESTED_MINORS[0], (RQ_TESTED_MINORS[-1][0], RQ_TESTED_MINORS[-1][1] + 1)
RQ_RANGE = f">={RQ_LOWEST[0]}.{RQ_LOWEST[1]},<{RQ_BEYOND[0]}.{RQ_BEYOND[1]}"
"""The supported rq versions, as pyproject.toml pins them (``rq>=3.0,<3.1``)."""

SKIP_ENV = "FAIR_ROUTER_SKIP_RQ_CHECK"
_ON, _OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


class RqVersionError(ImportError):
    """The installed rq is not one fair-router supports: outside the tested range, or a member fair-router
    overrides or calls is missing or has another signature. The message names each."""


class RqVersionWarning(RuntimeWarning):
    """:class:`RqVersionError`'s finding, as a warning: ``FAIR_ROUTER_SKIP_RQ_CHECK=1`` is set."""


def parse_minor(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as ``3.0.0`` or ``3.1.0rc1``; None if it has none."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def in_range(version: str) -> bool:
    """Whether rq ``version`` is within :data:`RQ_RANGE`."""
    minor = parse_minor(version)
    return minor is not None and RQ_LOWEST <= minor < RQ_BEYOND


def shape_of(value: Any) -> str:
    """A callable's parameter names in rq's order, as ``(self, job, *args, **kwargs)``, without defaults or annotations;
    a plain function's read off its code object (a tenth of ``inspect.signature``'s cost, the same text)."""
    code = getattr(value, "__code__", None)
    if code is not None and inspect.isfunction(value) and not hasattr(value, "__wrapped__"):
        return _code_shape(code)
    return signature_shape(value)


def _code_shape(code: Any) -> str:
    positional, keyword_only = code.co_argcount, code.co_kwonlyargcount
    names = list(code.co_varnames[:positional + keyword_only])
    parts = names[:positional]
    if code.co_posonlyargcount:
        parts.insert(code.co_posonlyargcount, "/")
    index = positional + keyword_only
    if code.co_flags & inspect.CO_VARARGS:
        parts.append("*" + code.co_varnames[index])
        index += 1
    elif keyword_only:
        parts.append("*")
    parts += names[positional:]
    if code.co_flags & inspect.CO_VARKEYWORDS:
        parts.append("**" + code.co_varnames[index])
    return f"({', '.join(parts)})"


def signature_shape(value: Any) -> str:
    """:func:`shape_of` through ``inspect.signature``."""
    signature = inspect.signature(value)
    bare = [p.replace(default=p.empty, annotation=p.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=bare, return_annotation=inspect.Signature.empty))


def _owner(path: str) -> Any:
    """The module or class ``path`` names (AttributeError / ImportError when rq has no such thing)."""
    module = sys.modules.get(path)
    if module is not None:
        return module
    module_name, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module_name), name)


def _sets_in_init(cls: type, name: str) -> bool:
    """Whether ``__init__`` of ``cls`` or one of its bases names the attribute ``name`` (``self.name = ...``)."""
    for base in cls.__mro__:
        init = base.__dict__.get("__init__")
        code = getattr(init, "__code__", None)
        if code is not None and name in code.co_names:
            return True
    return False


def member_problem(member: RqMember) -> str | None:
    """What is wrong with ``member`` in the installed rq (None: present, with the expected shape)."""
    try:
        owner = _owner(member.owner)
    except (ImportError, AttributeError):
        return f"{member.owner} is missing"
    try:
        raw = inspect.getattr_static(owner, member.name)
    except AttributeError:
        raw = None
        if not (member.shape == ATTRIBUTE and isinstance(owner, type) and _sets_in_init(owner, member.name)):
            return "missing"
    if member.shape == ATTRIBUTE:
        return None
    if member.shape == PROPERTY:
        return None if isinstance(raw, property) else f"no longer a property ({type(raw).__name__})"
    function = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else raw
    if not callable(function):
        return f"no longer callable ({type(function).__name__})"
    try:
        shape = shape_of(function)
    except (TypeError, ValueError):
        return "has no readable signature"
    return None if shape == member.shape else _differ(shape, member.shape)


def _differ(shape: str, expected: str) -> str:
    """How rq's signature ``shape`` differs from the ``expected`` one, readable for long parameter lists."""
    has, wants = shape.strip("()").split(", "), expected.strip("()").split(", ")
    gone, new = [p for p in wants if p not in has], [p for p in has if p not in wants]
    if len(shape) + len(expected) < 120 or not (gone or new):
        return f"has {shape}, fair-router expects {expected}"
    said = ([f"lacks {', '.join(gone)}"] if gone else []) + ([f"adds {', '.join(new)}"] if new else [])
    return f"parameters changed: {'; '.join(said)}"


def problems(members: Iterable[RqMember] = MEMBERS) -> list[str]:
    """One line per member that is missing or changed in the installed rq."""
    found = []
    for member in members:
        problem = member_problem(member)
        if problem is not None:
            found.append(f"{member.path} ({member.kind}): {problem}")
    return found


def installed_rq() -> tuple[str, str]:
    """The installed rq's version and where it was imported from."""
    import rq

    version = getattr(rq, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("rq")
    return str(version), str(getattr(rq, "__file__", "?"))


def report(version: str, location: str, found: list[str]) -> str:
    """The message of :class:`RqVersionError`: rq's version, the supported range, each member problem, the fix."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        ours = f"fair-router {dist_version('fair-router')}"
    except PackageNotFoundError:
        ours = "fair-router"
    lines = [f"{ours} supports rq {RQ_RANGE} (the rq versions CI runs rq's own test suite against); "
             f"rq {version} is installed ({location})."]
    if not in_range(version):
        lines.append(f"rq {version} is outside {RQ_RANGE}.")
    if found:
        lines.append(f"rq members fair-router overrides or calls, missing or changed in rq {version}:")
        lines += [f"  - {line}" for line in found]
    fix = f"Fix: pip install 'rq{RQ_RANGE}'"
    minor = parse_minor(version)
    if minor is not None and minor < RQ_LOWEST:
        fix += f", or keep rq {version} with an older fair-router (rq 2.12: pip install 'fair-router<0.2')"
    lines.append(f"{fix}. {SKIP_ENV}=1 turns this error into a warning (at your own risk: jobs may fail "
                 "when they run). See docs/compatibility.md.")
    return "\n".join(lines)


def skip_requested() -> bool:
    """``FAIR_ROUTER_SKIP_RQ_CHECK``: 1/true/yes/on skips, unset/empty/0/false/no/off does not; anything else
    is refused (naming the variable), not guessed."""
    value = os.environ.get(SKIP_ENV, "").strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise RqVersionError(f"{SKIP_ENV}={os.environ[SKIP_ENV]!r}: expected 1 (skip the rq check) or 0")


def check_installed_rq(members: Iterable[RqMember] = MEMBERS) -> None:
    """Raise :class:`RqVersionError` if the installed rq is outside :data:`RQ_RANGE` or any of ``members`` is
    missing or changed (with ``FAIR_ROUTER_SKIP_RQ_CHECK=1``: warn instead)."""
    version, location = installed_rq()
    found = problems(members)
    if in_range(version) and not found:
        return
    message = report(version, location, found)
    if not skip_requested():
        raise RqVersionError(message, name="rq")
    warnings.warn(message, RqVersionWarning, stacklevel=3)


check_installed_rq()
