"""The fair queue's claim-time mirror of an org's concurrency limit (lua/lib/claims.lua): a pop that takes an org to
its limit as workers last reported it parks the org's entry, so that none of its tenants is served until a release
of one of its jobs (fair_unpark.lua with the org) or the claim's bound; other orgs' jobs flow meanwhile. The FairQueue
API on the real redis-server; the workers' side is tests/test_org_limits.py."""

from __future__ import annotations

import fair_jobs
from conftest import wait_for
from redis import Redis

from fair_router import FairQueue, Settings
from fair_router.config.settings import ConcurrencyConfig
from fair_router.core.keys import encode

PREFIX = "orgclaims"


def queue_with_jobs(conn: Redis) -> tuple[FairQueue, dict[str, list[str]]]:
    """Org acme with 5 tenants of 2 jobs each, org other with one tenant of 4 jobs."""
    queue = FairQueue("orgclaims", connection=conn, settings=Settings(prefix=PREFIX))
    jobs: dict[str, list[str]] = {}
    for i in range(2):
        for t in range(5):
            job = queue.enqueue(fair_jobs.log, "a", i, fair_tenant=f"a{t}", fair_org="acme", job_id=f"a{t}-{i}")
            jobs.setdefault("acme", []).append(job.id)
    jobs["other"] = [queue.enqueue(fair_jobs.log, "o", i, fair_tenant="o", fair_org="other", job_id=f"o-{i}").id
                     for i in range(4)]
    return queue, jobs


def test_a_pop_that_takes_an_org_to_its_limit_parks_the_org_until_a_release_of_its_job(conn: Redis) -> None:
    queue, jobs = queue_with_jobs(conn)
    queue.unpark("a0", limit=0, org="acme", org_limit=1)  # a release reported the org's limit: learnt
    assert conn.hget(queue.fair_keys.limits, "!" + encode("acme")) == b"1"
    taken = [queue.pop_job_id() for _ in range(6)]
    running = [job for job in taken if job in jobs["acme"]]
    assert len(running) == 1, taken  # acme's first job took it to its limit: none of its 5 tenants is served on
    assert [job for job in taken if job in jobs["other"]] == jobs["other"]  # the other org's jobs flow
    assert taken[-1] is None  # only the parked org's jobs wait
    assert conn.zscore(queue.fair_keys.parked, "!" + encode("acme")) is not None
    tenant = running[0].split("-")[0]
    queue.unpark(tenant, job_id=running[0], limit=0, org="acme", org_limit=1)  # its release ends the org's park
    assert conn.zscore(queue.fair_keys.parked, "!" + encode("acme")) is None
    assert conn.llen(queue.fair_keys.wake) >= 1  # a worker blocked while only parked jobs waited is woken
    following = queue.pop_job_id()
    assert following in jobs["acme"] and following != running[0]
    assert queue.pop_job_id() is None  # at its limit again
    served = set(running)
    previous = following
    while previous is not None:  # one at a time, each release lets the next one out: all served, none twice
        served.add(previous)
        queue.unpark(previous.split("-")[0], job_id=previous, limit=0, org="acme", org_limit=1)
        previous = queue.pop_job_id()
    assert served == set(jobs["acme"])
    assert conn.hget(queue.fair_keys.claimed, "!" + encode("acme")) in (None, b"0")


def test_an_org_without_a_known_limit_is_never_parked_and_a_limit_of_0_is_forgotten(conn: Redis) -> None:
    queue, jobs = queue_with_jobs(conn)
    queue.unpark("a0", limit=0, org="acme", org_limit=2)
    assert queue.unpark("a0", limit=0, org="acme", org_limit=0) == 0  # the org's limit was removed: forgotten
    assert conn.hget(queue.fair_keys.limits, "!" + encode("acme")) is None
    taken = [queue.pop_job_id() for _ in range(14)]
    assert sorted(job for job in taken if job) == sorted(jobs["acme"] + jobs["other"])


def test_an_orgs_park_ends_by_itself_at_its_claims_bound(conn: Redis) -> None:
    """A worker that died with the org's job never releases it: the pop ends the org's park once its bound (the
    claim's life, ``concurrency.lease_ttl``) has passed, and the expired claim goes with it."""
    queue = FairQueue("orgclaims", connection=conn,
                      settings=Settings(prefix=PREFIX, concurrency=ConcurrencyConfig(lease_ttl="200ms")))
    jobs = [queue.enqueue(fair_jobs.log, "a", i, fair_tenant=f"a{i}", fair_org="acme", job_id=f"a{i}").id
            for i in range(2)]
    queue.unpark("a0", limit=0, org="acme", org_limit=1)
    assert queue.pop_job_id() == jobs[0]
    assert queue.pop_job_id() is None  # the org is parked
    wait_for(lambda: queue.pop_job_id() == jobs[1], 10, "the park's end")
    assert conn.zscore(queue.fair_keys.claims, "!" + encode("acme") + "|" + jobs[0]) is None
