"""Two-level fairness (docs/fair-queue.md, "Organisations"): counts and ratios, never a wall time asserted.

1. Key splitting: org A spreads 2,000 jobs over 20 tenant keys, org B has 1 key with 40 jobs, equal org weights.
   B's share of the first 80 starts and how many of A's jobs start before B's first, one level (no fair_org: each
   key is its own org) and two levels. Starts are the fair pops in order (two workers taking turns start jobs in
   pop order).
2. Share accuracy: 5 backlogged orgs x 4 tenants, org weights 1-5, tenant weights 1/3/5/1 (tiers); Jain's index of
   share / weight over the orgs and, worst of the five, inside an org.
3. Fair pop server time, two levels / one level: the same tenants (every tenant backlogged) with and without orgs
   (tenants / --per-org orgs, at least 1), rounds interleaved, the median over rounds of each round's lowest
   100-pop chunk (``INFO commandstats``, as bench/fair_pop.py measures it). Each tenant has 2-3 jobs waiting (or
   --jobs-per-tenant: with 1, nearly every pop takes its tenant's last job, as on a queue that drains).
4. charge="runtime" at both levels: org A's jobs run 4x org B's; A's starts / B's (pops and settles).
5. Memory per org: ``MEMORY USAGE`` of every fair key, one level and two levels (the same tenants and jobs), and the
   orgs' own overhead (two levels less one level) per org, 1,000 orgs of 1 and of 10 tenants.

Always runs on a private redis-server.

    .venv/bin/python bench/orgs.py [--tenants 10,1000,10000] [--pops 2000] [--rounds 3] [--per-org 100]
                                   [--memory-orgs 1000] [--jobs-per-tenant 1] [--pop-cost-only]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any, cast

from redis import Redis
from rq import Queue

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.jobs import noop
from bench.redisstats import pop_stat
from fair_router import FairQueue, FairRouter, Settings
from fair_router.config.settings import TiersConfig
from fair_router.demo.redis_server import RedisServer

CHUNK = 100


def fill(queue: FairQueue, jobs: list[tuple[str, str | None]]) -> None:
    """Enqueue one job per (tenant, org) in order, 1,000 per enqueue_many."""
    for start in range(0, len(jobs), 1000):
        queue.enqueue_many([Queue.prepare_data(noop, (i,), meta={"fair_tenant": tenant}
                                               | ({"fair_org": org} if org else {}), result_ttl=60)
                            for i, (tenant, org) in enumerate(jobs[start:start + 1000], start)])


def pop_tenants(queue: FairQueue, n: int) -> list[str]:
    """The tenants of the next ``n`` fair pops."""
    out = []
    for _ in range(n):
        job_id = queue.pop_fair().job_id
        assert job_id is not None
        job = queue.fetch_job(job_id)
        assert job is not None
        out.append(str(job.meta["fair_tenant"]))
    return out


def key_splitting(conn: Redis, orgs: bool) -> tuple[float, int]:
    """(B's share of the first 80 starts, A's starts before B's first)."""
    conn.flushdb()
    queue = FairQueue("bench", connection=conn, settings=Settings(prefix="bench"))
    jobs = [(f"a{k}", "A" if orgs else None) for _ in range(100) for k in range(20)]
    fill(queue, jobs + [("b0", "B" if orgs else None)] * 40)
    order = pop_tenants(queue, 80)
    return order.count("b0") / 80, order.index("b0") if "b0" in order else 80


def jain(values: list[float]) -> float:
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def share_accuracy(conn: Redis, pops: int) -> tuple[float, float]:
    """(Jain over the orgs, lowest Jain inside an org) of share / weight after ``pops`` pops."""
    conn.flushdb()
    tiers = TiersConfig(weights={"free": 1, "pro": 3, "enterprise": 5})
    settings = Settings(prefix="bench", tiers=tiers, orgs={f"o{i}": {"weight": i + 1} for i in range(5)})
    queue = FairQueue("bench", connection=conn, settings=settings)
    router = FairRouter(conn, prefix="bench", tiers=tiers)
    weights, names = [1, 3, 5, 1], ["free", "pro", "enterprise", "free"]
    backlog = pops // 4
    for o in range(5):
        for t in range(4):
            router.set_tier(f"o{o}t{t}", names[t])
    fill(queue, [(f"o{o}t{t}", f"o{o}") for _ in range(backlog) for o in range(5) for t in range(4)])
    served = Counter(pop_tenants(queue, pops))
    over = jain([sum(served[f"o{o}t{t}"] for t in range(4)) / (o + 1) for o in range(5)])
    inside = min(jain([served[f"o{o}t{t}"] / weights[t] for t in range(4)]) for o in range(5))
    return over, inside


def pop_time(conn: Redis, tenants: int, pops: int, orgs: bool, per_org: int = 100,
             per_tenant: int = 0) -> tuple[float, int]:
    """Lowest 100-pop chunk's fair pop server time (us per call) at ``tenants`` backlogged tenants, and the fair
    state's memory (bytes, ``MEMORY USAGE`` of the queue's fair keys) before the pops. ``per_tenant``: jobs per
    tenant (0: enough that no pop measured takes a tenant's last)."""
    conn.flushdb()
    queue = FairQueue("bench", connection=conn, settings=Settings(prefix="bench"))
    n_orgs = max(1, tenants // per_org)
    total = max(pops + tenants, 2 * tenants) if per_tenant <= 0 else max(pops + 1, per_tenant * tenants)
    fill(queue, [(f"t{i % tenants}", f"o{(i % tenants) % n_orgs}" if orgs else None) for i in range(total)])
    memory = sum(int(conn.memory_usage(key, samples=0) or 0) for key in queue.fair_keys.all())
    times = []
    for _ in range(pops // CHUNK):
        conn.config_resetstat()
        for _ in range(CHUNK):
            assert queue.pop_fair().job_id is not None
        pop = pop_stat(cast(dict[str, dict[str, Any]], conn.info("commandstats")))
        times.append(float(pop["usec"]) / int(pop["calls"]))
    return min(times), memory


def org_memory(conn: Redis, n_orgs: int, per_org: int) -> tuple[dict[bool, int], dict[str, float]]:
    """The fair state with and without orgs, ``n_orgs`` orgs of ``per_org`` backlogged tenants each (2 jobs per
    tenant): ``MEMORY USAGE`` summed over every fair key of the queue, one level (the same tenants and jobs, no
    org) and two levels; and the difference per org by fair key (active: an org's entry instead of its tenants';
    orgs: one member per active tenant; state: the org fields of each tenant's record). Every key is counted, so
    the difference is all the orgs add; each key is rebuilt (DUMP, RESTORE) before it is measured, so that a large
    hash caught mid-rehash does not count its second table."""
    sizes: dict[bool, dict[str, int]] = {}
    for orgs in (False, True):
        conn.flushdb()
        queue = FairQueue("bench", connection=conn, settings=Settings(prefix="bench"))
        tenants = n_orgs * per_org
        fill(queue, [(f"t{i}", f"o{i // per_org}" if orgs else None) for _ in range(2) for i in range(tenants)])
        keys = queue.fair_keys
        for key in keys.all():  # rebuilt by DUMP/RESTORE: no hash table caught mid-rehash
            dumped = conn.dump(key)
            if dumped is not None:
                conn.restore(key, max(0, int(conn.pttl(key))), dumped, replace=True)
        sizes[orgs] = {name: int(conn.memory_usage(getattr(keys, name), samples=0) or 0) for name in keys.names()[1:]}
    by_key = {name: (sizes[True][name] - sizes[False][name]) / n_orgs for name in sizes[True]
              if sizes[True][name] != sizes[False][name]}
    return {orgs: sum(sizes[orgs].values()) for orgs in sizes}, by_key


def runtime_orgs(conn: Redis, pops: int = 400) -> float:
    """charge="runtime": org A's jobs settle at 40 ms, org B's at 10 ms (equal weights, 2 tenants each, every job
    declaring 10 ms, so only the settlement tells them apart): A's starts / B's over ``pops`` pops and settles."""
    conn.flushdb()
    queue = FairQueue("bench", connection=conn, settings=Settings(prefix="bench", fair_charge="runtime"))
    for start in range(0, pops, 1000):
        queue.enqueue_many([Queue.prepare_data(noop, (i,), meta={"fair_tenant": tenant, "fair_org": tenant[0].upper(),
                                                                 "fair_cost": 0.01}, result_ttl=60)
                            for i in range(start, min(pops, start + 1000)) for tenant in ("a0", "a1", "b0", "b1")])
    served: Counter[str] = Counter()
    for _ in range(pops):
        job_id = queue.pop_fair().job_id
        assert job_id is not None
        job = queue.fetch_job(job_id)
        assert job is not None
        tenant = str(job.meta["fair_tenant"])
        queue.settle(job_id, 0.04 if tenant[0] == "a" else 0.01)
        served[tenant[0]] += 1
    return served["a"] / served["b"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", default="10,1000,10000", help="comma-separated backlogged tenant counts")
    parser.add_argument("--pops", type=int, default=2000, help="pops measured per tenant count and round")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (one level, two levels)")
    parser.add_argument("--per-org", type=int, default=100, help="tenants per org in the pop time runs")
    parser.add_argument("--memory-orgs", type=int, default=1000, help="orgs in the memory runs")
    parser.add_argument("--jobs-per-tenant", type=int, default=0, help="jobs per tenant in the pop time runs (0: 2-3)")
    parser.add_argument("--pop-cost-only", action="store_true", help="only the pop time runs (scenario 3)")
    args = parser.parse_args()
    with RedisServer() as server:
        conn = server.client()
        for orgs in (False, True) if not args.pop_cost_only else ():
            share, before = key_splitting(conn, orgs)
            print(f"key splitting, {'two levels' if orgs else 'one level '}: B's share of the first 80 starts "
                  f"{share:.3f}, A's starts before B's first {before}")
        if not args.pop_cost_only:
            over, inside = share_accuracy(conn, 1000)
            print(f"share accuracy, 5 orgs x 4 tenants, 1000 pops: Jain over orgs {over:.4f}, lowest inside an org "
                  f"{inside:.4f}")
            print(f"charge='runtime', org A's jobs 4x org B's: A's starts / B's {runtime_orgs(conn):.3f} (goal 0.25)")
            own = {}
            for per_org in (1, 10):
                totals, by_key = org_memory(conn, args.memory_orgs, per_org)
                own[per_org] = (totals[True] - totals[False]) / args.memory_orgs
                parts = ", ".join(f"{name} {value:+.0f}" for name, value in by_key.items())
                print(f"memory, {args.memory_orgs} orgs x {per_org:>2} tenant(s): fair state one level "
                      f"{totals[False]} B, two levels {totals[True]} B; the orgs' own {own[per_org]:.0f} B per org "
                      f"(goal <= 150 B; by key: {parts})")
            each = (own[10] - own[1]) / 9  # per org = fixed + each tenant's: two sizes give both
            print(f"memory the orgs add: {own[1] - each:.0f} B per org, + {each:.0f} B per tenant in it")
        for tenants in (int(x) for x in args.tenants.split(",") if x):
            one, two, extra = [], [], 0
            for _ in range(args.rounds):
                (low, before), (high, after) = (
                    pop_time(conn, tenants, args.pops, False, args.per_org, args.jobs_per_tenant),
                    pop_time(conn, tenants, args.pops, True, args.per_org, args.jobs_per_tenant))
                one.append(low)
                two.append(high)
                extra = after - before
            ratios = sorted(b / a for a, b in zip(one, two, strict=True))
            rounds = ", ".join(f"{r:.2f}" for r in ratios)
            n_orgs = max(1, tenants // args.per_org)
            print(f"{tenants:>7} tenants in {n_orgs:>4} orgs: fair pop one level "
                  f"{statistics.median(one):6.1f} us, two levels {statistics.median(two):6.1f} us, ratio "
                  f"{statistics.median(two) / statistics.median(one):.3f} (per round {rounds}); fair state "
                  f"+{extra} B with orgs, {extra / tenants:.0f} B per tenant")


if __name__ == "__main__":
    main()
