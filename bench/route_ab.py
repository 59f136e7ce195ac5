"""``route.lua`` of this checkout against another's, side by side on one redis-server: a change to the script
measured where machine noise cannot tell the trees apart (bench/lua_floor.py runs one tree at a time, and on a
busy machine its route row moves by more than a change of a microsecond).

Both trees' built texts are loaded on one server and fed the same calls, captured from real enqueues
(bench/enqueue.py's two rules, 50 tenants, every window past its cap) with a fresh job id digest per call; each
tree's calls as its own code makes them (captured by its own bench/route_ab.py in a subprocess, then replayed
once on the measuring server to fill its windows), so that trees whose route.lua takes other arguments compare:

- ``fcall``: ``FairRouter.record_and_route`` (route.lua as a Redis function, bench/lua_floor.py's route case),
  with a third side, ``empty``: this tree's library returning at once, the same arguments (the call and its
  arguments, before any Lua);
- ``evalsha``: the one-round-trip ``delay()``'s call (route.lua as EVALSHA, with its waiting and push sections).

Blocks of ``--calls`` calls per side, the order swapping every round. Per side: the median µs per call (``INFO
commandstats``) and the median of its per-round ratio to this tree, of that µs and of the server's CPU per call
(``INFO cpu``: time a preempted server is not running is not counted); and the commands it sent per call.

    .venv/bin/python bench/route_ab.py OTHER_CHECKOUT [--rounds 20] [--calls 500]
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from redis import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from enqueue import TENANTS, Target, tenant_names

from fair_router.demo.redis_server import RedisServer
from fair_router.store import luascript

CAPTURED = TENANTS * 150  # calls captured per mode: every window past its cap (101)
NOT_INNER = ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_config|resetstat", "cmdstat_info")
Captured = list[tuple[list[Any], list[Any]]]
Call = Callable[[list[Any], list[Any]], object]


def library(text: str, name: str) -> str:
    """A built function library under another name (its library and function names are one string)."""
    return text.replace(text.split("\n", 1)[0].removeprefix("#!lua name="), name)


def returning_at_once(text: str) -> str:
    """The library with a body that returns at once (one unrecorded job's reply)."""
    head, sep, _ = text.partition("KEYS, ARGV = keys, args\n")
    return head + sep + "return {0, -1}\nend}\n"


def capture(conn: Redis) -> tuple[Captured, Captured]:
    """(the FCALLs of record_and_route, the route EVALSHAs of delay()), as keys and args, CAPTURED of each."""
    fcalls: Captured = []
    evalshas: Captured = []
    target = Target(conn, private=True)
    tenants = tenant_names("tenant", TENANTS)
    fcall = conn.fcall

    def recording(function: str, numkeys: int, *keys_and_args: Any) -> Any:
        fcalls.append((list(keys_and_args[:numkeys]), list(keys_and_args[numkeys:])))
        return fcall(function, numkeys, *keys_and_args)

    conn.fcall = recording  # type: ignore[method-assign]
    rules = target.rules()
    for i in range(CAPTURED):
        target.router.record_and_route("route_ab", tenants[i % TENANTS], f"job-{i}", target.base, rules)
    conn.fcall = fcall  # type: ignore[method-assign]

    queue_loaded = luascript.Call.queue_loaded

    def queued(call: luascript.Call[Any], pipe: Any) -> Any:
        if call.script.name == "route":
            evalshas.append((list(call.keys), list(call.args)))
        return queue_loaded(call, pipe)

    luascript.Call.queue_loaded = queued  # type: ignore[method-assign]
    try:
        routed = target.routed_noop()
        for i in range(CAPTURED):
            routed.delay(tenants[i % TENANTS], i)
    finally:
        luascript.Call.queue_loaded = queue_loaded  # type: ignore[method-assign]
    return fcalls, evalshas


CAPTURE_IN = """
import pickle, sys
from pathlib import Path
root = Path(sys.argv[1])
sys.path[:0] = [str(root), str(root / "bench")]
import route_ab
from fair_router.demo.redis_server import RedisServer
with RedisServer() as server:
    sys.stdout.buffer.write(pickle.dumps(route_ab.capture(server.client())))
"""


def captured_by(checkout: Path) -> tuple[Captured, Captured]:
    """:func:`capture` as ``checkout``'s own code makes the calls (its bench/route_ab.py, in a subprocess)."""
    done = subprocess.run([sys.executable, "-c", CAPTURE_IN, str(checkout.resolve())], capture_output=True,
                          check=True, timeout=600)
    calls: tuple[Captured, Captured] = pickle.loads(done.stdout)
    return calls


def fcall_of(conn: Redis, function: str) -> Call:
    """One side: FCALL of ``function``."""
    return lambda keys, args: conn.fcall(function, len(keys), *keys, *args)


def evalsha_of(conn: Redis, sha: str) -> Call:
    """One side: EVALSHA of ``sha``."""
    return lambda keys, args: conn.evalsha(sha, len(keys), *keys, *args)


def measure(conn: Redis, sides: dict[str, tuple[Call, Captured]],
            rounds: int, per_block: int) -> dict[str, list[tuple[float, float, float]]]:
    """Per side (its call and the calls it replays), per round: (µs per call, server CPU µs per call, commands
    per call)."""
    rows: dict[str, list[tuple[float, float, float]]] = {side: [] for side in sides}
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(reversed(sides))
        for side in order:
            conn.config_resetstat()
            cpu = conn.info("cpu")
            before = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
            call, calls = sides[side]
            for i in range(per_block):
                keys, args = calls[-per_block + i]
                args = [*args[:-2], f"{side}-{r}-{i}".encode(), args[-1]]  # a fresh job id digest
                call(keys, args)
            cpu = conn.info("cpu")
            used = (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]) - before) / per_block * 1e6
            stats = conn.info("commandstats")
            script = next(stats[name] for name in ("cmdstat_fcall", "cmdstat_evalsha") if name in stats)
            inner = sum(int(v["calls"]) for name, v in stats.items() if name not in NOT_INNER) / per_block
            rows[side].append((float(script["usec_per_call"]), used, inner))
    return rows


