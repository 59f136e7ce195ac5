"""The patterns of the names users give (queues, rule queues, key prefixes, tiers), without pydantic: the
annotated types of :mod:`fair_router.core.validation` check with them, and ``@fair_job`` checks a queue name at
import with them alone (a work horse importing a module of jobs then needs no pydantic)."""

from __future__ import annotations

import re

QUEUE_CHARS = r"A-Za-z0-9_.\-"
QUEUE_NAME = re.compile(rf"[{QUEUE_CHARS}]{{1,200}}")
RULE_QUEUE = re.compile(rf"(?:[{QUEUE_CHARS}]|\{{queue\}})+")
PREFIX = re.compile(r"[A-Za-z0-9_.:\-]{1,100}")
TIER_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,100}")


def is_queue_name(name: str | None) -> bool:
    """Whether ``name`` is absent or a valid rq queue name (``QueueName``'s rule)."""
    return name is None or QUEUE_NAME.fullmatch(name) is not None
