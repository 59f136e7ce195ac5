"""The dashboard in a real browser: headless Chromium (Debian's chromium and chromium-driver, through
selenium) against ``fair-router dashboard`` while two real rq workers drain a one-tenant flood from a fair
queue and small tenants keep arriving. Concurrency limits are on (every tenant on the default tier: one job at
once), so the greedy tenant runs one job at a time and is parked whenever a second worker takes its next one.

One small tenant is paused (``FairRouter.pause``) before its jobs arrive: its row must say "paused" and
"parked" (a worker that took its job parked it in the fair queue).

Skipped only when no Chromium or chromedriver is found and neither ``CI`` nor ``FAIR_ROUTER_REQUIRE_BROWSER``
is set; ``.ci/run`` installs both and sets the latter, so in CI a missing browser fails the test.
``FAIR_ROUTER_SCREENSHOT=path.png`` also copies the screenshot there (docs/dashboard.png is made so, with
``FAIR_ROUTER_FLOOD_JOBS`` raised for a longer chart).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import terminate
from redis import Redis
from rq import Queue, Worker

from fair_router.demo.harness import timed_job
from fair_router.demo.redis_server import RedisServer
from fair_router.fairqueue.queue import FairQueue
from fair_router.routing.router import FairRouter

QUEUE = "flood"
PREFIX = "browser"
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1440,1400", "--hide-scrollbars")
FLOOD_JOBS = int(os.environ.get("FAIR_ROUTER_FLOOD_JOBS", "500"))
SMALL = [f"small-{i}" for i in range(1, 6)]
PAUSED = SMALL[-1]
"""Paused before its jobs arrive: its row must show it paused and parked."""
STATE_JS = """
const cell = (row, sel) => { const e = row && row.querySelector(sel); return e ? e.getAttribute('data-value') : null; };
const greedy = document.querySelector('tr[data-tenant="greedy"]');
const small = [...document.querySelectorAll('tr[data-tenant^="small-"]')].map(row => ({
  tenant: row.getAttribute('data-tenant'), p95: cell(row, '.p95-5m'),
  text: row.querySelector('.p95-5m') ? row.querySelector('.p95-5m').textContent : null}));
const badges = (tenant) => [...document.querySelectorAll('tr[data-tenant="' + tenant + '"] .badge')].map(
  b => b.textContent.split(' ')[0]);
return {rendered: document.body.getAttribute('data-rendered'), greedy_waiting: cell(greedy, 'td.waiting'),
        paused_badges: badges(arguments[0]),
        small: small, chart_lines: document.querySelectorAll('#chart path.series, #chart circle').length};
"""


def find_chromium() -> tuple[str, str] | None:
    """(browser, chromedriver) paths, or None."""
    browser = next((path for name in ("chromium", "chromium-browser", "google-chrome")
                    if (path := shutil.which(name))), None)
    driver = shutil.which("chromedriver") or next(
        (p for p in ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver") if Path(p).is_file()), None)
    return (browser, driver) if browser and driver else None


@pytest.fixture
def chromium(tmp_path: Path) -> Iterator[Any]:
    found = find_chromium()
    if found is None:
        if os.environ.get("CI") or os.environ.get("FAIR_ROUTER_REQUIRE_BROWSER"):
            pytest.fail("CI: chromium and chromium-driver must be installed (.ci/run installs them with apt)")
        reason = "no chromium/chromedriver on PATH (apt-get install chromium chromium-driver)"
        print(f"skipping the browser test: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = found[0]
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=found[1]), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def fleet(redis_server: RedisServer, conn: Redis, tmp_path: Path) -> Iterator[str]:
    """Two real worker processes on the fair queue and the dashboard server, all on one settings file;
    yields the dashboard's URL."""
    config = tmp_path / "fair_router.yaml"
    config.write_text(yaml.safe_dump({"redis_url": redis_server.url, "prefix": PREFIX, "queues": {QUEUE: 1},
                                      "fair_queues": [QUEUE], "observe": {"top_tenants": 8},
                                      "concurrency": {"enabled": True, "lease_ttl": 30}}))
    env = {**os.environ, "FAIR_ROUTER_CONFIG": str(config)}
    workers = [subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedSimpleWorker",
                                 "--url", redis_server.url, "--logging_level", "WARNING", QUEUE], env=env)
               for _ in range(2)]
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "fair_router.cli", "dashboard", "--port", str(port),
                               "--config", str(config), "--refresh", "1"], env=env)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while len(Worker.all(queue=Queue(QUEUE, connection=conn))) < 2 or not _up(url):
            assert time.monotonic() < deadline, "workers or dashboard did not start within 60 s"
            assert server.poll() is None, "the dashboard exited"
            time.sleep(0.2)
        yield url
    finally:
        for proc in (server, *workers):
            terminate(proc, grace=10)


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "api/snapshot", timeout=5) as response:
            return bool(json.load(response)["queues"] is not None)
    except OSError:
        return False


