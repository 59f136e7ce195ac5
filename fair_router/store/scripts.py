"""Typed wrappers around the Lua scripts in the top-level ``lua/`` directory: one class per script, each on
:class:`~fair_router.store.luascript.LuaScript` (whose module says how scripts are assembled and run). A wrapper's
``__call__`` names its script's KEYS and ARGV and returns a :class:`~fair_router.store.luascript.Call`: ``.run()``
on its own, or ``.queue(pipeline)``, the one way to run inside a pipeline (``script.parse(reply)`` types the
reply the pipeline's execute returns).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from redis import Redis

from fair_router.core.keys import Keys
from fair_router.core.rules import Rule, window_cap
from fair_router.core.shards import SHARD_SUFFIX
from fair_router.core.text import as_text as _text
from fair_router.store.luascript import Call, LuaScript

Clock = Callable[[], float]
"""Returns epoch seconds. ``None`` in its place means Redis server ``TIME``."""


def now_arg(clock: Clock | None) -> str:
    """The ``now_ms`` ARGV slot: the injected clock in ms, or '' for server TIME."""
    return "" if clock is None else str(round(clock() * 1000))


Text = str | bytes
"""A key or text argument: str, or bytes already encoded (what a hot path keeps to skip the client's encoder)."""


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


class RoutePush(NamedTuple):
    """route.lua's push section: where one job saved earlier in the same MULTI goes once its rule is chosen."""

    job_key: Text  # the job's hash (rq's job key)
    queues_key: Text  # rq's set of queue keys
    at_front: bool
    job_id: Text
    lists: list[Text]  # the rq list of each family: base queue, then each rule's
    metas: list[bytes]  # the job's serialized meta for each rule's family (the rule is in it); the base
    # family's is the one rq saved with the job
    fair: Text = ""  # per family (base first) '1' for a fair queue: not pushed by route.lua; "" = none is
    inflight: tuple[Text, ...] = ()  # with a fair family: each family's fair inflight key (a plain one's list)


class RouteWaiting(NamedTuple):
    """route.lua's waiting section: its recorded jobs count waiting for their tenants in the queues chosen."""

    keys: tuple[Text, Text]  # the job key's waiting counts and jobs (Keys.waiting)
    tenants: Sequence[Text]  # the encoded tenant of each window, in window order
    unthrottled_only: bool = False  # only jobs no rule moved count (the rules' queues are fair: they count theirs)


NONE, ONE, TWO = b"0", b"1", b"2"
"""route.lua's section markers (none / a section follows, in one of two modes) as sent: no int to encode."""
SMALL = tuple(str(n).encode() for n in range(256))
"""Small counts and indexes as sent: redis-py encodes an int argument by repr, about 2 µs, a str 1 µs."""


def _count(n: int) -> bytes | int:
    """``n`` as route.lua gets it, pre-encoded when small."""
    return SMALL[n] if n < 256 else n


class RouteScript(LuaScript[list[tuple[int, int]]]):
    """route.lua: record each job in its tenant window, return the matching rule per job and, for a sharded
    job key, the least loaded of the job's candidate shards."""

    name = "route"
    as_function = True  # run on its own (FairRouter.place): its lua/lib pieces defined once, not per call; in the
    # one-round-trip enqueue's MULTI it goes as EVALSHA (routing/enqueue.py)

    def __init__(self, connection: Redis) -> None:
        super().__init__(connection)
        self._headers: dict[tuple[str, tuple[Rule, ...]], bytes] = {}  # route_header per (base, rules)

    def __call__(
        self,
        windows: Sequence[Text],
        routed: Text,
        jobs: Sequence[RouteJob],
        base: str,
        rules: tuple[Rule, ...],
        now_ms: str,
        shards: ShardLoads | None = None,
        push: RoutePush | None = None,
        waiting: RouteWaiting | None = None,
    ) -> Call[list[tuple[int, int]]]:
        """KEYS = the job key's ``routed`` counters, ``windows``, then the shard section's load keys, then the
        push section's keys; ``base``: the queue family of jobs no rule matches; ``push``: one job to push;
        ``waiting``: count the recorded jobs waiting in the plain queues they go to (observe/waiting.py).
        Result: per job (0 or the 1-based index of the rule that matched, the chosen shard or -1)."""
        keys = [routed, *windows]
        header = self._headers.get((base, rules))
        if header is None:
            header = self._headers[(base, rules)] = route_header(base, rules)
        args: list[str | int | bytes] = [now_ms or b"", header, _count(len(windows))]
        if waiting is None:
            args.append(NONE)
        else:
            keys += waiting.keys
            args += (TWO if waiting.unthrottled_only else ONE, *waiting.tenants)
        if shards is None:
            args.append(NONE)
        else:
            args += (len(shards.shards), *shards.shards)
            for key, extra in shards.loads:
                if key is None:
                    args += (0, extra)
                else:
                    keys.append(key)
                    args += (len(keys), extra)
        if push is None:
            args.append(NONE)
        else:  # its keys last, where route.lua finds them
            keys += (*push.inflight, push.job_key, push.queues_key, *push.lists)
            args += (TWO if push.at_front else ONE, push.job_id, *push.metas,
                     push.fair or "0" * (len(push.metas) + 1))
        for job in jobs:
            args += (NONE if job.window is None else _count(job.window + 1), Keys.member(job.job_id),
                     _count(len(job.candidates)), *(position + 1 for position in job.candidates))
        return self.call(keys, args)  # type: ignore[arg-type]  # keys: str or pre-encoded bytes, as redis-py sends

    def parse(self, reply: Any) -> list[tuple[int, int]]:
        flat = [int(x) for x in reply]
        return list(zip(flat[::2], flat[1::2], strict=True))


def route_header(base: str, rules: tuple[Rule, ...]) -> bytes:
    """route.lua's header (ARGV[2], lib/windows.lua): a route's rules, window cap and ttl, base queue and the shard
    queues' suffix in one binary argument, which the script reads in place with ``struct.unpack``: one argument
    where ten cost redis-py 1-2 µs each. Fixed part ``>HIII`` (n_rules, cap, the 1-based offsets of the suffix's
    and the base queue's texts), then per rule ``>QII`` (per_ms, threshold, its queue's offset), then the texts,
    each ``>I`` length and bytes: the ttl (ms, digits) first, at ``15 + 16 n_rules``."""
    ttl, cap = max((rule.per_ms for rule in rules), default=1), window_cap(rules) if rules else 1
    texts = [str(ttl).encode(), SHARD_SUFFIX.encode(), base.encode(), *(rule.queue.encode() for rule in rules)]
    offsets, at = [], 15 + 16 * len(rules)
    for text in texts:
        offsets.append(at)
        at += 4 + len(text)
    head = struct.pack(">HIII", len(rules), cap, offsets[1], offsets[2])
    per_rule = b"".join(struct.pack(">QII", rule.per_ms, rule.threshold, offset)
                        for rule, offset in zip(rules, offsets[3:], strict=True))
    return head + per_rule + b"".join(struct.pack(">I", len(text)) + text for text in texts)


class WindowCounts(NamedTuple):
    """What peek.lua read of one window."""

    now_ms: int  # the script's clock
    counts: list[int]  # enqueues within each rule's period, in rule order


class UnrecordScript(LuaScript[int]):
    """unrecord.lua: take back window entries (and their routed counts) of jobs whose enqueue failed."""

    name = "unrecord"

    def __call__(self, windows: Sequence[str], routed: str, jobs: Sequence[tuple[int, str, str]],
                 waiting: tuple[str, str]) -> Call[int]:
        """KEYS = ``windows``, the job key's waiting counts and jobs, and its ``routed`` counters; ``jobs`` =
        (index into windows, job id, the queue route.lua counted it for). Result: the entries removed."""
        args: list[str | int | bytes] = []
        for index, job_id, queue in jobs:
            args += (index + 1, Keys.member(job_id), queue)
        return self.call([*windows, *waiting, routed], args)

    def parse(self, reply: Any) -> int:
        return int(reply)


class UnwaitScript(LuaScript[list[bytes]]):
    """unwait.lua: routed jobs that started stop counting waiting in the plain queue they went to."""

    name = "unwait"

    def __call__(self, waiting: tuple[str, str], job_ids: Sequence[str]) -> Call[list[bytes]]:
        """KEYS = the job key's waiting counts and jobs (:meth:`Keys.waiting`). Result: (digest, field) of each
        job that was counted, flat and as sent (a digest is binary), as :class:`RewaitScript` takes it back."""
        return self.call(list(waiting), [Keys.member(job_id) for job_id in job_ids])

    def parse(self, reply: Any) -> list[bytes]:
        return [item if isinstance(item, bytes) else str(item).encode() for item in reply or ()]


class RewaitScript(LuaScript[int]):
    """rewait.lua: jobs whose start was refused after unwait.lua took their counts count waiting again."""

    name = "rewait"

    def __call__(self, waiting: tuple[str, str], taken: Sequence[bytes]) -> Call[int]:
        """KEYS = as :class:`UnwaitScript`; ARGV = its result. Result: the jobs counted again."""
        return self.call(list(waiting), list(taken))

    def parse(self, reply: Any) -> int:
        return int(reply)


class PeekScript(LuaScript[WindowCounts]):
    """peek.lua: read-only count of one window for each rule's period."""

    name = "peek"

    def __call__(self, window: str, rules: Sequence[Rule], now_ms: str) -> Call[WindowCounts]:
        """KEYS = [window]; ARGV = now_ms, then each rule's period."""
        return self.call([window], [now_ms, *(rule.per_ms for rule in rules)])

    def parse(self, reply: Any) -> WindowCounts:
        return WindowCounts(int(reply[0]), [int(x) for x in reply[1:]])


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
    """observe_start.lua: add a batch of job starts (a worker's buffer) to the tenants' records. The flush rides
    rq's job-start MULTI as an EVAL; the record layout's settings go in every call's ARGV."""

    name = "observe_start"

    def __init__(self, connection: Redis, constants: Sequence[int]) -> None:
        """``constants``: cap, ttl, minute_slots, tick_ms, tick_slots, n_buckets, recent_ms (the script's
        header names them)."""
        self.constants = tuple(constants)
        super().__init__(connection)

    def __call__(self, fixed: Sequence[str], records: Sequence[str], args: Sequence[int | str]) -> Call[list[int]]:
        """KEYS = ``fixed`` (#other, #all, recent) then one record per group; ``args`` = now_ms ('' = server
        TIME), then per group: age_ms, starts, total wait (us), k, k pairs (bucket, starts); the constants go
        after now_ms."""
        return self.call([*fixed, *records], [args[0], *self.constants, *args[1:]])

    def parse(self, reply: Any) -> list[int]:
        return [int(flag) for flag in reply]
