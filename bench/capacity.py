"""What one job costs Redis, end to end, and how many jobs/s one Redis primary can carry.

Four set-ups, each enqueueing ``--jobs`` no-op jobs one call at a time from 50 tenants (round-robin), then
draining them with one in-process burst worker (enqueue, route, fetch, start, finish):

- ``plain rq``: ``Queue.enqueue``, drained by rq's ``SimpleWorker``;
- ``router``: ``@fair_job`` with a throttle rule (``FairRouter``'s routed enqueue: the window record and the
  job in one MULTI), drained by ``WeightedSimpleWorker`` (weighted fetch order; recording off);
- ``FairQueue``: ``FairQueue.enqueue`` with ``fair_tenant=``, drained by ``WeightedSimpleWorker`` (the fair
  pop; recording off);
- ``FairQueue + limits + rec``: the same with concurrency limits on (a lease per job), a never-binding rate
  on every tenant (the GCRA check at each start) and start recording on (fair_router.observe).

Each measurement runs on a dedicated redis-server (flushed before it, ``CONFIG RESETSTAT``, then ``INFO``
deltas after the enqueues and after the drain). Reported per job: Redis commands (as Redis counts them:
those scripts and MULTIs run included, MULTI/EXEC themselves too), the commands' own time (``INFO
commandstats`` usec of every command but EVAL/EVALSHA/EXEC, which contain the others), the scripts' time
(EVAL/EVALSHA/FCALL usec, their commands included; commands' + scripts' us is an upper bound of the time in
commands, the commands scripts run counted twice) and the server's CPU time (``INFO cpu``, user + system: what
the single Redis thread spends on the job, the event loop, reading requests and writing replies included), and
how often the server was woken per job (its voluntary context switches, from ``/proc``). Redis runs commands on
one thread, so the ceiling of one primary is ``1e6 / server CPU us per job`` jobs/s (a bound: no client waits,
no other traffic, the primary's core to itself).

``--pin one`` (the default) runs redis-server and this process (producer and worker) on one core: the server's
core is then never idle when a request comes. Left free (``--pin none``, the old measure) or on a core of its
own (``--pin split``), an idle server's every wake-up costs it 15-20 us more of CPU on this (virtual) machine,
and plain rq, with a round trip to wait for at each of its ~22 wake-ups per job, reads 700-800 us per job
instead of 230-300: the "bimodal" plain rq of earlier runs was whether the scheduler happened to leave Redis on
an idle core. A busy primary (the one whose capacity is asked) always has a request waiting: ``one`` is the
comparable measure, and the paired ratios come from it. The worker's own start-up and
registration are in the drain (a few dozen commands, spread over ``--jobs``). Rounds interleave the
set-ups (rotating who goes first); medians are reported, and "vs plain rq" is the median of each round's
ratio to plain rq's server CPU in the same round (on a shared machine a round's CPU per job can swing 2x).

``--tenants N`` spreads the jobs over N tenants (default 50; with N >= ``--jobs`` every job is a new
tenant's, nothing of one job's state is reused by the next). ``--breakdown`` adds, per set-up, one more
measurement (outside the medians) with the slow log on for every command: its ``INFO commandstats`` deltas
per job (calls and usec of each command, those scripts run counted on their own lines too) and its scripts,
each by name (an EVALSHA's SHA, an EVAL's text and an FCALL's function mapped to its ``lua/built`` file):
calls and usec per job, their commands included.

    .venv/bin/python bench/capacity.py [--jobs 500] [--rounds 5] [--tenants 50] [--pin one|split|none]
                                       [--breakdown] [--json PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue, SimpleWorker
from rq.registry import FailedJobRegistry, FinishedJobRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.jobs import noop
from bench.redisstats import Usage
from fair_router import FairQueue, Rule, Settings, WeightedSimpleWorker, fair_job
from fair_router.config.settings import ConcurrencyConfig, ObserveConfig, TiersConfig
from fair_router.demo.redis_server import RedisServer
from fair_router.store.luascript import BUILT, lua_dir

PREFIX = "capacity"
QUEUE = "capacity"
THROTTLED = f"{QUEUE}_throttled"
TENANTS = 50
"""Default number of tenants the jobs go round (``--tenants``)."""
PINS = ("one", "split", "none")
"""``--pin``: redis-server and this process on one core, on a core each, or left to the scheduler."""
BARE = Settings(prefix=PREFIX, observe=ObserveConfig(record=False))
FULL = Settings(prefix=PREFIX, concurrency=ConcurrencyConfig(enabled=True), observe=ObserveConfig(record=True),
                tiers=TiersConfig(rate={"free": "100000/s"}, burst={"free": 1000}))


def tenant(i: int, tenants: int) -> str:
    return f"tenant-{i % tenants}"


@dataclass(frozen=True)
class Setup:
    """One way of running jobs: how they are enqueued (one call each) and the worker that drains them."""

    label: str
    enqueue: Callable[[Redis, int, int], None]
    worker: Callable[[Redis], SimpleWorker]
    queues: tuple[str, ...] = (QUEUE,)


def plain_enqueue(conn: Redis, jobs: int, tenants: int) -> None:
    queue = Queue(QUEUE, connection=conn)
    for i in range(jobs):
        queue.enqueue(noop, i)


def routed_enqueue(conn: Redis, jobs: int, tenants: int) -> None:
    # A rule every tenant stays under here (10 jobs per 50 tenants per round at 500 jobs): each enqueue is
    # recorded in its tenant's window and its rule checked, as in production; none is throttled.
    job = fair_job(QUEUE, rules=[Rule(queue=THROTTLED, threshold=1000, per=60)], connection=conn, settings=BARE,
                   job_key="capacity.noop")(noop)
    for i in range(jobs):
        job.enqueue(i, fair_tenant=tenant(i, tenants))


def fair_enqueue(settings: Settings) -> Callable[[Redis, int, int], None]:
    def enqueue(conn: Redis, jobs: int, tenants: int) -> None:
        queue = FairQueue(QUEUE, connection=conn, settings=settings)
        for i in range(jobs):
            queue.enqueue(noop, i, fair_tenant=tenant(i, tenants))

    return enqueue


def weighted(settings: Settings, queues: tuple[str, ...]) -> Callable[[Redis], SimpleWorker]:
    return lambda conn: WeightedSimpleWorker(list(queues), connection=conn, settings=settings)


SETUPS = {
    "plain": Setup("plain rq", plain_enqueue, lambda conn: SimpleWorker([QUEUE], connection=conn)),
    "router": Setup("router", routed_enqueue, weighted(BARE, (QUEUE, THROTTLED)), (QUEUE, THROTTLED)),
    "fair": Setup("FairQueue", fair_enqueue(BARE), weighted(BARE.model_copy(update={"fair_queues": [QUEUE]}),
                                                              (QUEUE,))),
    "fair_limited": Setup("FairQueue + limits + rec", fair_enqueue(FULL),
                          weighted(FULL.model_copy(update={"fair_queues": [QUEUE]}), (QUEUE,))),
}


def measure(conn: Redis, setup: Setup, jobs: int, tenants: int = TENANTS) -> dict[str, float]:
    """One enqueue-then-drain of ``jobs`` jobs on an emptied server: per-job costs of each phase."""
    return _measure(conn, setup, jobs, tenants)[0]


def wakeups(conn: Redis) -> float:
    """How many times the server's process has been woken so far (voluntary context switches; 0 without ``/proc``)."""
    try:
        status = Path(f"/proc/{conn.info('server')['process_id']}/status").read_text()
    except OSError:
        return 0.0
    return float(re.search(r"^voluntary_ctxt_switches:\s*(\d+)", status, re.M).group(1))  # type: ignore[union-attr]


