"""The dashboard's why panel in a real browser (headless Chromium through selenium, as
tests/test_dashboard_browser.py): a job id typed in the search box draws its reason, facts and estimated start
(one real worker drains a greedy tenant's backlog, so starts are recorded and the estimate has a basis); a tenant
row's "why" link draws ``explain_tenant``'s answer. Tenant ids and job ids are hostile input: a tenant whose id is
HTML and a searched id that is HTML show as text (no element made of them), under the Content-Security-Policy
with no violation; a tenant id of 117 characters (longer ones are shown as a digest, without a link) fits in the
panel at 1400 px, nothing overflows. ``FAIR_ROUTER_SCREENSHOT_DIR`` copies the screenshots there
(docs/dashboard-why.png is the job view's)."""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_dashboard_browser
from conftest import terminate
from redis import Redis
from rq import Queue, Worker
from test_dashboard_browser import csp_messages, free_port

from fair_router.config.settings import Settings
from fair_router.dashboard.app import create_app, listen
from fair_router.demo.harness import timed_job
from fair_router.demo.redis_server import RedisServer
from fair_router.fairqueue.queue import FairQueue

chromium = test_dashboard_browser.chromium
"""The headless Chromium fixture of the dashboard's browser test."""
PREFIX = "whybrowser"
QUEUE = "reports"
HOSTILE = '<img src=x id=injected onerror="window.pwned=1">'
LONG = "tenant-with-a-very-long-id-" + "x" * 90
PANEL_JS = """
const panel = document.getElementById('why');
return {reason: panel.getAttribute('data-reason'), hidden: panel.hidden, text: panel.innerText,
        injected: document.querySelectorAll('#injected, #why img, #tenants img').length,
        pwned: window.pwned === 1, overflow: panel.scrollWidth > panel.clientWidth + 1,
        page_overflow: document.documentElement.scrollWidth > window.innerWidth};
"""

LINKS_JS = "return [...document.querySelectorAll('#tenants a.why-link')].map(a => a.getAttribute('data-tenant'));"
CLICK_JS = """
const link = [...document.querySelectorAll('#tenants a.why-link')]
  .find(a => a.getAttribute('data-tenant') === arguments[0]);
if (link) link.click();
return Boolean(link);
"""


@pytest.fixture
def served(redis_server: RedisServer, conn: Redis, tmp_path: Path) -> Iterator[tuple[str, Settings]]:
    """The dashboard (waitress, in a thread) and one weighted worker on the fair queue; yields the page's URL."""
    settings = Settings(redis_url=redis_server.url, prefix=PREFIX, queues={QUEUE: 1}, fair_queues=[QUEUE])
    config = tmp_path / "fair_router.yaml"
    config.write_text(settings.model_dump_json(include={"redis_url", "prefix", "queues", "fair_queues"}))
    worker = subprocess_worker(redis_server.url, config)
    port = free_port()
    server = listen(create_app(settings, conn, refresh=1), "127.0.0.1", port)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not Worker.all(queue=Queue(QUEUE, connection=conn)):
            assert time.monotonic() < deadline and worker.poll() is None, "the worker did not start"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/", settings
    finally:
        server.close()
        terminate(worker, grace=10)


def subprocess_worker(url: str, config: Path) -> Any:
    import subprocess

    env = {**os.environ, "FAIR_ROUTER_CONFIG": str(config)}
    return subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedSimpleWorker",
                             "--url", url, "--logging_level", "WARNING", QUEUE], env=env)


def panel(driver: Any, *showing: str, reason: str | None = None) -> dict[str, Any]:
    """The why panel's state once it shows each of ``showing`` (``reason``: and says that one); it redraws every
    second."""
    deadline = time.monotonic() + 20
    while True:
        state: dict[str, Any] = driver.execute_script(PANEL_JS)
        shown = all(text in state["text"].replace("\n", "") for text in showing)
        if state["reason"] and shown and (reason is None or state["reason"] == reason):
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.2)


def shot(driver: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    assert driver.save_screenshot(str(path))
    if os.environ.get("FAIR_ROUTER_SCREENSHOT_DIR"):
        shutil.copyfile(path, Path(os.environ["FAIR_ROUTER_SCREENSHOT_DIR"]) / name)
    return path


def test_the_why_panel_for_a_job_and_a_tenant_in_a_real_browser(
    conn: Redis, served: tuple[str, Settings], chromium: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    url, settings = served
    chromium.set_window_size(1400, 1300)
    queue = FairQueue(QUEUE, connection=conn, settings=settings)
    done = f"{PREFIX}:done"
    queue.enqueue_many([Queue.prepare_data(timed_job, ("greedy", 40, done), meta={"fair_tenant": "greedy"})
                        for _ in range(300)])
    for tenant in (HOSTILE, LONG):
        queue.enqueue_many([Queue.prepare_data(timed_job, (tenant, 40, done), meta={"fair_tenant": tenant})
                            for _ in range(30)])
    waiting = [queue.enqueue(timed_job, "acme", 40, done, fair_tenant="acme") for _ in range(40)][-1]
    deadline = time.monotonic() + 30
    while int(conn.get(done) or 0) < 20:  # starts recorded: the estimate has a throughput to go by
        assert time.monotonic() < deadline, "the worker ran no jobs"
        time.sleep(0.2)

    chromium.get(url)
    field = chromium.find_element(By.ID, "why-job")
    field.send_keys(waiting.id)
    field.submit()
    job = panel(chromium, waiting.id, "starts/s")  # the workers flush their starts each second
    assert job["reason"] in ("behind", "next") and not job["hidden"], job
    assert waiting.id in job["text"] and "Estimated start:" in job["text"] and "starts/s" in job["text"], job
    assert "?job=" + waiting.id in chromium.current_url  # the view has an address of its own
    assert not job["overflow"] and not job["page_overflow"], job
    shot(chromium, tmp_path, "dashboard-why.png")

    linked = chromium.execute_script(LINKS_JS)
    assert {"greedy", "acme", HOSTILE, LONG} <= set(linked), linked
    assert chromium.execute_script(CLICK_JS, HOSTILE)  # in one script: the rows are redrawn every second
    hostile = panel(chromium, HOSTILE, reason="fair_share")
    assert HOSTILE in hostile["text"] and hostile["injected"] == 0 and not hostile["pwned"], hostile
    assert chromium.execute_script(CLICK_JS, LONG)
    long = panel(chromium, LONG)
    assert LONG in long["text"].replace("\n", "") and "fair_share" in long["text"], long
    assert not long["overflow"] and not long["page_overflow"], long  # the long id wraps in the panel
    shot(chromium, tmp_path, "dashboard-tenant-why.png")

    field = chromium.find_element(By.ID, "why-job")
    field.clear()
    field.send_keys(HOSTILE)
    field.submit()
    missing = panel(chromium, HOSTILE, reason="not_found")
    assert HOSTILE in missing["text"] and missing["injected"] == 0 and not missing["pwned"], missing
    chromium.find_element(By.CSS_SELECTOR, "button.why-close").click()
    assert chromium.execute_script("return document.getElementById('why').hidden") is True
    assert csp_messages(chromium) == []
