"""Settings are found, and said: the search order (``$FAIR_ROUTER_CONFIG``, then ``fair_router.yaml`` in the working
directory and its parents up to the project's root), the one log line naming what was read, and mistakes that
fail at load in every process rather than only in ``fair-router check``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from fair_router import fair_job
from fair_router.config.settings import (
    Settings,
    SettingsError,
    SettingsWarning,
    default_config_path,
    load_settings,
)
from fair_router.demo.redis_server import RedisServer

BIN = Path(sys.executable).parent
RULES = """
jobs:
  myapp.tasks.process:
    queue: default
    rules:
      - {queue: default_throttled, threshold: 100, per: 1h}
      - {queue: default_superslow, threshold: 10, per: 1m}
queues: {default: 6, default_throttled: 3, default_superslow: 1}
"""
LOAD = "from fair_router import load_settings; s = load_settings(); load_settings(); print(len(s.jobs))"


def run(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {key: value for key, value in os.environ.items() if not key.startswith("FAIR_ROUTER_")}
    return subprocess.run(args, cwd=cwd, env={**clean, **(env or {})}, capture_output=True, text=True, timeout=60)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "myapp" / "web").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'myapp'\n")
    (root / "fair_router.yaml").write_text(RULES)
    return root


@pytest.mark.usefixtures("isolated_settings")
def test_a_process_started_in_a_subdirectory_reads_the_projects_file(project: Path) -> None:
    assert default_config_path(project / "myapp" / "web") == project / "fair_router.yaml"
    assert default_config_path(project) == project / "fair_router.yaml"
    done = run(project / "myapp" / "web", str(BIN / "python"), "-c",
               "import logging; logging.basicConfig(level=logging.INFO); " + LOAD)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"  # the project's job key, with its rules
    said = [line for line in done.stderr.splitlines() if "fair-router settings:" in line]
    assert said == [f"INFO:fair_router.settings:fair-router settings: {project / 'fair_router.yaml'}"]


@pytest.mark.usefixtures("isolated_settings")
def test_the_search_stops_at_the_projects_root(tmp_path: Path, project: Path) -> None:
    (project / "fair_router.yaml").unlink()
    (tmp_path / "fair_router.yaml").write_text(RULES)  # above the project's root: another project's
    assert default_config_path(project / "myapp") is None
    done = run(project / "myapp", str(BIN / "python"), "-c", LOAD)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
    warned = [line for line in done.stderr.splitlines() if "fair-router settings:" in line]
    assert len(warned) == 1, done.stderr  # once per process, however many loads
    assert f"none found ($FAIR_ROUTER_CONFIG is not set, and there is no fair_router.yaml in {project / 'myapp'}" \
        f" or its parents up to {project})" in warned[0]


@pytest.mark.usefixtures("isolated_settings")
def test_a_django_project_without_the_file_is_told_where_the_commands_read_settings(project: Path) -> None:
    """fair-router's commands do not run Django: its FAIR_ROUTER is not theirs, and the warning says so."""
    (project / "fair_router.yaml").unlink()
    done = run(project, str(BIN / "python"), "-c", LOAD, env={"DJANGO_SETTINGS_MODULE": "myproject.settings"})
    assert done.returncode == 0, done.stderr
    assert ("$DJANGO_SETTINGS_MODULE is set, but Django's FAIR_ROUTER is read only in a process that runs Django: "
            "point $FAIR_ROUTER_CONFIG at a YAML file with the same keys") in done.stderr, done.stderr


@pytest.mark.usefixtures("isolated_settings")
def test_the_variable_wins_and_is_named(tmp_path: Path, project: Path) -> None:
    other = tmp_path / "elsewhere.yaml"
    other.write_text("queues: {default: 1}\n")
    done = run(project, str(BIN / "python"), "-c", "import logging; logging.basicConfig(level=logging.INFO); " + LOAD,
               env={"FAIR_ROUTER_CONFIG": str(other)})
    assert done.stdout.strip() == "0"
    assert f"fair-router settings: {other} (from $FAIR_ROUTER_CONFIG)" in done.stderr


