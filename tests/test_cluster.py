"""fair-router on a real Redis Cluster (three masters on loopback, tests/rediscluster.py): producers (the
decorator's delay, enqueue_many, enqueue_in; routed and fair jobs) and both kinds of workers (``fair-router
worker`` and ``rq worker -w fair_router.WeightedWorker``), the CLI and the dashboard's reader; and the refusal
to start without a hash-tagged ``RQ_KEY_PREFIX``.

rq reads ``RQ_KEY_PREFIX`` once, at import, and this test process imported rq with the default ``rq``: so every
process that runs on the cluster here is a subprocess started with ``RQ_KEY_PREFIX={rq}``; the checks read the
cluster with redis-py's ``RedisCluster`` and rq's key names spelled out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import TESTS, kill_session, terminate, wait_for
from redis import RedisCluster

from fair_router.core.keys import Keys
from fair_router.store.cluster import ClusterSetupError, check_rq_prefix, connections_for

pytestmark = pytest.mark.cluster

LOG = "{rq}:test:cluster:ran"
SMALL = 100  # tenants t1 .. t99 send one job of each kind; t0 floods
BIG = 150


def cluster_env(cluster: Any, config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RQ_", "FAIR_ROUTER_"))}
    env.update(RQ_KEY_PREFIX="{rq}", FAIR_ROUTER_REDIS_CLUSTER="true", FAIR_ROUTER_REDIS_URL=cluster.seed_url,
               FAIR_ROUTER_CONFIG=str(config))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    return env


def write_config(tmp_path: Path, **extra: Any) -> Path:
    path = tmp_path / "fair_router.yaml"
    path.write_text(yaml.safe_dump({
        "prefix": "frc",
        "fair_queues": ["cl_fair"],
        "jobs": {"cluster_jobs.routed": {
            "queue": "cl_routed", "rules": [{"queue": "{queue}_throttled", "threshold": 5, "per": "1h"}]}},
        "recovery": {"abandon_after": 30},
        **extra,  # a test's own values win (the crash recovery test's shorter abandon_after)
    }), encoding="utf-8")
    return path


def run_python(code: str, env: dict[str, str], timeout: float = 180) -> Any:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                         timeout=timeout, check=False, cwd=TESTS)
    assert out.returncode == 0, out.stderr[-6000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fair_router.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120, check=False, cwd=TESTS)


@pytest.fixture
def state(redis_cluster: Any) -> RedisCluster:
    client = RedisCluster.from_url(redis_cluster.seed_url)
    client.flushall(target_nodes=RedisCluster.PRIMARIES)  # type: ignore[no-untyped-call]
    return client


def test_cluster_fixture_is_a_real_cluster(redis_cluster: Any, state: RedisCluster) -> None:
    """Three masters own the 16384 slots between them, and keys of different tags land on different masters."""
    masters = {redis_cluster.master_of(f"{{t{n}}}").port for n in range(50)}
    assert len(masters) == 3
    assert len(state.get_primaries()) == 3  # type: ignore[no-untyped-call]


def test_refuses_to_start_without_a_hash_tagged_rq_key_prefix(redis_cluster: Any, tmp_path: Path) -> None:
    """This process's rq has the default prefix ``rq``: no tag, so every entry point refuses, naming
    RQ_KEY_PREFIX, before anything is written."""
    with pytest.raises(ClusterSetupError, match="RQ_KEY_PREFIX='rq' has no hash tag"):
        connections_for(redis_cluster.seed_url, cluster=True)
    assert check_rq_prefix("{rq}") == "rq" and check_rq_prefix("{app}:rq") == "app"
    assert check_rq_prefix("app{rq}") == "rq"  # Redis hashes by the first {...} wherever it is
    for bad in ("rq", "rq{}", "{}{rq}"):
        with pytest.raises(ClusterSetupError, match="RQ_KEY_PREFIX"):
            check_rq_prefix(bad)
    env = cluster_env(redis_cluster, write_config(tmp_path))
    del env["RQ_KEY_PREFIX"]
    shown = cli(env, "tenant", "show", "acme")
    assert shown.returncode == 2 and "RQ_KEY_PREFIX" in shown.stderr, shown.stderr
    worker = cli(env, "worker", "--burst", "cl_fair")
    assert worker.returncode == 2 and "RQ_KEY_PREFIX" in worker.stderr, worker.stderr
    rq_worker = subprocess.run([sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedWorker",
                                "--connection-class", "fair_router.store.cluster.RqSlotRedis", "--burst", "--url",
                                redis_cluster.seed_url, "cl_fair"], env=env, capture_output=True, text=True,
                               timeout=120, check=False)
    assert rq_worker.returncode != 0 and "RQ_KEY_PREFIX" in rq_worker.stderr + rq_worker.stdout


def worker_logs(tmp_path: Path) -> str:
    return "\n".join(path.read_text(errors="replace")[-3000:] for path in sorted(tmp_path.glob("worker-*.log")))


def drain(cluster: Any, env: dict[str, str], state: RedisCluster, tmp_path: Path, expected: int) -> None:
    """Run a ``fair-router worker`` and an ``rq worker -w fair_router.WeightedWorker`` until ``expected`` jobs
    ran, then stop them (warm): both must still be running then and exit with status 0."""
    rq_owner = cluster.master_of("{rq}")
    # Any node as the URL: one not owning rq's slot, so rq's CLI needs the cluster-aware connection class.
    other = next(node for node in cluster.nodes if node.port != rq_owner.port)
    queues = ["cl_fair", "cl_routed", "cl_routed_throttled"]
    logs = [(tmp_path / f"worker-{i}.log").open("wb") for i in range(3)]
    workers = [
        subprocess.Popen([sys.executable, "-m", "fair_router.cli", "worker", "--with-scheduler", "--url", other.url,
                          *queues], env=env, stdout=logs[0], stderr=subprocess.STDOUT, cwd=TESTS,
                         start_new_session=True),
        subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedWorker",
                          "--connection-class", "fair_router.store.cluster.RqSlotRedis", "--url", other.url,
                          *queues], env=env, stdout=logs[1], stderr=subprocess.STDOUT, cwd=TESTS,
                         start_new_session=True),
    ]
    try:
        wait_for(lambda: state.llen(LOG) >= expected or any(w.poll() is not None for w in workers), 240,
                 f"{expected} jobs to run")
        assert all(w.poll() is None for w in workers), worker_logs(tmp_path)
        time.sleep(0.5)  # nothing more should come (a job run twice would show now)
    finally:
        for proc in workers:
            terminate(proc, grace=15)
        for log in logs:
            log.close()
    assert [w.returncode for w in workers] == [0, 0], worker_logs(tmp_path)


PRODUCE = """
    import json, cluster_jobs
    print(json.dumps(cluster_jobs.produce({tenants}, {big})))
