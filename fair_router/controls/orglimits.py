"""An organisation's start controls: its pause and its concurrency slot, decided in the same start call as its
tenant's (``lua/start.lua``: ``start_org_pause``, ``start_org_slot``), on the org's cluster slot, where a tenant's
lease-family keys live when its job has an org (:meth:`~fair_router.core.keys.Keys.lease_base`). A job without an org
sends them no keys, and they decide nothing. The org's rate is one more scope of the rate control
(:mod:`~fair_router.controls.ratelimit`). A refused job waits as its tenant's would: parked in its FairQueue (until
the org's next release, or its pause ends), deferred on a plain queue (docs/tenant-controls.md, Organisations)."""

from __future__ import annotations

from fair_router.config.sections import ConcurrencyConfig
from fair_router.controls.gate import Admission, Refusal, Section, Start, StartControl, Verdict
from fair_router.controls.pauses import PAUSE_PARK
from fair_router.core.keys import Keys, encode


def org_parked_member(tenant: str, queue: str) -> str:
    """The org's parked-in member of ``tenant`` parked in fair queue ``queue`` (``|`` never comes out of encode)."""
    return f"{encode(tenant)}|{queue}"


class OrgPauseCheck(StartControl):
    """Refused while the job's organisation is paused (``fair-router org pause``)."""

    piece = "start_org_pause"
    verdicts = (Verdict.ORG_PAUSED,)
    counter = "paused"

    def __init__(self, keys: Keys) -> None:
        self.keys = keys

    def needed(self, start: Start) -> bool:
        """Only an org paused as of the org cache (within 5 s); any call that goes reads the flag itself."""
        return start.org_profile is not None and start.org_profile.paused

    def section(self, start: Start) -> Section:
        """The org's pause flag; nothing for a job without an org."""
        return ([self.keys.org_paused(start.org)], []) if start.org is not None else ([], [])

    def on_refused(self, admission: Admission) -> Refusal:
        """Parked for :data:`PAUSE_PARK` at most (``org resume`` unparks its tenants at once); snoozed on a plain
        queue."""
        return Refusal(self.counter, "in a paused org", PAUSE_PARK)


class OrgSlot(StartControl):
    """The org's concurrency limit: one lease per running job of its tenants, across every worker."""

    piece = "start_org_slot"
    verdicts = (Verdict.ORG_LIMIT,)
    counter = "refused"

    def __init__(self, keys: Keys, config: ConcurrencyConfig) -> None:
        self.keys, self.config = keys, config
        self.lease_ms = max(1, round(config.lease_ttl * 1000))

    def needed(self, start: Start) -> bool:
        """Only an org with a limit (the tenant's own slot makes the call anyway)."""
        return start.org_profile is not None and start.org_profile.limit is not None

    def section(self, start: Start) -> Section:
        """The org's leases and parked-in set; its limit, the lease's life, the member a refusal parks."""
        profile = start.org_profile
        if start.org is None or profile is None or profile.limit is None:
            return [], []
        parked = org_parked_member(start.tenant, start.fair_queue) if start.fair_queue else ""
        return ([self.keys.org_leases(start.org), self.keys.org_parked_in(start.org)],
                [profile.limit, self.lease_ms, parked])

    def on_refused(self, admission: Admission) -> Refusal:
        """Parked until the org's next release (at most until its first lease expires); snoozed on a plain queue."""
        seconds = self.config.lease_ttl
        if admission.at_ms:
            seconds = min(seconds, max(0.001, (admission.at_ms - admission.now_ms) / 1000))
        return Refusal(self.counter, "in an org at its limit", seconds, until_release=True, org_release=True)
