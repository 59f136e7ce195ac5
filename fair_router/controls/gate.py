"""A job's start checks: pause, (with ``slots``) the concurrency slot, and rates, each a small
:class:`StartControl` (:mod:`~fair_router.controls.pauses`, :mod:`~fair_router.controls.concurrency`,
:mod:`~fair_router.controls.ratelimit`), decided in that order by ONE call of ``lua/start.lua`` per start
(:class:`StartScript`), queued on rq's job-start MULTI (:mod:`fair_router.workers.start_gate`). Why this
order, and what becomes of a refused start: docs/internals.md ("Follow a slot take")."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import IntEnum
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import NoScriptError, ResponseError
from rq import Queue
from rq.job import Job

from fair_router.controls.orgs import OrgProfile
from fair_router.controls.tiers import TierBook
from fair_router.core.profiles import TenantProfile
from fair_router.core.tenancy import InvalidTenant, stored_org
from fair_router.store.luascript import Call, LuaScript, forget_functions, function_lost
from fair_router.store.scripts import Clock, now_arg


class Verdict(IntEnum):
    """The start script's status for one job start."""

    AT_LIMIT = 0  # refused: the tenant's concurrency slots are all taken
    GRANTED = 1  # admitted (a slot taken when concurrency limits are on)
    HELD = 2  # the job already held its slot: lease extended
    RATE = 3  # refused by a rate limit: the next start is allowed at at_ms
    PAUSED = 4  # refused: the tenant is paused
    RESERVED = 5  # refused by a rate limit, its token taken: the job may start at at_ms
    ORG_LIMIT = 6  # refused: the job's organisation runs as many jobs as its concurrency limit allows
    ORG_PAUSED = 7  # refused: the job's organisation is paused


class Admission(NamedTuple):
    """What the start script decided for one job start."""

    status: Verdict
    reclaimed: int
    at_ms: int  # RATE / RESERVED: when the job may start; AT_LIMIT: when its first lease expires (epoch ms)
    now_ms: int  # the script's clock when it decided
    next_ms: int = 0  # GRANTED: when the tenant's own rate allows its next start (0: at once)
    report: bool = False  # GRANTED from a fair queue, paced: the queue must hear next_ms (lib/start_rate.lua)

    @property
    def admitted(self) -> bool:
        return self.status in (Verdict.GRANTED, Verdict.HELD)


class RateScope(NamedTuple):
    """One GCRA state a start must pass: its key, the interval between starts and the burst tolerance."""

    key: str
    interval_ms: int
    tolerance_ms: int


@dataclass(frozen=True)
class Lease:
    """A held slot: whose, on which tier, for which job."""

    tenant: str
    tier: str
    job_id: str
    org: str | None = None  # the job's organisation: its lease-family keys are under the org's tag (Keys.lease_base)


@dataclass(frozen=True)
class Start:
    """One job start as the controls see it: whose, which job, the tenant's profile (looked up once)."""

    tenant: str
    job_id: str
    profile: TenantProfile
    rates: tuple[RateScope, ...] = ()  # the GCRA scopes it must pass, the tenant's own first
    tenant_scopes: int = 0  # how many of ``rates`` hold every job of the tenant (0 or 1)
    reserve: bool = False  # a rate refusal takes the job's token and reserves its start (plain queues)
    refresh: bool = False  # the job already runs in its slot: a refusal is a lost slot, not a refused job
    fair_queue: str = ""  # the FairQueue the job came from ('' none): a refusal at the limit parks it there
    org: str | None = None  # the job's organisation (core.tenancy.stored_org), None for none
    org_profile: OrgProfile | None = None  # its values in effect (controls/orgs.py), with ``org``


Section = tuple[list[str], list[str | int]]
"""One control's KEYS and ARGV in the start script call, in the order its ``lua/lib`` piece reads them."""


@dataclass(frozen=True)
class Refusal:
    """What becomes of a start a control refused."""

    counter: str  # the per-tier counter it is counted under
    why: str  # for the worker's log line
    park_seconds: float  # how long a fair queue parks the tenant (skipped by pops) at most
    until_ms: int | None = None  # a rate's next token: a plain queue's job comes back then, a park ends then
    until_release: bool = False  # parked until one of the tenant's slots is released (Keys.parked_in records it)
    org_release: bool = False  # parked until one of its org's slots is released (Keys.org_parked_in records it)


class StartControl(Protocol):
    """One check of a job start (a small class: pause, slot, rate): its ``lua/lib`` piece, the refusals it
    returns, their counter, and three hooks."""

    piece: ClassVar[str]
    verdicts: ClassVar[tuple[Verdict, ...]]
    counter: ClassVar[str]

    def needed(self, start: Start) -> bool:
        """Whether this start must go to Redis for this control (none needing it: no call at all)."""

    def section(self, start: Start) -> Section:
        """Its KEYS and ARGV in the start script."""

    def on_refused(self, admission: Admission) -> Refusal:
        """What becomes of a start it refused."""


