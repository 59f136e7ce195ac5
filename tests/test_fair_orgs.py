"""Organisations in a FairQueue (docs/fair-queue.md, "Organisations"): orgs served by weighted fair share, then each
org's tenants by theirs, FIFO within a tenant; a job without org is its tenant's own org, as before. Real
redis-server, real SimpleWorkers where the order jobs start in is what is measured."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import fair_jobs
import pytest
from conftest import command_calls
from redis import Redis
from rq import Queue

from fair_router import FairQueue, FairRouter, Settings, WeightedSimpleWorker, fair_job
from fair_router.config.settings import TiersConfig
from fair_router.core.keys import Keys
from fair_router.core.tenancy import InvalidTenant, stored_org
from fair_router.fairqueue.pushing import TenantInOtherOrg

PREFIX = "fq_orgs"
pytestmark = pytest.mark.usefixtures("isolated_settings")


def fair(conn: Redis, name: str = "default", **extra: Any) -> FairQueue:
    return FairQueue(name, connection=conn, settings=Settings(prefix=PREFIX, **extra))


def fill(queue: Queue, tenant: str, n: int, org: str | None = None, start: int = 0) -> None:
    """``n`` jobs of ``tenant`` numbered from ``start``, in one enqueue_many."""
    meta: dict[str, Any] = {"fair_tenant": tenant} | ({"fair_org": org} if org is not None else {})
    queue.enqueue_many([Queue.prepare_data(fair_jobs.log, (tenant, i), meta=meta, result_ttl=600)
                        for i in range(start, start + n)])


def started(conn: Redis) -> list[str]:
    """Tenants in the order their jobs ran."""
    return [entry.decode().rsplit(":", 1)[0] for entry in conn.lrange(fair_jobs.LOG, 0, -1)]


def run_alternating(conn: Redis, queue: FairQueue, workers: int, jobs: int) -> None:
    """``workers`` real (weighted) SimpleWorkers taking one job each in turn, ``jobs`` in all (or until the queue is
    empty)."""
    pool = [WeightedSimpleWorker([queue], connection=conn, settings=queue._config.settings) for _ in range(workers)]
    for i in range(jobs):
        if not pool[i % workers].work(burst=True, max_jobs=1):
            break


def sybil(conn: Redis, org_weights: dict[str, float] | None = None) -> FairQueue:
    """Org A spreads 2,000 jobs over 20 tenant keys (interleaved, as a flood arrives), org B has one key with 40."""
    orgs = {name: {"weight": weight} for name, weight in (org_weights or {}).items()}
    queue = fair(conn, orgs=orgs)
    for r in range(5):
        for k in range(20):
            fill(queue, f"a{k}", 20, org="A", start=20 * r)
    fill(queue, "b0", 40, org="B")
    return queue


def test_key_splitting_gains_an_org_nothing_against_an_org_with_one_key(conn: Redis) -> None:
    """Two workers, equal org weights: B, with one key, gets half of the first 80 starts and starts after at most
    two of A's jobs (one level: about 1/21 and 20)."""
    queue = sybil(conn)
    run_alternating(conn, queue, workers=2, jobs=80)
    order = started(conn)
    assert len(order) == 80
    b_share = order.count("b0") / 80
    assert b_share >= 0.45, (b_share, order[:30])
    assert order.index("b0") <= 2, order[:30]


