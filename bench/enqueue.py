"""Enqueue cost of fair-router against plain rq, measured side by side in one run.

1. Single enqueue: median latency of ``Queue.enqueue(noop, i)`` vs a ``@fair_job``'s ``.delay(tenant, i)``
   (50 tenants). The sides alternate call by call, and which goes first alternates by round, so that
   machine noise hits both.
2. Batch enqueue: ``Queue.enqueue_many`` vs ``FairJob.enqueue_many`` of 10k jobs (50 tenants), jobs/s.
3. Memory: one tenant enqueues 10k jobs within a day; ``MEMORY USAGE`` of its window key stays bounded.
4. Script cost: ``usec_per_call`` of ``cmdstat_evalsha`` (route.lua) with 1k and with 100k tenants.

Runs against a private redis-server, or against ``$REDIS_URL`` when set: then it only touches its own
uniquely named queues and keys, deletes them at the end, never flushes, and reads command statistics
as deltas instead of resetting them.

    .venv/bin/python bench/enqueue.py [--rounds N] [--quick] [--json PATH] [--only SECTION]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from importlib.metadata import version
from pathlib import Path
from typing import Any
from uuid import uuid4

from redis import Redis
from rq import Queue
from rq.job import Job

# This checkout's fair_router, not the installed one: a worktree of another commit measures that commit.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fair_router import FairJobFunction, FairRouter, Rule, fair_job
from fair_router.demo.redis_server import RedisServer
from fair_router.routing.router import Route

# rq stores a job's function by dotted path and refuses functions defined in __main__.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs import noop

TENANTS = 50
MEMORY_GOAL_BYTES = 4096
SCRIPT_GOAL_USEC = 10.0
FLAT_GOAL = 1.25  # 100k-tenant script cost / 1k-tenant script cost


@dataclass(frozen=True)
class Sizes:
    rounds: int  # single-enqueue rounds, each side
    per_round: int  # single enqueues per round, each side
    batch_rounds: int  # enqueue_many rounds, each side
    batch: int  # jobs per enqueue_many
    memory_jobs: int  # enqueues of the one tenant in section 3
    small_tenants: int  # section 4, first phase
    large_tenants: int  # section 4, second phase


FULL = Sizes(rounds=10, per_round=500, batch_rounds=5, batch=10_000, memory_jobs=10_000,
             small_tenants=1_000, large_tenants=100_000)
QUICK = Sizes(rounds=2, per_round=100, batch_rounds=2, batch=1_000, memory_jobs=1_000,
              small_tenants=100, large_tenants=2_000)


@dataclass
class Row:
    """One line of the result table; ``ok`` is None for rows that only inform."""

    metric: str
    plain: str
    routed: str
    value: str
    goal: str
    ok: bool | None


# -- the server under test ------------------------------------------------------------------------


class Target:
    """A Redis connection plus the queue names and key prefix this run owns on it."""

    def __init__(self, conn: Redis, private: bool) -> None:
        self.conn = conn
        self.private = private
        run = f"fair_bench_{secrets.token_hex(3)}"
        self.prefix = run
        self.base = f"{run}.default"
        self.throttled = f"{run}.default_throttled"
        self.superslow = f"{run}.default_superslow"
        self.router = FairRouter(conn, prefix=self.prefix)

    @property
    def queue_names(self) -> tuple[str, str, str]:
        return (self.base, self.throttled, self.superslow)

    def rules(self, longest: str = "1h") -> tuple[Rule, Rule]:
        """The rules under test: > 100 per ``longest`` -> throttled, > 10 per minute -> superslow."""
        return (Rule(queue=self.throttled, threshold=100, per=longest),
                Rule(queue=self.superslow, threshold=10, per="1m"))

    def routed_noop(self) -> FairJobFunction[..., None]:
        """``noop`` as a ``@fair_job`` on the base queue whose tenant is its first argument. (``router=``
        rather than ``connection=``, which would take the key prefix from the settings file.)"""
        return fair_job(self.base, rules=self.rules(), tenant=lambda tenant, i: tenant, router=self.router)(noop)

    def empty_queues(self) -> None:
        """Delete this run's queued jobs and queues (windows stay)."""
        for name in self.queue_names:
            Queue(name, connection=self.conn).delete(delete_jobs=True)

    def reset(self) -> None:
        """Remove everything this run wrote: a flush on a private server, else only its own keys."""
        if self.private:
            self.conn.flushdb()
            return
        self.empty_queues()
        batch: list[bytes] = []
        for key in self.conn.scan_iter(match=f"{self.prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                self.conn.unlink(*batch)
                batch.clear()
        if batch:
            self.conn.unlink(*batch)

    def evalsha_stats(self) -> tuple[int, int]:
        """(calls, usec) of EVALSHA so far."""
        stats = self.conn.info("commandstats").get("cmdstat_evalsha", {})
        return int(stats.get("calls", 0)), int(stats.get("usec", 0))

    def script_usec(self) -> int:
        """Server usec of EVAL and EVALSHA so far (a routed batch's one script call is either)."""
        stats = self.conn.info("commandstats")
        return sum(int(stats.get(f"cmdstat_{name}", {}).get("usec", 0)) for name in ("eval", "evalsha"))

    def reset_evalsha_stats(self) -> tuple[int, int]:
        """CONFIG RESETSTAT on a private server (a shared one's statistics are left alone); then
        :meth:`evalsha_stats`, to subtract from a later reading."""
        if self.private:
            self.conn.config_resetstat()
        return self.evalsha_stats()


@contextmanager
def target() -> Iterator[Target]:
    url = os.environ.get("REDIS_URL")
    server = None if url else RedisServer().start()
    conn = Redis.from_url(url) if url else server.client()
    bench = Target(conn, private=server is not None)
    try:
        yield bench
    finally:
        try:
            bench.reset()
        finally:
            conn.close()
            if server is not None:
                server.stop()


# -- helpers --------------------------------------------------------------------------------------


def time_alternating(first: Callable[[int], object], second: Callable[[int], object], start: int,
                     n: int) -> tuple[list[int], list[int]]:
    """Nanoseconds of ``first(i)`` and of ``second(i)`` for i in ``start .. start + n - 1``, called
    alternately (first, second, first, ...) so that any burst of machine noise lands on both."""
    clock = time.perf_counter_ns
    a, b = [], []
    for i in range(start, start + n):
        t0 = clock()
        first(i)
        t1 = clock()
        second(i)
        t2 = clock()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return a, b


def ratio_row(metric: str, plain: float, routed: float, unit: str, goal: float, higher_is_better: bool) -> Row:
    ratio = routed / plain
    ok = ratio >= goal if higher_is_better else ratio <= goal
    sign = ">=" if higher_is_better else "<="
    return Row(metric, f"{plain:,.1f} {unit}", f"{routed:,.1f} {unit}", f"{ratio:.3f}x", f"{sign} {goal:.2f}x", ok)


def tenant_names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{k}" for k in range(n)]


# -- 1. single enqueue ----------------------------------------------------------------------------


def bench_single(bench: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    plain_queue = Queue(bench.base, connection=bench.conn)
    routed_job = bench.routed_noop()
    tenants = tenant_names("tenant", TENANTS)

    def plain(i: int) -> object:
        return plain_queue.enqueue(noop, i)

    def routed(i: int) -> object:
        return routed_job.delay(tenants[i % TENANTS], i)

    time_alternating(plain, routed, 0, 100)  # warm-up: script load, rq's cached server version, imports
    samples: dict[str, list[int]] = {"plain": [], "routed": []}
    round_ratios = []
    for rnd in range(sizes.rounds):
        gc.collect()
        # Each round alternates the two sides call by call; which one goes first alternates by round.
        if rnd % 2 == 0:
            plain_ns, routed_ns = time_alternating(plain, routed, rnd * sizes.per_round, sizes.per_round)
        else:
            routed_ns, plain_ns = time_alternating(routed, plain, rnd * sizes.per_round, sizes.per_round)
        samples["plain"] += plain_ns
        samples["routed"] += routed_ns
        round_ratios.append(statistics.median(routed_ns) / statistics.median(plain_ns))
    bench.empty_queues()

    us = {name: statistics.median(got) / 1000 for name, got in samples.items()}
    p90 = {name: statistics.quantiles(got, n=10)[-1] / 1000 for name, got in samples.items()}
    row = ratio_row("single enqueue, median latency", us["plain"], us["routed"], "us", 1.00, False)
    info = Row("  (p90 latency; range of the per-round median ratios)", f"{p90['plain']:,.1f} us",
               f"{p90['routed']:,.1f} us", f"{min(round_ratios):.3f}-{max(round_ratios):.3f}x", "", None)
    result = {"median_us": us, "p90_us": p90, "ratio": us["routed"] / us["plain"], "round_ratios": round_ratios,
              "enqueues_per_side": len(samples["plain"])}
    return [row, info], result


# -- 2. batch enqueue -----------------------------------------------------------------------------


def bench_batch(bench: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    plain_queue = Queue(bench.base, connection=bench.conn)
    routed_job = bench.routed_noop()
    tenants = tenant_names("tenant", TENANTS)
    n = sizes.batch

    def plain() -> list[Job]:
        return plain_queue.enqueue_many([Queue.prepare_data(noop, (i,)) for i in range(n)])

    def routed() -> list[Job]:
        return routed_job.enqueue_many([((tenants[i % TENANTS], i), {}) for i in range(n)])

    seconds: dict[str, list[float]] = {"plain": [], "routed": []}
    route_ms: list[float] = []  # route.lua's server time per routed batch (EVAL + EVALSHA usec)
    sides = [("plain", plain), ("routed", routed)]
    for rnd in range(sizes.batch_rounds):
        for name, fn in sides if rnd % 2 == 0 else sides[::-1]:
            bench.empty_queues()
            gc.collect()
            before = bench.script_usec()
            t0 = time.perf_counter()
            jobs = fn()
            seconds[name].append(time.perf_counter() - t0)
            if name == "routed":
                route_ms.append((bench.script_usec() - before) / 1000)
            assert len(jobs) == n
    bench.empty_queues()

    rate = {name: n / statistics.median(got) for name, got in seconds.items()}
    row = ratio_row(f"enqueue_many of {n:,}, jobs/s", rate["plain"], rate["routed"], "/s", 0.90, True)
    script = Row(f"  route.lua server time per batch of {n:,} (median)", "-", f"{statistics.median(route_ms):,.1f} ms",
                 f"{statistics.median(route_ms) * 1000 / n:.1f} us/job", "", None)
    return [row, script], {"jobs": n, "seconds": seconds, "jobs_per_s": rate, "ratio": rate["routed"] / rate["plain"],
                           "route_ms": route_ms}


# -- 3. window memory -----------------------------------------------------------------------------


def bench_memory(bench: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    route = Route("bench.memory", bench.base, bench.rules(longest="1d"))
    tenant = "acme"
    chunk = 500
    for start in range(0, sizes.memory_jobs, chunk):
        count = min(chunk, sizes.memory_jobs - start)
        bench.router.record_and_choose(route, [(tenant, str(uuid4())) for _ in range(count)])
    key = bench.router.keys.window(route.job_key, tenant)
    size = int(bench.conn.memory_usage(key, samples=0) or 0)
    zcard = int(bench.conn.zcard(key))
    encoding = bench.conn.object("encoding", key)
    encoding = encoding.decode() if isinstance(encoding, bytes) else str(encoding)
    cap = max(rule.threshold for rule in route.rules) + 1
    row = Row(f"window memory, 1 tenant x {sizes.memory_jobs:,} in 1d", "-", "-",
              f"{size:,} B (ZCARD {zcard}, {encoding})", f"<= {MEMORY_GOAL_BYTES:,} B", size <= MEMORY_GOAL_BYTES)
    return [row], {"jobs": sizes.memory_jobs, "memory_usage_bytes": size, "zcard": zcard, "cap": cap,
                   "encoding": encoding, "pttl_ms": int(bench.conn.pttl(key))}


# -- 4. route script cost -------------------------------------------------------------------------


def script_phase(bench: Target, label: str, tenants: int, fill: int = 0, chunks: int = 20) -> dict[str, Any]:
    """Route one job for each of ``tenants`` tenants with FairRouter.record_and_route, one call each, after ``fill``
    earlier enqueues per tenant (recorded with one batched record_and_choose() per tenant, not measured).

    The server's EVALSHA time is read after each of ``chunks`` slices: their median usec/call shrugs off
    bursts of other load on the machine; the mean over the whole phase is reported next to it.
    """
    route = Route("bench.script", bench.base, bench.rules())
    names = tenant_names(label, tenants)
    for tenant in names if fill else ():
        bench.router.record_and_choose(route, [(tenant, str(uuid4())) for _ in range(fill)])
    job_ids = [str(uuid4()) for _ in names]
    step = -(-tenants // chunks)
    per_chunk = []
    wall = 0.0
    first = last = bench.reset_evalsha_stats()
    for start in range(0, tenants, step):
        t0 = time.perf_counter()
        for tenant, job_id in zip(names[start:start + step], job_ids[start:start + step], strict=True):
            bench.router.record_and_route(route.job_key, tenant, job_id, route.queue, route.rules)
        wall += time.perf_counter() - t0
        now = bench.evalsha_stats()
        per_chunk.append((now[1] - last[1]) / max(now[0] - last[0], 1))
        last = now
    window = bench.conn.zcard(bench.router.keys.window(route.job_key, names[-1]))
    return {"tenants": tenants, "fill": fill, "window_entries": int(window), "evalsha_calls": last[0] - first[0],
            "usec_per_call": statistics.median(per_chunk),
            "usec_per_call_mean": (last[1] - first[1]) / max(last[0] - first[0], 1),
            "usec_per_call_chunks": per_chunk, "client_us_per_route": wall / tenants * 1e6}


def calibration(bench: Target, n: int) -> dict[str, Any]:
    """This machine's floor: a PING round trip, and the server cost of an EVALSHA that does nothing."""
    trivial = bench.conn.register_script("return 0")
    trivial()
    calls0, usec0 = bench.reset_evalsha_stats()
    for _ in range(n):
        trivial()
    calls1, usec1 = bench.evalsha_stats()
    t0 = time.perf_counter()
    for _ in range(n):
        bench.conn.ping()
    ping = (time.perf_counter() - t0) / n * 1e6
    return {"trivial_evalsha_usec_per_call": (usec1 - usec0) / max(calls1 - calls0, 1), "ping_rtt_us": ping}


def bench_script(bench: Target, sizes: Sizes) -> tuple[list[Row], dict[str, Any]]:
    script_phase(bench, "warm-up", sizes.small_tenants)  # a cold server is slower: don't bill that to phase 1
    bench.reset()
    cap = max(rule.threshold for rule in bench.rules()) + 1
    small = script_phase(bench, "small", sizes.small_tenants)
    large = script_phase(bench, "large", sizes.large_tenants)
    full = script_phase(bench, "full", sizes.small_tenants, fill=cap)
    floor = calibration(bench, 2000)

    def script_row(metric: str, phase: dict[str, Any]) -> Row:
        usec = phase["usec_per_call"]
        return Row(metric, "-", f"{phase['client_us_per_route']:.1f} us/route",
                   f"{usec:.2f} us (mean {phase['usec_per_call_mean']:.2f})",
                   f"<= {SCRIPT_GOAL_USEC:.0f} us", usec <= SCRIPT_GOAL_USEC)

    flat = large["usec_per_call"] / small["usec_per_call"]
    rows = [
        script_row(f"route.lua usec_per_call, {small['tenants']:,} new tenants", small),
        script_row(f"route.lua usec_per_call, {large['tenants']:,} new tenants", large),
        Row(f"  flat: {large['tenants']:,} vs {small['tenants']:,} tenants", "-", "-", f"{flat:.3f}x",
            f"<= {FLAT_GOAL:.2f}x", flat <= FLAT_GOAL),
        script_row(f"route.lua usec_per_call, {full['tenants']:,} tenants, windows at cap ({cap})", full),
        Row("  machine floor: PING round trip; EVALSHA 'return 0'", f"{floor['ping_rtt_us']:.1f} us", "-",
            f"{floor['trivial_evalsha_usec_per_call']:.2f} us", "", None),
    ]
    return rows, {"new_small": small, "new_large": large, "full_windows": full, "flat_ratio": flat,
                  "calibration": floor}


# -- report ---------------------------------------------------------------------------------------


def print_table(rows: list[Row]) -> None:
    head = ["metric", "plain rq", "fair-router", "ratio / value", "goal", "ok"]
    body = [[r.metric, r.plain, r.routed, r.value, r.goal, "" if r.ok is None else "PASS" if r.ok else "FAIL"]
            for r in rows]
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]

    def fmt(cells: list[str]) -> str:
        first, *rest = zip(cells, widths, strict=True)
        return "  ".join([first[0].ljust(first[1]), *(cell.rjust(width) for cell, width in rest)])

    rule = "  ".join("-" * width for width in widths)
    print("\n".join([rule, fmt(head), rule, *(fmt(cells) for cells in body), rule]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, help="single-enqueue rounds per side (default 10; --quick 2)")
    parser.add_argument("--batch-rounds", type=int, help="enqueue_many rounds per side (default 5; --quick 2)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--only", choices=["single", "batch", "memory", "script"], action="append",
                        help="run only this section (repeatable)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.rounds is not None:
        sizes = replace(sizes, rounds=args.rounds)
    if args.batch_rounds is not None:
        sizes = replace(sizes, batch_rounds=args.batch_rounds)

    started = time.perf_counter()
    rows: list[Row] = []
    results: dict[str, Any] = {}
    with target() as bench:
        server_version = bench.conn.info("server")["redis_version"]
        where = "private redis-server" if bench.private else "REDIS_URL (own keys only, stats as deltas)"
        print(f"fair-router enqueue bench: redis {server_version} ({where}), python {platform.python_version()}, "
              f"rq {version('rq')}, redis-py {version('redis')}")
        print(f"sizes: {sizes}")
        sections = [("single", bench_single), ("batch", bench_batch), ("memory", bench_memory),
                    ("script", bench_script)]
        for name, section in [(name, section) for name, section in sections if name in (args.only or [name])]:
            t0 = time.perf_counter()
            section_rows, results[name] = section(bench, sizes)
            print(f"  {name}: {time.perf_counter() - t0:.1f} s", flush=True)
            rows += section_rows
            bench.reset()
    elapsed = time.perf_counter() - started

    print()
    print_table(rows)
    failed = [r.metric.strip() for r in rows if r.ok is False]
    print(f"{len([r for r in rows if r.ok is not None]) - len(failed)} passed, {len(failed)} failed "
          f"in {elapsed:.1f} s")
    if args.json:
        report = {"sizes": asdict(sizes), "quick": args.quick, "elapsed_s": elapsed, "redis_version": server_version,
                  "python": platform.python_version(), "rq": version("rq"), "redis_py": version("redis"),
                  "machine": platform.machine(), "results": results, "rows": [asdict(r) for r in rows]}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
