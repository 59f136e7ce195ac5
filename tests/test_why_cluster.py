"""``fair_router.explain`` and ``explain_tenant`` on a real Redis Cluster (three masters, tests/rediscluster.py): the
fair queue's state read on rq's slot, the tenant's controls on the tenant's slot, the observers' record on ``{obs}``.
As in tests/test_cluster.py, everything that runs on the cluster runs in a subprocess with ``RQ_KEY_PREFIX={rq}``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from redis import RedisCluster
from test_cluster import cli, cluster_env, run_python, write_config

from fair_router.core.keys import Keys

pytestmark = pytest.mark.cluster

SCENE = """
    import json, why_jobs
    from fair_router import FairQueue, FairRouter, WeightedSimpleWorker, explain, load_settings
    from fair_router.controls.tiers import TierBook
    from fair_router.core.keys import Keys
    from fair_router.dashboard.reader import SnapshotReader
    from fair_router.dashboard.why import job_answer
    from fair_router.routing.tenant_why import explain_tenant
    from fair_router.store.cluster import connections_for
    from fair_router.workers.limiter import ConcurrencyLimiter

    settings = load_settings()
    pair = connections_for(settings.redis_url, True)
    keys = Keys(settings.prefix)
    queue = FairQueue("cl_fair", connection=pair.state, settings=settings)
    for n in range(3):  # starts for the observers' record: a throughput to estimate from
        queue.enqueue(why_jobs.noop, fair_tenant="warm", result_ttl=600)
    slots = ConcurrencyLimiter(pair.state, keys, TierBook(pair.state, keys), settings.concurrency)
    held = slots.acquire("capped", "elsewhere")  # the default tier's limit is 1: its one slot held elsewhere
    capped = queue.enqueue(why_jobs.noop, fair_tenant="capped")
    WeightedSimpleWorker([queue], connection=pair.state, settings=settings).work(burst=True)
    first = [queue.enqueue(why_jobs.noop, fair_tenant="t0").id for _ in range(3)]
    second = [queue.enqueue(why_jobs.noop, fair_tenant="t1").id for _ in range(3)]
    resting = queue.enqueue(why_jobs.noop, fair_tenant="resting")
    FairRouter(pair.state, prefix=settings.prefix).pause("resting")  # its park's cause noted on its own slot
    answers = {name: explain(job_id, connection=pair.state, settings=settings).as_dict()
               for name, job_id in [("capped", capped.id), ("next", first[0]), ("behind", second[2]),
                                   ("paused", resting.id)]}
    answers["via_rq_client"] = explain(second[2], connection=pair.rq, settings=settings).as_dict()
    orged = queue.enqueue(why_jobs.noop, fair_tenant="orgt", fair_org="O")
    FairRouter(pair.state, prefix=settings.prefix).tenants.pause_org("O")  # the org's flag on the org's own slot
    answers["org_paused"] = explain(orged.id, connection=pair.state, settings=settings).as_dict()
    answers["org_tenant"] = explain_tenant("orgt", pair.rq, settings).as_dict()
    answers["tenant"] = explain_tenant("capped", pair.rq, settings).as_dict()
    answers["dashboard"] = job_answer(SnapshotReader(pair.state, settings), capped.id)[0]
    answers["ids"] = {"capped": capped.id, "behind": second[2]}
    answers["lease_key"] = keys.leases("capped")
    print(json.dumps(answers))
"""


def test_explain_and_tenant_why_on_a_cluster(redis_cluster: Any, tmp_path: Path) -> None:
    """A job behind others, the next one and one of a tenant at its concurrency limit (a real weighted worker's start
    refused, the tenant parked): each explained from either client of the pair, the dashboard and the CLI; the
    tenant's slot is on another master than rq's."""
    state = RedisCluster.from_url(redis_cluster.seed_url)
    state.flushall(target_nodes=RedisCluster.PRIMARIES)  # type: ignore[no-untyped-call]
    env = cluster_env(redis_cluster, write_config(tmp_path, concurrency={"enabled": True, "lease_ttl": 60}))
    got = run_python(SCENE, env)
    lease_tag = got["lease_key"][got["lease_key"].index("{"):got["lease_key"].index("}") + 1]
    assert redis_cluster.master_of(lease_tag).port != redis_cluster.master_of("{rq}").port  # two slots, two masters

    capped = got["capped"]
    assert capped["reason"] == "concurrency_limit", capped
    assert capped["facts"]["limit"] == 1 and capped["facts"]["running"] == ["elsewhere"]
    assert capped["facts"]["tenant_state"] == "parked" and capped["estimated_start"] is None
    assert got["dashboard"]["reason"] == "concurrency_limit" and got["dashboard"]["fact_order"][0] == "queue"
    paused = got["paused"]
    assert paused["reason"] == "paused" and paused["facts"]["paused_since"]
    assert paused["facts"]["tenant_state"] == "parked"
    assert state.get(Keys("frc").park_cause("resting", "cl_fair")) == b"paused"
    org_paused = got["org_paused"]  # the tenant's slot and its org's differ: read through the cluster client
    assert org_paused["reason"] == "paused" and org_paused["facts"]["org_paused_since"], org_paused
    assert org_paused["facts"]["org"] == "O" and "paused_since" not in org_paused["facts"]
    assert got["org_tenant"]["reason"] == "paused" and got["org_tenant"]["facts"]["org_paused_since"]
    assert got["next"]["reason"] == "next" and got["next"]["facts"]["jobs_ahead"] == 0
    behind = got["behind"]
    assert behind["reason"] == "behind" and behind["facts"]["fifo_ahead"] == 2, behind
    assert behind["facts"]["jobs_ahead"] == 5 and behind["facts"]["tenants_before"] == 1 and behind["facts"]["exact"]
    assert "3 starts of every queue" in behind["estimate_basis"] and behind["estimated_start"] is not None
    assert got["via_rq_client"]["facts"] == behind["facts"]  # the plain client to rq's slot owner finds the pair
    tenant = got["tenant"]
    assert tenant["reason"] == "concurrency_limit" and tenant["facts"]["running_jobs"] == ["elsewhere"], tenant
    assert tenant["facts"]["waiting"] == {"cl_fair": 1}

    shown = cli(env, "why", got["ids"]["behind"], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["facts"]["jobs_ahead"] == 5
    shown = cli(env, "tenant", "why", "capped")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("tenant 'capped': concurrency_limit"), shown.stdout
    assert cli(env, "why", "no-such-job").returncode == 1
