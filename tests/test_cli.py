"""The fair-router command: check, stats, demo."""

from __future__ import annotations

import os
import time
from pathlib import Path

from click.testing import CliRunner
from redis import Redis

from fair_router import FairRouter, load_settings
from fair_router.cli import main
from fair_router.demo.redis_server import RedisServer

CONFIG = """
prefix: clitest
jobs:
  app.tasks.sync:
    queue: default
    rules:
      - {queue: default_throttled, threshold: 2, per: 1h}
      - {queue: default_superslow, threshold: 3, per: 90s}
queues: {critical: strict, default: 6, default_throttled: 3, default_superslow: 1}
"""


def test_check_prints_the_rules_table(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG.replace("app.tasks.sync", "routed_jobs.echo"))  # a job key that imports (tests/)
    unset = {name: None for name in os.environ if name.startswith("FAIR_ROUTER_")}  # e.g. CI's own variables
    result = CliRunner().invoke(main, ["check", str(path)], env=unset)
    assert result.exit_code == 0, result.output
    assert "routed_jobs.echo" in result.output and "default_superslow" in result.output
    assert "> 3" in result.output and "90s" in result.output and "critical: strict" in result.output
    assert "routed_jobs.echo is not a @fair_job function" in result.output  # a warning: check exits 0
    assert "settings OK, with 1 warning(s) above" in result.output


def test_check_fails_with_file_key_and_reason(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("jobs: {a.b: {rules: [{queue: q, threshold: 0, per: 1h}]}}\n")
    result = CliRunner().invoke(main, ["check", str(path)])
    assert result.exit_code == 2
    assert str(path) in result.output and "jobs['a.b'].rules[0].threshold" in result.output


def test_stats_is_read_only_and_predicts_the_next_queue(tmp_path: Path, conn: Redis,
                                                        redis_server: RedisServer) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CONFIG + f"redis_url: {redis_server.url}\n")
    settings = load_settings(path)
    router = FairRouter(conn, prefix=settings.prefix)
    rules = settings.job("app.tasks.sync").rules
    for i in range(2):
        router.record_and_route("app.tasks.sync", "acme:{1}", f"j{i}", "default", rules)
    before = conn.zcard(router.keys.window("app.tasks.sync", "acme:{1}"))
    result = CliRunner().invoke(main, ["stats", "app.tasks.sync", "acme:{1}", "--config", str(path)])
    assert result.exit_code == 0, result.output
    assert "next job would go to: default_throttled" in result.output
    assert conn.zcard(router.keys.window("app.tasks.sync", "acme:{1}")) == before == 2
    result = CliRunner().invoke(main, ["stats", "app.tasks.sync", "nobody", "--config", str(path)])
    assert "next job would go to: default\n" in result.output


def test_stats_marks_a_trimmed_window_count_as_a_lower_bound(tmp_path: Path, conn: Redis,
                                                              redis_server: RedisServer) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"redis_url: {redis_server.url}\nprefix: clitest\njobs:\n  app.tasks.sync:\n    queue: default\n"
                    "    rules:\n      - {queue: slow, threshold: 100, per: 1h}\n"
                    "      - {queue: slower, threshold: 10, per: 1m}\n")
    rules = load_settings(path).job("app.tasks.sync").rules
    half_an_hour_ago = time.time() - 1800
    old = FairRouter(conn, prefix="clitest", clock=lambda: half_an_hour_ago)
    for i in range(300):
        old.record_and_route("app.tasks.sync", "acme", f"old{i}", "default", rules)
    now = FairRouter(conn, prefix="clitest")
    for i in range(5):
        now.record_and_route("app.tasks.sync", "acme", f"new{i}", "default", rules)
    result = CliRunner().invoke(main, ["stats", "app.tasks.sync", "acme", "--config", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].split()[:5] == ["≥101", "enqueued", "in", "last", "1h"]  # 305 enqueued, 101 kept
    assert lines[2].split()[:5] == ["5", "enqueued", "in", "last", "1m"]  # exact: trimmed ones are older
    assert "(≥101: a window keeps only the newest 101 enqueues" in result.output
    result = CliRunner().invoke(main, ["stats", "app.tasks.sync", "nobody", "--config", str(path)])
    assert "≥" not in result.output