"""


def test_routed_and_fair_jobs_of_100_tenants_drained_by_both_kinds_of_workers(
        redis_cluster: Any, state: RedisCluster, tmp_path: Path) -> None:
    env = cluster_env(redis_cluster, write_config(tmp_path))
    produced = run_python(PRODUCE.format(tenants=SMALL, big=BIG), env)
    expected = produced["routed"] + produced["fair"]
    assert produced == {"routed": BIG + SMALL, "fair": BIG + SMALL}
    # rq's keys on the owner of rq's slot (where the plain client went), reachable through the cluster too.
    assert state.llen("{rq}:queue:cl_fair") > 0 and state.exists("{rq}:queue:cl_routed_throttled")
    assert redis_cluster.master_of("{rq}").client().exists("{rq}:queue:cl_fair")

    drain(redis_cluster, env, state, tmp_path, expected)
    ran = [entry.decode().split() for entry in state.lrange(LOG, 0, -1)]
    assert len(ran) == expected, worker_logs(tmp_path)
    assert len({(kind, tenant, n) for kind, tenant, n, _ in ran}) == expected  # each job once
    kinds = Counter(kind for kind, *_ in ran)
    assert kinds == {"routed": produced["routed"], "fair": produced["fair"]}
    assert int(state.zcard("{rq}:failed:cl_fair") or 0) == 0
    assert state.llen("{rq}:queue:cl_fair") == 0 and state.llen("{rq}:queue:cl_routed_throttled") == 0

    # Routing: t0's first 5 routed jobs went to the base queue, the rest to the throttled one; small tenants
    # (one job each) stayed on the base queue, whether sent by delay or enqueue_many.
    origins = Counter((tenant == "t0", origin) for kind, tenant, _, origin in ran if kind == "routed")
    assert origins == {(True, "cl_routed"): 5, (True, "cl_routed_throttled"): BIG + 1 - 5,
                       (False, "cl_routed"): SMALL - 1}
    # Fairness: the flood of t0 (enqueued first) did not push the small tenants to the end of the fair queue.
    fair = [tenant for kind, tenant, _, _ in ran if kind == "fair"]
    last_small = max(i for i, tenant in enumerate(fair) if tenant != "t0")
    assert last_small < 0.75 * len(fair), fair
    # Workers recorded starts (the {obs} slot) and held no lease at the end.
    assert state.exists("frc:{obs}:recent")


READ = """
    import json
    from fair_router import load_settings
    from fair_router.dashboard.reader import SnapshotReader
    from fair_router.dashboard.collector import metrics_text
    from fair_router.store.cluster import connections_for
    settings = load_settings()
    state = connections_for(settings.redis_url, True).state
    reader = SnapshotReader(state, settings)
    snap = reader.snapshot()
    metrics = metrics_text(reader)
    print(json.dumps({
        "queues": {q.name: q.jobs for q in snap.queues},
        "fair": {q.name: q.tenants_waiting for q in snap.queues if q.fair},
        "top": [row.tenant for row in snap.tenants],
        "routed": {f"{k}|{q}": n for (k, q), n in snap.routed.items()},
        "metrics": metrics.decode(),
    }))
