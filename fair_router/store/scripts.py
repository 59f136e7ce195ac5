"""Typed wrappers around the Lua scripts in the top-level ``lua/`` directory: one class per script, each on
:class:`~fair_router.store.luascript.LuaScript` (whose module says how scripts are assembled and run). A wrapper's
``__call__`` names its script's KEYS and ARGV and returns a :class:`~fair_router.store.luascript.Call`: ``.run()``
on its own, or ``.queue(pipeline)``, the one way to run inside a pipeline (``script.parse(reply)`` types the
reply the pipeline's execute returns).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any, NamedTuple

from redis import Redis

from fair_router.routing.rules import Rule, window_cap
from fair_router.store.keys import FairQueueKeys, Keys
from fair_router.store.luascript import Call, LuaScript, assemble, compact

Clock = Callable[[], float]
"""Returns epoch seconds. ``None`` in its place means Redis server ``TIME``."""


def now_arg(clock: Clock | None) -> str:
    """The ``now_ms`` ARGV slot: the injected clock in ms, or '' for server TIME."""
    return "" if clock is None else str(round(clock() * 1000))


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class RouteJob(NamedTuple):
    """One job for route.lua."""

    window: int | None  # index into the call's windows; None: not recorded (system job, no tenant, no rules)
    job_id: str
    candidates: tuple[int, ...] = ()  # sharded: positions in ShardLoads.shards to choose among (empty: unsharded)


class ShardLoads(NamedTuple):
    """The shard section of a route.lua call: the shards its jobs may go to and how to know each family's
    jobs waiting there. ``loads`` holds one (rq list key to LLEN or None, jobs to add) per family (base queue,
    then each rule's queue) and shard, family by family; on shards of other Redis servers the key is None and
    the count, read there, is the number."""

    shards: list[int]
    loads: list[tuple[str | None, int]]


class RouteScript(LuaScript[list[tuple[int, int]]]):
    """route.lua: record each job in its tenant window, return the matching rule per job and, for a sharded
    job key, the least loaded of the job's candidate shards."""

    name = "route"

    def __init__(self, connection: Redis) -> None:
        super().__init__(connection)
        self._headers: dict[tuple[str, tuple[Rule, ...]], list[int | str]] = {}

    def __call__(
        self,
        windows: Sequence[str],
        routed: str,
        jobs: Sequence[RouteJob],
        base: str,
        rules: tuple[Rule, ...],
        now_ms: str,
        shards: ShardLoads | None = None,
    ) -> Call[list[tuple[int, int]]]:
        """KEYS = the job key's ``routed`` counters, ``windows``, then the shard section's load keys;
        ``base``: the queue family of jobs no rule matches. Result: per job (0 or the 1-based index of the rule
        that matched, the chosen shard or -1)."""
        keys = [routed, *windows]
        args: list[str | int | bytes] = [now_ms, *self._header(base, rules), len(windows)]
        if shards is None:
            args.append(0)
        else:
            args += (len(shards.shards), *shards.shards)
            for key, extra in shards.loads:
                if key is None:
                    args += (0, extra)
                else:
                    keys.append(key)
                    args += (len(keys), extra)
        for job in jobs:
            args += (0 if job.window is None else job.window + 1, Keys.member(job.job_id), len(job.candidates),
                     *(position + 1 for position in job.candidates))
        return self.call(keys, args)

    def parse(self, reply: Any) -> list[tuple[int, int]]:
        flat = [int(x) for x in reply]
        return list(zip(flat[::2], flat[1::2], strict=True))

    def _header(self, base: str, rules: tuple[Rule, ...]) -> list[int | str]:
        """ARGV after now_ms: ttl_ms, cap, n_rules, base queue, (per_ms, threshold, queue)...; built once per
        route."""
        header = self._headers.get((base, rules))
        if header is None:
            header = [max((r.per_ms for r in rules), default=1), window_cap(rules) if rules else 1, len(rules), base]
            for rule in rules:
                header += (rule.per_ms, rule.threshold, rule.queue)
            self._headers[(base, rules)] = header
        return header


class WindowCounts(NamedTuple):
    """What peek.lua read of one window."""

    now_ms: int  # the script's clock
    counts: list[int]  # enqueues within each rule's period, in rule order


class PeekScript(LuaScript[WindowCounts]):
    """peek.lua: read-only count of one window for each rule's period."""

    name = "peek"

    def __call__(self, window: str, rules: Sequence[Rule], now_ms: str) -> Call[WindowCounts]:
        """KEYS = [window]; ARGV = now_ms, then each rule's period."""
        return self.call([window], [now_ms, *(rule.per_ms for rule in rules)])

    def parse(self, reply: Any) -> WindowCounts:
        return WindowCounts(int(reply[0]), [int(x) for x in reply[1:]])


class Verdict(IntEnum):
    """acquire.lua's status for one job start."""

    AT_LIMIT = 0  # refused: the tenant's concurrency slots are all taken
    GRANTED = 1  # admitted (a slot taken when concurrency limits are on)
    HELD = 2  # the job already held its slot: lease extended
    RATE = 3  # refused by a rate limit: the next start is allowed at at_ms
    PAUSED = 4  # refused: the tenant is paused
    RESERVED = 5  # refused by a rate limit, its token taken: the job may start at at_ms


class Admission(NamedTuple):
    """What acquire.lua decided for one job start."""

    status: Verdict
    reclaimed: int
    at_ms: int  # RATE / RESERVED: when the job may start (epoch ms, the script's clock)
    now_ms: int  # the script's clock when it decided
    next_ms: int = 0  # GRANTED: when the tenant's own rate allows its next start (0: at once)

    @property
    def admitted(self) -> bool:
        return self.status in (Verdict.GRANTED, Verdict.HELD)


class RateScope(NamedTuple):
    """One GCRA state a start must pass: its key, the interval between starts and the burst tolerance."""

    key: str
    interval_ms: int
    tolerance_ms: int


class AcquireScript(LuaScript[Admission]):
    """acquire.lua: admit a job start (pause, rates) and take or extend a tenant's concurrency slot."""

    name = "acquire"

    def __call__(
        self,
        leases: str,
        paused: str,
        paid: str,
        job_id: str,
        limit: int,
        lease_ms: int,
        now_ms: str,
        rates: Sequence[RateScope] = (),
        reserve: bool = False,
        tenant_scopes: int = 0,
    ) -> Call[Admission]:
        """KEYS = [leases, paused, paid, *rate keys]; ARGV = now_ms, job_id, limit (0 takes no slot), lease_ms,
        reserve, tenant_scopes (the first rate scopes that hold all of the tenant's jobs: their next start
        is returned), then (interval_ms, tolerance_ms) per rate scope."""
        keys = [leases, paused, paid, *(scope.key for scope in rates)]
        args: list[str | int] = [now_ms, job_id, limit, lease_ms, int(reserve), tenant_scopes]
        for scope in rates:
            args += (scope.interval_ms, scope.tolerance_ms)
        return self.call(keys, args)

    def parse(self, reply: Any) -> Admission:
        status, reclaimed, at_ms, now, next_ms = (int(x) for x in reply)
        return Admission(Verdict(status), reclaimed, at_ms, now, next_ms)


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


class FairPushScript(LuaScript[int]):
    """fair_push.lua: add jobs to a fair queue (or put popped ones back after a dead worker)."""

    name = "fair_push"

    def __call__(self, keys: FairQueueKeys, jobs: Sequence[PushEntry]) -> Call[int]:
        """ARGV = nine per job (PushEntry's fields). Result: how many were added, or -(i + 1) when job i would
        pass its cap and nothing was added."""
        args: list[str | float | int] = []
        for job in jobs:
            args += (job.job_id, job.tenant, repr(float(job.weight)), int(job.at_front), int(job.from_inflight),
                     int(job.listed), job.cap, job.func, "" if job.declared is None else repr(float(job.declared)))
        return self.call(keys.all_for_scripts(), args)

    def parse(self, reply: Any) -> int:
        return int(reply)


class PopKind(IntEnum):
    """What a fair pop found."""

    EMPTY = 0  # nothing waits
    PLAIN = 1  # an id rq's internals pushed, served in list order
    FAIR = 2  # the stride scheduler's choice
    STALLED = 3  # jobs wait, but only those of parked tenants


class PopResult(NamedTuple):
    kind: PopKind
    job_id: str | None
    wake_ms: int  # STALLED / EMPTY: when the first park ends (epoch ms), -1 if none
    seq: int | None  # FAIR: the job's place in its tenant's FIFO (for fair_park)


class FairPopScript(LuaScript[PopResult]):
    """fair_pop.lua: the next job of a fair queue, plain entries first-come, fair jobs by stride."""

    name = "fair_pop"

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
        kind, job_id, wake, seq = reply
        return PopResult(PopKind(int(kind)), _text(job_id) or None, int(wake), None if seq in (b"", "") else int(seq))


class FairParkScript(LuaScript[int]):
    """fair_park.lua: put a refused job back at its tenant's front and park the tenant."""

    name = "fair_park"

    def __call__(
        self, keys: FairQueueKeys, job_id: str, tenant: str, weight: float, until_ms: int, seq: int | None,
        limit: int | None = None,
    ) -> Call[int]:
        """``seq``: the job's FIFO place when a fair choice served it (pop kind 2 or 3): it goes back there,
        and the 1 / weight its pop added to the tenant's pass is taken back; None for a plain entry, whose
        pop added nothing (it goes to the front). ``limit``: the tenant's concurrency limit (0 none, None
        not known). Result: 1 if the job was put back, 0 if it was waiting."""
        refund = seq is not None
        args: list[str | int] = [job_id, tenant, repr(float(weight)), until_ms, int(refund), "" if seq is None else seq,
                                 "" if limit is None else limit]
        return self.call(keys.all_for_scripts(), args)

    def parse(self, reply: Any) -> int:
        return int(reply)


class FairUnparkScript(LuaScript[int]):
    """fair_unpark.lua: a tenant's slot was released; make it eligible and wake one worker if needed."""

    name = "fair_unpark"

    def __call__(self, keys: FairQueueKeys, tenant: str, job_id: str = "", limit: int | None = None,
                 now_ms: str = "") -> Call[int]:
        """``job_id``: the job whose slot was released (its claim here ends); ``limit``: the tenant's limit
        (0 none, None not known). Result: 1 if the tenant has jobs waiting in this queue and may be served."""
        return self.call(keys.all_for_scripts(), [tenant, job_id, "" if limit is None else limit, now_ms])

    def parse(self, reply: Any) -> int:
        return int(reply)


class FairHoldScript(LuaScript[int]):
    """fair_hold.lua: park a tenant before a pop hands out its job (paused), or report a paced tenant's start
    (parked exactly until its rate's next start)."""

    name = "fair_hold"

    def __call__(self, keys: FairQueueKeys, tenant: str, until_ms: int, paced: bool = False,
                 now_ms: str = "") -> Call[int]:
        """Result: 1 if the tenant has jobs waiting in this queue, else 0."""
        return self.call(keys.all_for_scripts(), [tenant, until_ms, int(paced), now_ms])

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


class AbandonScript(LuaScript[list[str]]):
    """abandon.lua: move abandoned executions from rq's StartedJobRegistry to our staging set, each only if
    its score is still the one read (no heartbeat since)."""

    name = "abandon"

    def __call__(
        self, started: str, staging: str, counter: str, entries: Sequence[tuple[str, float]]
    ) -> Call[list[str]]:
        """KEYS = [started, staging, counter]; ``entries`` = (member, score read). Result: the members moved,
        which ``counter`` (the queue's abandoned-jobs count) has counted in the same call."""
        args: list[str] = []
        for member, score in entries:
            args += (member, repr(float(score)))
        return self.call([started, staging, counter], args)

    def parse(self, reply: Any) -> list[str]:
        return [_text(raw) for raw in reply]


class ObserveStartScript(LuaScript[list[int]]):
    """observe_start.lua: add a batch of job starts (a worker's buffer) to the tenants' records. The record
    layout's constants go in front of the script's text rather than in ARGV, and the text is sent compacted:
    the flush rides rq's job-start MULTI as an EVAL of that text."""

    name = "observe_start"

    def __init__(self, connection: Redis, constants: Sequence[int]) -> None:
        """``constants``: cap, ttl, minute_slots, tick_ms, tick_slots, n_buckets, recent_ms (the script's
        header names them)."""
        self.constants = tuple(constants)
        super().__init__(connection)

    def build_source(self) -> str:
        names = "cap, ttl, minute_slots, tick_ms, tick_slots, n_buckets, recent_ms"
        return f"local {names} = {', '.join(map(str, self.constants))}\n" + compact(assemble(self.name))

    def __call__(self, fixed: Sequence[str], records: Sequence[str], args: Sequence[int | str]) -> Call[list[int]]:
        """KEYS = ``fixed`` (#other, #all, recent) then one record per group; ARGV = now_ms ('' = server
        TIME), then per group: age_ms, starts, total wait (us), k, k pairs (bucket, starts)."""
        return self.call([*fixed, *records], args)

    def parse(self, reply: Any) -> list[int]:
        return [int(flag) for flag in reply]


class FairUnmarkScript(LuaScript[int]):
    """fair_unmark.lua: remove a queue's fairness mark, only while the queue is empty."""

    name = "fair_unmark"

    def __call__(self, rq_list: str, members: str, mark: str) -> Call[int]:
        """KEYS = [rq_list, members, mark]. Result: 1 removed, 0 there was none, -N: N jobs still wait."""
        return self.call([rq_list, members, mark], [])

    def parse(self, reply: Any) -> int:
        return int(reply)