def report(mode: str, rows: dict[str, list[tuple[float, float, float]]]) -> None:
    this = rows["this"]
    for side, values in rows.items():
        time_ratio = statistics.median(v[0] / t[0] for v, t in zip(values, this, strict=True))
        cpu_ratio = statistics.median(v[1] / t[1] for v, t in zip(values, this, strict=True))
        print(f"{mode:8}{side:8}{statistics.median(v[0] for v in values):>8.2f} us{time_ratio:>9.3f}x"
              f"{cpu_ratio:>9.3f}x{statistics.median(v[2] for v in values):>10.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", type=Path, help="the other checkout (its lua/built is read)")
    parser.add_argument("--rounds", type=int, default=20, help="rounds, each side once per round (default 20)")
    parser.add_argument("--calls", type=int, default=500, help="calls per side per round (default 500)")
    args = parser.parse_args(argv)
    built = {"this": Path(__file__).resolve().parent.parent / "lua" / "built", "other": args.other / "lua" / "built"}
    per_block = min(args.calls, CAPTURED)
    fcalls, evalshas = captured_by(Path(__file__).resolve().parent.parent)
    other_fcalls, other_evalshas = captured_by(args.other)
    with RedisServer() as server:
        conn = server.client()
        texts = {side: (path / "route.library.lua").read_text(encoding="utf-8") for side, path in built.items()}
        texts["empty"] = returning_at_once(texts["this"])
        functions: dict[str, tuple[Call, Captured]] = {}
        for side, text in texts.items():
            conn.function_load(library(text, f"route_ab_{side}"), replace=True)
            functions[side] = (fcall_of(conn, f"route_ab_{side}"), other_fcalls if side == "other" else fcalls)
        scripts = {side: (evalsha_of(conn, conn.script_load((path / "route.lua").read_text(encoding="utf-8"))),
                          other_evalshas if side == "other" else evalshas) for side, path in built.items()}
        for call, calls in (functions["this"], functions["other"], scripts["this"], scripts["other"]):
            for keys, argv in calls:  # each tree's windows filled (past their cap) alike
                call(keys, argv)
        print(f"route.lua A/B ({args.rounds} rounds x {per_block} calls per side; ratios: medians of each round's "
              f"side / this)")
        print(f"{'mode':8}{'side':8}{'time':>11}{'/ this':>10}{'CPU / this':>11}{'commands':>9}")
        report("fcall", measure(conn, functions, args.rounds, per_block))
        report("evalsha", measure(conn, scripts, args.rounds, per_block))
    return 0


if __name__ == "__main__":
    sys.exit(main())