"""


def test_cli_and_dashboard_reader_on_the_cluster(redis_cluster: Any, state: RedisCluster, tmp_path: Path) -> None:
    env = cluster_env(redis_cluster, write_config(tmp_path))
    run_python(PRODUCE.format(tenants=10, big=8), env)

    checked = cli(env, "check", "--ping")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "answers" in checked.stdout
    queue = cli(env, "queue", "show", "cl_fair", "cl_routed")
    assert queue.returncode == 0, queue.stderr
    assert "cl_fair: fair" in queue.stdout and "cl_routed: plain" in queue.stdout
    stats = cli(env, "stats", "cluster_jobs.routed", "t0")
    assert stats.returncode == 0, stats.stderr
    assert "≥6 enqueued in last 1h" in stats.stdout and "next job would go to: {queue}_throttled" in stats.stdout
    assert cli(env, "tenant", "set", "t1", "--limit", "3").returncode == 0
    assert cli(env, "tenant", "pause", "t1").returncode == 0
    shown = cli(env, "tenant", "show", "t1")
    assert shown.returncode == 0, shown.stderr
    assert "(PAUSED since 20" in shown.stdout and "3 at once (override)" in shown.stdout, shown.stdout
    assert "waiting     1 in cl_fair" in shown.stdout  # read from the fair queue's state on rq's slot
    assert cli(env, "tenant", "resume", "t1").returncode == 0
    assert not state.exists("frc:{lease:t1}:paused")
    assert state.zscore("frc:{tiers}:changes", "t1")  # noted for every process's tier cache (set, pause, resume)

    read = run_python(READ, env)
    # (t0's enqueue_in jobs wait in rq's scheduled registries, not in the lists)
    assert read["queues"]["cl_fair"] == 8 + 9 and read["queues"]["cl_routed_throttled"] == 8 - 5
    # cl_routed_throttled, a rule's queue, is a fair queue (throttled_queues: fair): t0's jobs wait there fairly
    assert read["fair"] == {"cl_fair": 10, "cl_routed_throttled": 1}
    assert "t0" in read["top"]
    assert read["routed"] == {"cluster_jobs.routed|cl_routed": 5 + 9, "cluster_jobs.routed|cl_routed_throttled": 4}
    assert 'queue="cl_fair"' in read["metrics"]


def test_concurrency_limits_on_the_cluster(redis_cluster: Any, state: RedisCluster, tmp_path: Path) -> None:
    """With concurrency limits on, the job-start checks (a RedisCluster pipeline with the worker's state write),
    parks in the fair queue, snoozes on plain queues and slot releases work across slots: every job runs,
    none fails, no lease is left."""
    env = cluster_env(redis_cluster, write_config(
        tmp_path, concurrency={"enabled": True, "snooze": "1s", "jitter": "0.5s"}))
    produced = run_python(PRODUCE.format(tenants=10, big=20), env)
    expected = produced["routed"] + produced["fair"]
    drain(redis_cluster, env, state, tmp_path, expected)
    ran = [entry.decode().split() for entry in state.lrange(LOG, 0, -1)]
    assert len({(kind, tenant, n) for kind, tenant, n, _ in ran}) == len(ran) == expected
    assert int(state.zcard("{rq}:failed:cl_fair") or 0) == 0 and int(state.zcard("{rq}:failed:cl_routed") or 0) == 0
    assert not [key for key in state.scan_iter("frc:{lease:*}", target_nodes=RedisCluster.PRIMARIES)
                if state.zcard(key)]  # the leases (a tenant's other keys, e.g. a park's cause, have suffixes)
    counters = state.hgetall("frc:{stats}:limits")
    assert int(counters.get(b"free:acquired", 0)) >= expected  # every tenant job took its slot


def test_crash_recovery_on_the_cluster(redis_cluster: Any, state: RedisCluster, tmp_path: Path) -> None:
    """A worker killed (with its work horse) mid-job: another weighted worker finds the job abandoned after
    ``abandon_after`` (its recovery keys on rq's slot) and rq retries it; it then runs to the end."""
    env = cluster_env(redis_cluster, write_config(tmp_path, recovery={"abandon_after": 6}))
    job_id = run_python("""
        import json, cluster_jobs
        print(json.dumps(cluster_jobs.slow.delay("t1", 4).id))
    """, env)
    log = (tmp_path / "worker-0.log").open("wb")
    first = subprocess.Popen([sys.executable, "-m", "fair_router.cli", "worker", "cl_slow"], env=env, stdout=log,
                             stderr=subprocess.STDOUT, cwd=TESTS, start_new_session=True)
    second = None
    try:
        wait_for(lambda: state.zcard("{rq}:wip:cl_slow") > 0, 60, "the job to start")
        kill_session(first.pid)  # the worker's machine dies: worker and work horse at once
        first.wait()
        second = subprocess.Popen([sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedWorker",
                                   "--connection-class", "fair_router.store.cluster.RqSlotRedis", "--url",
                                   redis_cluster.seed_url, "cl_slow"], env=env, stdout=log,
                                  stderr=subprocess.STDOUT, cwd=TESTS, start_new_session=True)
        wait_for(lambda: state.llen(LOG) > 0 or second.poll() is not None, 90, "the job to run again")
        assert second.poll() is None, worker_logs(tmp_path)
        wait_for(lambda: state.hget(f"{{rq}}:job:{job_id}", "status") == b"finished", 30, "the job to finish")
    finally:
        for proc in (first, second):
            if proc is not None:
                terminate(proc, grace=15)
        log.close()
    assert [entry.decode().split()[:3] for entry in state.lrange(LOG, 0, -1)] == [["slow", "t1", "0"]]
    abandoned = int(state.get(Keys("frc").abandoned_total("{rq}:wip:cl_slow")) or 0)
    assert abandoned == 1, worker_logs(tmp_path)  # counted on rq's slot


def test_every_primary_s_maxmemory_policy_is_read(redis_cluster: Any, state: RedisCluster, tmp_path: Path) -> None:
    """One primary of three evicting: `check --ping` exits 2 naming it alone, and a weighted worker on the
    cluster logs one warning line for it (store/serverconf.py reads INFO memory from every primary)."""
    env = cluster_env(redis_cluster, write_config(tmp_path))
    lru = redis_cluster.nodes[-1]
    lru.client().config_set("maxmemory-policy", "allkeys-lru")
    try:
        checked = cli(env, "check", "--ping")
        assert checked.returncode == 2, checked.stdout + checked.stderr
        named = [line for line in checked.stderr.splitlines() if "maxmemory-policy is" in line]
        assert len(named) == 1 and f"Redis at 127.0.0.1:{lru.port}: maxmemory-policy is allkeys-lru" in named[0]
        worker = cli(env, "worker", "--burst", "--without-scheduler", "cl_routed")
        assert worker.returncode == 0, worker.stderr
        warned = [line for line in (worker.stdout + worker.stderr).splitlines() if "maxmemory-policy" in line]
        assert len(warned) == 1 and f"127.0.0.1:{lru.port}: maxmemory-policy is allkeys-lru" in warned[0], warned
    finally:
        lru.client().config_set("maxmemory-policy", "noeviction")
    assert cli(env, "check", "--ping").returncode == 0


ORG_CHARGE = """
    import json
    from collections import Counter
    from rq import Queue
    from rq.job import Job
    from fair_router import FairQueue, load_settings
    from fair_router.store.cluster import connections_for
    settings = load_settings()
    rq = connections_for(settings.redis_url, True).rq
    q = FairQueue("cl_orgs", connection=rq, settings=settings, charge="runtime")
    meta = lambda tenant: {"fair_tenant": tenant, "fair_org": tenant[0].upper(), "fair_cost": 0.01}
    q.enqueue_many([Queue.prepare_data(print, (i,), meta=meta(t), result_ttl=60)
                    for i in range(100) for t in ("a0", "a1", "b0")])
    served = Counter()
    for _ in range(100):
        job_id = q.pop_job_id()
        tenant = Job.fetch(job_id, connection=rq).meta["fair_tenant"]
        assert q.settle(job_id, 0.04 if tenant[0] == "a" else 0.01) == 1
        served[tenant[0]] += 1
    print(json.dumps(served))
"""


def test_runtime_charging_of_orgs_on_the_cluster(redis_cluster: Any, state: RedisCluster, tmp_path: Path) -> None:
    """charge="runtime" with orgs on a cluster: each pop and settle is one script call on the fair queue's slot
    (a cross-slot call would fail); org A, whose jobs run 4x org B's, gets about a quarter of B's starts."""
    served = run_python(ORG_CHARGE, cluster_env(redis_cluster, write_config(tmp_path)))
    assert served["a"] / served["b"] == pytest.approx(0.25, abs=0.06), served