def test_without_orgs_the_same_scenario_gives_the_one_key_org_one_share_in_21(conn: Redis) -> None:
    """The same jobs without fair_org: every key is its own org (one level, as before), so B's share is ~1/21."""
    queue = fair(conn)
    for _ in range(5):
        for k in range(20):
            fill(queue, f"a{k}", 20)
    fill(queue, "b0", 40)
    run_alternating(conn, queue, workers=2, jobs=84)
    assert started(conn).count("b0") <= 6
    assert conn.exists(queue.fair_keys.orgs) == 0  # a queue without orgs never writes the orgs set


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def test_shares_follow_org_weights_and_tenant_weights_inside_each_org(conn: Redis) -> None:
    """5 backlogged orgs x 4 tenants, org weights 1-5, tenant weights 1/3/5/1 by tier: Jain's index of share / weight
    is at least 0.98 over the orgs and inside each org."""
    tiers = TiersConfig(weights={"free": 1, "pro": 3, "enterprise": 5})
    queue = fair(conn, tiers=tiers, orgs={f"o{i}": {"weight": i + 1} for i in range(5)})
    router = FairRouter(conn, prefix=PREFIX, tiers=tiers)
    tenant_tiers = ["free", "pro", "enterprise", "free"]
    for o in range(5):
        for t, tier in enumerate(tenant_tiers):
            router.set_tier(f"o{o}t{t}", tier)
            fill(queue, f"o{o}t{t}", 200, org=f"o{o}")
    pops = 1000  # no tenant runs out: the heaviest (org weight 5, tenant weight 5 of 10) gets ~167 of its 200
    served = Counter(started_by_pops(queue, pops))
    org_share = [sum(served[f"o{o}t{t}"] for t in range(4)) / pops / (o + 1) for o in range(5)]
    assert jain(org_share) >= 0.98, org_share
    weights = [1, 3, 5, 1]
    for o in range(5):
        inside = [served[f"o{o}t{t}"] / weights[t] for t in range(4)]
        assert jain(inside) >= 0.98, (o, inside)


def started_by_pops(queue: FairQueue, n: int) -> list[str]:
    """The tenants of the next ``n`` pops (the order workers would start them in), each job's tenant from its id."""
    tenants = []
    for _ in range(n):
        job_id = queue.pop_job_id()
        assert job_id is not None
        tenants.append(queue.fetch_job(job_id).meta["fair_tenant"])  # type: ignore[union-attr]
    return tenants


def test_each_tenant_stays_fifo_and_every_job_runs_once(conn: Redis) -> None:
    queue = sybil(conn)
    WeightedSimpleWorker([queue], connection=conn, settings=queue._config.settings).work(burst=True)
    entries = [entry.decode().rsplit(":", 1) for entry in conn.lrange(fair_jobs.LOG, 0, -1)]
    assert len(entries) == 2040
    by_tenant: dict[str, list[int]] = {}
    for tenant, n in entries:
        by_tenant.setdefault(tenant, []).append(int(n))
    for tenant, numbers in by_tenant.items():
        assert numbers == sorted(numbers), tenant
    assert conn.exists(queue.fair_keys.orgs) == 0 and queue.count == 0


def test_org_and_orgless_tenants_share_one_queue_fairly(conn: Redis) -> None:
    """An org competes as one entry against tenants without org: org A (3 keys) and two org-less tenants get a
    third of the pops each."""
    queue = fair(conn)
    for k in range(3):
        fill(queue, f"a{k}", 60, org="A")
    fill(queue, "solo1", 60)
    fill(queue, "solo2", 60)
    served = Counter(started_by_pops(queue, 90))
    a = sum(served[f"a{k}"] for k in range(3))
    assert (a, served["solo1"], served["solo2"]) == (30, 30, 30)


def test_a_tenant_under_another_org_is_refused_naming_tenant_and_both_orgs(conn: Redis) -> None:
    queue = fair(conn)
    queue.enqueue(fair_jobs.log, "t", 0, fair_tenant="t", fair_org="acme")
    with pytest.raises(TenantInOtherOrg, match=r"tenant 't'.*org 'acme'.*org 'globex'"):
        queue.enqueue(fair_jobs.log, "t", 1, fair_tenant="t", fair_org="globex")
    with pytest.raises(Exception, match=r"FAIRORG 0 tenant t .* under org acme: it cannot join org \(none\)"):
        queue.enqueue(fair_jobs.log, "t", 2, fair_tenant="t")  # the push script refuses the other way round
    WeightedSimpleWorker([queue], connection=conn, settings=queue._config.settings).work(burst=True)
    queue.enqueue(fair_jobs.log, "t", 3, fair_tenant="t", fair_org="globex")  # none waits: it may change org
    assert queue.count == 1


@pytest.mark.parametrize("value", ["", "x" * 300, 1.5, ["a"], "\udcff"])
def test_a_bad_org_id_is_refused_naming_it(conn: Redis, value: object) -> None:
    queue = fair(conn)
    with pytest.raises((TypeError, InvalidTenant), match="org id"):
        queue.enqueue(fair_jobs.log, "t", 0, fair_tenant="t", fair_org=value)
    assert queue.count == 0


