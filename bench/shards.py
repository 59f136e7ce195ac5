"""Shuffle-sharding, measured.

1. Simulated blast radius: the fraction of 100,000 tenants whose whole shard set equals a hog's, against
   1 / C(N, k), for a few (N, k).
2. A real flood: a hog enqueues 400 jobs (50 ms each), then 20 small tenants one job each; 4 real rq worker
   processes (fair_router.WeightedWorker) either share one queue or serve one shard each (4 shards, k = 2).
   Reported: the small tenants' waits (enqueue to start), split into those whose shard set differs from the
   hog's and those dealt the very same set.

Run: .venv/bin/python bench/shards.py
"""

from __future__ import annotations

import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from math import comb
from pathlib import Path

import yaml
from rq.job import Job

from fair_router import Settings, fair_job, shards_of
from fair_router.demo.redis_server import RedisServer

HERE = Path(__file__).resolve().parent
HOG, SMALL, HOG_JOBS, JOB_SECONDS = "hog", [f"small-{n}" for n in range(20)], 400, 0.05


def work(tenant: str, seconds: float = 0.0) -> str:
    """One job of ``tenant`` taking ``seconds``."""
    time.sleep(seconds)
    return tenant


def blast_radius(count: int, per_tenant: int, tenants: int = 100_000) -> float:
    hog = shards_of(HOG, count, per_tenant)
    return sum(shards_of(f"tenant-{n}", count, per_tenant) == hog for n in range(tenants)) / tenants


def flood(server: RedisServer, sharded: bool) -> dict[str, list[float]]:
    conn = server.client()
    conn.flushall()
    jobs_config = {"bench.work": {"queue": "flood", **({"shards": {"count": 4, "per_tenant": 2}} if sharded else {})}}
    settings = Settings(redis_url=server.url, jobs=jobs_config, observe={"record": False})
    # By its importable name (this file run as a script is __main__, which the workers cannot import).
    send = fair_job(connection=conn, settings=settings, job_key="bench.work")(importlib.import_module("shards").work)
    send.enqueue_many([((HOG, JOB_SECONDS), {"fair_tenant": HOG}) for _ in range(HOG_JOBS)])
    small = {tenant: send.enqueue(tenant, JOB_SECONDS, fair_tenant=tenant) for tenant in SMALL}
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "fair_router.yaml"
        config.write_text(yaml.safe_dump({"redis_url": server.url, "jobs": jobs_config,
                                          "observe": {"record": False}}))
        env = {**os.environ, "FAIR_ROUTER_CONFIG": str(config), "PYTHONPATH": str(HERE)}
        queues = [f"flood_shard{i}" for i in range(4)] if sharded else ["flood"] * 4
        workers = [subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedWorker",
                                     "--burst", "--url", server.url, "--logging_level", "WARNING", queue], env=env)
                   for queue in queues]
        for worker in workers:
            worker.wait()
    hog_set = shards_of(HOG, 4, 2)
    waits: dict[str, list[float]] = {"differs": [], "same set": []}
    for tenant, job in small.items():
        fetched = Job.fetch(job.id, connection=conn)
        assert fetched.started_at is not None and fetched.enqueued_at is not None
        wait = (fetched.started_at - fetched.enqueued_at).total_seconds()
        waits["same set" if sharded and shards_of(tenant, 4, 2) == hog_set else "differs"].append(wait)
    return waits


def describe(waits: list[float]) -> str:
    if not waits:
        return "-"
    return f"{len(waits):>2} tenants  median {statistics.median(waits):6.2f} s  max {max(waits):6.2f} s"


def main() -> None:
    print("blast radius: fraction of 100,000 tenants dealt exactly the hog's shard set")
    for count, per_tenant in [(4, 2), (8, 2), (8, 3), (16, 2)]:
        print(f"  N={count:>2} k={per_tenant}  measured {blast_radius(count, per_tenant):.5f}  "
              f"1/C(N,k) {1 / comb(count, per_tenant):.5f}")
    with RedisServer() as server:
        print(f"\nflood: hog {HOG_JOBS} jobs then {len(SMALL)} small tenants x 1 job, {JOB_SECONDS * 1000:.0f} ms "
              f"each, 4 workers; small tenants' wait (enqueue -> start)")
        shared = flood(server, sharded=False)
        print(f"  one shared queue            {describe(shared['differs'])}")
        sharded = flood(server, sharded=True)
        print(f"  4 shards, k=2, set differs  {describe(sharded['differs'])}")
        print(f"  4 shards, k=2, hog's set    {describe(sharded['same set'])}")


if __name__ == "__main__":
    main()
