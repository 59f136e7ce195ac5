"""How close a routed ``delay()`` can come to plain rq's ``enqueue``: the floor under any routing script.

Four sides against one private redis-server, called in turn, in each of their orders by rotation (so that a
burst of machine noise lands on all of them):

1. ``plain``: rq's ``Queue.enqueue(noop, i)``: two MULTIs (the queue's registration, then the job's save and
   push), 46 command arguments in all.
2. ``routed``: bench/enqueue.py's routed job, ``.delay(tenant, i)``, 50 tenants, two rules: one MULTI, rq's
   save then ``route.lua`` (window, rule, waiting count, push), whose call carries 25 arguments.
3. ``floor``: the same enqueue through a router whose route script only pushes the job (its ``RPUSH`` and
   ``SADD``), with route.lua's very KEYS and ARGV: what a routed enqueue costs before its script routes
   anything. It says how far a cheaper route.lua alone could take the ratio.
4. ``fair``: a FairQueue's ``enqueue(noop, i, fair_tenant=...)`` over the same 50 tenants: one MULTI, rq's save
   then ``fair_push.lua``.

Per side: the median latency; the median client CPU (the thread's CPU time around the call: rq's job, the
router's Python, redis-py's packing of every argument, and the thread's own system time, so the socket calls
of each round trip count here rather than in the wait); and the median of their difference, the wait (the
rest of the round trips and the server's time). Ratios are against plain, in the same run. Between rounds
the queues are emptied but the routers' windows, waiting counts and routed counters stay, as in production:
each tenant's window fills up to its cap (101) over the rounds, where route.lua's call costs most. It also
prints whether redis-py has hiredis, which packs commands in C: redis-py's own packer costs about a
microsecond per argument.

``--rtt-us N`` puts bench/delay_proxy.py between every side and the server, adding N µs to each round trip
(half each way): Redis as it is reached over a network, where plain rq's second round trip costs what a
network's round trip costs. It prints the round trip it then measured (the median PING), which is what the
ratios were taken at: the proxy's own relay adds a few tens of µs.

At the end it checks each side: every job id it returned is on one of its queues and nowhere twice, each of
its non-empty queues is in ``rq:queues``, and the real router recorded windows where the floor's recorded none.

    .venv/bin/python bench/route_floor.py [--rounds 6] [--per-round 1000] [--rtt-us N] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from redis import Redis
from redis.utils import HIREDIS_AVAILABLE
from rq import Queue

# This checkout's fair_router, not the installed one: a worktree of another commit measures that commit.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fair_router import FairQueue, Settings
from fair_router.demo.redis_server import RedisServer
from fair_router.store.scripts import RouteScript

# rq stores a job's function by dotted path and refuses functions defined in __main__; bench/enqueue.py's
# routed job is the one measured here.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from delay_proxy import DelayProxy
from enqueue import TENANTS, Target, tenant_names
from jobs import noop

SIDES = ("plain", "routed", "floor", "fair")

# route.lua's sections, read only as far as its push section (lib/routepush.lua): the job goes onto its base
# family's list, as route.lua puts a job no rule matched, and every job is answered (rule 0, unsharded).
FLOOR_LUA = """
local n_rules = struct.unpack('>H', ARGV[2])
local at = 4
if ARGV[at] == '1' or ARGV[at] == '2' then at = at + 1 + tonumber(ARGV[3]) else at = at + 1 end
if ARGV[at] ~= '0' then return redis.error_reply('route_floor: a sharded route') end
at = at + 1
if ARGV[at] ~= '1' and ARGV[at] ~= '2' then return redis.error_reply('route_floor: no push section') end
local job = #KEYS - n_rules - 2
redis.call(ARGV[at] == '2' and 'LPUSH' or 'RPUSH', KEYS[job + 2], ARGV[at + 1])
redis.call('SADD', KEYS[job + 1], KEYS[job + 2])
return {0, -1}
"""


class FloorRoute(RouteScript):
    """route.lua's wrapper over the floor script: same KEYS and ARGV, same reply shape."""

    as_function = False  # the floor script's own text, never route.lua's function library

    def build_source(self) -> str:
        return FLOOR_LUA


