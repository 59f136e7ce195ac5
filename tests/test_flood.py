"""The flood scenario (shared by the demo and bench/fairness.py), small, on real workers."""

from __future__ import annotations

from redis import Redis

from fair_router.flood import FloodParams, JobTiming, jain, percentile, run_scenario, share_accuracy
from fair_router.redis_server import RedisServer


def test_metric_helpers() -> None:
    assert jain([1, 1, 1, 1]) == 1.0
    assert jain([1, 0, 0, 0]) == 0.25
    assert percentile([5, 1, 4, 2, 3], 0.5) == 3
    assert percentile(list(range(1, 101)), 0.95) == 95


def test_small_flood_runs_every_job_in_every_mode(conn: Redis, redis_server: RedisServer) -> None:
    params = FloodParams(greedy_jobs=150, small_tenants=5, small_jobs=2, spread=0.5, job_ms=1, workers=2,
                         share_tenants=3, share_jobs=40)
    seen: list[int] = []
    report = run_scenario(conn, redis_server.url, params, progress=seen.append)
    assert sum(seen) == 3 * (params.total_jobs + 10 + 120)  # each mode: calm, flood and backlogged runs
    for name in ("fifo", "router", "fair"):
        entry = report["modes"][name]
        assert len(entry["waits"]["greedy"]) == 150 and len(entry["waits"]["small"]) == 10
        assert entry["summary"]["makespan"] > 0 and 0 < entry["summary"]["jain_slowdown"] <= 1
    assert report["modes"]["router"]["summary"]["makespan_vs_fifo"] > 0
    assert report["modes"]["fair"]["summary"]["makespan_vs_fifo"] > 0
    # FIFO serves the tenants' batches one after another (first half: 40, 20, 0 jobs -> 0.6); the fair
    # queue interleaves all three.
    assert report["modes"]["fifo"]["summary"]["share_jain"] <= 0.65
    assert report["modes"]["fair"]["summary"]["share_jain"] >= 0.9
    assert conn.keys("rq:queue:*") == []  # the scenario cleans its queues up


def test_share_accuracy() -> None:
    def timing(tenant: str, started: float) -> JobTiming:
        return JobTiming(tenant, "backlogged", 0.0, started, started + 1)

    fifo = [timing("a", i) for i in range(4)] + [timing("b", 4 + i) for i in range(4)]
    assert share_accuracy(fifo) == 0.5  # first half all "a": x = (2, 0)
    alternating = [timing("ab"[i % 2], i) for i in range(8)]
    assert share_accuracy(alternating) == 1.0