class Rates(StartControl, Protocol):
    """The rate control (controls/ratelimit.py): also names the rate scopes a job's start must pass."""

    def scopes(self, tenant: str, profile: TenantProfile, job: Job, org: str | None = None,
               org_profile: OrgProfile | None = None) -> list[RateScope]: ...


class Slots(Protocol):
    """What the gate uses of its limiter (controls/concurrency.py's ConcurrencySlots)."""

    @property
    def connection(self) -> Redis: ...
    @property
    def tiers(self) -> TierBook: ...
    @property
    def clock(self) -> Clock | None: ...
    @property
    def tally(self) -> Tally: ...
    @property
    def pause(self) -> StartControl: ...
    @property
    def slot(self) -> StartControl: ...
    @property
    def org_controls(self) -> tuple[StartControl, StartControl]: ...
    @property
    def org_profile(self) -> Callable[[str], OrgProfile] | None: ...

    def defer(self, job: Job, queue: Queue, when: datetime, held: str = "") -> None: ...


L = TypeVar("L", bound=Slots)


class Tally(Protocol):
    """Where the controls' counts go (per tier, by name); written with the next pipeline that passes by (the slots
    taken and released at every job: once a second, fair_router/observe/counters.py)."""

    def add(self, tier: str, counter: str, amount: int = 1) -> None: ...

    def queue(self, pipe: Pipeline, force: bool = False) -> int: ...


class StartScript(LuaScript[Admission]):
    """start.lua: one text for every list of controls; each call names its controls' pieces, in order. A Redis
    function where the server has them (its pieces defined once, not at each start)."""

    name = "start"
    as_function = True

    def __init__(self, connection: Redis, pieces: Sequence[str]) -> None:
        self.pieces = tuple(pieces)
        super().__init__(connection)

    def __call__(self, now_ms: str, job_id: str, sections: Sequence[Section]) -> Call[Admission]:
        """KEYS = every section's keys in order; ARGV = now_ms, job_id, then per section: the piece's name, its
        number of keys, of args, and its args. A section without keys or args (an org control of a job without an
        org) is left out: an org-less start sends what it sent before orgs had limits."""
        keys: list[str] = []
        args: list[str | int] = [now_ms, job_id]
        for piece, (section_keys, section_args) in zip(self.pieces, sections, strict=True):
            if not section_keys and not section_args:
                continue
            keys += section_keys
            args += (piece, len(section_keys), len(section_args), *section_args)
        return self.call(keys, args)

    def parse(self, reply: Any) -> Admission:
        status, reclaimed, at_ms, now, next_ms, *report = (int(x) for x in reply)
        return Admission(Verdict(status), reclaimed, at_ms, now, next_ms, report == [1])


class PendingStart(NamedTuple):
    """A start check queued on someone else's pipeline: the start, and the place of its reply."""

    start: Start
    place: int


