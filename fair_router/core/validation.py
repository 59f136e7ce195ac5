"""The validated vocabulary: one annotated pydantic type per kind of value users give (settings, constructors, CLI
options), so a rule is stated once and a bad value gets the same message wherever it came from. Each value is checked
once where it enters; the code behind trusts it."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sized
from typing import Annotated, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, PlainSerializer
from redis.connection import parse_url

from fair_router.core.durations import parse_duration
from fair_router.core.names import PREFIX, QUEUE_NAME, RULE_QUEUE, TIER_NAME
from fair_router.core.rates import Rate, parse_rate

MAX_WEIGHT = 1e6
"""Largest weight: past any useful share, and keeps sums of passes well inside a double's precision."""

MAX_COUNT = 1_000_000_000
"""Largest count (threshold, limit, burst, cap, workers): larger is a typo, and Lua numbers stay exact."""

MAX_QUEUES = 1000
"""Most entries of ``queues:`` / ``fair_queues:`` / ``pool:`` (a worker polls each listed queue)."""

MAX_JOBS = 1000
"""Most job functions under ``jobs:``."""

MAX_RULES = 100
"""Most throttle rules of one job function (route.lua checks each at every enqueue)."""

MAX_TIERS = 1000
"""Most tiers (keys of ``tiers.concurrency``)."""

_C = TypeVar("_C", bound=Sized)


def at_most(limit: int, what: str) -> AfterValidator:
    """A validator of a list or mapping that holds at most ``limit`` ``what`` (a documented limit)."""

    def check(value: _C) -> _C:
        if len(value) > limit:
            raise ValueError(f"at most {limit} {what} (a fair-router limit), got {len(value)}")
        return value

    return AfterValidator(check)



def _matching(pattern: re.Pattern[str], rule: str) -> Callable[[str], str]:
    """A validator that accepts a value ``pattern`` matches whole, else says ``rule`` and the value."""

    def check(value: str) -> str:
        if not pattern.fullmatch(value):
            raise ValueError(f"{rule}, got {value!r}")
        return value

    return check


QueueName = Annotated[str, AfterValidator(_matching(QUEUE_NAME, "queue name must be 1-200 letters, digits, "
                                                                  "'_', '-' or '.'"))]
"""An rq queue name: letters, digits, ``_``, ``-`` and ``.`` (safe in keys, logs and the rq CLI)."""


def _rule_queue(value: str) -> str:
    if len(value) > 200 or not RULE_QUEUE.fullmatch(value):
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
    if not all(QUEUE_NAME.fullmatch(name) for name in names):
        raise ValueError(f"pool key {value!r} must be queue names (letters, digits, '_', '-', '.') joined by ','")
    return ",".join(names)


QueueGroup = Annotated[str, BeforeValidator(_queue_group)]
"""Queues one pooled worker listens on, comma-separated, e.g. ``analysis_priority`` or ``a,b``."""


Prefix = Annotated[str, AfterValidator(_matching(PREFIX, "prefix must be 1-100 letters, digits, '_', '.', "
                                                           "':' or '-' (no braces)"))]
"""What every Redis key of one deployment starts with. No braces: the keys put their own hash tags after it."""


TierName = Annotated[str, AfterValidator(_matching(TIER_NAME, "tier name must be 1-100 letters, digits, "
                                                               "'_', '-' or '.'"))]
"""A plan tier's name (``free``, ``pro``): a key of ``tiers.concurrency``."""


QueueWeight = float | Literal["strict"]
"""What a validated :data:`Weight` holds."""


def _weight(value: object) -> object:
    """Queue weights are positive finite numbers or the word ``strict`` (bools are not numbers here)."""
    if value == "strict":
        return value
    try:
        number = float(value) if isinstance(value, int | float | str) and not isinstance(value, bool) else math.nan
    except (ValueError, OverflowError):
        number = math.nan
    if not (0 < number <= MAX_WEIGHT):  # also rejects NaN and infinities
        raise ValueError(f"weight must be a positive number up to {MAX_WEIGHT:g} or 'strict', got {value!r}")
    return number


Weight = Annotated[QueueWeight, BeforeValidator(_weight)]
"""A queue's fetch weight: a positive number, or ``"strict"`` (always polled first, in listed order)."""

FairWeight = Annotated[float, Field(gt=0, le=MAX_WEIGHT, allow_inf_nan=False)]
"""A tenant's (or tier's) share in a FairQueue: a positive number up to :data:`MAX_WEIGHT` (default 1)."""

AtLeastOne = Annotated[int, Field(ge=1, le=MAX_COUNT)]
"""A count that must allow something (a limit, burst, cap, number of workers), at most :data:`MAX_COUNT`."""

TenantMaxBytes = Annotated[int, Field(ge=16, le=65536)]
"""The ``tenant_max_bytes`` setting: the longest tenant id taken, in bytes of UTF-8 (16 to 64 KiB)."""

Replicas = Annotated[int, Field(ge=0, le=1000)]
"""The ``replicas_to_wait`` setting: replicas that must acknowledge each enqueue (0: none, no WAIT sent)."""

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A measured or declared time in seconds, zero allowed (a job's ``fair_cost``)."""

Duration = Annotated[float, BeforeValidator(parse_duration)]
"""A positive duration in seconds: seconds, a ``timedelta`` or ``"250ms"`` / ``"5m"`` / ``"1d"``."""

RateField = Annotated[Rate, BeforeValidator(parse_rate), PlainSerializer(str, return_type=str)]
"""Job starts per unit, ``"10/s"`` / ``"N/m"`` / ``"N/h"``, serialised back to its text."""


def _redis_url(value: str) -> str:
    """A URL redis-py parses as meant, with a numeric database path (redis-py would ignore another)."""
    try:
        parse_url(value)  # type: ignore[no-untyped-call]
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"must be redis://[:password@]host[:port][/db], rediss://... or unix:///path "
                         f"({exc}), got {value!r}") from None
    if parts.scheme in ("redis", "rediss"):
        if not parts.hostname:
            raise ValueError(f"names no host, got {value!r}")
        if port == 0:
            raise ValueError(f"port must be 1-65535, got {value!r}")
        database = parts.path.strip("/")
        if database and not database.isdigit():
            raise ValueError(f"database must be a number (the path after the port), got {value!r}")
    return value


RedisUrl = Annotated[str, AfterValidator(_redis_url)]
"""A Redis URL (``redis://``, ``rediss://`` or ``unix://``) that redis-py parses as meant."""
