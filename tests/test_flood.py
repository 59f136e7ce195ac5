"""The flood scenario (shared by the demo and bench/fairness.py), small, on real workers."""

from __future__ import annotations

import pytest
from redis import Redis

from fair_router.demo.flood import FloodParams, run_scenario
from fair_router.demo.metrics import (
    JobTiming,
    jain,
    percentile,
    served_ahead,
    share_accuracy,
    summarize,
)
from fair_router.demo.redis_server import RedisServer
from fair_router.demo.run import dashboard_view, print_flood


def test_metric_helpers() -> None:
    assert jain([1, 1, 1, 1]) == 1.0
    assert jain([1, 0, 0, 0]) == 0.25
    assert percentile([5, 1, 4, 2, 3], 0.5) == 3
    assert percentile(list(range(1, 101)), 0.95) == 95


def test_small_flood_runs_every_job_in_every_mode(
    conn: Redis, redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # Under a second per flood: the workers flush their start records every 50 ms, not every second, so the
    # halfway dashboard view can show them.
    params = FloodParams(greedy_jobs=150, small_tenants=5, small_jobs=2, spread=0.5, job_ms=1, workers=2,
                         share_tenants=3, share_jobs=40, flush_interval=0.05)
    seen: list[int] = []
    views: dict[str, list[str]] = {}
    report = run_scenario(conn, redis_server.url, params, progress=seen.append, midway=dashboard_view(conn, views))
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
    assert conn.keys("fair_router_flood:{obs}:*") == []  # and the workers' start records

    # The demo's dashboard view, read halfway through each flood by the dashboard's own reader. FIFO runs rq's
    # own workers, which record nothing.
    assert set(views) == {"router", "fair"}
    for name, lines in views.items():
        greedy = [line for line in lines if line.split()[:1] == ["greedy-0"]]
        assert len(greedy) == 1, (name, lines)
        assert "ms" in greedy[0] or " s " in greedy[0], greedy  # its wait p50 · p95
    fair_greedy = next(line for line in views["fair"] if line.split()[:1] == ["greedy-0"]).split()
    assert int(fair_greedy[1]) > 0  # jobs waiting, halfway through its flood
    assert any("superslow" in line for line in views["router"])  # the rule throttling the greedy tenant
    report["dashboard"] = views
    print_flood(report)
    out = capsys.readouterr().out
    assert "Jain" not in out and out.count("jobs served ahead (") == 3 and out.count("verdict: ") == 3
    assert out.count("dashboard halfway through the flood") == 2


def test_share_accuracy() -> None:
    def timing(tenant: str, started: float) -> JobTiming:
        return JobTiming(tenant, "backlogged", 0.0, started, started + 1)

    fifo = [timing("a", i) for i in range(4)] + [timing("b", 4 + i) for i in range(4)]
    assert share_accuracy(fifo) == 0.5  # first half all "a": x = (2, 0)
    alternating = [timing("ab"[i % 2], i) for i in range(8)]
    assert share_accuracy(alternating) == 1.0


def test_served_ahead_counts_jobs_started_between_enqueue_and_start() -> None:
    jobs = [
        JobTiming("g", "greedy", 0.0, 1.0, 2.0),
        JobTiming("g", "greedy", 0.0, 2.0, 3.0),
        JobTiming("s", "small", 1.5, 4.0, 5.0),  # the greedy job started at 2.0 and the small one at 3.0 went first
        JobTiming("t", "small", 2.5, 3.0, 4.0),  # nothing started in between
    ]
    assert served_ahead(jobs) == [2, 0]


def test_summarize_pools_waits_and_takes_the_median_makespan_over_runs() -> None:
    def run(makespan: float, wait: float) -> list[JobTiming]:
        return [JobTiming("s", "small", 0.0, wait, makespan), JobTiming("g", "greedy", 0.0, 0.0, 1.0)]

    summary = summarize([run(10.0, 1.0), run(30.0, 3.0), run(20.0, 2.0)])
    assert summary["makespan"] == 20.0
    assert summary["small_p50"] == 2.0 and summary["small_p95"] == 3.0
    assert summary["throughput"] == 2 / 20.0


def test_each_mode_gets_a_one_line_verdict_that_follows_its_figures() -> None:
    from fair_router.demo.run import METRICS_EXPLAINED, verdict

    fifo = {"small_p95": 9.5, "small_ahead_p95": 1973, "share_jain": 0.556}
    router = {"small_p95": 0.018, "small_p95_vs_fifo": 0.002, "makespan_vs_fifo": 0.98, "share_jain": 0.648}
    fair = {"small_p95": 0.013, "small_p95_vs_fifo": 0.001, "makespan_vs_fifo": 0.99, "share_jain": 0.999}
    assert "whole flood" in verdict("fifo", fifo) and "1973 jobs ahead" in verdict("fifo", fifo)
    assert "500x shorter" in verdict("router", router) and "do not get equal shares" in verdict("router", router)
    assert "1000x shorter" in verdict("fair", fair) and "get equal shares (accuracy 0.999)" in verdict("fair", fair)
    assert len(METRICS_EXPLAINED) == 5 and all(line.endswith(".") for line in METRICS_EXPLAINED)