def test_a_stored_org_that_is_no_org_id_is_named_with_its_field() -> None:
    with pytest.raises(InvalidTenant, match=r'job.meta\["fair_org"\] = \[1\] is no org id'):
        stored_org({"fair_org": [1]})
    assert stored_org({"fair_org": 42}) == "42"
    assert stored_org({"fair_org": ""}) is None


def test_an_org_needs_a_tenant_and_a_runtime_queue_takes_orgs(conn: Redis) -> None:
    """charge="runtime" charges orgs too (tests/test_org_charge.py): the org is stored, not refused."""
    with pytest.raises(ValueError, match="needs a tenant"):
        fair(conn).enqueue(fair_jobs.log, "t", 0, fair_org="acme")
    job = fair(conn, fair_charge="runtime").enqueue(fair_jobs.log, "t", 0, fair_tenant="t", fair_org="acme")
    assert job.meta["fair_org"] == "acme"


def test_fair_job_takes_an_org_callable_and_fair_org(conn: Redis) -> None:
    router = FairRouter(conn, prefix=PREFIX)

    @fair_job("orgjobs", tenant=lambda tenant, n: tenant, org=lambda tenant, n: tenant[0], router=router, fair=True,
              settings=Settings(prefix=PREFIX), result_ttl=600)
    def work(tenant: str, n: int) -> None:
        fair_jobs.log(tenant, n)

    assert work.delay("ab", 0).meta["fair_org"] == "a"
    assert work.enqueue("xy", 1, fair_org="zz").meta["fair_org"] == "zz"
    jobs = work.enqueue_many([(("cd", 2), {}), (("ce", 3), {"fair_org": "q"})])
    assert [job.meta["fair_org"] for job in jobs] == ["c", "q"]


def test_a_parked_org_tenant_leaves_its_org_and_comes_back_in_fifo_order(conn: Redis) -> None:
    """A tenant of an org parked (its limit) is skipped; the org's other tenant is served meanwhile; on unpark it
    comes back. Removing jobs and the stale ones rq deleted keep the org's state consistent."""
    queue = fair(conn)
    fill(queue, "p", 3, org="O")
    fill(queue, "q", 3, org="O")
    first = queue.pop_job_id()
    assert first is not None
    job = queue.fetch_job(first)
    assert job is not None
    tenant = job.meta["fair_tenant"]
    queue.park(job, tenant, 60)
    other = {"p": "q", "q": "p"}[tenant]
    popped = [queue.fetch_job(queue.pop_job_id() or "").meta["fair_tenant"] for _ in range(3)]  # type: ignore[union-attr]
    assert popped == [other] * 3
    assert queue.pop_job_id() is None  # only the parked tenant's jobs wait
    queue.unpark(tenant)
    rest = []
    while (job_id := queue.pop_job_id()) is not None:
        rest.append(queue.fetch_job(job_id).args)  # type: ignore[union-attr]
    assert rest == [(tenant, 0), (tenant, 1), (tenant, 2)]
    assert conn.zcard(queue.fair_keys.orgs) == 0


def test_removed_and_deleted_jobs_of_an_org_leave_no_org_state(conn: Redis) -> None:
    queue = fair(conn)
    fill(queue, "r", 2, org="O")
    fill(queue, "s", 2, org="O")
    ids = queue.get_job_ids()
    queue.remove(ids[0])
    Queue("default", connection=conn).fetch_job(ids[1]).delete()  # type: ignore[union-attr]  # rq behind our back
    WeightedSimpleWorker([queue], connection=conn, settings=queue._config.settings).work(burst=True)
    assert queue.count == 0
    assert conn.exists(queue.fair_keys.orgs) == 0
    assert all(not member.startswith(b"!") for member in conn.zrange(queue.fair_keys.active, 0, -1))


def test_every_reader_of_a_stored_org_goes_through_the_validator() -> None:
    """Only fair_router/core/tenancy.py reads job.meta["fair_org"] (as for fair_tenant, tests/test_poison.py)."""
    package = Path(__file__).resolve().parent.parent / "fair_router"
    reads = []
    for path in sorted(package.rglob("*.py")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"\.get\((META_ORG|[\"']fair_org[\"'])|\[META_ORG\](?!\s*=)", line):
                reads.append((str(path.relative_to(package)), line.strip()))
    assert reads == [("core/tenancy.py", "value = (meta or {}).get(META_ORG)")], reads


