"""Typed wrappers of the fair queue's Lua scripts (``lua/fair_*.lua``), apart from the other wrappers
(:mod:`fair_router.store.scripts`): every one takes the queue's keys in :class:`~fair_router.core.keys.FairQueueKeys`
order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from fair_router.controls.fairstate import TENANT_FIELD, record_waiting, record_weight
from fair_router.core.keys import FairQueueKeys
from fair_router.core.text import as_text as _text
from fair_router.rq_internals.queue import PopKind, PopResult
from fair_router.store.luascript import Call, LuaScript


def _tenant_records(state: dict[Any, Any]) -> dict[str, Any]:
    """Tenant (encoded) -> its record, out of a fair queue's ``state`` hash (as HGETALL read it)."""
    texts = ((_text(field), value) for field, value in state.items())
    return {field[len(TENANT_FIELD):]: value for field, value in texts if field.startswith(TENANT_FIELD)}


def tenant_weights(state: dict[Any, Any]) -> dict[str, float]:
    """Tenant (encoded) -> weight from its last push, for every tenant with waiting jobs, out of the ``state``
    hash's tenant records."""
    return {tenant: float(record_weight(value) or 1.0) for tenant, value in _tenant_records(state).items()}


def tenant_waiting(state: dict[Any, Any]) -> dict[str, int]:
    """Tenant (encoded) -> how many of its jobs wait, for every tenant with waiting jobs, out of the ``state``
    hash's tenant records."""
    return {tenant: record_waiting(value) for tenant, value in _tenant_records(state).items()}


def tenant_orgs(state: dict[Any, Any]) -> dict[str, list[str]]:
    """Tenant (encoded) -> its record's org fields (encoded org, org weight, pass in its org, "1" when in its
    org's set: lua/lib/records.lua), for every tenant of an org with waiting jobs, out of the ``state`` hash."""
    split = ((tenant, _text(value).split("|")) for tenant, value in _tenant_records(state).items())
    return {tenant: parts[4:8] for tenant, parts in split if len(parts) >= 8}


class PushEntry(NamedTuple):
    """One job for fair_push.lua."""

    job_id: str
    tenant: str  # encoded (FairQueue.tenant_key)
    weight: float
    at_front: bool = False
    from_inflight: bool = False  # only if still recorded as popped-not-started (recovery)
    listed: bool = False  # rq already pushed the id onto its list (unique=True): only give it a FIFO place
    cap: int = 0  # the tenant's backlog cap in this queue (0: none); a call passing one pushes nothing
    func: str = ""  # charge="runtime": the job's function, whose recent run time its pop charges
    declared: float | None = None  # charge="runtime": the job's declared cost in seconds (fair_cost=)
    org: str = ""  # the tenant's organisation, encoded ("": the tenant is its own org)
    org_weight: float = 1.0  # the org's weight (settings ``orgs``)


def weight_arg(job: PushEntry) -> str:
    """The weight argument of a push: the tenant's weight, or for a tenant of an org "<weight>|<org>|<org weight>"
    (lua/lib/fifo.lua fifo_place)."""
    weight = repr(float(job.weight))
    return f"{weight}|{job.org}|{float(job.org_weight)!r}" if job.org else weight


class FairPushScript(LuaScript[int]):
    """fair_push.lua: add jobs to a fair queue (or put popped ones back after a dead worker)."""

    name = "fair_push"
    as_function = True  # every enqueue: its lua/lib pieces defined once, not per call (Call.queue_ours)

    def __call__(self, keys: FairQueueKeys, jobs: Sequence[PushEntry]) -> Call[int]:
        """ARGV = nine per job (PushEntry's fields). Result: how many were added, or -(i + 1) when job i would
        pass its cap and nothing was added."""
        args: list[str | float | int] = []
        for job in jobs:
            args += (job.job_id, job.tenant, weight_arg(job), int(job.at_front), int(job.from_inflight),
                     int(job.listed), job.cap, job.func, "" if job.declared is None else repr(float(job.declared)))
        return self.call(keys.all_for_scripts(), args)

    def parse(self, reply: Any) -> int:
        return int(reply)


