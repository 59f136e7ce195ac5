"""What a Lua call costs Redis on this machine before its own logic, and so the least server time ``route.lua``
and the fair pop could take with the commands they send.

Three prices, from ``INFO commandstats`` in tight loops on a private redis-server:

- ``base``: an ``EVALSHA`` of ``return 0`` (the call, its reply, no arguments);
- ``bridge``: what one ``redis.call`` costs beyond the command's own time (a script making 20 ``HGET`` calls,
  less ``base`` and the ``HGET`` time Redis counts for them, per call);
- per script, as it runs for real: its server time per call, how many commands it sends and their own time.
  ``route.lua`` records one enqueue of a tenant whose window is at its cap (``FairRouter.record_and_route``, 50
  tenants, bench/enqueue.py's rules); the fair pop is ``FairQueue.pop_fair()`` over 10 tenants; the settle is
  ``FairQueue.settle()`` of a popped job of a ``charge="runtime"`` queue (fair_settle.lua, EVALSHA; ``settle,
  EVAL``: as a worker sends it, on rq's after-job pipeline, an EVAL of its text: its hashing counts); the push is
  fair_push.lua adding one job of 10 tenants with jobs waiting (as an enqueue's MULTI carries it); the start
  is one job start with every control on (pause, a slot, the tenant's rate; ``TenantGate.queue_check`` as it
  rides rq's job-start MULTI: an FCALL of its library, as in a worker), 50 tenants; the release is a slot's end
  as a worker sends it (release.lua, then fair_unpark.lua for the job's claim in its fair queue, both EVAL on one
  pipeline; their floors add up).

The floor of a script is ``base + commands x bridge + the commands' own time``: the time it would take if its
Lua logic and argument handling cost nothing. The fair pop is also shown against the floor with its own call: an
``FCALL`` of a function returning at once with the pop's 15 KEYS and its arguments (``call``) in place of ``base``,
and the same 10 tenants in one organisation (``fair_org``, the two-level pop) beside the one-level pop. A goal
below that floor cannot be met by making the Lua cheaper, only by sending fewer commands. Times move with the
machine's load; the command counts do not.

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
from fair_router.config.settings import ConcurrencyConfig, TiersConfig
from fair_router.controls.gate import Lease, TenantGate
from fair_router.controls.ratelimit import RateLimiter
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.demo.redis_server import RedisServer
from fair_router.fairqueue.scripts import FairPushScript, PushEntry
from fair_router.workers.limiter import ConcurrencyLimiter

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


def pop_cost(conn: Redis, calls: int, org: bool = False) -> dict[str, float]:
    """The fair pop over 10 tenants that all keep jobs waiting (as bench/fair_pop.py); ``org``: all in one org."""
    queue = FairQueue("lua_floor_org" if org else "lua_floor", connection=conn, settings=Settings(prefix="lua_floor"))
    for start in range(0, calls + 1000, 1000):
        queue.enqueue_many([Queue.prepare_data(noop, (i,), meta={"fair_tenant": f"t{i % 10}"}
                                               | ({"fair_org": "o"} if org else {}))
                            for i in range(start, start + 1000)])
    queue.pop_fair()  # its function library loaded
    return script_cost(stats_of(conn, calls, lambda i: queue.pop_fair()), calls)


def push_cost(conn: Redis, calls: int) -> dict[str, float]:
    """fair_push.lua adding one job at a time of 10 tenants that keep jobs waiting, as ``FairQueue.enqueue``'s MULTI
    carries it (an FCALL where the server has functions, else EVALSHA), here on its own."""
    queue = FairQueue("lua_floor_push", connection=conn, settings=Settings(prefix="lua_floor"))
    push = FairPushScript(conn)
    entries = [PushEntry(f"push-{i}", f"t{i % 10}", 1.0) for i in range(-10, calls)]
    for entry in entries[:10]:  # every tenant waiting, the script or library loaded
        push(queue.fair_keys, [entry]).run()
    return script_cost(stats_of(conn, calls, lambda i: push(queue.fair_keys, [entries[10 + i]]).run()), calls)


CALL_LIBRARY = """#!lua name=lua_floor_call
redis.register_function{function_name='lua_floor_call', flags={'allow-oom'}, callback=function(keys, args) return 0 end}
"""


def call_price(conn: Redis, calls: int) -> float:
    """µs of an FCALL of a function returning at once, with the fair pop's KEYS and arguments (one ack)."""
    conn.function_load(CALL_LIBRARY, replace=True)
    keys = FairQueue("lua_floor", connection=conn, settings=Settings(prefix="lua_floor")).fair_keys.all_for_scripts()
    args = ["", "", 0, 0, 1, "00000000-0000-0000-0000-000000000000"]
    stats = stats_of(conn, calls, lambda i: conn.fcall("lua_floor_call", len(keys), *keys, *args))
    return float(stats["cmdstat_fcall"]["usec_per_call"])


