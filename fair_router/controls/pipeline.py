"""Job-start checks as a pipeline: each control (pause, concurrency slot, rate) is a small
:class:`StartControl` with the same three hooks, and a :class:`StartPipeline` runs a configured list of
them, in order, as ONE script call per start.

The script is built from the list (:class:`~fair_router.store.scripts.StartScript`): ``lua/lib/start.lua``
runs each control's own ``lua/lib/start_<name>.lua`` piece in the list's order, so adding a control is a
class here and a piece there, and a start still costs one call, riding in the caller's pipeline.

A control's hooks, in the order a start meets them:

- :meth:`StartControl.needed`: whether this start must go to Redis for it at all; when no control needs
  to, the start costs no round trip (limits off, no rate, tenant not paused as of the tier cache);
- :meth:`StartControl.section`: its KEYS and ARGV in the start script;
- :meth:`StartControl.on_refused`: what becomes of a start it refused (the counter, how long a fair queue
  parks the tenant, when a plain queue's job comes back), so the worker has no branch per control.

Backlog caps are no start control: they are decided where jobs are pushed, atomically with the push
(``lua/fair_push.lua``, :mod:`fair_router.controls.backlog`), before any worker sees the job.

What a start holds while its job runs (a slot's lease) is kept alive and released by the limiter
(:mod:`fair_router.controls.concurrency`); counts go to a :class:`Tally` (the workers give
:class:`fair_router.observe.counters.TierCounters`, which also reads them back).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple, Protocol

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import NoScriptError

from fair_router.core.profiles import TenantProfile
from fair_router.store.luascript import Call
from fair_router.store.scripts import Admission, Clock, RateScope, StartScript, Verdict, now_arg


class Tally(Protocol):
    """Where the controls' counts go (per tier, by name); written with the next pipeline that passes by."""

    def add(self, tier: str, counter: str, amount: int = 1) -> None:
        """Count ``amount`` more of ``counter`` for ``tier``, written later by :meth:`queue`."""

    def queue(self, pipe: Pipeline) -> int:
        """Queue the pending counts on ``pipe``; returns how many commands were queued."""


class NoTally:
    """A tally that keeps nothing: for controls run where nobody reads counts."""

    def add(self, tier: str, counter: str, amount: int = 1) -> None:
        """Nothing is counted."""

    def queue(self, pipe: Pipeline) -> int:
        """Nothing to write."""
        return 0


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


class Section(NamedTuple):
    """One control's part of the start script call."""

    keys: list[str]
    args: list[str | int]


@dataclass(frozen=True)
class Refusal:
    """What becomes of a start a control refused."""

    counter: str  # the per-tier counter it is counted under
    why: str  # for the worker's log line
    park_seconds: float  # how long a fair queue parks the tenant (skipped by pops) at most
    until_ms: int | None = None  # a rate's next token (server clock): a plain queue's job comes back then, a fair
    #                              queue's park ends then (None: after a snooze / park_seconds)
    until_release: bool = False  # parked until one of the tenant's slots is released (Keys.parked_in records it)


class StartControl:
    """One check of a job start; a subclass names its Lua piece, its verdicts and its counter."""

    piece: ClassVar[str]
    """Its ``lua/lib`` piece, which decides it inside the start script."""
    verdicts: ClassVar[tuple[Verdict, ...]]
    """The refusals it returns."""
    counter: ClassVar[str]
    """The per-tier counter a refusal of it is counted under."""

    def needed(self, start: Start) -> bool:
        """Whether this start must go to Redis for this control: one needing it costs the start a call."""
        raise NotImplementedError

    def section(self, start: Start) -> Section:
        """Its KEYS and ARGV in the start script, in the order its piece reads them."""
        raise NotImplementedError

    def on_refused(self, start: Start, admission: Admission) -> Refusal:
        """What becomes of a start it refused, so the worker handles every control's refusal alike."""
        raise NotImplementedError


class StartPipeline:
    """Runs a list of start controls, in order, as one script call per start; counts go to ``tally``."""

    def __init__(self, connection: Redis, controls: Sequence[StartControl], tally: Tally,
                 clock: Clock | None = None) -> None:
        self.controls = tuple(controls)
        self.tally = tally
        self.clock = clock
        self.script = StartScript(connection, [control.piece for control in self.controls])
        self._by_verdict = {verdict: control for control in self.controls for verdict in control.verdicts}
        self.slots = any(control.piece == "start_slot" for control in self.controls)

    def needed(self, start: Start) -> bool:
        """Whether any control needs a call for this start."""
        return any(control.needed(start) for control in self.controls)

    def run(self, start: Start, pipeline: Pipeline | None = None) -> Admission:
        """Decide ``start`` by one call (with ``pipeline``: after the commands queued there, in the same round
        trip, with the pending counts). The pipeline is executed here, so the call goes as EVALSHA (Redis does
        not hash the script's text at each start, as it must an EVAL's); after a NOSCRIPT (Redis lost its
        scripts) only the call is sent again, on its own (it did nothing; the pipeline's other commands ran)."""
        call = self._call(start)
        if pipeline is None:
            return self._counted(start, call.run())
        self.tally.queue(pipeline)
        place = len(pipeline)
        call.queue_loaded(pipeline)
        replies = pipeline.execute(raise_on_error=False)
        reply = replies[place]
        for other in replies:
            if isinstance(other, Exception) and not isinstance(other, NoScriptError):
                raise other
        if isinstance(reply, NoScriptError):
            return self._counted(start, call.run())
        return self.answer(start, reply)

    def queue(self, start: Start, pipeline: Pipeline) -> int:
        """Queue ``start``'s call (and the pending counts) on ``pipeline``, which someone else may execute
        (rq's job-start MULTI); returns the place of its reply in ``pipeline.execute()``'s list."""
        self.tally.queue(pipeline)
        place = len(pipeline)
        self._call(start).queue(pipeline)
        return place

    def answer(self, start: Start, reply: object) -> Admission:
        """The admission in the reply of a call :meth:`queue` placed."""
        return self._counted(start, self.script.parse(reply))

    def _counted(self, start: Start, admission: Admission) -> Admission:
        """Counts a refusal (unless a refresh), a slot taken and leases reclaimed."""
        tier = start.profile.tier
        self.tally.add(tier, "reclaimed", admission.reclaimed)
        if self.slots and admission.status == Verdict.GRANTED:
            self.tally.add(tier, "acquired")
        refusing = self._by_verdict.get(admission.status)
        if refusing is not None and not start.refresh:
            self.tally.add(tier, refusing.counter)
        return admission

    def _call(self, start: Start) -> Call[Admission]:
        return self.script(now_arg(self.clock), start.job_id, [control.section(start) for control in self.controls])

    def refusal(self, start: Start, admission: Admission) -> Refusal | None:
        """What becomes of ``start`` after ``admission`` (None: it was admitted)."""
        refusing = self._by_verdict.get(admission.status)
        return None if refusing is None else refusing.on_refused(start, admission)