def test_a_tenant_joining_an_org_whose_only_tenant_has_been_served_alone_shares_its_turns(conn: Redis) -> None:
    """An org's only active tenant keeps its pass in the org (nothing to compare with); a tenant joining later
    starts level with it: from then on the org's turns alternate between them, and the org keeps its one share
    against a tenant without org."""
    queue = fair(conn)
    fill(queue, "x", 20, org="O")
    fill(queue, "solo", 20)
    assert Counter(started_by_pops(queue, 6)) == {"x": 3, "solo": 3}
    fill(queue, "y", 10, org="O")
    served = started_by_pops(queue, 12)
    assert Counter(served) == {"solo": 6, "x": 3, "y": 3}, served


def test_recovered_and_adopted_jobs_come_back_in_their_org(conn: Redis) -> None:
    """A popped job never started (recovery's from_inflight push) and a job rq pushed itself (adopted by the
    reconcile) join their tenant's FIFO under their org again."""
    from fair_router.fairqueue.reconcile import reconcile_queues

    queue = fair(conn)
    fill(queue, "r", 2, org="O")
    popped = queue.pop_job_id()
    assert sorted(queue.recover(older_than=0)) == [popped]
    plain = Queue("default", connection=conn)
    plain.enqueue(fair_jobs.log, "s", 0, meta={"fair_tenant": "s", "fair_org": "O"}, result_ttl=600)
    reconcile_queues([queue])
    records = {key.decode(): value.decode() for key, value in conn.hgetall(queue.fair_keys.state).items()
               if key.startswith(b"=")}
    assert {tenant: value.split("|")[4] for tenant, value in records.items()} == {"=r": "O", "=s": "O"}
    assert Counter(started_by_pops(queue, 3)) == {"r": 2, "s": 1}
    assert conn.exists(queue.fair_keys.orgs) == 0


def test_two_refused_jobs_of_an_org_tenant_whose_last_jobs_were_popped_both_come_back(conn: Redis) -> None:
    """Both jobs of a tenant of an org are popped (it has none waiting), then both refused: the first refusal
    writes its record again with no pass in its org yet, the second is refunded against it; both come back once
    the park ends (in the order refusals land, as without orgs: the first had no known FIFO place)."""
    queue = fair(conn)
    fill(queue, "x", 2, org="O")
    jobs = [queue.fetch_job(queue.pop_job_id() or "") for _ in range(2)]
    for job in jobs:  # the last popped (the only one whose refund is known here) second
        assert job is not None
        queue.park(job, "x", 60)
    queue.unpark("x")
    rest = []
    while (job_id := queue.pop_job_id()) is not None:
        rest.append(queue.fetch_job(job_id).args)  # type: ignore[union-attr]
    assert sorted(rest) == [("x", 0), ("x", 1)]
    assert conn.exists(queue.fair_keys.orgs) == 0


def test_the_listing_is_the_order_workers_start_jobs_in_with_orgs(conn: Redis) -> None:
    """get_job_ids() replays the two-level pop: orgs by weight, their tenants by weight inside, org-less tenants
    beside them; one WeightedSimpleWorker then starts the jobs exactly in that order."""
    queue = fair(conn, orgs={"A": {"weight": 2}}, tiers=TiersConfig(resolver="tier_resolvers:by_name",
                                                                    weights={"pro": 2, "enterprise": 4}))
    for tenant, n, org in [("a1", 6, "A"), ("pro-a2", 9, "A"), ("b1", 5, "B"), ("ent-b2", 7, "B"), ("c", 6, None)]:
        fill(queue, tenant, n, org=org)
    listing = queue.get_job_ids()
    ids_by_job = {f"{job.args[0]}:{job.args[1]}": job.id for job in queue.jobs}
    assert len(listing) == 33 and len(ids_by_job) == 33
    run_alternating(conn, queue, workers=1, jobs=33)
    ran = [ids_by_job[entry.decode()] for entry in conn.lrange(fair_jobs.LOG, 0, -1)]
    assert ran == listing
    # the first 12 starts: org A (weight 2) twice as many as org B and tenant c, pro-a2 twice a1's
    first = Counter(started(conn)[:12])
    assert (first["a1"] + first["pro-a2"], first["b1"] + first["ent-b2"], first["c"]) == (6, 3, 3), first
    assert (first["a1"], first["pro-a2"]) == (2, 4), first


