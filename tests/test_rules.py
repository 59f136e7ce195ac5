from datetime import timedelta

import pytest
from pydantic import ValidationError

from fair_router import Rule
from fair_router.core.durations import format_duration, parse_duration
from fair_router.core.rules import last_match


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("250ms", 0.25), ("30s", 30), ("5m", 300), ("1h", 3600), ("1d", 86400), ("1.5h", 5400), ("45", 45),
     (10, 10), (0.5, 0.5), (timedelta(minutes=2), 120)],
)
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["0s", "-1s", "1w", "h", "", "1 hour", 0, -3, True, None, [1], float("nan")])
def test_bad_durations_name_the_value(value: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


def test_format_round_trips() -> None:
    for text in ["250ms", "30s", "5m", "1h", "1d", "90m"]:
        assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)
    assert format_duration(5400) == "90m"


def test_rule_accepts_every_per_form() -> None:
    assert Rule(queue="q", threshold=1, per="1h").per == 3600
    assert Rule(queue="q", threshold=1, per=timedelta(hours=1)) == Rule(queue="q", threshold=1, per=3600)
    assert Rule(queue="q", threshold=3, per="250ms").per_ms == 250


@pytest.mark.parametrize(
    ("fields", "where"),
    [({"queue": "q", "threshold": 0, "per": "1h"}, "threshold"),
     ({"queue": "q", "threshold": -5, "per": "1h"}, "threshold"),
     ({"queue": "", "threshold": 1, "per": "1h"}, "queue"),
     ({"queue": "bad name", "threshold": 1, "per": "1h"}, "queue"),
     ({"queue": "q", "threshold": 1, "per": "0s"}, "per"),
     ({"queue": "q", "threshold": 1, "per": "1h", "extra": 1}, "extra")],
)
def test_bad_rules_fail_naming_the_field(fields: dict[str, object], where: str) -> None:
    with pytest.raises(ValidationError) as info:
        Rule(**fields)  # type: ignore[arg-type]
    assert where in str(info.value)


def test_a_rule_matches_counting_the_next_enqueue() -> None:
    """``matches(count)``: the window's earlier enqueues plus the one being decided pass the threshold."""
    rule = Rule(queue="q", threshold=2, per="1h")
    assert [rule.matches(count) for count in range(5)] == [False, False, True, True, True]


def test_the_last_matching_rule_routes() -> None:
    rules = [Rule(queue="slow", threshold=1, per="1h"), Rule(queue="slower", threshold=3, per="1m")]
    assert last_match(rules, [0, 0]) is None
    assert last_match(rules, [1, 1]) == rules[0]
    assert last_match(rules, [5, 3]) == rules[1]
    assert last_match(rules, [5, 2]) == rules[0]
    with pytest.raises(ValueError):
        last_match(rules, [1])  # one count per rule
