from pathlib import Path

import pytest

from fair_router import Settings, SettingsError, load_settings

GOOD = """
redis_url: redis://localhost:6379/3
prefix: myapp
jobs:
  myapp.tasks.process:
    queue: default
    rules:
      - {queue: default_throttled, threshold: 100, per: 1h}
      - {queue: default_superslow, threshold: 10, per: 1m}
queues:
  critical: strict
  default: 6
  default_throttled: 3
  default_superslow: 0.5
"""


def write(tmp_path: Path, text: str, name: str = "fair_router.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_loads_yaml(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, GOOD))
    assert isinstance(settings, Settings)
    assert settings.redis_url.endswith("/3") and settings.prefix == "myapp"
    job = settings.job("myapp.tasks.process")
    assert [r.queue for r in job.rules] == ["default_throttled", "default_superslow"]
    assert job.rules[1].per == 60
    assert settings.queues == {"critical": "strict", "default": 6, "default_throttled": 3, "default_superslow": 0.5}
    assert settings.weight("unlisted") == 1
    assert settings.job("not.configured").rules == []


def test_config_env_and_default_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, GOOD, "elsewhere.yaml")
    monkeypatch.setenv("FAIR_ROUTER_CONFIG", str(path))
    assert load_settings().prefix == "myapp"
    monkeypatch.delenv("FAIR_ROUTER_CONFIG")
    monkeypatch.chdir(tmp_path)
    assert load_settings().prefix == "fair_router"  # no ./fair_router.yaml: defaults
    write(tmp_path, "prefix: fromcwd\n")
    assert load_settings().prefix == "fromcwd"


def test_environment_overrides_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIR_ROUTER_PREFIX", "envprefix")
    monkeypatch.setenv("FAIR_ROUTER_REDIS_URL", "redis://example:1/0")
    monkeypatch.setenv("FAIR_ROUTER_QUEUES__default", "2")
    monkeypatch.setenv("FAIR_ROUTER_QUEUES__slow", "1")
    monkeypatch.setenv("FAIR_ROUTER_JOBS", '{"a.b": {"rules": [{"queue": "slow", "threshold": 5, "per": "10s"}]}}')
    settings = load_settings(write(tmp_path, GOOD))
    assert settings.prefix == "envprefix" and settings.redis_url == "redis://example:1/0"
    assert settings.queues["default"] == 2 and settings.queues["critical"] == "strict"
    assert settings.job("a.b").rules[0].threshold == 5


BAD = [
    ("jobs: {a.b: {rules: [{queue: q, threshold: -1, per: 1h}]}}", "jobs['a.b'].rules[0].threshold"),
    ("jobs: {a.b: {rules: [{queue: q, threshold: 0, per: 1h}]}}", "jobs['a.b'].rules[0].threshold"),
    ("jobs: {a.b: {rules: [{queue: q, threshold: 1, per: 0s}]}}", "jobs['a.b'].rules[0].per"),
    ("jobs: {a.b: {rules: [{queue: q, threshold: 1, per: -5m}]}}", "jobs['a.b'].rules[0].per"),
    ("jobs: {a.b: {rules: [{queue: q, threshold: 1, per: soon}]}}", "jobs['a.b'].rules[0].per"),
    ("jobs: {a.b: {rules: [{queue: '', threshold: 1, per: 1h}]}}", "jobs['a.b'].rules[0].queue"),
    ("jobs: {a.b: {queue: ''}}", "jobs['a.b'].queue"),
    ("jobs: {a.b: {rules: [{queue: q, threshold: 1, per: 1h, color: red}]}}", "jobs['a.b'].rules[0].color"),
    ("unknown_key: 1", "unknown_key"),
    ("queues: {default: 0}", "queues.default"),
    ("queues: {default: -2}", "queues.default"),
    ("queues: {default: fast}", "queues.default"),
    ("queues: {default: true}", "queues.default"),
    ("prefix: 'a{b}'", "prefix"),
]


@pytest.mark.parametrize(("text", "where"), BAD)
def test_bad_settings_name_file_key_and_reason(tmp_path: Path, text: str, where: str) -> None:
    path = write(tmp_path, text + "\n")
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    message = str(info.value)
    assert str(path) in message
    assert where in message, message


@pytest.mark.parametrize("text", ["jobs: [unclosed\n", "key: : value\n  - bad\n", "- just\n- a list\n"])
def test_malformed_yaml_names_the_file(tmp_path: Path, text: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SettingsError, match=str(path)):
        load_settings(path)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="not found"):
        load_settings(tmp_path / "nope.yaml")


