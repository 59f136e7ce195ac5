"""Throttle rules: when a tenant's jobs go to a slower queue, and the one test of whether a rule matches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from fair_router.core.durations import format_duration
from fair_router.core.validation import MAX_COUNT, Duration, RuleQueue


class Rule(BaseModel):
    """Route a tenant's jobs to ``queue`` once it enqueued more than ``threshold`` jobs within ``per``. When several
    rules match the last wins, so a stricter rule can be appended without editing the others."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    queue: RuleQueue
    threshold: Annotated[int, Field(gt=0, le=MAX_COUNT, strict=False)]
    per: Duration

    def matches(self, recorded: int) -> bool:
        """Whether the next enqueue matches, the window holding ``recorded`` (``lua/route.lua`` tests the same)."""
        return recorded + 1 > self.threshold

    def for_base(self, base: str) -> Rule:
        """This rule with ``{queue}`` in its target replaced by ``base`` (tier routing)."""
        if "{queue}" not in self.queue:
            return self
        return self.model_copy(update={"queue": self.queue.replace("{queue}", base)})

    @property
    def per_ms(self) -> int:
        """Window length in whole milliseconds, the resolution of the route script."""
        return max(1, round(self.per * 1000))

    def describe(self) -> str:
        """One line for tables and logs: ``> 100 per 1h -> default_throttled``."""
        return f"> {self.threshold} per {format_duration(self.per)} -> {self.queue}"


def window_cap(rules: Sequence[Rule]) -> int:
    """Entries a window keeps: the largest threshold + 1, enough to decide every rule (a count there is a floor)."""
    return max(rule.threshold for rule in rules) + 1


def last_match(rules: Sequence[Rule], recorded: Sequence[int]) -> Rule | None:
    """The rule the next enqueue would be routed by (the last one matching ``recorded``), else None."""
    matched = None
    for rule, count in zip(rules, recorded, strict=True):
        if rule.matches(count):
            matched = rule
    return matched


def shadowed(rules: Sequence[Rule]) -> list[tuple[int, int]]:
    """Pairs ``(i, j)``, ``i < j``, where rule ``j`` matches whenever rule ``i`` does (window as long, threshold as
    low), so rule ``i`` can never be the last match."""
    return [(i, j) for i, earlier in enumerate(rules) for j in range(i + 1, len(rules))
            if rules[j].per >= earlier.per and rules[j].threshold <= earlier.threshold]