def settle_cost(conn: Redis, calls: int, as_worker: bool = False) -> dict[str, float]:
    """fair_settle.lua: each of ``calls`` jobs popped from a charge="runtime" queue over 10 tenants, settled with
    its measured run time (what a worker sends as the job ends): on its own (EVALSHA), or ``as_worker`` on a
    pipeline, as rq's after-job pipeline carries it (EVAL of its text, hashed at each call)."""
    name = "lua_floor_settle_eval" if as_worker else "lua_floor_settle"
    queue = FairQueue(name, connection=conn, settings=Settings(prefix="lua_floor"), charge="runtime")
    for start in range(0, calls, 1000):
        queue.enqueue_many([Queue.prepare_data(noop, (i,), meta={"fair_tenant": f"t{i % 10}"})
                            for i in range(start, min(calls, start + 1000))])
    popped = [queue.pop_fair().job_id for _ in range(calls)]

    def settle(i: int) -> object:
        if not as_worker:
            return queue.settle(str(popped[i]), 0.01)
        with conn.pipeline() as pipe:
            queue.settle(str(popped[i]), 0.01, pipeline=pipe)
            return pipe.execute()

    stats = stats_of(conn, calls, settle)
    return eval_cost(stats, calls) if as_worker else script_cost(stats, calls)


def eval_cost(stats: dict[str, Any], calls: int) -> dict[str, float]:
    """As :func:`script_cost`, for scripts queued on someone else's MULTI: every EVAL or FCALL of the loop (MULTI/EXEC
    not counted)."""
    usec = sum(float(stats.get(name, {"usec": 0.0})["usec"]) for name in SCRIPT_CALLS)
    inner = {name: value for name, value in stats.items() if name not in (*NOT_INNER, "cmdstat_multi", "cmdstat_exec")}
    return {"us": usec / calls, "commands": sum(int(v["calls"]) for v in inner.values()) / calls,
            "own_us": sum(float(v["usec"]) for v in inner.values()) / calls}


def limited_gate(conn: Redis) -> TenantGate:
    """Every start control on: a slot per job (limit far off) and the tenant's own rate (never binding)."""
    tiers = TiersConfig(concurrency={"free": 1_000_000, "pro": 3, "pro_plus": 3, "enterprise": 5},
                        rate={"free": "100000/s"}, burst={"free": 1000})
    keys = Keys("lua_floor")
    limiter = ConcurrencyLimiter(conn, keys, TierBook(conn, keys, tiers), ConcurrencyConfig(enabled=True))
    return TenantGate(limiter, RateLimiter(keys), slots=True)


def start_cost(conn: Redis, calls: int) -> dict[str, float]:
    """start.lua deciding one job start of 50 tenants with every control on, queued on a MULTI as the worker's
    rides rq's job-start MULTI (FCALL of its library, loaded first as after a worker's first start)."""
    gate = limited_gate(conn)
    queue = FairQueue("lua_floor_start", connection=conn, settings=Settings(prefix="lua_floor"))
    jobs = [queue.create_job(noop, args=(i,), meta={"fair_tenant": f"t{i % TENANTS}"}) for i in range(calls)]

    def start(i: int) -> object:
        tenant = f"t{i % TENANTS}"
        with conn.pipeline() as pipe:
            pending = gate.queue_check(tenant, jobs[i], gate.checks(tenant, jobs[i]) or [], False, pipe, queue.name)
            return gate.answer(pending, pipe.execute())

    for tenant in range(TENANTS):
        gate.limiter.tiers.profile(f"t{tenant}")  # the tier cache filled, as in a running worker
    with conn.pipeline() as pipe:
        gate.script.loaded_function(pipe)  # its function library loaded, as after a worker's first start
    return eval_cost(stats_of(conn, calls, start), calls)


