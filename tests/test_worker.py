"""Weighted workers against the real redis-server: in-process dequeues, and real `rq worker` processes."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from redis import Redis
from rq import Queue
from rq.registry import FinishedJobRegistry
from rq.worker import DequeueStrategy
from worker_jobs import noop

from fair_router import SettingsError, WeightedSimpleWorker, WeightedWorker
from fair_router.demo.redis_server import RedisServer

TESTS = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
WORKER_CLASS = "fair_router.WeightedSimpleWorker"  # the documented `rq worker -w` path


@pytest.fixture(autouse=True)
def no_ambient_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Workers built without weights= read settings: make sure none leak in from the shell or cwd."""
    for key in list(os.environ):
        if key.startswith("FAIR_ROUTER_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def fill(conn: Redis, name: str, n: int) -> Queue:
    queue = Queue(name, connection=conn)
    if n:
        queue.enqueue_many([Queue.prepare_data(noop, result_ttl=600) for _ in range(n)])
    return queue


def dequeue_names(worker: WeightedSimpleWorker | WeightedWorker, n: int) -> list[str]:
    """Queue of each of `n` fetches through the worker's real dequeue (non-blocking, like --burst)."""
    names = []
    for _ in range(n):
        result = worker.dequeue_job_and_maintain_ttl(timeout=None)
        assert result is not None, "a queue ran dry: the test backlog is too small"
        names.append(result[1].name)
    return names


def tolerance(p: float, n: int, sds: float = 4.5) -> float:
    """`sds` binomial standard deviations of a share p over n trials.

    At 4.5 sd the exact binomial tail is <= 2e-5 for every check below; all of them together raise a
    false alarm about once in 20,000 runs, while the bugs they target miss by 10+ sd.
    """
    return sds * math.sqrt(p * (1 - p) / n)


def test_empty_heavy_queue_is_skipped_and_the_rest_renormalise(conn: Redis) -> None:
    # weights 4/2/1 with the weight-4 queue empty: b and c must split 2/3 : 1/3, as if `a` did not exist.
    n = 3000
    fill(conn, "a", 0)
    fill(conn, "b", n)
    fill(conn, "c", n)
    worker = WeightedSimpleWorker(["a", "b", "c"], connection=conn, weights={"a": 4, "b": 2, "c": 1})
    shares = Counter(dequeue_names(worker, n))
    assert set(shares) == {"b", "c"}
    assert shares["b"] / n == pytest.approx(2 / 3, abs=tolerance(2 / 3, n))  # +-3.9 points


def test_a_dequeue_strategy_the_weights_replace_is_warned_about_once(conn: Redis,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    for name in ("a", "b"):
        for _ in range(2):
            Queue(name, connection=conn).enqueue(noop)
    worker = WeightedSimpleWorker(["a", "b"], connection=conn, weights={"a": 1, "b": 1})
    with caplog.at_level(logging.WARNING, logger="fair_router"):
        worker.work(burst=True, dequeue_strategy=DequeueStrategy.ROUND_ROBIN)
    said = [record.getMessage() for record in caplog.records if "--dequeue-strategy" in record.getMessage()]
    assert said == ["--dequeue-strategy round_robin is not applied: the queues' weights (settings' queues:, or "
                    "weights=) draw the order of every fetch. Drop the weights of these queues to use rq's strategy, "
                    "or drop the option"]
    caplog.clear()
    WeightedSimpleWorker(["a", "b"], connection=conn, weights={"a": 1, "b": 1}).work(burst=True)
    assert not [record for record in caplog.records if "--dequeue-strategy" in record.getMessage()]


def test_first_fetch_is_sampled_too(conn: Redis) -> None:
    # rq only reorders *after* a fetch; a fresh worker that left its first fetch to rq would always
    # take the listed-first queue `a` (share 0 for b instead of 0.9).
    trials = 200
    fill(conn, "a", trials)
    fill(conn, "b", trials)
    firsts = Counter(
        dequeue_names(WeightedSimpleWorker(["a", "b"], connection=conn, weights={"a": 1, "b": 9}), 1)[0]
        for _ in range(trials)
    )
    assert firsts["b"] / trials == pytest.approx(0.9, abs=tolerance(0.9, trials))  # +-9.5 points


def test_strict_queue_is_always_first_while_it_has_jobs(conn: Redis) -> None:
    for name in ("a", "b"):
        fill(conn, name, 40)
    fill(conn, "urgent", 15)
    fill(conn, "critical", 10)
    weights = {"critical": "strict", "urgent": "strict", "a": 1, "b": 2}
    # Strict queues go first in the worker's listed order (urgent before critical here), wherever listed.
    worker = WeightedSimpleWorker(["a", "urgent", "b", "critical"], connection=conn, weights=weights)
    names = dequeue_names(worker, 65)
    assert names[:25] == ["urgent"] * 15 + ["critical"] * 10
    assert set(names[25:]) <= {"a", "b"}


@pytest.mark.parametrize("weights", [{}, {"elsewhere": 5}, None], ids=["empty", "other-queues", "settings"])
def test_without_weights_for_its_queues_the_worker_keeps_rq_order(
    conn: Redis, weights: dict[str, float] | None
) -> None:
    # All-equal weights would shuffle; "no weights configured" must mean rq's listed order instead.
    for name in ("q1", "q2", "q3"):
        fill(conn, name, 5)
    worker = WeightedSimpleWorker(["q2", "q3", "q1"], connection=conn, weights=weights)
    assert dequeue_names(worker, 15) == ["q2"] * 5 + ["q3"] * 5 + ["q1"] * 5


def test_weights_come_from_settings_when_not_given(conn: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIR_ROUTER_QUEUES", json.dumps({"low": 1, "top": "strict"}))
    fill(conn, "low", 5)
    fill(conn, "top", 5)
    worker = WeightedWorker(["low", "top"], connection=conn)  # rq's forking Worker, same mixin
    assert dequeue_names(worker, 10) == ["top"] * 5 + ["low"] * 5


@pytest.mark.parametrize("bad", [0, -2, "fast", float("nan"), float("inf"), True, None])
def test_invalid_explicit_weight_fails_at_start_naming_queue_and_value(conn: Redis, bad: object) -> None:
    with pytest.raises(SettingsError) as caught:
        WeightedSimpleWorker(["good", "bad_q"], connection=conn, weights={"good": 2, "bad_q": bad})
    message = str(caught.value)
    assert "WeightedSimpleWorker(weights=...)" in message
    assert f"bad_q: weight must be a positive number up to 1e+06 or 'strict', got {bad!r}" in message


def test_weights_are_checked_before_connecting() -> None:
    unreachable = Redis(host="127.0.0.1", port=1)  # nothing listens: a connection attempt would raise
    with pytest.raises(SettingsError, match="bad_q: weight must be"):
        WeightedSimpleWorker(["bad_q"], connection=unreachable, weights={"bad_q": 0})


def test_invalid_weight_in_settings_fails_at_start(conn: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIR_ROUTER_QUEUES", '{"a": -1}')
    with pytest.raises(SettingsError,
                       match=r"queues\.a: weight must be a positive number up to 1e\+06 or 'strict', got -1"):
        WeightedSimpleWorker(["a"], connection=conn)


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a console script from this venv with tests/ importable (the jobs live in tests/worker_jobs.py)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FAIR_ROUTER_")}
    full_env |= {"PYTHONPATH": str(TESTS), **env}
    return subprocess.run(args, env=full_env, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_rq_cli_worker_drains_backlogged_queues_in_proportion_to_weights(
    conn: Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    weights = {"a": 6, "b": 3, "c": 1}
    config = tmp_path / "fair_router.yaml"
    config.write_text("queues:\n  a: 6\n  b: 3\n  c: 1\n")
    n = 600  # every queue holds n jobs, so all stay backlogged for the whole run
    queues = {name: fill(conn, name, n) for name in weights}
    done = run([str(BIN / "rq"), "worker", "-w", WORKER_CLASS, "--burst", "--max-jobs", str(n),
                "--url", redis_server.url, "a", "b", "c"], {"FAIR_ROUTER_CONFIG": str(config)}, tmp_path)
    assert done.returncode == 0, done.stderr
    taken = {name: n - queue.count for name, queue in queues.items()}
    assert sum(taken.values()) == n
    for name, weight in weights.items():
        # +-9.0 / 8.4 / 5.5 points for a / b / c; FIFO (100/0/0) or a uniform shuffle (33 each) fail.
        share = weight / sum(weights.values())
        assert taken[name] / n == pytest.approx(share, abs=tolerance(share, n)), (name, taken)


def test_rq_cli_reports_invalid_weights_and_exits(redis_server: RedisServer, tmp_path: Path) -> None:
    done = run([str(BIN / "rq"), "worker", "-w", WORKER_CLASS, "--burst", "--url", redis_server.url, "a"],
               {"FAIR_ROUTER_QUEUES": '{"a": 0}'}, tmp_path)
    assert done.returncode == 1
    assert "queues.a: weight must be a positive number up to 1e+06 or 'strict', got 0" in done.stderr


def test_fair_router_worker_command_drains_named_queues_and_runs_due_scheduled_jobs(
    conn: Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text(f"redis_url: {redis_server.url}\nqueues:\n  q1: 2\n  q2: 1\n  not_named: 5\n")
    fill(conn, "q1", 20)
    fill(conn, "q2", 10)
    scheduled = Queue("q1", connection=conn).enqueue_at(datetime.now(timezone.utc) - timedelta(seconds=1), noop)
    done = run([str(BIN / "fair-router"), "worker", "--burst", "--config", str(config),
                "--url", redis_server.url, "q1", "q2"], {}, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (Queue("q1", connection=conn).count, Queue("q2", connection=conn).count) == (0, 0)
    assert len(FinishedJobRegistry("q1", connection=conn)) == 21  # the scheduler is on by default
    assert len(FinishedJobRegistry("q2", connection=conn)) == 10
    assert scheduled.get_status(refresh=True) == "finished"


def test_fair_router_worker_command_defaults_to_the_settings_queues(
    conn: Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    fill(conn, "x", 3)
    fill(conn, "y", 3)
    fill(conn, "z", 3)  # not in the settings: must be left alone
    env = {"FAIR_ROUTER_QUEUES": '{"x": 1, "y": "strict"}', "FAIR_ROUTER_REDIS_URL": redis_server.url}
    done = run([str(BIN / "fair-router"), "worker", "--burst", "--max-jobs", "6"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert [Queue(name, connection=conn).count for name in "xyz"] == [0, 0, 3]


def test_fair_router_worker_command_without_any_queue_explains(tmp_path: Path) -> None:
    done = run([str(BIN / "fair-router"), "worker", "--burst"], {}, tmp_path)
    assert done.returncode == 2
    assert "no queues to work on" in done.stderr
