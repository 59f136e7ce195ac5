"""The order in which a fair queue would serve its waiting jobs: the pops of ``fair_pop.lua`` replayed on one
snapshot of its state, in Python (``get_job_ids``, job positions), at both levels: organisations by their pass in
``active``, each org's tenants by their pass in ``orgs`` (lua/lib/orgs.lua, serve.lua, ties.lua)."""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

ORG = "!"
"""The prefix of an organisation's entry in ``active`` (lua/lib/orgs.lua)."""
PASS_FORMAT = "%.6f"
"""How a tenant's pass in its org is written in its record (lua/lib/orgs.lua): 6 decimals, compared as numbers."""


@dataclass(frozen=True)
class OrgPlace:
    """A tenant of an organisation, as its record says (lua/lib/records.lua)."""

    org: str  # encoded
    weight: float  # the org's weight
    pass_: str  # the tenant's pass in its org as written (PASS_FORMAT), "" when it has none yet
    on: bool  # in its org's set (else parked, or not yet activated)


@dataclass(frozen=True)
class FairSnapshot:
    """What the replay reads, taken in one MULTI."""

    listed: Sequence[str]  # rq's list, head first
    members: Mapping[str, str]  # job id -> "<order>|<tenant>:<seq>"
    active: Mapping[str, float]  # tenant without org, or ORG + org -> pass
    kept: Mapping[str, float]  # tenant or ORG + org -> pass kept while idle or parked
    weights: Mapping[str, float]
    vtime: float
    costs: Mapping[str, float] = field(default_factory=dict)  # job id -> its pop's charge (charge="runtime")
    places: Mapping[str, OrgPlace] = field(default_factory=dict)  # tenant of an org -> its place
    in_orgs: Sequence[str] = ()  # the members of ``orgs`` as listing.py reads them: "<org>\0<pass>\0<tenant>"


