"""Organisations on the dashboard and ``/metrics``: each tenant's org and the orgs' figures, out of the fair queues'
state hashes the snapshot reads anyway (a tenant of an org names it in its record: lua/lib/records.lua), so no
read more. The top N orgs by jobs waiting are shown, the rest summed under ``_other`` (as tenants are)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from fair_router.dashboard.model import OTHER_LABEL, OrgView, TenantView
from fair_router.dashboard.queueread import QueueRead


@dataclass
class OrgFigures:
    """The orgs waiting now and the two-level fair shares (empty when no org waits)."""

    orgs: list[OrgView] = field(default_factory=list)  # the top N by jobs waiting
    other: OrgView | None = None  # every other org, summed; None when there are no more than N
    tenant_org: dict[str, str] = field(default_factory=dict)  # tenant key -> org key
    org_share: dict[str, float] = field(default_factory=dict)  # org key -> its fair share
    tenant_share: dict[str, float] = field(default_factory=dict)  # tenant key -> its fair share, two levels

    def apply(self, rows: Sequence[TenantView], label: Callable[[str], str]) -> None:
        """Name each row's org and its org's share, and give the rows the two-level fair share (a tenant alone in
        every queue it waits in keeps none: it shares with nobody)."""
        if not self.org_share:
            return
        for row in rows:
            org = self.tenant_org.get(row.key)
            if org is not None:
                row.org, row.org_share = label(org), self.org_share[org]
            if row.key in self.tenant_share and not row.alone:
                row.fair_share = self.tenant_share[row.key]


def org_figures(reads: Sequence[QueueRead], top_n: int, label: Callable[[str], str]) -> OrgFigures:
    """The orgs of the fair queues read (``reads``), the top ``top_n`` by jobs waiting; ``label``: an encoded id as
    shown. The fair shares are over every fair queue together, as the tenants' one-level ones are: top-level
    entries (orgs, and tenants without org) by weight, then an org's share among its tenants by weight."""
    weights: dict[str, float] = {}
    tenant_org: dict[str, str] = {}
    org_weight: dict[str, float] = {}
    waiting: dict[str, Counter[str]] = {}  # org -> queue -> jobs
    members: dict[str, Counter[str]] = {}  # org -> tenant -> jobs
    parked: dict[str, set[str]] = {}
    for read in reads:
        for tenant, jobs in (read.backlog or {}).items():
            weights[tenant] = max(weights.get(tenant, 0.0), read.weights.get(tenant, 1.0))
            if tenant not in read.orgs:
                continue
            org, weight = read.orgs[tenant]
            tenant_org[tenant], org_weight[org] = org, max(org_weight.get(org, 0.0), weight)
            waiting.setdefault(org, Counter())[read.view.name] += jobs
            members.setdefault(org, Counter())[tenant] += jobs
            if tenant in read.parked:
                parked.setdefault(org, set()).add(tenant)
    if not org_weight:
        return OrgFigures()
    top_level = sum(org_weight.values()) + sum(w for tenant, w in weights.items() if tenant not in tenant_org)
    org_share = {org: weight / top_level for org, weight in org_weight.items()}
    tenant_share = {}
    for tenant, weight in weights.items():
        if tenant not in tenant_org:
            tenant_share[tenant] = weight / top_level
            continue
        org = tenant_org[tenant]
        tenant_share[tenant] = org_share[org] * weight / sum(weights[other] for other in members[org])
    views = [OrgView(label(org), org, org_weight[org], [label(t) for t, _ in members[org].most_common(top_n)],
                     len(members[org]), dict(waiting[org]), len(parked.get(org, ())), org_share[org])
             for org in org_weight]
    views.sort(key=lambda view: (-view.waiting_total, view.org))
    rest = views[top_n:]
    other = None
    if rest:
        summed: Counter[str] = sum((Counter(view.waiting) for view in rest), Counter())
        other = OrgView(OTHER_LABEL, "", None, [], sum(view.tenants_waiting for view in rest), dict(summed),
                        sum(view.parked for view in rest), sum(view.fair_share or 0.0 for view in rest))
    return OrgFigures(views[:top_n], other, tenant_org, org_share, tenant_share)