@pytest.mark.usefixtures("isolated_settings")
def test_check_prints_the_file_first(project: Path) -> None:
    (project / "myapp" / "tasks.py").write_text("from fair_router import fair_job\n\n\n@fair_job('default')\n"
                                                "def process(account_id): ...\n")
    done = run(project / "myapp", str(BIN / "fair-router"), "check", "--path", str(project))
    assert done.stdout.splitlines()[0] == f"settings:  {project / 'fair_router.yaml'}", done.stdout
    assert done.returncode == 0, done.stderr


@pytest.mark.usefixtures("isolated_settings")
def test_a_rule_queue_left_out_of_queues_fails_at_load_in_every_process(tmp_path: Path) -> None:
    file = tmp_path / "fair_router.yaml"
    file.write_text(RULES.replace("default_superslow: 1", "default_superslw: 1"))
    with pytest.raises(SettingsError) as raised:
        load_settings(file)
    message = str(raised.value)
    assert str(file) in message
    assert "jobs['myapp.tasks.process'].rules[1].queue is 'default_superslow', which has no weight" in message


@pytest.mark.usefixtures("isolated_settings")
def test_a_rule_that_can_never_be_the_last_match_fails_at_load(tmp_path: Path) -> None:
    file = tmp_path / "fair_router.yaml"
    file.write_text(RULES.replace("threshold: 10, per: 1m", "threshold: 100, per: 1d"))
    with pytest.raises(SettingsError) as raised:
        load_settings(file)
    assert ("jobs['myapp.tasks.process']: rules[0] (> 100 per 1h -> default_throttled) never applies: rules[1] "
            "(> 100 per 1d -> default_superslow) matches whenever it does") in str(raised.value)


