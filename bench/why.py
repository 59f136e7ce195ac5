"""Redis time of ``fair_router.explain`` for a job deep in a backlog (goal: at most 10 ms for a job behind 100,000
others), against the serving-order replay rq's ``get_job_ids`` runs on a FairQueue (its snapshot reads the whole
queue).

A private redis-server gets a FairQueue of ``--jobs`` waiting jobs over ``--tenants`` tenants (equal shares, pushed
round-robin), then one more tenant's job at the very end, and a plain queue of as many jobs. Each round explains,
in turn, the fair queue's last job in serving order, the last job of its first tenant, the new tenant's job and the
plain queue's last job, and takes one serving-order snapshot; the server time of each is the sum of its SLOWLOG
entries (slowlog-log-slower-than 0: every top-level command with its execution time, a script's commands inside its
EVALSHA, a MULTI's commands each on its own). Medians over ``--rounds`` are printed, in ms.

    .venv/bin/python bench/why.py --jobs 100000 --rounds 20
    .venv/bin/python bench/why.py --jobs 100000 --rounds 20 --orgs 10   # the tenants in 10 orgs: two levels

Server time only (no round trip, no client work); a shared machine moves it by some percent between runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from redis import Redis
from rq import Queue

from fair_router import FairQueue, Settings, explain
from fair_router.core.keys import Keys
from fair_router.demo.redis_server import RedisServer
from fair_router.fairqueue.listing import snapshot

PREFIX = "why_bench"
BATCH = 2000


def noop() -> None:
    """Never run: the jobs only wait."""


def fill(queue: Queue, tenants: list[str], jobs: int, orgs: int = 0) -> list[str]:
    """``jobs`` jobs, tenants in turn, in batches of BATCH (with ``orgs``, tenant i in org ``o<i % orgs>``); their
    ids in push order."""
    ids: list[str] = []
    for start in range(0, jobs, BATCH):
        datas = [Queue.prepare_data(noop, meta={"fair_tenant": tenants[i % len(tenants)]} | (
                     {"fair_org": f"o{i % len(tenants) % orgs}"} if orgs else {}), result_ttl=60)
                 for i in range(start, min(jobs, start + BATCH))]
        ids += [job.id for job in queue.enqueue_many(datas)]
    return ids


def server_ms(conn: Redis, run: Callable[[], object]) -> float:
    """Milliseconds of server time of the commands ``run`` sends (SLOWLOG, every command logged)."""
    conn.slowlog_reset()
    run()
    entries = conn.slowlog_get(100_000)
    return sum(int(entry["duration"]) for entry in entries
               if not str(entry["command"]).lower().startswith(("slowlog", "b'slowlog"))) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--orgs", type=int, default=0, help="put the fair queue's tenants in this many orgs")
    args = parser.parse_args()
    with RedisServer() as server:
        conn = server.client()
        settings = Settings(prefix=PREFIX)
        fair = FairQueue("deep", connection=conn, settings=settings)
        plain = Queue("deep_plain", connection=conn)
        started = time.monotonic()
        tenants = [f"t{i}" for i in range(args.tenants)]
        fair_ids = fill(fair, tenants, args.jobs, args.orgs)
        last = fill(fair, ["late"], 1)[0]
        plain_last = fill(plain, tenants, args.jobs + 1)[-1]
        first_tenant_last = fair_ids[-args.tenants]
        print(f"filled {args.jobs + 1} fair and {args.jobs + 1} plain jobs in {time.monotonic() - started:.0f} s")
        jobs = {"the fair queue's last job in serving order": fair_ids[-1],
                "the last job of the first tenant": first_tenant_last,
                "a new tenant's only job": last, "the plain queue's last job": plain_last}
        for name, job_id in jobs.items():  # scripts loaded; what each case finds
            answer = explain(job_id, connection=conn, settings=settings)
            print(f"{name}: {answer.reason.value}, {answer.facts['jobs_ahead']} jobs ahead "
                  f"(exact: {answer.facts['exact']})")
        conn.config_set("slowlog-log-slower-than", 0)
        conn.config_set("slowlog-max-len", 100_000)
        cases: dict[str, Callable[[], object]] = {
            f"explain {name}": (lambda job_id=job_id: explain(job_id, conn, settings)) for name, job_id in jobs.items()}
        cases["serving-order snapshot (get_job_ids' reads)"] = lambda: snapshot(conn, Keys(PREFIX).fair_queue(
            fair.key), False)
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, run in cases.items():
                times[name].append(server_ms(conn, run))
        for name, values in times.items():
            print(f"{name}: median {statistics.median(values):.2f} ms, min {min(values):.2f}, max {max(values):.2f} "
                  f"(server time, {args.rounds} rounds)")

if __name__ == "__main__":
    main()
