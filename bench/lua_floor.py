"""What a Lua call costs Redis on this machine before its own logic, and so the least server time ``route.lua``
and the fair pop could take with the commands they send.

Three prices, from ``INFO commandstats`` in tight loops on a private redis-server:

- ``base``: an ``EVALSHA`` of ``return 0`` (the call, its reply, no arguments);
- ``bridge``: what one ``redis.call`` costs beyond the command's own time (a script making 20 ``HGET`` calls,
  less ``base`` and the ``HGET`` time Redis counts for them, per call);
- per script, as it runs for real: its server time per call, how many commands it sends and their own time.
  ``route.lua`` records one enqueue of a tenant whose window is at its cap (``FairRouter.record_and_route``, 50
  tenants, bench/enqueue.py's rules); the fair pop is ``FairQueue.pop_fair()`` over 10 tenants; the settle is
  ``FairQueue.settle()`` of a popped job of a ``charge="runtime"`` queue (fair_settle.lua).

The floor of a script is ``base + commands x bridge + the commands' own time``: the time it would take if its
Lua logic and argument handling cost nothing. A goal below that floor cannot be met by making the Lua cheaper,
only by sending fewer commands. Times move with the machine's load; the command counts do not.

    .venv/bin/python bench/lua_floor.py [--calls 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from enqueue import TENANTS, Target, tenant_names
from jobs import noop
from redisstats import pop_stat

from fair_router import FairQueue, Settings
from fair_router.demo.redis_server import RedisServer

BRIDGE_CALLS = 20
SCRIPT_CALLS = ("cmdstat_evalsha", "cmdstat_fcall", "cmdstat_eval")
NOT_INNER = (*SCRIPT_CALLS, "cmdstat_config|resetstat", "cmdstat_info")
ROUTE_GOAL_US, POP_GOAL_US = 10.0, 30.0  # the performance issue's goals


def stats_of(conn: Redis, calls: int, run: Callable[[int], object]) -> dict[str, Any]:
    """``run(i)`` for i < ``calls`` on reset statistics; returns ``INFO commandstats`` after."""
    conn.config_resetstat()
    for i in range(calls):
        run(i)
    stats: dict[str, Any] = conn.info("commandstats")
    return stats


def script_cost(stats: dict[str, Any], calls: int) -> dict[str, float]:
    """A measured script's server µs per call, the commands it sent per call and their own µs per call."""
    script = pop_stat(stats)  # its FCALL where it ran as a Redis function, else its EVALSHA
    inner = {name: value for name, value in stats.items() if name not in NOT_INNER}
    return {"us": float(script["usec"]) / int(script["calls"]),
            "commands": sum(int(v["calls"]) for v in inner.values()) / calls,
            "own_us": sum(float(v["usec"]) for v in inner.values()) / calls}


def prices(conn: Redis, calls: int) -> tuple[float, float]:
    """(base, bridge) in µs: an empty EVALSHA; one redis.call beyond its command's own time."""
    conn.hset("lua_floor:h", "x", "1")
    empty = conn.script_load("return 0")
    loop = conn.script_load(f"for i = 1, {BRIDGE_CALLS} do redis.call('HGET', KEYS[1], 'x') end return 0")
    base = float(stats_of(conn, calls, lambda i: conn.evalsha(empty, 0))["cmdstat_evalsha"]["usec_per_call"])
    stats = stats_of(conn, calls, lambda i: conn.evalsha(loop, 1, "lua_floor:h"))
    hget = float(stats["cmdstat_hget"]["usec"]) / calls
    bridge = (float(stats["cmdstat_evalsha"]["usec_per_call"]) - base - hget) / BRIDGE_CALLS
    return base, bridge


def route_cost(conn: Redis, calls: int) -> dict[str, float]:
    """route.lua recording one enqueue at a time into windows at their cap (bench/enqueue.py's rules)."""
    target = Target(conn, private=True)
    tenants = tenant_names("tenant", TENANTS)
    rules = target.rules()

    def record(i: int) -> object:
        return target.router.record_and_route("lua_floor", tenants[i % TENANTS], f"job-{i}", target.base, rules)

    for i in range(TENANTS * 150):  # every window past its cap (101)
        record(-1 - i)
    return script_cost(stats_of(conn, calls, record), calls)


def pop_cost(conn: Redis, calls: int) -> dict[str, float]:
    """The fair pop over 10 tenants that all keep jobs waiting (as bench/fair_pop.py)."""
    queue = FairQueue("lua_floor", connection=conn, settings=Settings(prefix="lua_floor"))
    for start in range(0, calls + 1000, 1000):
        queue.enqueue_many([Queue.prepare_data(noop, (i,), meta={"fair_tenant": f"t{i % 10}"})
                            for i in range(start, start + 1000)])
    queue.pop_fair()  # its function library loaded
    return script_cost(stats_of(conn, calls, lambda i: queue.pop_fair()), calls)


def settle_cost(conn: Redis, calls: int) -> dict[str, float]:
    """fair_settle.lua: each of ``calls`` jobs popped from a charge="runtime" queue over 10 tenants, settled with
    its measured run time (what a worker sends as the job ends)."""
    queue = FairQueue("lua_floor_settle", connection=conn, settings=Settings(prefix="lua_floor"), charge="runtime")
    for start in range(0, calls, 1000):
        queue.enqueue_many([Queue.prepare_data(noop, (i,), meta={"fair_tenant": f"t{i % 10}"})
                            for i in range(start, min(calls, start + 1000))])
    popped = [queue.pop_fair().job_id for _ in range(calls)]
    return script_cost(stats_of(conn, calls, lambda i: queue.settle(str(popped[i]), 0.01)), calls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000, help="calls per measurement (default 3000)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; medians are printed (default 3)")
    args = parser.parse_args(argv)
    rows: dict[str, list[float]] = {}
    with RedisServer() as server:
        conn = server.client()
        for _ in range(args.rounds):
            conn.flushdb()
            base, bridge = prices(conn, args.calls)
            for name, cost in (("route.lua", route_cost(conn, args.calls)), ("fair pop", pop_cost(conn, args.calls)),
                               ("settle", settle_cost(conn, args.calls))):
                floor = base + cost["commands"] * bridge + cost["own_us"]
                for key, value in (("base", base), ("bridge", bridge), (f"{name} us", cost["us"]),
                                   (f"{name} commands", cost["commands"]), (f"{name} own", cost["own_us"]),
                                   (f"{name} floor", floor)):
                    rows.setdefault(key, []).append(value)
    med = {key: statistics.median(values) for key, values in rows.items()}
    print(f"Lua floor ({args.rounds} rounds x {args.calls} calls, medians): an empty EVALSHA {med['base']:.1f} us; "
          f"a redis.call beyond its command {med['bridge']:.2f} us")
    print(f"{'script':10}{'server':>10}{'commands':>10}{'their own':>11}{'floor':>9}{'goal':>8}")
    for name, goal in (("route.lua", ROUTE_GOAL_US), ("fair pop", POP_GOAL_US), ("settle", None)):
        print(f"{name:10}{med[f'{name} us']:>7.1f} us{med[f'{name} commands']:>10.2f}{med[f'{name} own']:>8.1f} us"
              f"{med[f'{name} floor']:>6.1f} us" + ("" if goal is None else f"{goal:>5.0f} us"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
