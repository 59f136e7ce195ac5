"""The order in which a fair queue would serve its waiting jobs, computed from one snapshot of its state.

rq's list holds every waiting job exactly once, but not in serving order: a pop takes the list head when
rq's internals pushed it (a *plain* entry), and otherwise the stride scheduler's choice. So the listing
rq's tools ask for (``get_job_ids``, job positions) replays the pops of ``fair_pop.lua`` on a copy, with
no new pushes: O(n log tenants) in Python, and no Redis time beyond reading the snapshot.
"""

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
    """Every listed id once, in the order pops would serve them. Members no longer listed (removed by rq
    behind our back) are left out, as the pop drops them; parked tenants' jobs come last, in stride order
    from their kept passes, since no pop serves them before their park ends."""
    on_list = Counter(snap.listed)
    fifos: dict[str, deque[str]] = {}
    places: dict[str, list[tuple[int, str]]] = {}
    for job_id, value in snap.members.items():
        if on_list[job_id]:
            tenant, _, seq = value.rpartition("|")[2].rpartition(":")
            places.setdefault(tenant, []).append((int(seq), job_id))
    for tenant, jobs in places.items():
        fifos[tenant] = deque(job_id for _, job_id in sorted(jobs))
    waiting = {job_id for jobs in fifos.values() for job_id in jobs}  # members a fair choice may still serve

    slots = list(snap.listed)  # the list; a served member's slot takes the head entry, as fair_pop.lua does
    where = {job_id: index for index, job_id in enumerate(slots) if job_id in waiting}
    vtime = snap.vtime
    ready = [(pass_, tenant) for tenant, pass_ in snap.active.items() if fifos.get(tenant)]
    heapq.heapify(ready)
    order: list[str] = []

    def serve(heap: list[tuple[float, str]]) -> str:
        nonlocal vtime
        pass_, tenant = heapq.heappop(heap)
        vtime = pass_
        job_id = fifos[tenant].popleft()
        waiting.discard(job_id)
        if fifos[tenant]:
            heapq.heappush(heap, (pass_ + snap.costs.get(job_id, 1.0) / snap.weights.get(tenant, 1.0), tenant))
        order.append(job_id)
        return job_id

    head = 0
    while head < len(slots):
        entry = slots[head]
        head += 1
        if entry not in waiting:
            order.append(entry)  # a plain entry: served when it reaches the head
        elif not ready:
            # Only parked tenants' members are left: each pop serves the next plain entry further down.
            order.extend(job_id for job_id in slots[head:] if job_id not in waiting)
            break
        else:
            job_id = serve(ready)  # a member at the head: the stride choice goes, and the head takes its slot
            if job_id != entry:
                slots[where[job_id]] = entry
                where[entry] = where[job_id]
    # What is left belongs to tenants no pop serves now (parked): in stride order from their kept passes.
    rest = [(max(vtime, snap.kept.get(tenant, snap.active.get(tenant, vtime))), tenant)
            for tenant, jobs in fifos.items() if jobs]
    heapq.heapify(rest)
    while rest:
        serve(rest)
    return order