class _Schedule:
    """The two-level stride schedule of one replay: top-level entries (tenants without org, orgs) in a heap of
    (pass, entry, version), each org's tenants in a heap of (pass as written, as a number; tenant; version); an entry is
    current while its version is its key's (ZRANGE's order: by score, then by name)."""

    def __init__(self, snap: FairSnapshot, fifos: dict[str, deque[str]], waiting: set[str]) -> None:
        self.snap, self.fifos, self.waiting = snap, fifos, waiting
        self.vtime = snap.vtime
        self.kept = dict(snap.kept)
        self.passes: dict[str, float] = {}  # top-level entry -> pass
        self.inner: dict[str, str] = {}  # tenant of an org, in its org's set -> its pass there
        self.own = {tenant: place.pass_ for tenant, place in snap.places.items()}  # passes kept in records
        self.sizes: Counter[str] = Counter()  # org -> tenants in its set
        self.versions: Counter[str] = Counter()
        self.heap: list[tuple[float, str, int]] = []
        self.heaps: dict[str, list[tuple[float, str, int]]] = {}
        for entry, pass_ in snap.active.items():
            if entry.startswith(ORG) or fifos.get(entry):
                self._set_top(entry, pass_)
        for member in snap.in_orgs:
            org, written, tenant = member.split("\0", 2)
            if fifos.get(tenant) and tenant in snap.places:
                self._enter(tenant, org, written)

    def _set_top(self, entry: str, pass_: float) -> None:
        self.versions[entry] += 1
        self.passes[entry] = pass_
        heapq.heappush(self.heap, (pass_, entry, self.versions[entry]))

    def _drop_top(self, entry: str) -> None:
        self.versions[entry] += 1
        del self.passes[entry]

    def _enter(self, tenant: str, org: str, pass_: str) -> None:
        self.versions[tenant] += 1
        self.sizes[org] += 1
        self.inner[tenant] = self.own[tenant] = pass_
        heapq.heappush(self.heaps.setdefault(org, []), (float(pass_), tenant, self.versions[tenant]))

    def _leave(self, tenant: str, org: str) -> None:
        if self.inner.pop(tenant, None) is not None:
            self.versions[tenant] += 1
            self.sizes[org] -= 1

    def first(self, org: str) -> str | None:
        """The min-pass tenant of ``org``'s set (``ZRANGEBYLEX``), None when it has none."""
        heap = self.heaps.get(org, [])
        while heap and self.versions[heap[0][1]] != heap[0][2]:
            heapq.heappop(heap)
        return heap[0][1] if heap else None

    def top(self) -> tuple[str, float] | None:
        """The min-pass entry and its pass, as ``ZRANGE active 0 0`` gives it."""
        while self.heap and self.versions[self.heap[0][1]] != self.heap[0][2]:
            heapq.heappop(self.heap)
        return (self.heap[0][1], self.heap[0][0]) if self.heap else None

    def tenant(self, entry: str) -> str | None:
        """The tenant a top-level entry stands for: itself, or an org's min-pass tenant."""
        return self.first(entry[len(ORG):]) if entry.startswith(ORG) else entry

    def ties(self, tenant: str, min_pass: float) -> bool:
        """Whether ``tenant`` is tied on the minimum at both levels (lua/lib/ties.lua): its top-level entry's pass is
        ``min_pass`` and, in an org, its pass there is its org's minimum."""
        place = self.snap.places.get(tenant)
        if place is None:
            return self.passes.get(tenant) == min_pass
        first = self.first(place.org)
        return (tenant in self.inner and first is not None and self.inner[first] == self.inner[tenant]
                and self.passes.get(ORG + place.org) == min_pass)

    def choose(self) -> str | None:
        """The stride choice: the min-pass entry's tenant with a listed job, its stale members dropped on the way."""
        while (top := self.top()) is not None:
            tenant = self.tenant(top[0])
            if tenant is None:  # an org without active tenant: it leaves
                self._drop_top(top[0])
                continue
            jobs = self.fifos[tenant]
            while jobs and jobs[0] not in self.waiting:
                jobs.popleft()
            if jobs:
                return tenant
            self._idle(tenant, None)
        return None

    def _idle(self, tenant: str, pass_: float | None) -> None:
        """``tenant`` has nothing left: it leaves (keeping ``pass_`` if given; in an org, none)."""
        place = self.snap.places.get(tenant)
        if place is None:
            self._drop_top(tenant)
            if pass_ is not None:
                self.kept[tenant] = pass_
        else:
            self._leave(tenant, place.org)
            self._settle(place.org)

    def _settle(self, org: str) -> None:
        """An org is in ``active`` exactly while its set has a tenant (lua/lib/orgs.lua org_settle)."""
        entry = ORG + org
        if self.sizes[org] > 0:
            self._activate_entry(entry)
        elif entry in self.passes:
            self.kept[entry] = self.passes[entry]
            self._drop_top(entry)

    def _activate_entry(self, entry: str) -> None:
        if entry not in self.passes:
            self._set_top(entry, max(self.vtime, self.kept.pop(entry, self.vtime)))

    def activate(self, tenant: str) -> None:
        """A parked tenant's park ends (lua/lib/stride.lua activate): in an org, it starts at its org's min pass,
        or at its own if later, by at most one step."""
        place = self.snap.places.get(tenant)
        if place is None:
            return self._activate_entry(tenant)
        if tenant in self.inner:
            return None
        first, kept = self.first(place.org), self.own.get(tenant)
        start = float(kept) if kept else None
        if first is not None:
            base = float(self.inner[first])
            start = max(base, min(base if start is None else start, base + 1 / self.snap.weights.get(tenant, 1.0)))
        self._enter(tenant, place.org, PASS_FORMAT % max(0.0, start or 0.0))
        return self._settle(place.org)

    def serve(self, tenant: str) -> str:
        """Serve ``tenant``'s oldest job (lua/lib/serve.lua serve_take): its entry's pass advances by the step
        over the entry's weight (an org's), and a tenant of an org, unless alone there, by the step over its own."""
        place = self.snap.places.get(tenant)
        entry = tenant if place is None else ORG + place.org
        pass_ = self.vtime = self.passes[entry]
        job_id = self.fifos[tenant].popleft()
        self.waiting.discard(job_id)
        step, weight = self.snap.costs.get(job_id, 1.0), self.snap.weights.get(tenant, 1.0)
        left = bool(self.fifos[tenant])  # stale members too: a pop's waiting count keeps the tenant active
        if place is None:
            if left:
                self._set_top(tenant, pass_ + step / weight)
            else:
                self._idle(tenant, pass_ + step / weight)
            return job_id
        self._set_top(entry, pass_ + step / place.weight)
        if not left:
            self._idle(tenant, None)
        elif self.sizes[place.org] > 1:
            mine = float(self.inner[tenant]) + step / weight
            self._leave(tenant, place.org)
            self._enter(tenant, place.org, PASS_FORMAT % max(0.0, mine))
        return job_id


def serving_order(snap: FairSnapshot) -> list[str]:
    """Every listed id once, in the order pops would serve them; members no longer listed are left out, and parked
    tenants' jobs come last, served as if their parks all ended after the last pop."""
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
    schedule = _Schedule(snap, fifos, waiting)

    slots = list(snap.listed)  # the list; a served member's slot takes the head entry, as fair_pop.lua does
    where = {job_id: index for index, job_id in enumerate(slots) if job_id in waiting}
    order: list[str] = []
    head = 0
    while head < len(slots):
        entry = slots[head]
        head += 1
        if entry not in waiting:
            order.append(entry)  # a plain entry: served when it reaches the head
            continue
        top = schedule.top()
        first = None if top is None else schedule.tenant(top[0])
        own = tenant_of[entry]
        if top is not None and first is not None and own != first and fifos[own][0] == entry \
                and schedule.ties(own, top[1]):
            order.append(schedule.serve(own))  # tied on pass: the entry's tenant, whose oldest member it is
            continue
        chosen = schedule.choose()
        if chosen is None:
            # Only parked tenants' members are left: each pop serves the next plain entry further down.
            order.extend(job_id for job_id in slots[head:] if job_id not in waiting)
            break
        job_id = schedule.serve(chosen)  # the stride choice goes, and the head takes its slot
        order.append(job_id)
        if job_id != entry:
            slots[where[job_id]] = entry
            where[entry] = where[job_id]
    # What is left belongs to tenants no pop serves now (parked): their parks end, in stride order from then.
    for tenant, jobs in fifos.items():
        if any(job_id in waiting for job_id in jobs):
            schedule.activate(tenant)
    while (parked := schedule.choose()) is not None:
        order.append(schedule.serve(parked))
    return order
