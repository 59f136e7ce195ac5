"""The flood scenario (shared by the demo and bench/fairness.py), small, on real workers."""

from __future__ import annotations

from redis import Redis

from fair_router.flood import FloodParams, jain, percentile, run_scenario
from fair_router.redis_server import RedisServer


def test_metric_helpers() -> None:
    assert jain([1, 1, 1, 1]) == 1.0
    assert jain([1, 0, 0, 0]) == 0.25
    assert percentile([5, 1, 4, 2, 3], 0.5) == 3
    assert percentile(list(range(1, 101)), 0.95) == 95


def test_small_flood_runs_every_job_in_every_mode(conn: Redis, redis_server: RedisServer) -> None:
    params = FloodParams(greedy_jobs=150, small_tenants=5, small_jobs=2, spread=0.5, job_ms=1, workers=2)
    seen: list[int] = []
    report = run_scenario(conn, redis_server.url, params, progress=seen.append)
    assert sum(seen) == 3 * (params.total_jobs + 10)  # each mode: calm run + flood run
    for name in ("fifo", "router", "fair"):
        entry = report["modes"][name]
        assert len(entry["waits"]["greedy"]) == 150 and len(entry["waits"]["small"]) == 10
        assert entry["summary"]["makespan"] > 0 and 0 < entry["summary"]["jain_slowdown"] <= 1
    assert report["modes"]["router"]["summary"]["makespan_vs_fifo"] > 0
    assert report["modes"]["fair"]["summary"]["makespan_vs_fifo"] > 0
    assert conn.keys("rq:queue:*") == []  # the scenario cleans its queues up
