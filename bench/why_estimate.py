"""How good ``explain``'s estimated start is: a simulated flood on real rq workers, estimates against the actual
starts (goal: median error at most 30 %).

A private redis-server gets ``--jobs`` jobs (``bench.jobs.sleep_ms``, ``--ms`` each) in one FairQueue: one greedy
tenant with half of them and ``--tenants`` - 1 others sharing the rest, all enqueued at once. ``--workers`` real
``rq worker`` processes (fair-router's WeightedWorker) drain it. After ``--warmup`` seconds of draining (so the
observers have recorded a throughput), ``--sample`` waiting jobs picked at random are explained; once every job has
run, each estimate is compared with the job's actual start (rq's ``started_at``): error = |estimated - actual| /
(actual - when explained). Median and 90th percentile of the errors are printed, with the jobs-ahead of the
sample, and the workers' actual speed after the question beside the throughput the estimates were based on (their
difference, the shared machine's changing speed, is most of the error).

    .venv/bin/python bench/why_estimate.py --jobs 2000 --tenants 20 --workers 2
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml
from rq import Queue
from rq.job import Job

from fair_router import FairQueue, Settings, explain
from fair_router.demo.redis_server import RedisServer, stop_processes

ROOT = Path(__file__).resolve().parent.parent
PREFIX = "why_estimate"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ms", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--sample", type=int, default=40)
    args = parser.parse_args()
    rng = random.Random(1)
    with RedisServer() as server, tempfile.TemporaryDirectory(prefix="why-estimate-") as tmp:
        conn = server.client()
        config = Path(tmp) / "fair_router.yaml"
        config.write_text(yaml.safe_dump({"prefix": PREFIX, "fair_queues": ["flood"], "queues": {"flood": 1},
                                          "observe": {"flush_interval": 1.0}}))
        settings = Settings(prefix=PREFIX, fair_queues=["flood"], queues={"flood": 1})
        queue = FairQueue("flood", connection=conn, settings=settings)
        greedy = args.jobs // 2
        tenants = ["greedy"] * greedy + [f"t{i % (args.tenants - 1)}" for i in range(args.jobs - greedy)]
        rng.shuffle(tenants)
        queue.enqueue_many([Queue.prepare_data("bench.jobs.sleep_ms", (args.ms,), meta={"fair_tenant": tenant},
                                               result_ttl=3600) for tenant in tenants])
        env = {**os.environ, "FAIR_ROUTER_CONFIG": str(config), "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedWorker", "--url", server.url,
                   "--logging_level", "WARNING", "--burst", "flood"]
        procs = [subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for _ in range(args.workers)]
        try:
            time.sleep(args.warmup)
            waiting = queue.get_job_ids()
            estimates = []
            for job_id in rng.sample(waiting, min(args.sample, len(waiting))):
                answer = explain(job_id, connection=conn, settings=settings)
                if answer.estimated_start is not None:
                    estimates.append((job_id, datetime.now(timezone.utc), answer.estimated_start,
                                      answer.facts["jobs_ahead"]))
            print(f"explained {len(estimates)} of {len(waiting)} waiting jobs after {args.warmup:.0f} s; "
                  f"basis of the last: {answer.estimate_basis}")
            for proc in procs:
                proc.wait(timeout=600)
        finally:
            stop_processes(procs, grace=10)
        errors, ahead = [], []
        for job_id, asked, estimated, jobs_ahead in estimates:
            started = Job.fetch(job_id, connection=conn).started_at
            if started is None:
                continue
            actual = (started - asked).total_seconds()
            errors.append(abs((estimated - asked).total_seconds() - actual) / max(actual, 0.001))
            ahead.append(jobs_ahead)
        if not errors:
            print("no estimate to compare (no throughput recorded within the warm-up?)")
            return
        asked = min(when for _, when, _, _ in estimates)
        starts = sorted(job.started_at for job in Job.fetch_many(queue.finished_job_registry.get_job_ids(),
                                                                 connection=conn) if job and job.started_at)
        after = [(start - asked).total_seconds() for start in starts if start >= asked]
        if after and after[-1] > 0:
            before = (asked - starts[0]).total_seconds()
            print(f"actual: {len(after) / after[-1]:.3g} starts/s over the {after[-1]:.0f} s of draining after the "
                  f"question; {len(starts) - len(after)} jobs started in the {before:.1f} s before it")
        errors.sort()
        print(f"estimate error over {len(errors)} jobs ({min(ahead)}-{max(ahead)} jobs ahead): median "
              f"{statistics.median(errors):.0%}, p90 {errors[int(0.9 * (len(errors) - 1))]:.0%}, max {errors[-1]:.0%}")


if __name__ == "__main__":
    main()
