"""The dashboard's waiting counts on plain routed queues (fair_router.observe.waiting): per tenant, kept by the
routing script and the worker's start, equal to the jobs really waiting at every step. Real Redis, real rq
jobs, an in-process weighted worker."""

from __future__ import annotations

from collections import Counter

import pytest
import routed_jobs
from redis import Redis
from rq.job import Job

from fair_router import FairRouter, Rule, Settings, WeightedSimpleWorker, fair_job
from fair_router.core.keys import Keys
from fair_router.dashboard.collector import metric_families
from fair_router.dashboard.reader import SnapshotReader

pytestmark = pytest.mark.usefixtures("isolated_settings")

QUEUES = ["default", "default_throttled", "default_superslow"]
HOG, SMALL = 40, ("s1", "s2", "s3")


def really_waiting(conn: Redis) -> Counter[tuple[str, str]]:
    """(queue, tenant) -> jobs on the queue's list now: the truth, read job by job."""
    truth: Counter[tuple[str, str]] = Counter()
    for queue in QUEUES:
        for raw in conn.lrange(f"rq:queue:{queue}", 0, -1):
            truth[(queue, Job.fetch(raw.decode(), connection=conn).meta["fair_tenant"])] += 1
    return truth


def shown(conn: Redis, settings: Settings) -> tuple[Counter[tuple[str, str]], list[str], dict[str, int]]:
    """What the dashboard's reader shows waiting: per (queue, tenant) of the top rows, the rows' order, and
    what the `_other` row holds per queue."""
    snap = SnapshotReader(conn, settings).snapshot()
    counts: Counter[tuple[str, str]] = Counter()
    for row in snap.tenants:
        for queue, n in row.waiting.items():
            counts[(queue, row.tenant)] += n
    return counts, [row.tenant for row in snap.tenants], {q: n for q, n in snap.other.waiting.items() if n}


def test_waiting_counts_on_routed_plain_queues_follow_enqueues_and_starts(conn: Redis) -> None:
    settings = Settings.model_validate({"observe": {"top_tenants": 5}})
    router = FairRouter(conn)
    job = fair_job("default", rules=[Rule(queue="default_throttled", threshold=2, per="1h"),
                                     Rule(queue="default_superslow", threshold=4, per="1h")],
                   tenant=lambda account, item=0: account, router=router,
                   settings=Settings(throttled_queues="plain"))(routed_jobs.echo)
    for i in range(HOG):
        job.delay("hog", i)  # the one-round-trip enqueue: route.lua pushes and counts
    job.enqueue_many([((tenant, i), {}) for tenant in SMALL for i in range(3)])  # route.lua, then rq's MULTI
    waiting_counts, waiting_jobs = Keys("fair_router").waiting(job.fair_job.route.job_key)
    assert conn.hlen(waiting_jobs) == HOG + 3 * len(SMALL)  # one entry per job waiting
    truth = really_waiting(conn)
    assert truth[("default_superslow", "hog")] == HOG - 4  # the hog's backlog sits in the slowest queue
    counts, order, other = shown(conn, settings)
    assert counts == truth and other == {}
    assert order[0] == "hog"  # ranked by jobs waiting: never hidden in _other
    (family,) = [f for f in metric_families(SnapshotReader(conn, settings).snapshot())
                 if f.name == "fair_router_tenant_waiting"]
    gauges = {(s.labels["queue"], s.labels["tenant"]): s.value for s in family.samples}
    assert gauges[("default_superslow", "hog")] == HOG - 4 and gauges[("default_superslow", "_other")] == 0

    worker = WeightedSimpleWorker(QUEUES, connection=conn, settings=settings)
    for step in (7, 20):
        worker.work(burst=True, max_jobs=step)
        truth = really_waiting(conn)
        assert sum(truth.values()) > 0
        counts, _, other = shown(conn, settings)
        assert counts == truth and other == {}, step

    worker.work(burst=True)
    assert really_waiting(conn) == Counter()
    assert shown(conn, settings)[0] == Counter()
    assert conn.exists(waiting_counts, waiting_jobs) == 0  # every count taken back, nothing left behind


def test_a_lone_waiting_tenant_has_the_queue_to_itself_rather_than_a_share(conn: Redis) -> None:
    settings = Settings()
    job = fair_job("default", rules=[Rule(queue="default_superslow", threshold=1, per="1h")],
                   tenant=lambda account, item=0: account, router=FairRouter(conn))(routed_jobs.echo)
    for i in range(5):
        job.delay("hog", i)
    (row,) = SnapshotReader(conn, settings).snapshot().tenants
    assert row.waiting == {"default": 1, "default_superslow": 4}
    assert row.alone and row.fair_share is None
    job.delay("small", 0)
    rows = {row.tenant: row for row in SnapshotReader(conn, settings).snapshot().tenants}
    assert not rows["hog"].alone and not rows["small"].alone  # both wait in `default` now
