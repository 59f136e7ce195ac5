"""Organisations on the dashboard page in a real browser: headless Chromium (selenium, as
tests/test_dashboard_browser.py) against the dashboard app served on loopback, over a fair queue where one org spreads
its jobs over many tenant keys (the sybil case), others have one or two, and a tenant has no org; a real worker ran
some of them first, so shares of starts show. The page must draw the org column and the organisations table under
its Content-Security-Policy. ``FAIR_ROUTER_SCREENSHOT=path.png`` copies the screenshot there (docs/dashboard-orgs.png
is made so)."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from rq import Queue
from test_dashboard_browser import chromium, csp_messages, free_port  # noqa: F401 (chromium: a fixture)
from werkzeug.serving import make_server
from worker_jobs import noop

from fair_router import FairQueue, Settings, WeightedSimpleWorker
from fair_router.config.settings import ObserveConfig
from fair_router.dashboard.app import create_app

PREFIX = "browser_orgs"
SCREENSHOT = os.environ.get("FAIR_ROUTER_SCREENSHOT")  # read on import: isolated_settings clears FAIR_ROUTER_*
ORG_TENANTS = {"acme": [f"acme-key-{i}" for i in range(1, 9)], "globex": ["globex"], "initech": ["ini-a", "ini-b"]}
STATE_JS = """
const rows = [...document.querySelectorAll('#tenants tbody tr[data-tenant]')];
return {rendered: document.body.getAttribute('data-rendered'),
        org_col: !document.getElementById('org-col').hidden,
        orgs_panel: !document.getElementById('orgs-panel').hidden,
        tenant_orgs: Object.fromEntries(rows.map(r => [r.getAttribute('data-tenant'),
                                                      r.querySelector('td.org').getAttribute('data-value')])),
        orgs: [...document.querySelectorAll('#orgs tbody tr[data-org]')].map(r => r.getAttribute('data-org'))};
"""


@pytest.fixture
def served(conn: Redis, isolated_settings: None) -> Iterator[str]:
    """The dashboard of a fair queue with orgs, on a loopback port (a werkzeug server thread)."""
    settings = Settings(prefix=PREFIX, fair_queues=["jobs"], queues={"jobs": 1}, observe=ObserveConfig(top_tenants=10),
                        orgs={"globex": {"weight": 2}})
    queue = FairQueue("jobs", connection=conn, settings=settings)
    jobs = {**{(tenant, "acme"): 10 for tenant in ORG_TENANTS["acme"]}, ("globex", "globex"): 40,
            ("ini-a", "initech"): 25, ("ini-b", "initech"): 25, ("solo", None): 30}
    queue.enqueue_many([Queue.prepare_data(noop, meta={"fair_tenant": tenant} | ({"fair_org": org} if org else {}),
                                           result_ttl=60)
                        for (tenant, org), n in jobs.items() for _ in range(n)])
    WeightedSimpleWorker([queue], connection=conn, settings=settings).work(burst=True, max_jobs=40,
                                                                           logging_level="WARNING")
    port = free_port()
    server = make_server("127.0.0.1", port, create_app(settings, conn, refresh=1.0), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.shutdown()
        thread.join(10)


def test_the_page_shows_orgs_with_their_tenants(served: str, chromium: Any, tmp_path: Path) -> None:  # noqa: F811
    chromium.get(served)
    state: dict[str, Any] = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = chromium.execute_script(STATE_JS)
        if state["rendered"] and state["orgs"]:
            break
        time.sleep(0.3)
    shot = tmp_path / "dashboard-orgs.png"
    assert chromium.save_screenshot(str(shot))
    if SCREENSHOT:
        shutil.copyfile(shot, SCREENSHOT)
    assert csp_messages(chromium) == []
    assert state["org_col"] and state["orgs_panel"], state
    assert state["orgs"][0] == "acme" and set(state["orgs"]) == {"acme", "globex", "initech"}, state
    tenant_orgs = state["tenant_orgs"]
    assert tenant_orgs.get("solo") is None and "solo" in tenant_orgs, state  # no org: a dash, no value
    assert {tenant_orgs[t] for t in tenant_orgs if t.startswith("acme-")} == {"acme"}, state
