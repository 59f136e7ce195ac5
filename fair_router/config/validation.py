"""The validated vocabulary of fair-router: one annotated pydantic type per kind of value users give.

Settings fields, constructor arguments (``FairRouter``, ``FairQueue``, the weighted workers, tier overrides,
``@fair_job``) and the CLI's options (``fair_router.commands.common.Validated``) all check their values with
these types, so a rule is stated once and a bad value gets the same message wherever it was given. Each
check happens once, where the value enters (settings load, a constructor, an option): the code behind trusts
it, e.g. the worker's weighted fetch order does not look at its weights again on every fetch.

Messages name the value (``weight must be a positive number or 'strict', got -1``); where it came from (the
file, variable or argument and the key path) is added by :func:`fair_router.config.errors.describe_errors`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, PlainSerializer

from fair_router.config.durations import parse_duration
from fair_router.controls.rates import Rate, parse_rate

_QUEUE_CHARS = r"A-Za-z0-9_.\-"
_QUEUE_NAME = re.compile(rf"[{_QUEUE_CHARS}]{{1,200}}")
_RULE_QUEUE = re.compile(rf"(?:[{_QUEUE_CHARS}]|\{{queue\}})+")
_PREFIX = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")
_TIER_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,100}")


def _matching(pattern: re.Pattern[str], rule: str) -> Callable[[str], str]:
    """A validator that accepts a value ``pattern`` matches whole, else says ``rule`` and the value."""

    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{rule}, got {value!r}")
        return value

    return check


RedisUrl = Annotated[str, AfterValidator(_matching(re.compile(r"(redis|rediss|unix)://.+"),
                                                    "a Redis URL starts with redis://, rediss:// or unix://"))]
"""A Redis URL as redis-py's ``Redis.from_url`` reads it."""

QueueName = Annotated[str, AfterValidator(_matching(_QUEUE_NAME, "queue name must be 1-200 letters, digits, "
                                                                  "'_', '-' or '.'"))]
"""An rq queue name: letters, digits, ``_``, ``-`` and ``.`` (safe in keys, logs and the rq CLI)."""


def _rule_queue(value: str) -> str:
    if len(value) > 200 or not _RULE_QUEUE.fullmatch(value):
        raise ValueError(f"rule queue must be a queue name (letters, digits, '_', '-', '.'), which may say "
                         f"{{queue}} for the job's base queue, got {value!r}")
    return value


RuleQueue = Annotated[str, AfterValidator(_rule_queue)]
"""A rule's target queue: a queue name that may say ``{queue}`` for the job's (tier) base queue."""


def _queue_group(value: object) -> object:
    """One queue name or several joined by commas (``"default,default_throttled"``), spaces dropped."""
    if not isinstance(value, str):
        return value
    names = [name.strip() for name in value.split(",")]
    if not all(_QUEUE_NAME.fullmatch(name) for name in names):
        raise ValueError(f"pool key {value!r} must be queue names (letters, digits, '_', '-', '.') joined by ','")
    return ",".join(names)


QueueGroup = Annotated[str, BeforeValidator(_queue_group)]
"""Queues one pooled worker listens on, comma-separated, e.g. ``analysis_priority`` or ``a,b``."""


Prefix = Annotated[str, AfterValidator(_matching(_PREFIX, "prefix must be 1-100 letters, digits, '_', '.', "
                                                           "':' or '-' (no braces)"))]
"""What every Redis key of one deployment starts with. No braces: the keys put their own hash tags after it."""


TierName = Annotated[str, AfterValidator(_matching(_TIER_NAME, "tier name must be 1-100 letters, digits, "
                                                               "'_', '-' or '.'"))]
"""A plan tier's name (``free``, ``pro``): a key of ``tiers.concurrency``."""


QueueWeight = float | Literal["strict"]
"""What a validated :data:`Weight` holds."""


def _weight(value: object) -> object:
    """Queue weights are positive finite numbers or the word ``strict`` (bools are not numbers here)."""
    if value == "strict":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"weight must be a positive number or 'strict', got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"weight must be a positive number or 'strict', got {value!r}") from None
    if not (number > 0 and math.isfinite(number)):
        raise ValueError(f"weight must be a positive number or 'strict', got {value!r}")
    return number


Weight = Annotated[QueueWeight, BeforeValidator(_weight)]
"""A queue's fetch weight: a positive number, or ``"strict"`` (always polled first, in listed order)."""

FairWeight = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A tenant's (or tier's) share in a FairQueue: a positive finite number (default 1)."""

AtLeastOne = Annotated[int, Field(ge=1)]
"""A count that must allow something: a concurrency limit, a burst, a backlog cap, a number of workers."""

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A measured or declared time in seconds, zero allowed (a job's ``fair_cost``)."""

Duration = Annotated[float, BeforeValidator(parse_duration)]
"""A positive duration in seconds, given as seconds, a ``timedelta`` or ``"250ms"`` / ``"30s"`` / ``"5m"`` /
``"1h"`` / ``"1d"`` (:func:`fair_router.config.durations.parse_duration`)."""

RateField = Annotated[Rate, BeforeValidator(parse_rate), PlainSerializer(str, return_type=str)]
"""Job starts per unit of time, ``"10/s"`` / ``"N/m"`` / ``"N/h"`` (:func:`fair_router.controls.rates.parse_rate`),
serialised back to its text."""