def pin(conn: Redis, how: str) -> str:
    """Put redis-server and this process on CPUs as ``how`` says (:data:`PINS`); returns what was done."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if how == "none" or len(cpus) < 2:
        return "not pinned"
    server = int(conn.info("server")["process_id"])
    os.sched_setaffinity(server, {cpus[-1]})
    os.sched_setaffinity(0, {cpus[-1] if how == "one" else cpus[0]})
    return f"redis-server on CPU {cpus[-1]}, producer and worker on CPU {cpus[-1] if how == 'one' else cpus[0]}"


def _measure(conn: Redis, setup: Setup, jobs: int, tenants: int) -> tuple[dict[str, float], Usage]:
    conn.flushdb()
    conn.config_resetstat()
    woken = wakeups(conn)
    before = Usage.now(conn)
    setup.enqueue(conn, jobs, tenants)
    enqueued = Usage.now(conn)
    setup.worker(conn).work(burst=True, logging_level="WARNING")
    drained = Usage.now(conn)
    woken = wakeups(conn) - woken
    finished = sum(FinishedJobRegistry(name, connection=conn).count for name in setup.queues)
    failed = sum(FailedJobRegistry(name, connection=conn).count for name in setup.queues)
    if finished != jobs or failed:
        raise RuntimeError(f"{setup.label}: {finished} of {jobs} jobs finished, {failed} failed")
    enqueue, drain, total = enqueued - before, drained - enqueued, drained - before
    figures = {
        "enqueue_commands": enqueue.commands / jobs, "drain_commands": drain.commands / jobs,
        "commands": total.commands / jobs, "command_usec": total.command_usec / jobs,
        "script_usec": total.script_usec / jobs, "cpu_usec": total.cpu * 1e6 / jobs,
        "enqueue_cpu_usec": enqueue.cpu * 1e6 / jobs, "drain_cpu_usec": drain.cpu * 1e6 / jobs,
        "in_command_usec": (total.command_usec + total.script_usec) / jobs, "wakeups": woken / jobs,
    }
    return figures, total


def script_names() -> dict[str, str]:
    """What names a script in a slow log entry -> its name: the SHA1 of each ``lua/built`` text, each text's
    length (an EVAL's, truncated in the log to 128 characters and a count of the bytes left out: several texts
    begin alike) and each function library's name (FCALL's)."""
    names: dict[str, str] = {}
    for entry in lua_dir().joinpath(BUILT).iterdir():
        if not entry.name.endswith(".lua"):
            continue
        text = entry.read_text(encoding="utf-8")
        name = entry.name.removesuffix(".lua").removesuffix(".min").removesuffix(".library")
        if text.startswith("#!lua name="):
            names["fcall:" + text.split("\n", 1)[0].removeprefix("#!lua name=")] = name
        else:
            names[hashlib.sha1(text.encode()).hexdigest()] = name
            names[f"eval:{len(text.encode())}"] = name
    return names


def script_of(args: list[str], names: dict[str, str]) -> str | None:
    """The script a slow log entry's command ran ("name (EVAL)"), None when it ran none."""
    verb = args[0].upper() if args else ""
    if verb in ("EVALSHA", "EVALSHA_RO"):
        return f"{names.get(args[1].lower(), args[1][:12])} (EVALSHA)"
    if verb in ("FCALL", "FCALL_RO"):
        return f"{names.get('fcall:' + args[1], args[1])} (FCALL)"
    if verb in ("EVAL", "EVAL_RO"):
        cut = re.search(r"\.\.\. \((\d+) more bytes\)$", args[1])
        size = 128 + int(cut.group(1)) if cut else len(args[1].encode())
        return f"{names.get(f'eval:{size}', '?')} (EVAL)"
    return None