def routed_side(conn: Redis, floor: bool) -> tuple[Callable[[int], object], Target]:
    """A routed ``delay`` of bench/enqueue.py's routed job (its rules, 50 tenants), over queues of its own (the
    floor's router runs FloorRoute); and that bench's Target, which names the queues and the key prefix."""
    bench = Target(conn, private=True)
    if floor:
        bench.router._route = FloorRoute(conn)  # the bench's one reach inside: the script the router runs
    job = bench.routed_noop()
    tenants = tenant_names("tenant", TENANTS)
    return (lambda i: job.delay(tenants[i % TENANTS], i)), bench


def fair_side(conn: Redis) -> tuple[Callable[[int], object], FairQueue]:
    """A FairQueue's enqueue of ``noop`` over the routed side's 50 tenants, and the queue."""
    queue = FairQueue("bench_fair.default", connection=conn, settings=Settings(prefix="bench_fair"))
    tenants = tenant_names("tenant", TENANTS)
    return (lambda i: queue.enqueue(noop, i, fair_tenant=tenants[i % TENANTS])), queue


def ping_us(conn: Redis, pings: int = 300) -> float:
    """The median PING round trip (µs): what a round trip costs on this connection."""
    times = []
    for _ in range(pings):
        start = time.perf_counter_ns()
        conn.ping()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1000


def measure(calls: dict[str, Callable[[int], object]], rounds: int, per_round: int,
            empty: Callable[[], None]) -> dict[str, Any]:
    """Per side and round, each call's latency and client CPU (ns); the sides take turns call by call."""
    samples: dict[str, dict[str, list[int]]] = {side: {"wall": [], "cpu": []} for side in calls}
    per_round_median: dict[str, list[float]] = {side: [] for side in calls}
    orders = list(itertools.permutations(calls))
    for rnd in range(rounds):
        gc.collect()
        walls: dict[str, list[int]] = {side: [] for side in calls}
        for i in range(rnd * per_round, (rnd + 1) * per_round):
            for side in orders[i % len(orders)]:
                cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
                calls[side](i)
                wall, cpu = time.perf_counter_ns() - wall0, time.thread_time_ns() - cpu0
                walls[side].append(wall)
                samples[side]["wall"].append(wall)
                samples[side]["cpu"].append(cpu)
        for side in calls:
            per_round_median[side].append(statistics.median(walls[side]))
        empty()
    result: dict[str, Any] = {}
    for side, got in samples.items():
        result[side] = {
            "wall_us": statistics.median(got["wall"]) / 1000,
            "cpu_us": statistics.median(got["cpu"]) / 1000,
            "wait_us": statistics.median(w - c for w, c in zip(got["wall"], got["cpu"], strict=True)) / 1000,
            "round_ratios": [m / p for m, p in zip(per_round_median[side], per_round_median["plain"], strict=True)],
        }
    return result


