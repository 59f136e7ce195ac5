"""``explain``'s place in a fair queue with organisations: two levels counted (the top-level entries, tenants
without org and orgs, and an org's tenants among themselves), checked against the serving order the queue lists
(``get_job_ids()``, a replay of the pops), with real Redis."""

from __future__ import annotations

import random
from typing import Any

import pytest
import why_jobs
from redis import Redis
from rq import Queue
from rq.job import Job
from test_why import slot_held_elsewhere

from fair_router import FairQueue, FairRouter, Reason, Settings, WeightedSimpleWorker, explain
from fair_router.config.settings import ConcurrencyConfig
from fair_router.core.keys import Keys

PREFIX = "why_test"

pytestmark = pytest.mark.usefixtures("isolated_settings")


def settings() -> Settings:
    return Settings(prefix=PREFIX, orgs={"A": {"weight": 2}, "B": {"weight": 1}})


def fill(queue: Queue, tenant: str, n: int, org: str | None = None) -> list[Job]:
    meta: dict[str, Any] = {"fair_tenant": tenant} | ({"fair_org": org} if org is not None else {})
    jobs: list[Job] = queue.enqueue_many([Queue.prepare_data(why_jobs.noop, meta=meta, result_ttl=600)
                                          for _ in range(n)])
    return jobs


def test_places_among_orgs_match_the_serving_order(conn: Redis) -> None:
    """Org A (weight 2: a1 of weight 3, a2, a3), org B (b1), tenants x and y without org; pops that left every pass
    apart, then more pushes: each waiting job's jobs_ahead is its index in the listed order (within ``tied``; equal
    to it for nine in ten at least), and every place is exact."""
    FairRouter(conn, prefix=PREFIX).set_tenant("a1", weight=3)
    queue = FairQueue("default", connection=conn, settings=settings())
    for tenant, n, org in [("a1", 20, "A"), ("a2", 6, "A"), ("b1", 15, "B"), ("x", 10, None), ("a3", 4, "A"),
                           ("y", 3, None)]:
        fill(queue, tenant, n, org)
    for _ in range(11):
        queue.pop_job_id()
    fill(queue, "a2", 3, "A")
    fill(queue, "x", 2)
    order = queue.get_job_ids()
    assert len(order) == 20 + 6 + 15 + 10 + 4 + 3 + 3 + 2 - 11
    matched = 0
    for expected, job_id in enumerate(order):
        answer = explain(job_id, connection=conn, settings=settings())
        assert answer.facts["exact"], answer.facts
        ahead, tied = answer.facts["jobs_ahead"], answer.facts["tied"]
        assert ahead - tied <= expected <= ahead + tied, (expected, answer.facts)
        matched += ahead == expected  # a tie counted by name, as the pops break it here
        assert (answer.reason == Reason.NEXT) == (ahead == 0)
    assert matched >= 0.9 * len(order), matched
    last = explain(order[-1], connection=conn, settings=settings())
    assert last.facts["tenants_before"] >= 3


def test_an_org_tenants_place_is_exact_and_names_its_org(conn: Redis) -> None:
    """(Was: a place counted one level deep, approximate.) A job of an org's tenant, and one queued beside orgs'
    tenants: both places exact, the org a fact of the first only."""
    queue = FairQueue("default", connection=conn, settings=settings())
    fill(queue, "a1", 2, org="A")
    fill(queue, "a2", 2, org="A")
    plain = fill(queue, "c", 2)
    order = queue.get_job_ids()
    answer = explain(order[0], connection=conn, settings=settings())
    assert answer.facts["org"] == "A" and answer.facts["exact"] is True and answer.reason == Reason.NEXT, answer.facts
    assert answer.facts["tenant_state"] == "active" and "approximate" not in answer.facts
    beside = explain(plain[1].id, connection=conn, settings=settings())
    assert "org" not in beside.facts and beside.facts["exact"] is True, beside.facts
    assert beside.facts["jobs_ahead"] == order.index(plain[1].id)


def test_an_org_tenant_at_its_concurrency_limit_is_parked(conn: Redis) -> None:
    """A real weighted worker's start refused at the limit parks an org's tenant: it reads concurrency_limit, parked,
    its place a guess; its org mate's job is next."""
    config = Settings(prefix=PREFIX, orgs={"A": {"weight": 2}}, fair_queues=["default"],
                      concurrency=ConcurrencyConfig(enabled=True, lease_ttl=60))
    slots, held = slot_held_elsewhere(conn, config, "a1", org="A")
    queue = FairQueue("default", connection=conn, settings=config)
    capped = fill(queue, "a1", 2, org="A")
    WeightedSimpleWorker([queue], connection=conn, settings=config).work(burst=True, max_jobs=1)
    mate = fill(queue, "a2", 1, org="A")[0]
    answer = explain(capped[1].id, connection=conn, settings=config)
    assert answer.reason == Reason.CONCURRENCY_LIMIT and answer.facts["tenant_state"] == "parked", answer.facts
    assert answer.facts["org"] == "A" and answer.facts["exact"] is False
    assert explain(mate.id, connection=conn, settings=config).reason == Reason.NEXT
    slots.release(held)


