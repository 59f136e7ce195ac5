"""The dashboard in a real browser: headless Chromium (Debian's chromium and chromium-driver, through
selenium) against ``fair-router dashboard`` while two real rq workers drain a one-tenant flood from a fair
queue and small tenants keep arriving. Concurrency limits are on (every tenant on the default tier: one job at
once), so the greedy tenant runs one job at a time and is parked whenever a second worker takes its next one.

One small tenant is paused (``FairRouter.pause``) before its jobs arrive: its row must say "paused" and
"parked" (a worker that took its job parked it in the fair queue).

The server runs with a read token: the browser first gets the sign-in form, is refused a wrong
token, signs in with the right one (a plain form POST setting an HttpOnly cookie) and only then sees the page.
The page must draw itself under the Content-Security-Policy with no violation in Chromium's console; the
headers are read by a fetch in the page, and an injected inline script must be blocked (the policy is enforced,
and the console check would see a violation).

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

from fair_router.dashboard.app import READ_TOKEN_ENV
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
READ_TOKEN = "browser-read-token-0123456789"
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
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for CSP violations
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
    env = {**os.environ, "FAIR_ROUTER_CONFIG": str(config), READ_TOKEN_ENV: READ_TOKEN}
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
        request = urllib.request.Request(url + "api/snapshot", headers={"Authorization": f"Bearer {READ_TOKEN}"})
        with urllib.request.urlopen(request, timeout=5) as response:
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
    sign_in(chromium, url)
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
    csp_errors = csp_messages(chromium)
    headers = check_headers_and_csp(chromium)
    shot = tmp_path / "dashboard.png"
    assert chromium.save_screenshot(str(shot))
    print(f"screenshot: {shot}")
    if os.environ.get("FAIR_ROUTER_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["FAIR_ROUTER_SCREENSHOT"])

    assert csp_errors == [], csp_errors  # the page drew itself (above) under the CSP without a violation
    assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff", headers
    assert headers["referrer-policy"] == "no-referrer", headers
    assert max(seen_greedy_waiting, default=0) > 0, state  # the greedy tenant's row showed jobs waiting
    assert len(small_p95) >= 3, state  # small tenants' rows show a wait p95 ...
    assert all(text.endswith(("ms", " s")) for text in small_p95), small_p95  # ... as a duration
    assert {"paused", "parked"} <= set(paused_badges), state  # the paused tenant's row says both
    assert len(renders) >= 3, renders  # the page refreshed itself (each render stamps the snapshot's time)
    assert shot.stat().st_size > 10_000


def sign_in(chromium: Any, url: str) -> None:
    """The token flow in the browser: the form, a wrong token refused, the right one -> the page."""
    from selenium.webdriver.common.by import By

    chromium.get(url)
    assert chromium.find_elements(By.NAME, "token") and not chromium.find_elements(By.ID, "tenants")
    for token in ("not-the-read-token-at-all", READ_TOKEN):
        field = chromium.find_element(By.NAME, "token")
        field.send_keys(token)
        field.submit()
        if token != READ_TOKEN:
            assert chromium.find_element(By.ID, "wrong-token").text == "That is not the token."
    assert chromium.current_url == url and chromium.find_elements(By.ID, "tenants")
    cookie = chromium.get_cookie("fair_router_session")
    assert cookie and cookie["httpOnly"] and cookie["sameSite"] == "Strict" and READ_TOKEN not in cookie["value"]
    assert chromium.execute_script("return document.cookie") == ""  # HttpOnly: the page's scripts cannot read it


def csp_messages(chromium: Any) -> list[str]:
    """Content-Security-Policy messages in the console since the last call (Chromium logs each violation)."""
    return [entry["message"] for entry in chromium.get_log("browser") if "Content Security Policy" in entry["message"]]


HEADERS_JS = """
const done = arguments[arguments.length - 1];
fetch(document.body.getAttribute('data-api'), {cache: 'no-store'})
  .then(r => done(Object.fromEntries([...r.headers.entries()])), e => done({error: String(e)}));
"""
INLINE_JS = """
const script = document.createElement('script');
script.textContent = 'window.inlineRan = true;';
document.body.appendChild(script);
return window.inlineRan === true;
"""


def check_headers_and_csp(chromium: Any) -> dict[str, str]:
    """The response headers Chromium got (a fetch from the page, with the sign-in cookie), and the CSP
    enforced: an inline script added to the page does not run and shows as a violation in the console."""
    headers: dict[str, str] = chromium.execute_async_script(HEADERS_JS)
    csp = headers.get("content-security-policy", "")
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp, headers
    assert chromium.execute_script(INLINE_JS) is False  # blocked by the policy
    deadline = time.monotonic() + 10
    blocked: list[str] = []
    while not blocked and time.monotonic() < deadline:
        blocked = csp_messages(chromium)
        time.sleep(0.2)
    assert blocked and "inline script" in blocked[0], blocked
    return headers