def test_the_dashboard_shows_the_flood_in_a_real_browser(
    conn: Redis, fleet: str, chromium: Any, tmp_path: Path
) -> None:
    url = fleet
    queue = FairQueue(QUEUE, connection=conn, prefix=PREFIX)
    done_key = f"{PREFIX}:done"
    queue.enqueue_many([Queue.prepare_data(timed_job, ("greedy", 15, done_key), meta={"fair_tenant": "greedy"})
                        for _ in range(FLOOD_JOBS)])
    FairRouter(conn, prefix=PREFIX).pause(PAUSED)
    chromium.get(url)
    seen_greedy_waiting: list[int] = []
    paused_badges: list[str] = []
    small_p95: list[str] = []
    renders: set[str] = set()
    arrivals = [(tenant, k) for k in range(3) for tenant in SMALL]
    deadline = time.monotonic() + 120
    state: dict[str, Any] = {}
    while time.monotonic() < deadline:
        if arrivals:
            tenant, _ = arrivals.pop(0)
            queue.enqueue(timed_job, tenant, 15, done_key, fair_tenant=tenant)
        state = chromium.execute_script(STATE_JS, PAUSED)
        renders.add(state["rendered"])
        if {"paused", "parked"} <= set(state["paused_badges"]):
            paused_badges = state["paused_badges"]
        if state["greedy_waiting"] is not None:
            seen_greedy_waiting.append(int(state["greedy_waiting"]))
        small_p95 = [row["text"] for row in state["small"] if row["p95"] is not None]
        if (not arrivals and max(seen_greedy_waiting, default=0) > 0 and len(small_p95) >= 3 and len(renders) >= 3
                and paused_badges):
            break
        time.sleep(0.4)
    linger = time.monotonic() + float(os.environ.get("FAIR_ROUTER_SCREENSHOT_WAIT", "0"))
    while time.monotonic() < linger:  # a longer chart for docs/dashboard.png: small tenants keep arriving
        tenant = SMALL[int(time.monotonic()) % len(SMALL)]
        queue.enqueue(timed_job, tenant, 15, done_key, fair_tenant=tenant)
        time.sleep(min(1.0, max(0.0, linger - time.monotonic())))
    shot = tmp_path / "dashboard.png"
    assert chromium.save_screenshot(str(shot))
    print(f"screenshot: {shot}")
    if os.environ.get("FAIR_ROUTER_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["FAIR_ROUTER_SCREENSHOT"])

    assert max(seen_greedy_waiting, default=0) > 0, state  # the greedy tenant's row showed jobs waiting
    assert len(small_p95) >= 3, state  # small tenants' rows show a wait p95 ...
    assert all(text.endswith(("ms", " s")) for text in small_p95), small_p95  # ... as a duration
    assert {"paused", "parked"} <= set(paused_badges), state  # the paused tenant's row says both
    assert len(renders) >= 3, renders  # the page refreshed itself (each render stamps the snapshot's time)
    assert shot.stat().st_size > 10_000
