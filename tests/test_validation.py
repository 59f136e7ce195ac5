"""One validated vocabulary (fair_router/core/validation.py): a value means the same, and a bad one reads the same,
whether it comes from the settings, a constructor, the decorator or a CLI option."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError
from redis import Redis

from fair_router import FairQueue, FairRouter, SettingsError, WeightedSimpleWorker, fair_job, load_settings
from fair_router.cli import main
from fair_router.core.rates import Rate

PREFIX_REASON = "prefix must be 1-100 letters, digits, '_', '.', ':' or '-' (no braces), got 'a{b}'"


def test_a_bad_prefix_reads_the_same_from_settings_and_constructors(conn: Redis) -> None:
    with pytest.raises(SettingsError) as from_settings:
        load_settings(prefix="a{b}")
    with pytest.raises(SettingsError) as from_router:
        FairRouter(conn, prefix="a{b}")
    with pytest.raises(SettingsError) as from_queue:
        FairQueue("q", connection=conn, prefix="a{b}")
    assert PREFIX_REASON in str(from_settings.value)
    assert str(from_router.value) == f"invalid fair-router settings in FairRouter(prefix=...):\n  {PREFIX_REASON}"
    assert str(from_queue.value) == f"invalid fair-router settings in FairQueue(prefix=...):\n  {PREFIX_REASON}"
    assert FairRouter(conn, prefix="app:v2.fair-router_1").keys.prefix == "app:v2.fair-router_1"
    with pytest.raises(SettingsError, match="prefix must be 1-100"):
        FairRouter(conn, prefix="x" * 101)


def test_queue_names_and_weights_read_the_same_from_settings_and_the_worker(conn: Redis) -> None:
    with pytest.raises(SettingsError) as from_settings:
        load_settings(queues={"bad name": 1})
    with pytest.raises(SettingsError) as from_worker:
        WeightedSimpleWorker(["a"], connection=conn, weights={"bad name": 1})
    reason = "queue name must be 1-200 letters, digits, '_', '-' or '.', got 'bad name'"
    assert reason in str(from_settings.value) and reason in str(from_worker.value)
    worker = WeightedSimpleWorker(["a", "b"], connection=conn, weights={"a": "2.5", "b": "strict"})
    assert worker.fetch_weights is not None
    assert [weight for _, weight in worker.fetch_weights] == [2.5, "strict"]  # parsed once, here


def test_the_decorator_checks_its_queue_and_rate_with_the_settings_types() -> None:
    with pytest.raises(ValidationError, match="queue name must be"):
        fair_job("bad name")(print)
    with pytest.raises(ValidationError, match="rate must be"):
        fair_job("ok", rate="fast")(print)
    assert fair_job("ok.queue-1", rate="5/m")(print)._rate == Rate(5, 60)


def test_rules_say_which_queue_is_bad() -> None:
    with pytest.raises(SettingsError, match=r"rules\[0\]\.queue: rule queue must be a queue name .*got 'a b'"):
        load_settings(jobs={"app.job": {"rules": [{"queue": "a b", "threshold": 1, "per": "1h"}]}})
    settings = load_settings(jobs={"app.job": {"rules": [{"queue": "{queue}_slow", "threshold": 1, "per": "1h"}]}})
    assert settings.jobs["app.job"].rules[0].for_base("default").queue == "default_slow"


@pytest.mark.parametrize(
    ("option", "value", "reason"),
    [("--limit", "0", "Input should be greater than or equal to 1 (got '0')"),
     ("--burst", "many", "Input should be a valid integer, unable to parse string as an integer (got 'many')"),
     ("--weight", "0", "Input should be greater than 0 (got '0')"),
     ("--weight", "inf", "Input should be a finite number (got 'inf')"),
     ("--rate", "fast", "rate must be 'N/s', 'N/m' or 'N/h' (jobs started per second, minute or hour), got 'fast'")],
)
def test_cli_options_take_what_the_settings_take(tmp_path: Path, option: str, value: str, reason: str) -> None:
    """Checked before anything connects: the options' types are the settings' own."""
    result = CliRunner().invoke(main, ["tenant", "set", "acme", option, value, "--config", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert f"Invalid value for '{option}': {reason}" in " ".join(result.output.split())