@pytest.mark.parametrize("seed", range(6))
def test_random_queues_with_orgs_match_the_serving_order(conn: Redis, seed: int) -> None:
    """Random tenants (weights 1-3) in random orgs (weights 1-3) or none, random pushes and pops: every waiting job's
    jobs_ahead within ``tied`` of its index in the listed order, and equal to it for half at least."""
    rng = random.Random(seed)
    orgs = {f"O{i}": {"weight": rng.choice([1, 2, 3])} for i in range(3)}
    queue = FairQueue("default", connection=conn, settings=Settings(prefix=PREFIX, orgs=orgs))
    router = FairRouter(conn, prefix=PREFIX)
    tenants = {f"t{i}": rng.choice([None, "O0", "O1", "O2"]) for i in range(8)}
    for tenant in tenants:
        router.set_tenant(tenant, weight=rng.choice([1, 2, 3]))
    for _ in range(12):
        tenant = rng.choice(list(tenants))
        fill(queue, tenant, rng.randint(1, 6), tenants[tenant])
        for _ in range(rng.randint(0, 3)):
            queue.pop_job_id()
    order = queue.get_job_ids()
    matched = 0
    for expected, job_id in enumerate(order):
        facts = explain(job_id, connection=conn, settings=Settings(prefix=PREFIX, orgs=orgs)).facts
        assert facts["exact"], facts
        assert facts["jobs_ahead"] - facts["tied"] <= expected <= facts["jobs_ahead"] + facts["tied"], (expected, facts)
        matched += facts["jobs_ahead"] == expected
    assert matched >= 0.5 * len(order), (matched, len(order))  # ties: the pops follow the list, here by name


def test_an_org_at_its_limit_holds_its_tenants_job_and_explain_names_the_orgs_running_jobs(conn: Redis) -> None:
    """An org with concurrency 1 runs one job (a slot its lease holds): a real worker's start of another tenant's job
    of the org is refused and the tenant parked; explain says concurrency_limit with the org's limit and its running
    job, though the tenant itself runs nothing."""
    config = Settings(prefix=PREFIX, orgs={"A": {"weight": 1, "concurrency": 1}}, fair_queues=["default"],
                      concurrency=ConcurrencyConfig(enabled=True, lease_ttl=60))
    keys = Keys(PREFIX)
    conn.zadd(keys.org_leases("A"), {"elsewhere": 2**41})  # the org's one slot, held by a job on another queue
    queue = FairQueue("default", connection=conn, settings=config)
    capped = fill(queue, "a1", 2, org="A")
    WeightedSimpleWorker([queue], connection=conn, settings=config).work(burst=True, max_jobs=1)
    assert capped[0].get_status() in ("queued", "scheduled")  # refused, not run
    answer = explain(capped[0].id, connection=conn, settings=config)
    assert answer.reason == Reason.CONCURRENCY_LIMIT, answer.facts
    assert answer.facts["org_limit"] == 1 and answer.facts["org_running"] == ["elsewhere"], answer.facts
    assert "limit" not in answer.facts and answer.facts["tenant_state"] == "parked", answer.facts
    assert answer.estimated_start is None and "organisation runs 1 of 1" in answer.estimate_basis
    conn.delete(keys.org_leases("A"))
    assert "org_limit" not in explain(capped[1].id, connection=conn, settings=config).facts


def test_a_paused_orgs_job_reads_paused_with_the_orgs_pause_time(conn: Redis) -> None:
    """``org pause``: its tenants' waiting jobs read paused, since the org's pause; an org mate of another org not."""
    queue = FairQueue("default", connection=conn, settings=settings())
    router = FairRouter(conn, prefix=PREFIX)
    held = fill(queue, "a1", 2, org="A")
    free = fill(queue, "b1", 1, org="B")[0]
    router.tenants.pause_org("A")
    answer = explain(held[1].id, connection=conn, settings=settings())
    assert answer.reason == Reason.PAUSED or Reason.PAUSED in answer.secondary, answer
    assert answer.facts["org_paused"] is True and answer.facts["org_paused_since"] is not None, answer.facts
    assert "paused_since" not in answer.facts and "organisation is paused" in answer.estimate_basis
    assert Reason.PAUSED not in (explain(free.id, connection=conn, settings=settings()).secondary)
    router.tenants.resume_org("A")
    assert "org_paused" not in explain(held[1].id, connection=conn, settings=settings()).facts