def release_cost(conn: Redis, calls: int) -> dict[str, float]:
    """A slot's end as the worker sends it: release.lua and fair_unpark.lua (the job's claim in its fair queue
    ends) on one pipeline, for jobs of 50 limited tenants popped from a fair queue."""
    gate = limited_gate(conn)
    queue = FairQueue("lua_floor_release", connection=conn, settings=Settings(prefix="lua_floor"))
    for tenant in range(TENANTS):
        queue.unpark(f"t{tenant}", limit=1_000_000)  # the queue knows their limits: its pops claim
    tenant_of: dict[str, str] = {}
    for start in range(0, calls, 1000):
        jobs = queue.enqueue_many([Queue.prepare_data(noop, (i,), meta={"fair_tenant": f"t{i % TENANTS}"})
                                   for i in range(start, min(calls, start + 1000))])
        tenant_of.update((job.id, job.meta["fair_tenant"]) for job in jobs)
    leases = [Lease(tenant_of[job_id], "free", job_id)
              for job_id in (str(queue.pop_fair().job_id) for _ in range(calls))]
    for lease in leases:
        gate.limiter.acquire(lease.tenant, lease.job_id)

    def release(i: int) -> object:
        lease = leases[i]
        gate.limiter.release(lease, also=lambda pipe: queue.unpark(lease.tenant, pipe, lease.job_id, 1_000_000))
        return None

    return eval_cost(stats_of(conn, calls, release), calls)


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
            call = call_price(conn, args.calls)
            rows.setdefault("call", []).append(call)
            for name, cost in (("route.lua", route_cost(conn, args.calls)), ("fair pop", pop_cost(conn, args.calls)),
                               ("pop, 1 org", pop_cost(conn, args.calls, org=True)),
                               ("push", push_cost(conn, args.calls)),
                               ("settle", settle_cost(conn, args.calls)),
                               ("settle, EVAL", settle_cost(conn, args.calls, as_worker=True)),
                               ("start", start_cost(conn, args.calls)),
                               ("release", release_cost(conn, args.calls))):
                floor = base * (2 if name == "release" else 1) + cost["commands"] * bridge + cost["own_us"]
                for key, value in (("base", base), ("bridge", bridge), (f"{name} us", cost["us"]),
                                   (f"{name} commands", cost["commands"]), (f"{name} own", cost["own_us"]),
                                   (f"{name} floor", floor), (f"{name} call floor", floor - base + call)):
                    rows.setdefault(key, []).append(value)
    med = {key: statistics.median(values) for key, values in rows.items()}
    print(f"Lua floor ({args.rounds} rounds x {args.calls} calls, medians): an empty EVALSHA {med['base']:.1f} us; "
          f"a redis.call beyond its command {med['bridge']:.2f} us; an empty FCALL with the pop's KEYS and "
          f"arguments {med['call']:.1f} us")
    print(f"{'script':10}{'server':>10}{'commands':>10}{'their own':>11}{'floor':>9}{'goal':>8}")
    print_start_and_release(med)
    for name, goal in (("route.lua", ROUTE_GOAL_US), ("fair pop", POP_GOAL_US)):
        print(f"{name:10}{med[f'{name} us']:>7.1f} us{med[f'{name} commands']:>10.2f}{med[f'{name} own']:>8.1f} us"
              f"{med[f'{name} floor']:>6.1f} us{goal:>5.0f} us  {med[f'{name} us'] / med[f'{name} floor']:.2f}x floor")
    return 0


def print_start_and_release(med: dict[str, float]) -> None:
    """The fair pop (one level and in one org), the push, the start (FCALL), a slot's release (EVAL: hashing
    included; the release's two scripts summed) and the settle (fair_settle.lua; EVAL as a worker sends it, then
    EVALSHA), each with the ratio of its server time to its floor (the capacity issue's goal: 1.4x)."""
    for name in ("pop, 1 org", "fair pop", "push"):  # against the floor with its own call too (module docstring)
        print(f"{name:10}{med[f'{name} us']:>7.1f} us{med[f'{name} commands']:>10.2f}{med[f'{name} own']:>8.1f} us"
              f"{med[f'{name} floor']:>6.1f} us  {med[f'{name} us'] / med[f'{name} floor']:.2f}x floor, "
              f"{med[f'{name} us'] / med[f'{name} call floor']:.2f}x with its call "
              f"({med[f'{name} call floor']:.1f} us)")
    for name in ("start", "release", "settle, EVAL", "settle"):
        print(f"{name:10}{med[f'{name} us']:>7.1f} us{med[f'{name} commands']:>10.2f}{med[f'{name} own']:>8.1f} us"
              f"{med[f'{name} floor']:>6.1f} us  {med[f'{name} us'] / med[f'{name} floor']:.2f}x floor")


if __name__ == "__main__":
    sys.exit(main())