@pytest.mark.usefixtures("isolated_settings")
def test_rules_whose_queues_speed_up_are_a_warning_naming_both(tmp_path: Path) -> None:
    """The quickstart's rules listed most restrictive first: a heavier tenant would go to the faster queue."""
    file = tmp_path / "fair_router.yaml"
    file.write_text(RULES.replace("default_throttled, threshold: 100, per: 1h", "X").replace(
        "default_superslow, threshold: 10, per: 1m", "default_throttled, threshold: 100, per: 1h").replace(
        "X", "default_superslow, threshold: 10, per: 1m"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_settings(file)
    said = [str(w.message) for w in caught if issubclass(w.category, SettingsWarning)]
    assert said == ["jobs['myapp.tasks.process']: rules[1] sends a heavier tenant to 'default_throttled' (weight 3.0), "
                    "polled more often than 'default_superslow' (weight 1.0) of rules[0]: rules go from least to most "
                    "restrictive, and a later rule's queue should get a lower weight"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        file.write_text(RULES)
        load_settings(file)
    assert not [w for w in caught if issubclass(w.category, SettingsWarning)]


@pytest.mark.usefixtures("isolated_settings")
def test_stats_on_an_unknown_job_key_exits_1_naming_the_known_ones(project: Path) -> None:
    done = run(project, str(BIN / "fair-router"), "stats", "myapp.task.process", "acme")
    assert done.returncode == 1
    assert "job key 'myapp.task.process' is not in the settings" in done.stderr
    assert "did you mean 'myapp.tasks.process'?" in done.stderr
    assert "(job keys in the settings: myapp.tasks.process)" in done.stderr


def test_a_fair_job_whose_key_the_settings_miss_warns_naming_the_nearest(caplog: pytest.LogCaptureFixture) -> None:
    settings = Settings(jobs={"myapp.tasks.process": {"queue": "default", "rules": [
        {"queue": "default_throttled", "threshold": 100, "per": "1h"}]}},
        queues={"default": 6, "default_throttled": 3})

    @fair_job(settings=settings, job_key="myapp.task.process")
    def process(account_id: str) -> None: ...

    with caplog.at_level(logging.WARNING, logger="fair_router"):
        assert process.fair_job.route.rules == ()
    said = [record.getMessage() for record in caplog.records if "@fair_job" in record.getMessage()]
    assert said == ["@fair_job myapp.task.process: the settings (no settings file) have no rules for this job key, "
                    "so its jobs go to their base queue unthrottled; did you mean 'myapp.tasks.process'?"]

    @fair_job(settings=settings, job_key="myapp.tasks.process")
    def named(account_id: str) -> None: ...

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fair_router"):
        assert len(named.fair_job.route.rules) == 1
    assert not caplog.records


@pytest.mark.usefixtures("isolated_settings")
def test_a_worker_without_the_rule_queues_warns_at_start(tmp_path: Path, redis_server: RedisServer) -> None:
    (tmp_path / "fair_router.yaml").write_text(RULES + f"redis_url: {redis_server.url}\n")
    done = run(tmp_path, str(BIN / "rq"), "worker", "-w", "fair_router.WeightedWorker", "--burst", "--url",
               redis_server.url, "default")
    assert done.returncode == 0, done.stderr
    assert ("the settings' rules route jobs to default_superslow, default_throttled, which this worker does not "
            "serve") in done.stderr + done.stdout
    done = run(tmp_path, str(BIN / "rq"), "worker", "-w", "fair_router.WeightedWorker", "--burst", "--url",
               redis_server.url, "default", "default_throttled", "default_superslow")
    assert done.returncode == 0 and "does not serve" not in done.stderr + done.stdout


@pytest.mark.usefixtures("isolated_settings")
def test_a_worker_on_another_redis_than_the_settings_redis_url_warns_at_start(tmp_path: Path,
                                                                               redis_server: RedisServer) -> None:
    """rq's CLI takes its own --url, while the worker class reads the settings (fair queues, limits) and producers
    enqueue into the settings' redis_url: a worker on another database never sees their jobs, nor their controls."""
    (tmp_path / "fair_router.yaml").write_text(f"redis_url: {redis_server.url}\n")
    other_db = redis_server.url.rsplit("/", 1)[0] + "/1"
    done = run(tmp_path, str(BIN / "rq"), "worker", "-w", "fair_router.WeightedWorker", "--burst", "--url", other_db,
               "default")
    assert done.returncode == 0, done.stderr
    output = done.stderr + done.stdout
    assert "the settings' redis_url" in output and f"--url {redis_server.url}" in output, output
    same = redis_server.url.replace("127.0.0.1", "localhost") if "127.0.0.1" in redis_server.url \
        else redis_server.url.replace("localhost", "127.0.0.1")  # the same server and database, spelt otherwise
    for url in (redis_server.url, same):
        done = run(tmp_path, str(BIN / "rq"), "worker", "-w", "fair_router.WeightedWorker", "--burst", "--url", url,
                   "default")
        assert done.returncode == 0 and "the settings' redis_url" not in done.stderr + done.stdout, done.stderr


@pytest.mark.usefixtures("isolated_settings")
def test_a_variable_close_to_a_settings_name_is_logged_by_every_process(monkeypatch: pytest.MonkeyPatch,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A typo in a file's key fails at load; one in a variable's name was ignored silently outside `check`."""
    monkeypatch.setenv("FAIR_ROUTER_FAIR_QUEUE", '["imports"]')
    with caplog.at_level(logging.WARNING, logger="fair_router"):
        assert load_settings().fair_queues == []
    said = [record.getMessage() for record in caplog.records if "FAIR_ROUTER_FAIR_QUEUE" in record.getMessage()]
    assert said and "did you mean FAIR_ROUTER_FAIR_QUEUES?" in said[0], caplog.text