def breakdown(conn: Redis, setup: Setup, jobs: int, tenants: int) -> dict[str, dict[str, dict[str, float]]]:
    """One more enqueue-then-drain with every command in the slow log: per job, each command's calls and usec
    (``INFO commandstats``) and each script's calls and usec (the slow log's entries, mapped by name)."""
    conn.config_set("slowlog-log-slower-than", 0)
    conn.config_set("slowlog-max-len", 1_000_000)
    conn.slowlog_reset()
    try:
        _, total = _measure(conn, setup, jobs, tenants)
        entries = conn.execute_command("SLOWLOG", "GET", "-1")
    finally:
        conn.config_set("slowlog-log-slower-than", 10000)
        conn.slowlog_reset()
    names = script_names()
    scripts: dict[str, dict[str, float]] = {}
    for entry in entries:
        args = [arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg) for arg in entry[3]]
        script = script_of(args, names)
        if script is not None:
            row = scripts.setdefault(script, {"calls": 0.0, "usec": 0.0})
            row["calls"] += 1 / jobs
            row["usec"] += int(entry[2]) / jobs
    commands = {name.removeprefix("cmdstat_"): {field: value[field] / jobs for field in ("calls", "usec")}
                for name, value in total.stats.items()}
    return {"commands": commands, "scripts": scripts}


def breakdown_table(label: str, got: dict[str, dict[str, dict[str, float]]]) -> str:
    """One set-up's breakdown as two markdown tables, costliest first."""
    lines = [f"**{label}**: commands (scripts' and MULTI's counted on their own lines too)\n",
             "| command | calls/job | usec/job |", "|---|---:|---:|"]
    for name, row in sorted(got["commands"].items(), key=lambda item: -item[1]["usec"]):
        lines.append(f"| {name} | {row['calls']:.2f} | {row['usec']:.1f} |")
    if got["scripts"]:
        lines += ["", "| script | calls/job | usec/job (its commands included) | usec/call |", "|---|---:|---:|---:|"]
        for name, row in sorted(got["scripts"].items(), key=lambda item: -item[1]["usec"]):
            lines.append(f"| {name} | {row['calls']:.2f} | {row['usec']:.1f} | {row['usec'] / row['calls']:.1f} |")
    return "\n".join(lines)


