"""The demo's long-jobs scenario, small, on real `rq worker` processes: small tenants behind long
jobs wait less when the long jobs run in turns. Compared within one run, never against wall times."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis import Redis

from fair_router.demo.long_jobs import LongParams, run_long_jobs, total_jobs
from fair_router.demo.redis_server import RedisServer
from fair_router.demo.run import print_long_jobs


def test_small_tenants_wait_less_behind_long_jobs_in_turns(
    conn: Redis, redis_server: RedisServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # 40 x 20 ms = 0.8 s per long job, at least 0.8 s by its sleeps: more than two 0.3 s slices.
    params = LongParams(items=40, item_ms=20, workers=2, small_tenants=4)
    seen: list[int] = []
    report = run_long_jobs(conn, redis_server.url, params, progress=seen.append)

    assert sum(seen) == total_jobs(params) == 2 * (2 + 4)
    whole, turns = report["variants"]["whole"], report["variants"]["turns"]
    for entry in (whole, turns):
        assert len(entry["waits"]) == 4 and all(wait >= 0 for wait in entry["waits"])
        assert [run["result"] for run in entry["long"]] == [40, 40]  # every long job finished with its result
        assert entry["summary"]["p50"] <= entry["summary"]["p95"] <= entry["summary"]["max"] == max(entry["waits"])
    assert [run["turns"] for run in whole["long"]] == [1, 1]
    assert all(run["turns"] >= 2 for run in turns["long"]), turns["long"]
    # The point of the scenario: with turns, no small tenant waits for a whole long job.
    assert turns["summary"]["max"] < whole["summary"]["max"], report
    assert "shorter" in report["verdict"]
    assert conn.keys("rq:queue:*") == []  # the scenario cleans its queues up
    assert conn.keys("fair_router_flood:{obs}:*") == []  # and the workers' start records

    print_long_jobs(report)
    out = capsys.readouterr().out
    assert "in one go (no turns)" in out and "in turns of 0.3s" in out and "verdict: with turns" in out

    pytest.importorskip("matplotlib")
    from fair_router.demo.plot import plot_waits

    flood = {"modes": {name: {"waits": {"greedy": [0.5, 1.0], "small": [0.01, 0.02]},
                              "summary": {"greedy_p95": 1.0, "small_p95": 0.02}} for name in ("fifo", "fair")}}
    plot_waits(flood, tmp_path / "demo.png", report)
    assert (tmp_path / "demo.png").read_bytes().startswith(b"\x89PNG")
