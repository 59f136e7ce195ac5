"""Server time per call of the job-start script and the start-record script (splitting the Lua into
lua/lib pieces must keep it flat). Runs ``--calls`` job starts through the workers' start checks (pause, a
concurrency slot, a tenant rate and a job rate, one EVAL per start on a pipeline, as a worker sends it) and
``--calls`` start-record flushes of 20 starts over 10 tenants, against a fresh redis-server, and prints the
microseconds per call Redis reports in ``INFO commandstats`` (usec_per_call of EVAL / EVALSHA).

    .venv/bin/python bench/script_time.py --calls 3000

Server time only (no round trip): a shared, loaded machine still moves it by some percent between runs.
"""

from __future__ import annotations

import argparse
import random
import socket
import subprocess
import time
from typing import Any

from redis import Redis
from rq.job import Job

from fair_router.config.settings import ConcurrencyConfig, ObserveConfig, Settings, TiersConfig
from fair_router.controls.gate import TenantGate
from fair_router.controls.ratelimit import RateLimiter
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.observe.recorder import StartRecorder
from fair_router.workers.limiter import ConcurrencyLimiter


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def usec_per_call(conn: Redis) -> dict[str, float]:
    stats = conn.info("commandstats")
    return {name: float(stats[f"cmdstat_{name}"]["usec_per_call"]) for name in ("eval", "evalsha")
            if f"cmdstat_{name}" in stats}


def starts(conn: Redis, calls: int) -> dict[str, float]:
    keys = Keys("bench")
    tiers = TiersConfig(rate={"free": "100000/s"}, concurrency={"free": 1000}, priority=[])  # type: ignore[dict-item]
    limiter = ConcurrencyLimiter(conn, keys, TierBook(conn, keys, tiers), ConcurrencyConfig(enabled=True))
    jobs = Settings(jobs={"bench.job": {"rate": "100000/s", "burst": 5}}).jobs
    gate = TenantGate(limiter, RateLimiter(keys, jobs), slots=True)
    tenants = [f"t{i}" for i in range(50)]
    job_list = [Job.create("bench.job", connection=conn, meta={"fair_tenant": random.choice(tenants)})
                for _ in range(calls)]
    conn.config_resetstat()
    for job in job_list:
        tenant = str(job.meta["fair_tenant"])
        scopes = gate.checks(tenant, job) or []
        with conn.pipeline(transaction=False) as pipe:
            pipe.ping()
            gate.acquire(tenant, job, scopes, reserve=True, pipeline=pipe)
    return usec_per_call(conn)


def records(conn: Redis, calls: int) -> dict[str, float]:
    recorder = StartRecorder(conn, Keys("bench"), ObserveConfig())
    conn.config_resetstat()
    for _ in range(calls):
        for i in range(20):
            recorder.add(f"t{i % 10}", random.random() * 3)
        recorder.flush(conn)
    return usec_per_call(conn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    options = parser.parse_args()
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL)
    try:
        conn = Redis(port=port)
        for _ in range(100):
            try:
                conn.ping()
                break
            except Exception:
                time.sleep(0.05)
        out: dict[str, Any] = {"start (one EVAL per job start)": starts(conn, options.calls),
                               "observe_start (20 starts, 10 tenants)": records(conn, options.calls)}
        for name, figures in out.items():
            print(f"{name}: " + ", ".join(f"{cmd} {usec:.2f} us/call" for cmd, usec in figures.items()))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
