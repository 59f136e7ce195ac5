"""The reads behind ``fair_router.explain`` (:mod:`fair_router.observe.why`): a waiting job's place
(``lua/why_place.lua``, one read-only script on the queue's slot), its tenant's controls (one MULTI on the tenant's
slot) and the recent throughput (the observers' all-tenant record). Nothing here writes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from redis import Redis

from fair_router.core.keys import FairQueueKeys, Keys
from fair_router.core.text import as_text
from fair_router.observe.recorder import ALL, TICK_SECONDS, TICK_SLOTS
from fair_router.store.luascript import Call, LuaScript
from fair_router.store.profile_scripts import pause_time

BOUND = 1000
"""FIFO places checked one by one and tenants read per explanation; beyond it the place is approximate."""
SCAN = 200_000
"""List entries a plain queue's position is looked for among (LPOS MAXLEN); beyond it: "more than"."""
RATE_TICKS = 6
"""Full ticks (one minute) before the current one the throughput may be measured over."""
RATE_MIN_SECONDS = 3.0
"""Seconds of records after the oldest tick with starts needed to measure the throughput from that tick's end."""


@dataclass(frozen=True)
class PlainPlace:
    """A job on a plain queue (or a plain entry of a fair one): its index on rq's list, -1 when not within SCAN."""

    now_ms: int
    listed: int
    index: int


@dataclass(frozen=True)
class FairPlace:
    """A fair member's place (lua/why_place.lua's reply)."""

    now_ms: int
    listed: int
    tenant: str  # encoded, as the fair queue's keys hold it
    fifo_ahead: int
    fifo_exact: bool
    weight: float
    waiting: int
    where: str  # active | parked | idle
    pass_: float
    parked_until_ms: int | None
    vtime: float
    limit: int | None
    claimed: int
    paced_until_ms: int | None
    tenants_before: int
    jobs_ahead: int
    approximate: tuple[str, ...]  # why jobs_ahead is approximate (empty: exact): fifo_bound, not_active, ...
    active_tenants: int
    tied: int  # other tenants' jobs at this job's pass: pops prefer the one holding the list's head


def _int(text: str) -> int | None:
    return None if text == "" else int(float(text))


class WhyPlaceScript(LuaScript[PlainPlace | FairPlace]):
    """why_place.lua: read-only, a waiting job's place in its queue's serving order."""

    name = "why_place"

    def __call__(self, keys: FairQueueKeys, job_id: str, bound: int = BOUND, scan: int = SCAN,
                 now_ms: str = "") -> Call[PlainPlace | FairPlace]:
        return self.call(keys.all_for_scripts(), [job_id, bound, scan, now_ms])

    def parse(self, reply: Any) -> PlainPlace | FairPlace:
        kind, *rest = [as_text(part) for part in reply]
        if kind == "plain":
            return PlainPlace(*(int(value) for value in rest))
        (now, listed, tenant, ahead, counted, weight, waiting, where, pass_, parked, vtime, limit, claimed, paced,
         before, jobs, exact, active, tied) = rest
        return FairPlace(int(now), int(listed), tenant, int(ahead), counted == "1", float(weight), int(waiting), where,
                         float(pass_), _int(parked), float(vtime), _int(limit), int(claimed), _int(paced),
                         int(before), int(jobs), tuple(filter(None, exact.split(","))), int(active), int(tied))


@dataclass(frozen=True)
class TenantControls:
    """What the start controls hold for one tenant (its slot, ``{lease:<tenant>}``, or for a job under an org the
    org's, ``{lease:!<org>}``, where its leases and rates are then kept) and for its org."""

    paused: bool
    paused_since: datetime | None  # when it was paused (None: not paused, or paused before the time was recorded)
    running: list[str]  # job ids holding a concurrency slot (first BOUND)
    running_count: int
    rate_tat_ms: int | None  # the tenant's own rate: GCRA theoretical arrival time
    reserved_ms: int | None  # a plain queue's job deferred by a rate: the start reserved for it
    park_cause: str | None  # why a refused start parked the tenant in the queue asked about (while the park lasts)
    org_paused_since: datetime | None = None  # the job's org is paused since (None: not paused or no org)
    org_paused: bool = False
    org_running: tuple[str, ...] = ()  # the org's jobs holding its slots (first BOUND)
    org_running_count: int = 0
    org_limit_override: int | None = None  # ``fair-router org set --concurrency``


