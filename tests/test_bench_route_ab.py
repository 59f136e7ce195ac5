"""bench/route_ab.py at a tiny size, this checkout against itself: it captures both kinds of route.lua call,
replays them through every side on one redis-server and reports each (never its times as a verdict: the machine
is shared). The commands per call are counts, the same for both sides of one tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_route_ab_bench_reports_every_side() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "route_ab.py"), str(ROOT), "--rounds", "2",
                           "--calls", "20"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[-5:]]
    assert [(row[0], row[1]) for row in rows] == [("fcall", "this"), ("fcall", "other"), ("fcall", "empty"),
                                                  ("evalsha", "this"), ("evalsha", "other")]
    commands = {(row[0], row[1]): float(row[-1]) for row in rows}
    assert commands[("fcall", "this")] == commands[("fcall", "other")] >= 6  # TIME, ZADD, ZCARD, ZCOUNT, ...
    assert commands[("fcall", "empty")] == 0
    assert commands[("evalsha", "this")] == commands[("evalsha", "other")] > commands[("fcall", "this")]