class TenantGate(Generic[L]):
    """acquire / refusal / defer of one job start: the configured controls, in order, as one script call that
    rides in the caller's pipeline; counts go to the limiter's tally."""

    def __init__(self, limiter: L, rates: Rates, slots: bool) -> None:
        self.limiter, self.rates, self.slots = limiter, rates, slots
        # a paused tenant (or org) is refused as paused even when its slots are all taken; a rate goes last, because
        # its refusal with ``reserve`` takes the job's token. The org's pause and slot follow the tenant's: a job
        # without an org sends them no keys (lua/start.lua skips them)
        org_pause, org_slot = limiter.org_controls
        self.controls: tuple[StartControl, ...] = (limiter.pause, org_pause,
                                                   *((limiter.slot, org_slot) if slots else ()), rates)
        self.script = StartScript(limiter.connection, [control.piece for control in self.controls])
        self._by_verdict = {verdict: control for control in self.controls for verdict in control.verdicts}

    def start(self, tenant: str, job: Job, scopes: list[RateScope] | None = None, reserve: bool = False,
              fair_queue: str = "") -> Start:
        """``job``'s start as the controls see it; ``fair_queue``: the FairQueue it came from ('' none)."""
        rates = tuple(scopes or ())
        org, org_profile = self.org_of(job)
        return Start(tenant, job.id, self.limiter.tiers.profile(tenant, org), rates,
                     int(self.own_rate(tenant, list(rates), org)), reserve, fair_queue=fair_queue, org=org,
                     org_profile=org_profile)

    def org_of(self, job: Job) -> tuple[str | None, OrgProfile | None]:
        """``job``'s organisation and its values in effect; (None, None) for none (an unusable stored org is read
        as none: the fair queue's push warned of it)."""
        try:
            org = stored_org(job.meta)
        except InvalidTenant:
            return None, None
        found = self.limiter.org_profile
        return (None, None) if org is None else (org, found(org) if found is not None else None)

    def checks(self, tenant: str, job: Job) -> list[RateScope] | None:
        """The rate scopes ``job``'s start must pass, or None when no control needs a call (no slots, no rate, the
        tenant not paused as of the tier cache): then the start costs no round trip."""
        org, org_profile = self.org_of(job)
        profile = self.limiter.tiers.profile(tenant, org)  # its org's tier when it has none of its own
        scopes = self.rates.scopes(tenant, profile, job, org, org_profile)
        start = Start(tenant, job.id, profile, tuple(scopes), org=org, org_profile=org_profile)
        return scopes if any(control.needed(start) for control in self.controls) else None

    def acquire(self, tenant: str, job: Job, scopes: list[RateScope], reserve: bool,
                pipeline: Pipeline | None = None, fair_queue: str = "") -> tuple[Admission, Lease | None]:
        """Decide whether ``job`` may start now (``scopes`` from :meth:`checks`, the tenant's own rate first: an
        admission's ``next_ms`` is when it allows the tenant's next start). ``reserve`` (plain queues): a rate
        refusal takes the job's token and reserves its start, returned as ``at_ms``. The lease: a slot held."""
        start = self.start(tenant, job, scopes, reserve, fair_queue)
        admission = self.run(start, pipeline)
        return admission, self._lease(start, admission)

    def run(self, start: Start, pipeline: Pipeline | None = None) -> Admission:
        """Decide ``start`` by one call (with ``pipeline``: after its commands, in the same round trip, with the
        pending counts). Executed here, so the call goes as FCALL (EVALSHA where it cannot); after a NOSCRIPT or
        "Function not found" only the call is sent again, on its own (it did nothing; the pipeline's other
        commands ran)."""
        call = self._call(start)
        if pipeline is None:
            return self._counted(start, call.run())
        self.limiter.tally.queue(pipeline)
        place = len(pipeline)
        call.run_or_queue(pipeline, ours=True)
        replies = pipeline.execute(raise_on_error=False)
        for other in replies:
            if isinstance(other, Exception) and not isinstance(other, NoScriptError) and not function_lost(other):
                raise other
        return self._counted(start, self._decided(call, replies[place]))

    def queue_check(self, tenant: str, job: Job, scopes: list[RateScope], reserve: bool,
                    pipeline: Pipeline, fair_queue: str = "") -> PendingStart:
        """:meth:`acquire`'s call (and the pending counts) queued on a pipeline someone else executes (rq's
        job-start MULTI); :meth:`answer` reads its decision from the replies."""
        start = self.start(tenant, job, scopes, reserve, fair_queue)
        self.limiter.tally.queue(pipeline)
        place = len(pipeline)
        self._call(start).queue_function(pipeline)
        return PendingStart(start, place)

    def answer(self, pending: PendingStart, replies: list[Any]) -> tuple[Admission, Lease | None]:
        """What :meth:`acquire` returns, from the replies of the pipeline ``pending`` was queued on (its FCALL met
        "Function not found": made again on its own)."""
        admission = self._counted(pending.start, self._decided(self._call(pending.start), replies[pending.place]))
        return admission, self._lease(pending.start, admission)

    def _decided(self, call: Call[Admission], reply: Any) -> Admission:
        """The admission of ``reply``; a call that did nothing (NOSCRIPT, "Function not found": Redis lost the
        script) is made again on its own."""
        if isinstance(reply, NoScriptError) or function_lost(reply):
            forget_functions()
            return call.run()
        if isinstance(reply, ResponseError):
            raise reply
        return self.script.parse(reply)

    def _call(self, start: Start) -> Call[Admission]:
        return self.script(now_arg(self.limiter.clock), start.job_id,
                           [control.section(start) for control in self.controls])

    def _counted(self, start: Start, admission: Admission) -> Admission:
        """Counts a refusal (unless a refresh), a slot taken and leases reclaimed."""
        tier, tally = start.profile.tier, self.limiter.tally
        tally.add(tier, "reclaimed", admission.reclaimed)
        if self.slots and admission.status == Verdict.GRANTED:
            tally.add(tier, "acquired")
        refusing = self._by_verdict.get(admission.status)
        if refusing is not None and not start.refresh:
            tally.add(tier, refusing.counter)
        return admission

    def _lease(self, start: Start, admission: Admission) -> Lease | None:
        held = self.slots and admission.admitted
        return Lease(start.tenant, start.profile.tier, start.job_id, start.org) if held else None

    def refusal(self, admission: Admission) -> Refusal | None:
        """What becomes of a start refused by ``admission`` (None: it was admitted), from the refusing control."""
        refusing = self._by_verdict.get(admission.status)
        return None if refusing is None else refusing.on_refused(admission)

    def own_rate(self, tenant: str, scopes: list[RateScope] | None, org: str | None = None) -> bool:
        """True when the tenant has a rate of its own, the first of ``scopes`` (its override or tier's)."""
        return bool(scopes) and self.limiter.tiers.profile(tenant, org).rate is not None

    def defer_until(self, job: Job, queue: Queue, at_ms: int, held: str = "") -> datetime:
        """Reschedule ``job`` to its queue for ``at_ms`` (rounded up to whole seconds, as rq's scheduler keeps
        them, so it never comes back early), at the front: its token is paid, it must not wait again behind
        later jobs (which would delay every later token of a backlog too). ``held``: as the limiter's ``defer``."""
        when = datetime.fromtimestamp(math.ceil(at_ms / 1000), timezone.utc)
        job.enqueue_at_front = True
        self.limiter.defer(job, queue, when, held)
        return when
