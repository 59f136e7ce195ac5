"""bench/route_floor.py at a tiny size: it runs end to end on its own redis-server and reports all four sides
(never its times as a verdict: the machine is shared). Its exit status carries its own check of each side: the
job ids it returned are on its queues, the queues are in rq:queues, and the floor router ran the floor script
(no window written) where the real one ran route.lua. With ``--rtt-us`` every side goes through
bench/delay_proxy.py, so the same check covers the proxy: every byte of every enqueue and reply crossed it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SIDES = ["plain", "routed", "floor", "fair"]


@pytest.mark.parametrize("rtt", [None, "300"])
def test_route_floor_bench_reports_four_sides(tmp_path: Path, rtt: str | None) -> None:
    out = tmp_path / "floor.json"
    proxy = [] if rtt is None else ["--rtt-us", rtt]
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "route_floor.py"), "--rounds", "1", "--per-round",
                           "20", *proxy, "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()[-5:-1]] == SIDES

    report = json.loads(out.read_text())
    assert set(report["results"]) == set(SIDES)
    for side in report["results"].values():
        assert side["wall_us"] > 0 and side["cpu_us"] > 0
        assert len(side["round_ratios"]) == 1
    assert report["rtt_added_us"] == (None if rtt is None else float(rtt))
    if rtt is not None:
        # The proxy holds each chunk half the added round trip each way (a sleep can only run long), so a PING
        # through it takes at least the round trip it adds: a floor the proxy guarantees, not a timing verdict.
        assert report["ping_us"] >= float(rtt)