class FairPopScript(LuaScript[PopResult]):
    """fair_pop.lua: the next job of a fair queue, plain entries first-come, fair jobs by stride."""

    name = "fair_pop"
    as_function = True  # every worker's every fetch: its lua/lib pieces defined once, not per call

    def __call__(
        self, keys: FairQueueKeys, given: str, acks: Sequence[str], now_ms: str, runtime: bool = False,
        lease_ms: int = 0,
    ) -> Call[PopResult]:
        """``given``: an entry the caller already took off rq's list (BLPOP), else ''; ``acks``: ids this
        caller popped before, which have run since; ``runtime``: charge the estimated run time, not 1 job;
        ``lease_ms``: how long a limited tenant's job counts against its limit here without a release
        (lua/lib/claims.lua; 0 = no claims)."""
        return self.call(keys.all_for_scripts(), [now_ms, given, int(runtime), lease_ms, len(acks), *acks])

    def parse(self, reply: Any) -> PopResult:
        kind, job_id, wake, seq, *now = reply
        return PopResult(PopKind(int(kind)), _text(job_id) or None, int(wake), None if seq in (b"", "") else int(seq),
                         int(now[0]) if now else -1)


class FairParkScript(LuaScript[int]):
    """fair_park.lua: put a refused job back at its tenant's front and park the tenant."""

    name = "fair_park"

    def __call__(
        self, keys: FairQueueKeys, job_id: str, tenant: str, weight: float, until_ms: int, seq: int | None,
        limit: int | None = None, exact: bool = False, org: str = "", org_limit: int | None = None,
        org_full: bool = False,
    ) -> Call[int]:
        """``seq``: the job's FIFO place when a fair choice served it (pop kind 2 or 3): it goes back there,
        and the 1 / weight its pop added to the tenant's pass is taken back; None for a plain entry, whose
        pop added nothing (it goes to the front). ``limit``: the tenant's concurrency limit (0 none, None
        not known). ``exact``: a rate refused the start and ``until_ms`` (server clock) is its next token: the
        park ends then. ``org``: "<encoded org>|<org weight>" ("" none: FairConfig.org_arg); ``org_limit``: its
        concurrency limit, as ``limit``; ``org_full``: the org's limit refused the start (the org is
        parked too). Result: 1 if the job was put back, 0 if it was waiting."""
        refund = seq is not None
        args: list[str | int] = [job_id, tenant, repr(float(weight)), until_ms, int(refund), "" if seq is None else seq,
                                 "" if limit is None else limit, int(exact), org,
                                 "" if org_limit is None else org_limit, int(org_full)]
        return self.call(keys.all_for_scripts(), args)

    def parse(self, reply: Any) -> int:
        return int(reply)


class FairSettleScript(LuaScript[int]):
    """fair_settle.lua: charge="runtime": replace a popped job's estimated charge with its real cost."""

    name = "fair_settle"

    def __call__(
        self, keys: FairQueueKeys, job_id: str, measured: float | None, trust: bool, now_ms: str = ""
    ) -> Call[int]:
        """``measured``: seconds the job ran; None when its worker died (charged from its pop until now).
        Result: 1 if there was a charge to settle."""
        args = [now_ms, job_id, "" if measured is None else repr(float(measured)), int(trust)]
        return self.call(keys.all_for_scripts(), args)

    def parse(self, reply: Any) -> int:
        return int(reply)


class FairRemoveScript(LuaScript[int]):
    """fair_remove.lua: take one job out of a fair queue, keeping the token accounting exact."""

    name = "fair_remove"

    def __call__(self, keys: FairQueueKeys, job_id: str) -> Call[int]:
        """Result: list entries removed (1, or 0 when the job was not waiting), as rq's LREM."""
        return self.call(keys.all_for_scripts(), [job_id])

    def parse(self, reply: Any) -> int:
        return int(reply)


