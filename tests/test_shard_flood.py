"""The issue's flood test: a hog's backlog fills its own shards; every small tenant whose shard
set differs from the hog's is steered to a shard the hog did not load and finishes while the hog still has a
backlog. Real rq worker processes, one per shard."""

from __future__ import annotations

from collections.abc import Callable

from conftest import Fleet, wait_for, write_settings
from redis import Redis
from rq import Queue
from rq.job import Job, JobStatus
from shard_jobs import work

from fair_router import Settings, Shards, fair_job, shards_of

SHARDS = Shards(count=4, per_tenant=2)
HOG = "hog"


def test_small_tenants_escape_the_hogs_shards(conn: Redis, fleet_of: Callable[..., Fleet], tmp_path) -> None:  # type: ignore[no-untyped-def]
    send = fair_job(connection=conn, settings=Settings(), shards=SHARDS, job_key="flood.work")(work)
    hog_jobs = send.enqueue_many([((HOG, 0.1), {"fair_tenant": HOG}) for _ in range(400)])
    hog_shards = set(shards_of(HOG, 4, 2))
    assert {job.meta["fair_shard"] for job in hog_jobs} == hog_shards  # its two shards: 200 jobs, 20 s each

    small = [f"small-{n}" for n in range(20)]
    escaping = [tenant for tenant in small if set(shards_of(tenant, 4, 2)) != hog_shards]
    assert len(escaping) >= 10  # 5 in 6 of tenants, by the deal
    jobs: dict[str, list[Job]] = {tenant: [send.enqueue(tenant, 0.0, fair_tenant=tenant) for _ in range(3)]
                                  for tenant in small}
    for tenant in escaping:
        for job in jobs[tenant]:
            assert job.meta["fair_shard"] not in hog_shards, (tenant, job.origin)

    fleet = fleet_of(*SHARDS.queues("default"))
    fleet.config = write_settings(tmp_path, {})
    for queue in SHARDS.queues("default"):  # one worker per shard
        fleet.start(queue=queue, scheduler=False)

    def finished(tenant: str) -> bool:
        return all(job.get_status(refresh=True) == JobStatus.FINISHED for job in jobs[tenant])

    wait_for(lambda: all(finished(tenant) for tenant in escaping), 60, "the small tenants' jobs", fleet)
    backlog = sum(Queue(f"default_shard{shard}", connection=conn).count for shard in hog_shards)
    assert backlog > 0, "the hog's backlog was gone before the small tenants finished"
