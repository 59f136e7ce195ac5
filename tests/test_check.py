"""`fair-router check` through the real CLI (a subprocess in a temp project, as a user runs it): each
mistake that breaks a deployment fails it, naming the file or variable, the key and the value; warnings
exit 0 and say so; --ping reaches Redis (exit 1 when it cannot); --deep loads every script there."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from redis import Redis

from fair_router.core.keys import Keys
from fair_router.demo.redis_server import RedisServer, free_port
from fair_router.store.luascript import script_names, sent_text

BIN = Path(sys.executable).parent
TASKS = """
from fair_router import fair_job


@fair_job("default", tenant=lambda account_id, *args: account_id)
def process(account_id, item_id): ...


def plain(account_id): ...
"""
GOOD = """
jobs:
  myapp.tasks.process:
    queue: default
    rules:
      - {queue: default_throttled, threshold: 100, per: 1h}
queues: {default: 6, default_throttled: 3}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "tasks.py").write_text(TASKS)
    (tmp_path / "fair_router.yaml").write_text(GOOD)
    return tmp_path


def check(project: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``fair-router check ARGS`` run from the project directory, with only ``env``'s FAIR_ROUTER_* set."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FAIR_ROUTER_") and k != "PYTHONPATH"}
    return subprocess.run([str(BIN / "fair-router"), "check", *args], cwd=project, env={**clean, **(env or {})},
                          capture_output=True, text=True, timeout=60)


def test_good_settings_pass_and_ping_and_deep_reach_the_server(project: Path, redis_server: RedisServer,
                                                                 conn: Redis) -> None:
    done = check(project)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("settings OK") and done.stderr == ""
    done = check(project, "--deep", env={"FAIR_ROUTER_REDIS_URL": redis_server.url})
    assert done.returncode == 0, done.stderr
    version = conn.info("server")["redis_version"]
    assert f"answers, Redis {version}" in done.stdout
    assert f"scripts:   {len(script_names())} loaded" in done.stdout
    functions = int(version.split(".")[0]) >= 7
    assert ("the fair pop as a Redis function" in done.stdout) == functions, done.stdout
    shas = [hashlib.sha1(sent_text(name).encode()).hexdigest() for name in script_names()]
    assert len(shas) >= 10 and all(conn.script_exists(*shas))


def test_a_rule_queue_no_worker_serves_fails_naming_file_key_and_value(project: Path) -> None:
    (project / "fair_router.yaml").write_text(GOOD.replace("queues: {default: 6, default_throttled: 3}",
                                                           "queues: {default: 6}"))
    done = check(project)
    assert done.returncode == 2
    assert "invalid fair-router settings in fair_router.yaml" in done.stderr
    assert ("jobs['myapp.tasks.process'].rules[0].queue is 'default_throttled', which has no weight in `queues:`"
            in done.stderr)
    assert "settings OK" not in done.stdout + done.stderr


def test_a_queue_in_a_pool_group_counts_as_served(project: Path) -> None:
    (project / "fair_router.yaml").write_text(GOOD.replace("queues: {default: 6, default_throttled: 3}",
                                                           "pool: {'default,default_throttled': 2}"))
    assert check(project).returncode == 0


def test_a_misspelt_job_key_fails_with_a_did_you_mean(project: Path) -> None:
    (project / "fair_router.yaml").write_text(GOOD.replace("myapp.tasks.process", "myapp.tasks.proces"))
    done = check(project)
    assert done.returncode == 2
    assert "jobs['myapp.tasks.proces']: job key 'myapp.tasks.proces' does not import" in done.stderr
    assert "did you mean 'process'?" in done.stderr


def test_a_job_key_whose_module_is_missing_fails(project: Path) -> None:
    (project / "fair_router.yaml").write_text(GOOD.replace("myapp.tasks.process", "myap.tasks.process"))
    done = check(project)
    assert done.returncode == 2
    assert "does not import (No module named 'myap')" in done.stderr


def test_a_job_key_of_a_plain_function_or_no_dotted_path_is_a_warning(project: Path) -> None:
    (project / "fair_router.yaml").write_text(
        "jobs:\n  myapp.tasks.plain: {queue: default}\n  export-job: {queue: default}\nqueues: {default: 1}\n")
    done = check(project)
    assert done.returncode == 0, done.stderr
    assert "warning: fair_router.yaml: jobs['myapp.tasks.plain']: myapp.tasks.plain is not a @fair_job" in done.stderr
    assert "job key 'export-job' is not a dotted path" in done.stderr
    assert "settings OK, with 2 warning(s) above" in done.stdout


@pytest.mark.parametrize(("url", "reason"), [
    ("notaurl", "Redis URL must specify one of the following schemes"),
    ("redis://localhost:99999/0", "Port out of range 0-65535"),
    ("redis://localhost:6379/zero", "database must be a number"),
])
def test_a_malformed_redis_url_fails_naming_file_key_and_value(project: Path, url: str, reason: str) -> None:
    (project / "fair_router.yaml").write_text(GOOD + f"redis_url: {url}\n")
    done = check(project)
    assert done.returncode == 2
    assert "fair_router.yaml: redis_url: " in done.stderr and reason in done.stderr and repr(url) in done.stderr
    done = check(project, env={"FAIR_ROUTER_REDIS_URL": url})
    assert done.returncode == 2 and "FAIR_ROUTER_REDIS_URL" in done.stderr and repr(url) in done.stderr


def test_a_misspelt_variable_fails_with_a_did_you_mean(project: Path) -> None:
    done = check(project, env={"FAIR_ROUTER_QUEUS": '{"default": 1}'})
    assert done.returncode == 2
    assert "error: FAIR_ROUTER_QUEUS: unknown variable" in done.stderr
    assert "did you mean FAIR_ROUTER_QUEUES?" in done.stderr
    done = check(project, env={"FAIR_ROUTER_TIRES__DEFAULT": "pro"})
    assert done.returncode == 2 and "did you mean FAIR_ROUTER_TIERS__DEFAULT?" in done.stderr


def test_an_unknown_variable_unlike_any_setting_is_a_warning(project: Path) -> None:
    done = check(project, env={"FAIR_ROUTER_SCREENSHOT": "x.png", "FAIR_ROUTER_DASHBOARD_TOKEN": "t" * 20})
    assert done.returncode == 0, done.stderr
    assert "warning: FAIR_ROUTER_SCREENSHOT: unknown variable" in done.stderr
    assert "DASHBOARD_TOKEN" not in done.stderr.split("(known:")[0]
    assert "settings OK, with 1 warning(s) above" in done.stdout


def test_ping_exits_1_when_redis_is_unreachable(project: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    done = check(project, "--ping", env={"FAIR_ROUTER_REDIS_URL": url})
    assert done.returncode == 1
    assert f"error: redis_url {url}: cannot reach Redis" in done.stderr
    assert check(project, env={"FAIR_ROUTER_REDIS_URL": url}).returncode == 0  # without --ping: not contacted


def test_ping_warns_about_tiers_stored_in_redis_that_the_settings_do_not_know(
    project: Path, redis_server: RedisServer, conn: Redis
) -> None:
    conn.hset(Keys("fair_router").tiers(), mapping={"acme": "gold", "globex": "pro"})
    done = check(project, "--ping", env={"FAIR_ROUTER_REDIS_URL": redis_server.url})
    assert done.returncode == 0, done.stderr
    assert "1 tenant(s) have a tier stored in Redis that is not a key of tiers.concurrency ('acme': 'gold')" \
        in done.stderr
    assert "settings OK, with 1 warning(s) above" in done.stdout
