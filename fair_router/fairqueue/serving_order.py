"""The order in which a fair queue would serve its waiting jobs: the pops of ``fair_pop.lua`` replayed on one
snapshot of its state, in Python (``get_job_ids``, job positions)."""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FairSnapshot:
    """What the replay reads, taken in one MULTI."""

    listed: Sequence[str]  # rq's list, head first
    members: Mapping[str, str]  # job id -> "<order>|<tenant>:<seq>"
    active: Mapping[str, float]  # tenant -> pass
    kept: Mapping[str, float]  # tenant -> pass kept while idle or parked
    weights: Mapping[str, float]
    vtime: float
    costs: Mapping[str, float] = field(default_factory=dict)  # job id -> its pop's charge (charge="runtime")


def serving_order(snap: FairSnapshot) -> list[str]:
    """Every listed id once, in the order pops would serve them; members no longer listed are left out, and parked
    tenants' jobs come last, in stride order from their kept passes."""
    on_list = Counter(snap.listed)
    places: dict[str, list[tuple[int, str]]] = {}
    for job_id, value in snap.members.items():
        tenant, _, seq = value.rpartition("|")[2].rpartition(":")
        places.setdefault(tenant, []).append((int(seq), job_id))
    # Each tenant's members by FIFO place, stale ones (no longer listed) too: a pop drops those only when it
    # meets them, and until then they count as older than the jobs behind them.
    fifos = {tenant: deque(job_id for _, job_id in sorted(jobs)) for tenant, jobs in places.items()}
    tenant_of = {job_id: tenant for tenant, jobs in fifos.items() for job_id in jobs}
    waiting = {job_id for job_id in tenant_of if on_list[job_id]}  # members a fair choice may still serve

    slots = list(snap.listed)  # the list; a served member's slot takes the head entry, as fair_pop.lua does
    where = {job_id: index for index, job_id in enumerate(slots) if job_id in waiting}
    vtime = snap.vtime
    order: list[str] = []
    # The schedule: a heap of (pass, tenant, version); an entry is current while its version is the tenant's.
    passes = {tenant: pass_ for tenant, pass_ in snap.active.items() if fifos.get(tenant)}
    versions = dict.fromkeys(passes, 0)
    ready = [(pass_, tenant, 0) for tenant, pass_ in passes.items()]
    heapq.heapify(ready)

    def top(heap: list[tuple[float, str, int]]) -> str | None:
        """The min-pass tenant (by name among equals), as ``ZRANGE active 0 0`` would give it."""
        while heap and versions.get(heap[0][1]) != heap[0][2]:
            heapq.heappop(heap)
        return heap[0][1] if heap else None

    def choose(heap: list[tuple[float, str, int]]) -> str | None:
        """The stride choice: the min-pass tenant with a listed job, its stale members dropped on the way."""
        while (tenant := top(heap)) is not None:
            jobs = fifos[tenant]
            while jobs and jobs[0] not in waiting:
                jobs.popleft()
            if jobs:
                return tenant
            heapq.heappop(heap)
            del passes[tenant], versions[tenant]
        return None

    def serve(heap: list[tuple[float, str, int]], tenant: str) -> str:
        nonlocal vtime
        pass_ = vtime = passes[tenant]
        job_id = fifos[tenant].popleft()
        waiting.discard(job_id)
        versions[tenant] += 1
        if fifos[tenant]:  # stale members too: a pop's waiting count keeps the tenant active until it meets them
            passes[tenant] = pass_ + snap.costs.get(job_id, 1.0) / snap.weights.get(tenant, 1.0)
            heapq.heappush(heap, (passes[tenant], tenant, versions[tenant]))
        else:
            del passes[tenant], versions[tenant]
        order.append(job_id)
        return job_id

    head = 0
    while head < len(slots):
        entry = slots[head]
        head += 1
        if entry not in waiting:
            order.append(entry)  # a plain entry: served when it reaches the head
            continue
        first = top(ready)
        own = tenant_of[entry]
        if first is not None and own != first and own in passes and passes[own] == passes[first] \
                and fifos[own][0] == entry:
            serve(ready, own)  # tied on pass: the entry's tenant, whose oldest member it is (fair_pop.lua)
            continue
        chosen = choose(ready)
        if chosen is None:
            # Only parked tenants' members are left: each pop serves the next plain entry further down.
            order.extend(job_id for job_id in slots[head:] if job_id not in waiting)
            break
        job_id = serve(ready, chosen)  # the stride choice goes, and the head takes its slot
        if job_id != entry:
            slots[where[job_id]] = entry
            where[entry] = where[job_id]
    # What is left belongs to tenants no pop serves now (parked): in stride order from their kept passes.
    for idle in [tenant for tenant in fifos if tenant not in passes and any(j in waiting for j in fifos[tenant])]:
        passes[idle] = max(vtime, snap.kept.get(idle, snap.active.get(idle, vtime)))
        versions[idle] = 0
    rest = [(pass_, tenant, versions[tenant]) for tenant, pass_ in passes.items()]
    heapq.heapify(rest)
    while (parked := choose(rest)) is not None:
        serve(rest, parked)
    return order
