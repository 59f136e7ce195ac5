"""A failover of the master that owns rq's slot, mid-flood, on a real Redis Cluster with one replica per master
(``cluster-node-timeout 2000``, AOF ``appendfsync always``): the replica is promoted, workers (``fair-router
worker`` and ``rq worker -w fair_router.WeightedWorker``) follow rq's slot to it without exiting, and every job
whose enqueue returned (confirmed on the replica with ``WAIT 1``) runs."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS, terminate, wait_for
from redis import RedisCluster
from rediscluster import RedisClusterFixture
from test_cluster import LOG, cluster_env, write_config

pytestmark = pytest.mark.cluster

JOBS = 600


@pytest.fixture(scope="module")
def replicated_cluster() -> Iterator[RedisClusterFixture]:
    with RedisClusterFixture(masters=3, replicas=1) as cluster:
        yield cluster


def test_failover_of_rq_slot_owner_loses_no_acknowledged_job_and_no_worker(
        replicated_cluster: Any, tmp_path: Path) -> None:
    cluster = replicated_cluster
    env = cluster_env(cluster, write_config(tmp_path))
    env["CLUSTER_WAIT_REPLICA"] = "1"
    state = RedisCluster.from_url(cluster.seed_url)
    owner = cluster.master_of("{rq}")
    seed = next(node for node in cluster.nodes if node.port != owner.port)
    env["FAIR_ROUTER_REDIS_URL"] = seed.url  # not the node that will die
    queues = ["cl_fair", "cl_routed", "cl_routed_throttled"]
    logs = [(tmp_path / f"worker-{i}.log").open("wb") for i in range(3)]
    procs = [
        subprocess.Popen([sys.executable, "-m", "fair_router.cli", "worker", "--url", seed.url, *queues], env=env,
                         stdout=logs[0], stderr=subprocess.STDOUT, cwd=TESTS, start_new_session=True),
        subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedWorker",
                          "--connection-class", "fair_router.store.cluster.RqSlotRedis", "--url", seed.url,
                          *queues], env=env, stdout=logs[1], stderr=subprocess.STDOUT, cwd=TESTS,
                         start_new_session=True),
    ]
    acked_path = tmp_path / "acked.txt"
    producer = subprocess.Popen(
        [sys.executable, "-c", f"import cluster_jobs; cluster_jobs.flood({JOBS}, {str(acked_path)!r})"],
        env=env, stdout=logs[2], stderr=subprocess.STDOUT, cwd=TESTS, start_new_session=True)

    def worker_logs() -> str:
        return "\n".join(f"[{path.name}]\n" + path.read_text(errors="replace")[-4000:]
                         for path in sorted(tmp_path.glob("worker-*.log")))

    try:
        def acked_lines() -> int:
            return len(acked_path.read_text().splitlines()) if acked_path.exists() else 0

        wait_for(lambda: acked_lines() >= JOBS // 4 or producer.poll() is not None, 120, "a quarter of the jobs")
        assert producer.poll() is None, worker_logs()
        cluster.kill(owner)  # mid-flood: the master of rq's slot dies
        wait_for(lambda: producer.poll() is not None, 120, "the producer to finish")
        assert producer.returncode == 0, worker_logs()
        acked = {line.strip() for line in acked_path.read_text().splitlines() if line.strip()}

        def ran() -> set[str]:
            return {" ".join(entry.decode().split()[:3]) for entry in state.lrange(LOG, 0, -1)}

        wait_for(lambda: acked <= ran() or any(p.poll() is not None for p in procs[:2]), 180,
                 "every acknowledged job to run")
        exited = [p.poll() for p in procs[:2]]
        assert exited == [None, None], worker_logs()  # 0 worker exits: both followed rq's slot
        missing = acked - ran()
        assert not missing, f"{len(missing)} acknowledged jobs lost: {sorted(missing)[:10]}\n{worker_logs()}"
        assert len(acked) > JOBS // 2  # the flood went on through the failover
        assert cluster.master_of("{rq}").port != owner.port  # a replica was promoted
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{worker_logs()}") from None
    finally:
        terminate(producer, grace=5)
        for proc in procs:
            terminate(proc, grace=15)
        for log in logs:
            log.close()
    assert [p.returncode for p in procs[:2]] == [0, 0], worker_logs()