# -- environment overrides: errors name the variable, not the file -------------------------------


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("FAIR_ROUTER_QUEUES", "{bad"),
        ("FAIR_ROUTER_JOBS", '{"a.b": {"rules": [1,'),
        ("FAIR_ROUTER_FAIR_QUEUES", "[a, b]"),
        ("FAIR_ROUTER_TIERS", "nope"),
        ("FAIR_ROUTER_TIERS__CONCURRENCY", "{free: 2}"),
        ("FAIR_ROUTER_CONCURRENCY", "{'enabled': true}"),
    ],
)
@pytest.mark.usefixtures("isolated_settings")
def test_invalid_json_in_a_variable_names_the_variable_value_and_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    path = write(tmp_path, GOOD, "elsewhere.yaml")
    monkeypatch.setenv(variable, value)
    for load in (lambda: load_settings(path), load_settings):  # with a file, and with none at all
        with pytest.raises(SettingsError) as info:
            load()
        message = str(info.value)
        assert f"{variable}={value!r} is not valid JSON" in message, message
        assert "Expecting" in message  # the JSON reason
        assert str(path) not in message and "YAML" not in message


@pytest.mark.usefixtures("isolated_settings")
def test_a_long_invalid_value_is_shortened_in_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    value = '{"a.b": {"rules": [' + ", ".join(['{"queue": "q", "threshold": 1, "per": "1h"}'] * 50)
    monkeypatch.setenv("FAIR_ROUTER_JOBS", value)
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert "FAIR_ROUTER_JOBS='" + value[:60] in message and value not in message
    assert len(message) < 400


@pytest.mark.usefixtures("isolated_settings")
def test_value_errors_name_the_variable_or_the_file_they_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, GOOD.replace("queues:", "tiers: {priority: [pro]}\nqueues:") + "fair_queues: ['bad:name']\n")
    monkeypatch.setenv("FAIR_ROUTER_QUEUES__default", "fast")  # valid for the environment, invalid value
    monkeypatch.setenv("FAIR_ROUTER_JOBS", '{"a.b": {"rules": [{"queue": "q", "threshold": -1, "per": "1h"}]}}')
    monkeypatch.setenv("FAIR_ROUTER_TIERS__DEFAULT", "gold")  # merged with the file's tiers: both named
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid fair-router settings:"
    assert ("  FAIR_ROUTER_QUEUES__default: queues.default: weight must be a positive number up to "
            "1e+06 or 'strict', got 'fast'") in lines
    assert "  FAIR_ROUTER_JOBS: jobs['a.b'].rules[0].threshold: Input should be greater than 0 (got -1)" in lines
    assert any(line.startswith(f"  {path}: fair_queues[0]: ") for line in lines), lines
    assert any(line.startswith(f"  FAIR_ROUTER_TIERS__DEFAULT + {path}: tiers: unknown tier(s) 'gold'")
               for line in lines), lines
    assert len(lines) == 5


@pytest.mark.usefixtures("isolated_settings")
def test_a_variable_hides_the_files_value_and_arguments_hide_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, GOOD.replace("default: 6", "default: 0"))
    with pytest.raises(SettingsError, match=rf"  {path}: queues.default: weight must be"):
        load_settings(path)
    monkeypatch.setenv("FAIR_ROUTER_QUEUES__default", "2")
    assert load_settings(path).queues["default"] == 2
    monkeypatch.setenv("FAIR_ROUTER_PREFIX", "fine")
    with pytest.raises(SettingsError) as info:
        load_settings(path, prefix="a{b}")
    assert str(info.value).splitlines()[1:] == [
        "  load_settings() arguments: prefix: prefix must be 1-100 letters, digits, '_', '.', ':' or '-' (no braces), "
        "got 'a{b}'"]


def test_an_unknown_key_of_djangos_setting_names_the_key_meant() -> None:
    from fair_router.config.settings import from_django

    with pytest.raises(SettingsError) as info:
        from_django({"fair_queue": ["imports"]}, "mysite.settings.FAIR_ROUTER", {})
    assert "fair_queue: Extra inputs are not permitted" in str(info.value)
    assert "did you mean 'fair_queues'?" in str(info.value), str(info.value)


@pytest.mark.usefixtures("isolated_settings")
def test_a_missing_file_named_by_the_variable_names_the_variable_and_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIR_ROUTER_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(SettingsError) as info:
        load_settings()
    message = str(info.value)
    assert f"{tmp_path / 'nope.yaml'}" in message and "$FAIR_ROUTER_CONFIG" in message, message
    assert "unset" in message, message  # the fix: point it at a file, or unset it


def test_a_directory_given_as_the_settings_file_is_named_as_one(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(tmp_path)
    assert "is a directory" in str(info.value), str(info.value)