class FairUnmarkScript(LuaScript[int]):
    """fair_unmark.lua: remove a queue's fairness mark, only while the queue is empty."""

    name = "fair_unmark"

    def __call__(self, rq_list: str, members: str, mark: str) -> Call[int]:
        """KEYS = [rq_list, members, mark]. Result: 1 removed, 0 there was none, -N: N jobs still wait."""
        return self.call([rq_list, members, mark], [])

    def parse(self, reply: Any) -> int:
        return int(reply)


class FairMigrateScript(LuaScript[int]):
    """fair_migrate.lua: move a fair queue's state from an earlier layout into today's, once, so
    an upgrade never strands a waiting job (``Keys.fair_queue_legacy`` names the old keys)."""

    name = "fair_migrate"

    def __call__(self, keys: FairQueueKeys, legacy: Sequence[str]) -> Call[int]:
        """KEYS = [state, members, *legacy (head, tail, weights, fifo, backlog)]. Result: the tenants moved."""
        return self.call([keys.state, keys.members, *legacy], [])

    def parse(self, reply: Any) -> int:
        return int(reply)


class TidyResult(NamedTuple):
    """What fair_tidy.lua reports of a fair queue's stale members (lua/lib/stale.lua)."""

    ids: list[str]  # stale ids noted since the last tidy, handed to this caller only
    stale: int  # members ever found gone from rq's list (dropped, their tenants' counts with them)
    plain: int  # of those, how many our processes found run by a worker without our pop (a lower bound)
    length: int  # entries on rq's list


class FairTidyScript(LuaScript[TidyResult]):
    """fair_tidy.lua: drop the stale members of an empty fair queue and hand over the stale ids noted."""

    name = "fair_tidy"

    def __call__(self, keys: FairQueueKeys) -> Call[TidyResult]:
        return self.call(keys.all_for_scripts(), [])

    def parse(self, reply: Any) -> TidyResult:
        ids, stale, plain, length = reply
        return TidyResult(_text(ids).split(), int(stale), int(plain), int(length))


class FairRecountScript(LuaScript[list[int]]):
    """fair_recount.lua: tenants' waiting counts checked against rq's list (stale members dropped), before a
    backlog cap's pre-check refuses them."""

    name = "fair_recount"

    def __call__(self, keys: FairQueueKeys, tenants: Sequence[str]) -> Call[list[int]]:
        """``tenants``: encoded. Result: each one's waiting count, in order."""
        return self.call(keys.all_for_scripts(), list(tenants))

    def parse(self, reply: Any) -> list[int]:
        return [int(count) for count in reply]


class ReconcileResult(NamedTuple):
    """What fair_reconcile.lua did to a fair queue's counts."""

    exact: bool  # the list and the members were compared (False: beyond the bound, counts as they were)
    dropped: int  # stale members dropped (rq took their ids off the list)
    adopted: int  # ids rq pushed itself that joined their tenants' FIFOs
    plain: list[str]  # listed ids that are no members (compared only): for the caller to adopt
    length: int  # entries on rq's list


class FairReconcileScript(LuaScript[ReconcileResult]):
    """fair_reconcile.lua: compare a fair queue's members with rq's list (bounded) and adopt ids given."""

    name = "fair_reconcile"

    def __call__(self, keys: FairQueueKeys, bound: int, adopt: Sequence[PushEntry] = ()) -> Call[ReconcileResult]:
        """``bound``: compare only when the list and the members each hold at most this many entries; ``adopt``:
        listed ids to give a FIFO place (tenant, weight and costs from their entries)."""
        args: list[str | int] = [bound]
        for job in adopt:
            args += (job.job_id, job.tenant, weight_arg(job), job.func,
                     "" if job.declared is None else repr(float(job.declared)))
        return self.call(keys.all_for_scripts(), args)

    def parse(self, reply: Any) -> ReconcileResult:
        exact, dropped, adopted, plain, length = reply
        return ReconcileResult(bool(int(exact)), int(dropped), int(adopted), [_text(i) for i in plain], int(length))
