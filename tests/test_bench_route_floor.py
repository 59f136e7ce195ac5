"""bench/route_floor.py at a tiny size: it runs end to end on its own redis-server and reports all three sides
(never its times as a verdict: the machine is shared). Its exit status carries its own check of each side: the
job ids it returned are on its queues, the queues are in rq:queues, and the floor router ran the floor script
(no window written) where the real one ran route.lua."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_route_floor_bench_reports_three_sides(tmp_path: Path) -> None:
    out = tmp_path / "floor.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "route_floor.py"), "--rounds", "1", "--per-round",
                           "20", "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line.split()[0] for line in done.stdout.splitlines()[-4:-1]] == ["plain", "routed", "floor"]

    results = json.loads(out.read_text())["results"]
    assert set(results) == {"plain", "routed", "floor"}
    for side in results.values():
        assert side["wall_us"] > 0 and side["cpu_us"] > 0
        assert len(side["round_ratios"]) == 1