def run(conn: Redis, jobs: int, rounds: int, names: tuple[str, ...] = tuple(SETUPS),
        tenants: int = TENANTS) -> dict[str, Any]:
    """A warm-up of every set-up, then ``rounds`` interleaved rounds; medians per set-up and figure."""
    for name in names:
        measure(conn, SETUPS[name], min(jobs, 50), tenants)
    per_round: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for rnd in range(rounds):
        for name in names[rnd % len(names):] + names[: rnd % len(names)]:
            per_round[name].append(measure(conn, SETUPS[name], jobs, tenants))
    medians = {name: {field: statistics.median(got[field] for got in rows) for field in rows[0]}
               for name, rows in per_round.items()}
    for name, row in medians.items():
        row["ceiling_jobs_per_s"] = 1e6 / row["cpu_usec"]
        for field in ("cpu", "in_command") if "plain" in per_round else ():  # paired: against plain rq's same round
            pairs = zip(per_round[name], per_round["plain"], strict=True)
            row[f"{field}_ratio"] = statistics.median(got[f"{field}_usec"] / plain[f"{field}_usec"]
                                                      for got, plain in pairs)
    return {"jobs": jobs, "rounds": rounds, "tenants": tenants, "medians": medians, "rounds_detail": per_round}


def table(report: dict[str, Any]) -> str:
    """The medians as a markdown table."""
    medians = report["medians"]
    lines = ["| set-up | commands/job (enqueue + drain) | commands' us/job | scripts' us/job | in commands, at most "
             "(vs plain rq) | server wake-ups/job | server CPU us/job | vs plain rq (median of rounds) "
             "| ceiling of one primary (jobs/s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, row in medians.items():
        ratio = f"{row['cpu_ratio']:.2f}x" if "cpu_ratio" in row else "-"
        in_ratio = f" ({row['in_command_ratio']:.2f}x)" if "in_command_ratio" in row else ""
        lines.append(f"| {SETUPS[name].label} | {row['commands']:.1f} ({row['enqueue_commands']:.1f} + "
                     f"{row['drain_commands']:.1f}) | {row['command_usec']:.0f} | {row['script_usec']:.0f} | "
                     f"{row['in_command_usec']:.0f}{in_ratio} | {row['wakeups']:.1f} | "
                     f"{row['cpu_usec']:.0f} | {ratio} | {row['ceiling_jobs_per_s']:,.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=500, help="jobs per set-up per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians are reported)")
    parser.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated subset of {', '.join(SETUPS)}")
    parser.add_argument("--tenants", type=int, default=TENANTS, help="tenants the jobs go round")
    parser.add_argument("--pin", choices=PINS, default="one", help="where redis-server and this process run (module "
                        "docstring): one core for both (default), a core each, or as the scheduler likes")
    parser.add_argument("--breakdown", action="store_true", help="also print each set-up's cost per command and script")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    names = tuple(name.strip() for name in args.setups.split(","))
    if args.jobs < 1 or args.rounds < 1 or args.tenants < 1 or any(name not in SETUPS for name in names):
        parser.error(f"--jobs, --rounds and --tenants at least 1; --setups from {', '.join(SETUPS)}")
    with RedisServer() as server:
        conn = server.client()
        version = conn.info("server")["redis_version"]
        pinned = pin(conn, args.pin)
        report = run(conn, args.jobs, args.rounds, names, args.tenants)
        if args.breakdown:
            report["breakdown"] = {name: breakdown(conn, SETUPS[name], args.jobs, args.tenants) for name in names}
        conn.close()
    report["redis"], report["pinned"] = version, pinned
    print(f"Redis {version}, {args.rounds} rounds x {args.jobs} jobs per set-up, {args.tenants} tenants, {pinned}, "
          "medians:\n")
    print(table(report))
    print("\ncommands' us: each command's own time (INFO commandstats, those scripts and MULTIs ran included, once); "
          "scripts' us: EVAL/EVALSHA/FCALL, their commands included; in commands, at most: the two added (the "
          "commands scripts ran counted twice), without the event loop, reading requests and writing replies, "
          "which server CPU (INFO cpu, user + sys) has. ceiling = 1e6 / server CPU us per job: Redis runs commands "
          "on one thread, so this is what one primary carries at best (no other traffic, its core to itself).")
    for name, got in report.get("breakdown", {}).items():
        print("\n" + breakdown_table(SETUPS[name].label, got))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