def tenant_controls(connection: Redis, keys: Keys, tenant: str, job_id: str, queue: str = "",
                    org: str | None = None) -> TenantControls:
    """One pipeline of reads on the tenant's slot (and, for a job under ``org``, the org's); ``queue``: the fair queue
    whose park cause is read."""
    leases = keys.leases(tenant, org)
    with connection.pipeline() as pipe:
        pipe.get(keys.paused(tenant))
        pipe.zrange(leases, 0, BOUND - 1)
        pipe.zcard(leases)
        pipe.get(keys.rate(tenant, org=org))
        pipe.get(keys.rate_paid(tenant, job_id, org))
        pipe.get(keys.park_cause(tenant, queue))
        if org is not None:
            pipe.get(keys.org_paused(org))
            pipe.zrange(keys.org_leases(org), 0, BOUND - 1)
            pipe.zcard(keys.org_leases(org))
            pipe.hget(keys.org_overrides(org), "concurrency")
        paused, running, count, tat, paid, cause, *of_org = pipe.execute()
    controls = TenantControls(paused is not None, pause_time(paused), [as_text(raw) for raw in running], int(count),
                              None if tat is None else int(float(tat)), None if paid is None else int(float(paid)),
                              None if cause is None else as_text(cause))
    if not of_org:
        return controls
    org_paused, org_running, org_count, override = of_org
    return replace(controls, org_paused=org_paused is not None, org_paused_since=pause_time(org_paused),
                   org_running=tuple(as_text(raw) for raw in org_running), org_running_count=int(org_count),
                   org_limit_override=None if override is None else int(as_text(override)))


@dataclass(frozen=True)
class Throughput:
    """Job starts per second over the last full minute, from the observers' all-tenant record."""

    per_second: float
    starts: int
    seconds: int


def throughput(connection: Redis, keys: Keys, now_ms: int, lag: float = 0.0) -> Throughput:
    """Starts of every tenant (all queues: the record is not kept per queue) in the current tick and those before it,
    back to the oldest tick with starts of the RATE_TICKS before it, over the time they span, until now less ``lag``
    (seconds a worker holds its starts before it sends them: half its flush interval on average). Where the starts
    began within that oldest tick (none in the tick before it), they are counted from the earliest admission the
    record's "recent" set holds in it (a tenant's first start of a minute); else from the tick's end once
    RATE_MIN_SECONDS or more follow it (unbiased); else from its start (biased low by its idle part)."""
    tick = now_ms // 1000 // TICK_SECONDS
    wanted = [tick - back for back in range(RATE_TICKS + 1)]
    slots = [held % TICK_SLOTS for held in wanted]
    with connection.pipeline(transaction=False) as pipe:  # one slot ({obs}): one round trip, on a cluster too
        pipe.hmget(keys.observe_record(ALL), [f"t{slot}" for slot in slots] + [f"n{slot}" for slot in slots])
        pipe.zrangebyscore(keys.observe_recent(), wanted[-1] * TICK_SECONDS * 1000, "+inf", 0, 1, withscores=True)
        values, first = pipe.execute()
    counted = {expected: int(count or 0) for when, count, expected in zip(values[:len(slots)], values[len(slots):],
                                                                          wanted, strict=True)
               if when is not None and int(when) == expected and int(count or 0) > 0}
    oldest = min(counted, default=tick)
    begin, end = oldest * TICK_SECONDS, now_ms / 1000 - max(0.0, lag)
    admitted = first[0][1] / 1000 if first else None
    if oldest > wanted[-1] and admitted is not None and begin <= admitted < begin + TICK_SECONDS:
        begin = admitted  # the starts began here (the tick before had none): when its first tenant started
    elif len(counted) > 1 and end - (oldest + 1) * TICK_SECONDS >= RATE_MIN_SECONDS:
        begin += TICK_SECONDS
        counted.pop(oldest)
    seconds = max(1.0, end - begin)
    starts = sum(counted.values())
    return Throughput(starts / seconds, starts, round(seconds))