def test_org_set_and_show_store_an_override_that_pushes_use_over_the_settings(
    conn: Redis, redis_server: Any, tmp_path: Path
) -> None:
    """``fair-router org set A --weight 3`` beats the settings' ``orgs: {A: {weight: 1}}``: the pushes after it carry
    3, so org A gets three starts to B's one and solo's one; ``org show`` prints the weight, its source and the
    tenants waiting in each fair queue with their counts; ``--reset`` goes back to the settings; ``tenant show``
    names the org."""
    from click.testing import CliRunner

    from fair_router.cli import main

    config = tmp_path / "c.yaml"
    config.write_text(f"prefix: {PREFIX}\nredis_url: {redis_server.url}\norgs:\n  A: {{weight: 1}}\n")
    run = CliRunner().invoke
    shown = run(main, ["org", "show", "A", "--config", str(config)])
    assert shown.exit_code == 0, shown.output
    assert "weight      1 (settings orgs:)" in shown.output and "none in any fair queue" in shown.output
    done = run(main, ["org", "set", "A", "--weight", "3", "--config", str(config)])
    assert done.exit_code == 0 and "weight      3 (override)" in done.output, done.output
    assert run(main, ["org", "set", "A", "--weight", "-1", "--config", str(config)]).exit_code == 2
    queue = fair(conn, orgs={"A": {"weight": 1}})
    for tenant, org in [("a1", "A"), ("a2", "A"), ("b1", "B")]:
        fill(queue, tenant, 12, org=org)
    fill(queue, "solo", 2)
    run_alternating(conn, queue, workers=2, jobs=16)
    first = Counter(started(conn))
    assert first["a1"] + first["a2"] >= 9, first  # 10 of 16 at weight 3 against B's and solo's 1 (at weight 1: 7)
    shown = run(main, ["org", "show", "A", "--config", str(config)])
    waiting_a = 24 - first["a1"] - first["a2"]
    assert f"waiting     {waiting_a} in default: a1 {12 - first['a1']}, a2 {12 - first['a2']}" in shown.output, \
        shown.output
    assert "weight      3 (override)" in shown.output
    other = run(main, ["org", "show", "B", "--config", str(config)]).output
    assert "weight      1 (default)" in other and "b1" in other and "a1" not in other, other
    reset = run(main, ["org", "set", "A", "--reset", "--config", str(config)]).output
    assert "weight      1 (settings orgs:)" in reset, reset
    tenant = run(main, ["tenant", "show", "a1", "--config", str(config)]).output
    assert "org         A (in default)" in tenant, tenant
    assert "org " not in run(main, ["tenant", "show", "solo", "--config", str(config)]).output


def test_the_org_api_validates_and_reports_its_source(conn: Redis) -> None:
    """``router.tenants.set_org`` / ``org``: an override beats the settings, which beat 1; bad values are refused,
    one written by hand that does not validate is ignored."""
    router = FairRouter(conn, prefix=PREFIX).tenants
    settings = Settings(prefix=PREFIX, orgs={"acme": {"weight": 2}})
    assert (router.org("acme", settings.orgs).weight, router.org("acme", settings.orgs).source) == (2, "settings")
    router.set_org("acme", weight=5)
    assert (router.org("acme", settings.orgs).weight, router.org("acme").source) == (5, "override")
    with pytest.raises(ValueError, match="weight"):
        router.set_org("acme", weight=0)
    with pytest.raises(TypeError):
        router.set_org(1.5, weight=2)  # type: ignore[arg-type]
    conn.hset(Keys(PREFIX).org_overrides("acme"), "weight", "lots")  # by hand: ignored, logged
    assert FairRouter(conn, prefix=PREFIX).tenants.org("acme", settings.orgs).source == "settings"


def test_a_tenant_entering_its_org_reads_the_org_set_once_and_a_pop_once(conn: Redis) -> None:
    """Its start is its org's min pass (one ZRANGEBYLEX); its org then activates without reading the set again."""
    queue = fair(conn)
    fill(queue, "a1", 2, "A")
    conn.config_resetstat()
    fill(queue, "a2", 2, "A")
    assert command_calls(conn, "zrangebylex") == 1
    conn.config_resetstat()
    assert queue.pop_job_id() is not None
    assert command_calls(conn, "zrangebylex") == 1
