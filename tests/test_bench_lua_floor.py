"""bench/lua_floor.py at a tiny size: it runs end to end on its own redis-server and prints the prices of a
Lua call and every script's row (never its times as a verdict: the machine is shared). The command counts do
not move with the machine: route.lua recording into a window at its cap sends TIME, ZADD, ZCARD, the trim, the
ZCOUNT of the last rule (which matches), the routed counter's HINCRBY and PEXPIRE; the fair pop 10-11; the
settle of a charge="runtime" job 7 (TIME, the charge's HGET and HDEL, the means' HMGET and HSET, the HEXISTS of
the tenant's record, the HLEN of the means; the run time is the estimate: no pass moves)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_lua_floor_bench_prints_every_script() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "lua_floor.py"), "--calls", "200", "--rounds", "1"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {line.split()[0] + (" " + line.split()[1] if line.startswith("fair pop") else ""): line.split()
            for line in done.stdout.splitlines()[-3:]}
    assert set(rows) == {"route.lua", "fair pop", "settle"}
    assert float(rows["route.lua"][3]) == 7.0
    assert 10.0 <= float(rows["fair pop"][4]) <= 11.5
    assert 7.0 <= float(rows["settle"][3]) <= 7.5
