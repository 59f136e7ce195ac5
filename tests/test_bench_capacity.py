"""bench/capacity.py at a tiny size: it runs end to end on its own redis-server, prints the four set-ups'
table, and its counts are sane (never its times: the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_capacity_bench_reports_four_setups(tmp_path: Path) -> None:
    out = tmp_path / "capacity.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "capacity.py"), "--jobs", "20", "--rounds", "1",
                           "--json", str(out)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and not line.startswith("| set-up")]
    assert [row.split("|")[1].strip() for row in rows] == [
        "plain rq", "router", "FairQueue", "FairQueue + limits + rec"]

    medians = json.loads(out.read_text())["medians"]
    assert set(medians) == {"plain", "router", "fair", "fair_limited"}
    for row in medians.values():
        assert row["enqueue_commands"] > 0 and row["drain_commands"] > 0
        assert row["commands"] == pytest.approx(row["enqueue_commands"] + row["drain_commands"])
        assert row["cpu_usec"] > 0 and row["ceiling_jobs_per_s"] == pytest.approx(1e6 / row["cpu_usec"])
    # rq 3.0 saves and pushes a job in one MULTI (a handful of commands) and its worker takes a few dozen
    # per job (fetch, start, heartbeats, finish); worker start-up is spread over only 20 jobs here.
    assert 2 <= medians["plain"]["enqueue_commands"] <= 20
    assert 20 <= medians["plain"]["commands"] <= 150
    # A routed enqueue adds the window record (route.lua) to rq's enqueue; a lease and a start record add to
    # a fair drain; the plain side runs no script.
    assert medians["router"]["enqueue_commands"] > medians["plain"]["enqueue_commands"]
    assert medians["fair_limited"]["drain_commands"] > medians["fair"]["drain_commands"]
    assert medians["plain"]["script_usec"] == 0 and medians["fair"]["script_usec"] > 0


def test_capacity_breakdown_names_each_script_and_command(tmp_path: Path) -> None:
    out = tmp_path / "capacity.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "capacity.py"), "--jobs", "10", "--rounds", "1",
                           "--setups", "plain,fair_limited", "--tenants", "3", "--breakdown", "--json", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["tenants"] == 3
    plain, limited = report["breakdown"]["plain"], report["breakdown"]["fair_limited"]
    assert plain["scripts"] == {} and plain["commands"]["exec"]["calls"] > 0
    # Every script a job runs with every control on is named by its lua/built file, however it was sent.
    scripts = limited["scripts"]
    assert {"fair_push (FCALL)", "release (EVALSHA)"} <= set(scripts), scripts
    sent = {name.split(" (")[0] for name in scripts}
    assert {"start", "fair_pop", "fair_unpark"} <= sent and "?" not in sent, scripts
    for row in scripts.values():
        assert row["calls"] > 0 and row["usec"] > 0
    assert "| script | calls/job |" in done.stdout
