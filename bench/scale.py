"""Server cost per job of a FairQueue drained by worker processes, as the number of active tenants grows.

For each size (10, 1,000, 10,000, 100,000 active tenants by default) the database is emptied, a FairQueue is
filled with ``max(--jobs, tenants)`` jobs of ``bench.jobs.noop`` round-robin over the tenants (filling is not
measured), then ``--workers`` ``rq worker -w fair_router.WeightedSimpleWorker`` processes drain it with every
tenant control on: concurrency limits (every tenant limited to one job at a time), a rate of its own on every
tenant (``--rate``, high enough never to defer a job, so each start runs the GCRA check and reports its next
start to the fair queue) and start recording. ``INFO commandstats`` is reset just before the workers start and
read once ``--jobs`` jobs have finished; reported per finished job: Redis commands (commands run inside scripts
count, as Redis counts them), the server's CPU time (``INFO cpu``, user + system: everything it did, I/O
included), the scripts' time (EVAL/EVALSHA/FCALL usec), and the fair pop's own time per call (bench/redisstats.py
``pop_stat``: its FCALL, or on a Redis without functions the workers' only EVALSHA besides the rare park;
every other script rides a pipeline as EVAL). The goal (issue
27): server time per job at 100k tenants at most 1.2x that at 10. Server figures are what CPU noise
of a shared machine moves least; jobs/s is printed too, for orientation only.

Why not 16 workers: on a 2-core machine 16 worker processes only queue for the CPUs (the server's time per
command then measures the scheduler); ``--workers 16`` runs it as the issue wrote it.

Always runs on a private redis-server (it empties the database between sizes).

    .venv/bin/python bench/scale.py [--tenants 10,1000,10000,100000] [--jobs 3000] [--workers 4] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from redis import Redis
from rq import Queue
from rq.registry import FinishedJobRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.jobs import noop
from bench.redisstats import NOT_JOBS, SCRIPTS, pop_stat, server_cpu
from fair_router import FairQueue, Settings
from fair_router.demo.harness import stop_processes
from fair_router.demo.redis_server import RedisServer

PREFIX = "scale"
QUEUE = "scale"
ROOT = Path(__file__).resolve().parent.parent


def settings_file(directory: Path, rate: str) -> Path:
    """The workers' settings: our prefix, the queue fair, limits on (free tier: 1), a rate on every tenant."""
    path = directory / "fair_router.yaml"
    path.write_text(yaml.safe_dump({
        "prefix": PREFIX, "fair_queues": [QUEUE], "concurrency": {"enabled": True},
        "tiers": {"rate": {"free": rate}}, "observe": {"record": True},
    }), encoding="utf-8")
    return path


def fill(conn: Redis, tenants: int, total: int) -> None:
    """``total`` jobs round-robin over ``tenants`` tenants, in pipelined batches of 1,000."""
    queue = FairQueue(QUEUE, connection=conn, settings=Settings(prefix=PREFIX))
    batch = []
    for i in range(total):
        batch.append(Queue.prepare_data(noop, (i,), meta={"fair_tenant": f"tenant-{i % tenants}"}, result_ttl=600))
        if len(batch) == 1000:
            queue.enqueue_many(batch)
            batch = []
    if batch:
        queue.enqueue_many(batch)


def start_workers(url: str, n: int, config: Path, log_dir: Path) -> list[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIR_ROUTER_")}
    env["FAIR_ROUTER_CONFIG"] = str(config)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedSimpleWorker", "--url", url,
               "--logging_level", "WARNING", QUEUE]
    procs = []
    for i in range(n):
        with (log_dir / f"worker-{i}.log").open("wb") as log:
            procs.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT))
    return procs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    stop_processes(procs, grace=30)


def measure(
    conn: Redis, url: str, tenants: int, jobs: int, workers: int, config: Path, log_dir: Path
) -> dict[str, Any]:
    conn.flushdb()
    fill(conn, tenants, max(jobs, tenants))
    finished = FinishedJobRegistry(QUEUE, connection=conn)
    conn.config_resetstat()
    cpu_before = server_cpu(conn)
    started = time.perf_counter()
    procs = start_workers(url, workers, config, log_dir)
    try:
        deadline = time.monotonic() + 1800
        while finished.count < jobs:
            if time.monotonic() > deadline or any(proc.poll() is not None for proc in procs):
                raise RuntimeError(f"{finished.count} of {jobs} jobs finished; worker logs in {log_dir}")
            time.sleep(0.05)
        stats = conn.info("commandstats")
        cpu = server_cpu(conn) - cpu_before
        done = finished.count
        elapsed = time.perf_counter() - started
    finally:
        stop(procs)
    counted = {name: value for name, value in stats.items() if name not in NOT_JOBS}
    commands = sum(value["calls"] for value in counted.values())
    scripts = {name: value for name, value in counted.items() if name in SCRIPTS}
    pop = pop_stat(counted)
    return {
        "tenants": tenants, "workers": workers, "jobs": done,
        "commands_per_job": commands / done,
        "server_cpu_usec_per_job": cpu * 1e6 / done,
        "script_usec_per_job": sum(value["usec"] for value in scripts.values()) / done,
        "pop_usec_per_call": pop["usec_per_call"],
        "pops_per_job": pop["calls"] / done,
        "jobs_per_s": done / elapsed,
        "top": sorted(((name[8:], value["calls"] / done, value["usec_per_call"]) for name, value in counted.items()),
                      key=lambda row: -row[1])[:12],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tenants", default="10,1000,10000,100000", help="comma-separated active tenant counts")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs finished per size before the figures are read")
    parser.add_argument("--workers", type=int, default=4, help="worker processes (the issue's 16 needs 16 cores)")
    parser.add_argument("--rate", default="100000/s", help="every tenant's own rate (never binding by default)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()
    rows = []
    with RedisServer() as server, tempfile.TemporaryDirectory(prefix="fair-router-scale-") as tmp:
        config = settings_file(Path(tmp), args.rate)
        for tenants in (int(x) for x in args.tenants.split(",")):
            rows.append(measure(server.client(), server.url, tenants, args.jobs, args.workers, config, Path(tmp)))
            row = rows[-1]
            print(f"{tenants:>7} tenants: {row['commands_per_job']:5.1f} commands/job, "
                  f"server CPU {row['server_cpu_usec_per_job']:6.1f} us/job, "
                  f"fair pop {row['pop_usec_per_call']:5.1f} us/call ({row['pops_per_job']:.2f}/job), "
                  f"scripts {row['script_usec_per_job']:6.1f} us/job, {row['jobs_per_s']:6.0f} jobs/s", flush=True)
    base = rows[0]["server_cpu_usec_per_job"] or 1.0
    print("server CPU per job relative to the first size (goal <= 1.2x): "
          + " ".join(f"{row['tenants']}: {row['server_cpu_usec_per_job'] / base:.2f}x" for row in rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
