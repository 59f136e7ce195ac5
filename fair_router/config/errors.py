"""How an invalid value is reported: ``key.path: reason (got value)`` lines under a heading naming where it was
given."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError


class SettingsError(ValueError):
    """Settings that cannot be used; the message names the file or variable, the key path and the reason."""


class SettingsWarning(UserWarning):
    """Settings that work but are probably not what was meant (an empty settings file)."""


MAX_LINES = 20
"""Errors listed in one message; the rest are counted (a 1,000-entry mistake stays a short message)."""
SHOWN = 80
"""Characters of a value echoed in an error line."""


def shown(value: object) -> str:
    """``repr(value)``, cut to about :data:`SHOWN` characters."""
    text = repr(value)
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}... ({len(text)} characters)"


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


def _unknown_key_hint(model: Any, loc: Loc) -> str:
    """For an unknown key: the key of its section of ``model`` it is closest to, else the section's keys."""
    for part in loc[:-1]:  # down fields, dict values and list items, unwrapping Annotated[T, ...] and T | None
        if isinstance(model, type) and issubclass(model, BaseModel):
            model = getattr(model.model_fields.get(str(part)), "annotation", None)
        elif get_origin(model) in (dict, list):
            model = get_args(model)[-1]
        while get_origin(model) in (Annotated, Union, UnionType):
            model = next((arg for arg in get_args(model) if arg is not type(None)), None)
    if not (loc and isinstance(model, type) and issubclass(model, BaseModel)):
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else f"; the keys here are {', '.join(model.model_fields)}"


def describe_errors(error: ValidationError, source: str, origin: Callable[[Loc], str | None] | None = None,
                    model: type[BaseModel] | None = None) -> str:
    """A ValidationError as ``key.path: reason (got value)`` lines, each prefixed by its ``origin``, else ``source``;
    an unknown key also names the key of ``model`` (the settings class) it is closest to."""
    lines = []
    placed = True
    for item in error.errors():
        loc = tuple(p for p in item["loc"] if p not in ("function-after", "function-before"))
        reason = item["msg"].removeprefix("Value error, ")
        got = "" if item["type"] in ("missing", "value_error") else f" (got {shown(item['input'])})"
        label = origin(loc) if origin is not None else None
        placed = placed and label is not None
        where = f"{_location(loc)}: " if loc or label else ""  # a single argument has no key path
        if len(reason) > 4 * SHOWN:  # a validator's message quoting a long value
            reason = f"{reason[:4 * SHOWN]}... ({len(reason)} characters)"
        hint = _unknown_key_hint(model, loc) if item["type"] == "extra_forbidden" else ""
        lines.append(f"  {label + ': ' if label else ''}{where}{reason}{got}{hint}")
    if len(lines) > MAX_LINES:
        lines[MAX_LINES:] = [f"  ... and {len(lines) - MAX_LINES} more"]
    heading = "invalid fair-router settings:" if placed and lines else f"invalid fair-router settings in {source}:"
    return "\n".join([heading, *lines])


T = TypeVar("T")


def validated(adapter: TypeAdapter[T], value: object, source: str) -> T:
    """``value`` checked by ``adapter`` outside the settings; SettingsError naming ``source``, key, reason and value."""
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, source)) from None