def check_sides(conn: Redis, calls: dict[str, Callable[[int], object]], queues: dict[str, list[str]],
                prefixes: dict[str, str], empty: Callable[[], None]) -> list[str]:
    """One more call of each side, on emptied queues: each side's job ids are on its queues, each once; its
    non-empty queues are in ``rq:queues``; the real router recorded windows, the floor's router none (the floor
    script ran, not route.lua). Returns what is wrong."""
    empty()
    problems = []
    for side, call in calls.items():
        ids = sorted(str(getattr(call(i), "id", "")) for i in range(10))
        lists = [Queue.redis_queue_namespace_prefix + name for name in queues[side]]
        queued = sorted(raw.decode() for key in lists for raw in conn.lrange(key, 0, -1))
        if queued != ids:
            problems.append(f"{side}: queued {queued}, returned {ids}")
        for key in lists:
            if conn.llen(key) and not conn.sismember(Queue.redis_queues_keys, key):
                problems.append(f"{side}: {key} is not in {Queue.redis_queues_keys}")
    windows = {side: sum(1 for _ in conn.scan_iter(match=f"{prefix}:*:win:*")) for side, prefix in prefixes.items()}
    if not windows["routed"] or windows["floor"]:
        problems.append(f"window keys per router {windows}: route.lua records windows, the floor script none")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6, help="rounds (default 6)")
    parser.add_argument("--per-round", type=int, default=1000, help="enqueues per side and round (default 1000)")
    parser.add_argument("--rtt-us", type=float, metavar="N",
                        help="add N µs to every round trip through bench/delay_proxy.py (default: none, direct)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)

    with RedisServer() as server:
        if args.rtt_us is None:
            return run(server.client(), args, None)
        with DelayProxy(server.port, args.rtt_us) as proxy:
            return run(Redis(host="127.0.0.1", port=proxy.port), args, args.rtt_us)


def run(conn: Redis, args: argparse.Namespace, rtt_us: float | None) -> int:
    """The bench on ``conn`` (direct, or through a delay proxy adding ``rtt_us``); returns the exit status."""
    rtt = ping_us(conn)
    added = "direct" if rtt_us is None else f"+{rtt_us:g} us added by bench/delay_proxy.py"
    print(f"route floor bench: redis {conn.info('server')['redis_version']}, python "
          f"{platform.python_version()}, rq {version('rq')}, redis-py {version('redis')}, "
          f"hiredis {'yes' if HIREDIS_AVAILABLE else 'no'}; {args.rounds} rounds x {args.per_round} per side; "
          f"round trip {added}: PING {rtt:.1f} us")
    routed, routed_bench = routed_side(conn, floor=False)
    floor, floor_bench = routed_side(conn, floor=True)
    fair, fair_queue = fair_side(conn)
    plain_queue = Queue("bench_plain.default", connection=conn)
    calls: dict[str, Callable[[int], object]] = {
        "plain": lambda i: plain_queue.enqueue(noop, i), "routed": routed, "floor": floor, "fair": fair}
    queues = {"plain": [plain_queue.name], "routed": list(routed_bench.queue_names),
              "floor": list(floor_bench.queue_names), "fair": [fair_queue.name]}

    emptied = [Queue(name, connection=conn) for side in ("plain", "routed", "floor") for name in queues[side]]
    emptied.append(fair_queue)  # FairQueue.empty clears its fair state with rq's list

    def empty() -> None:
        for queue in emptied:
            queue.empty()

    for i in range(200):  # warm-up: script loads, rq's cached server version, the routers' announcements
        for call in calls.values():
            call(i)
    empty()
    result = measure(calls, args.rounds, args.per_round, empty)
    problems = check_sides(conn, calls, queues, {"routed": routed_bench.prefix, "floor": floor_bench.prefix},
                           empty)
    if problems:
        print("error: " + "; ".join(problems), file=sys.stderr)
        return 1

    print(f"{'side':8}{'latency':>12}{'ratio':>9}{'client CPU':>13}{'ratio':>9}{'wait':>11}  per-round ratios")
    plain = result["plain"]
    for side in SIDES:
        got = result[side]
        rounds = got["round_ratios"]
        print(f"{side:8}{got['wall_us']:>9.1f} us{got['wall_us'] / plain['wall_us']:>8.3f}x"
              f"{got['cpu_us']:>10.1f} us{got['cpu_us'] / plain['cpu_us']:>8.3f}x{got['wait_us']:>8.1f} us"
              f"  {min(rounds):.3f}-{max(rounds):.3f}x")
    if args.json:
        report = {"rounds": args.rounds, "per_round": args.per_round, "hiredis": HIREDIS_AVAILABLE,
                  "rtt_added_us": rtt_us, "ping_us": rtt,
                  "python": platform.python_version(), "rq": version("rq"), "redis_py": version("redis"),
                  "results": result}
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
