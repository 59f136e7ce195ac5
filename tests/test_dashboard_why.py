"""The dashboard's why: ``api/why/job?id=`` answers as ``fair_router.explain`` does (a waiting job's place and
reason, ``not_found`` with 404 for an unknown or impossible id, 400 for an over-long one) and ``api/why/tenant?id=``
as ``explain_tenant``; both read only, behind the read token like every view. Real Redis, Flask's test client; the
page's drawing of them is in tests/test_dashboard_why_browser.py."""

from __future__ import annotations

from redis import Redis

from fair_router.config.settings import Settings
from fair_router.dashboard.app import create_app
from fair_router.dashboard.why import MAX_JOB_ID_LENGTH
from fair_router.fairqueue.queue import FairQueue
from fair_router.routing.router import FairRouter

PREFIX = "dashwhy"
HOSTILE = '<img src=x onerror="alert(1)">&amp;'


def snapshot_of_redis(conn: Redis) -> dict[bytes, bytes | None]:
    return {key: conn.dump(key) for key in sorted(conn.keys("*"))}


def test_a_waiting_job_and_unknown_or_hostile_ids(conn: Redis) -> None:
    settings = Settings(prefix=PREFIX, fair_queues=["dw"])
    queue = FairQueue("dw", connection=conn, settings=settings)
    first = queue.enqueue(print, 1, fair_tenant="acme")
    second = queue.enqueue(print, 2, fair_tenant="acme")
    queue.enqueue(print, 3, fair_tenant="globex")
    client = create_app(settings, conn).test_client()
    before = snapshot_of_redis(conn)

    reply = client.get("/api/why/job", query_string={"id": second.id})
    assert reply.status_code == 200 and reply.mimetype == "application/json"
    answer = reply.get_json()
    assert answer["job_id"] == second.id and answer["reason"] == "behind"
    assert answer["facts"]["tenant"] == "acme" and answer["facts"]["fifo_ahead"] == 1
    assert answer["fact_order"][:3] == ["queue", "tenant", "status"]  # the answer's order, for the panel
    assert answer["facts"]["jobs_ahead"] == 2  # globex's job is served between acme's two
    assert answer["estimated_start"] is None and "no job start recorded" in answer["estimate_basis"]
    assert client.get("/api/why/job", query_string={"id": first.id}).get_json()["reason"] == "next"

    for unknown in ("no-such-job", HOSTILE, "abc:def", "../../etc", "x" * MAX_JOB_ID_LENGTH):
        reply = client.get("/api/why/job", query_string={"id": unknown})
        assert reply.status_code == 404, unknown
        assert reply.get_json()["reason"] == "not_found" and reply.get_json()["job_id"] == unknown
    assert reply.headers["X-Content-Type-Options"] == "nosniff"  # JSON, never sniffed as HTML
    too_long = client.get("/api/why/job", query_string={"id": "x" * (MAX_JOB_ID_LENGTH + 1)})
    assert too_long.status_code == 400 and "over the 1024" in too_long.get_json()["error"]
    assert client.get("/api/why/job").status_code == 400
    assert client.get("/api/why/queue", query_string={"id": "dw"}).status_code == 404
    page = client.get("/", query_string={"job": HOSTILE}).get_data(as_text=True)
    assert "<img src=x" not in page and 'id="why-form"' in page  # the page never writes the query back
    assert snapshot_of_redis(conn) == before  # nothing written


def test_the_tenant_why_and_its_link_data(conn: Redis) -> None:
    settings = Settings(prefix=PREFIX, fair_queues=["dw2"])
    queue = FairQueue("dw2", connection=conn, settings=settings)
    for tenant in ("acme", "globex", HOSTILE):
        queue.enqueue(print, tenant, fair_tenant=tenant)
    FairRouter(conn, prefix=PREFIX).pause("acme")
    client = create_app(settings, conn).test_client()
    rows = {row["tenant"]: row for row in client.get("/api/snapshot").get_json()["tenants"]}
    assert HOSTILE in rows  # the page links a row to the why of its tenant id (JavaScript, escaped)

    acme = client.get("/api/why/tenant", query_string={"id": "acme"}).get_json()
    assert acme["tenant"] == "acme" and acme["reason"] == "paused" and acme["facts"]["waiting"] == {"dw2": 1}
    hostile = client.get("/api/why/tenant", query_string={"id": HOSTILE})
    assert hostile.status_code == 200 and hostile.get_json()["tenant"] == HOSTILE
    assert hostile.get_json()["reason"] == "fair_share"
    assert client.get("/api/why/tenant", query_string={"id": "nobody"}).get_json()["reason"] == "not_waiting"
    for bad in ("", "t" * 300):
        reply = client.get("/api/why/tenant", query_string={"id": bad})
        assert reply.status_code == 400 and reply.get_json()["error"].startswith("not a tenant id"), bad


def test_the_why_routes_need_the_read_token(conn: Redis) -> None:
    token = "why-read-token-0123456789"
    client = create_app(Settings(prefix=PREFIX), conn, read_token=token).test_client()
    for path in ("/api/why/job?id=x", "/api/why/tenant?id=acme"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers={"Authorization": f"Bearer {token}"}).status_code in (200, 404)
