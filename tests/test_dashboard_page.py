"""What the dashboard page says about the deployment itself: its header names the key prefix only when it is not
the default one, and a tenant's tier is shown only when the settings name tiers (otherwise every tenant would read
"free", the built-in default, as if someone had chosen it)."""

from __future__ import annotations

from redis import Redis

from fair_router.config.settings import Settings, TiersConfig
from fair_router.core.keys import Keys
from fair_router.dashboard.app import create_app
from fair_router.dashboard.reader import SnapshotReader
from fair_router.fairqueue.queue import FairQueue


def test_the_header_names_a_prefix_only_when_it_is_not_the_default(conn: Redis) -> None:
    page = create_app(Settings(), conn).test_client().get("/").get_data(as_text=True)
    assert "<h1>fair-router</h1>" in page and "<title>fair-router</title>" in page
    page = create_app(Settings(prefix="acme"), conn).test_client().get("/").get_data(as_text=True)
    assert '<h1>fair-router <span class="muted">prefix acme</span></h1>' in page


def test_tiers_are_named_only_when_the_settings_or_redis_name_them(conn: Redis) -> None:
    queue = FairQueue("page_tiers", connection=conn, settings=Settings(prefix="page"))
    queue.enqueue(print, "x", fair_tenant="acme")
    assert SnapshotReader(conn, Settings(prefix="page"), queues=["page_tiers"]).snapshot().tiers_named is False
    configured = Settings(prefix="page", tiers=TiersConfig(weights={"pro": 2}))
    assert SnapshotReader(conn, configured, queues=["page_tiers"]).snapshot().tiers_named is True
    conn.hset(Keys("page").tiers(), "acme", "pro")  # a tier set with `fair-router tier set`: shown
    snapshot = SnapshotReader(conn, Settings(prefix="page"), queues=["page_tiers"]).snapshot()
    assert [row.tier for row in snapshot.tenants] == ["pro"] and snapshot.tiers_named is True
