"""The at-limit flood: starts refused at the limit per slot acquired, from the limiter's counters.

Two ``rq worker -w fair_router.WeightedWorker`` processes (rq's forking worker, as deployed) serve one FairQueue
with concurrency limits on and every tenant limited to one job at a time (the free tier); one tenant floods
``--jobs`` jobs of ``bench.jobs.sleep_ms`` (``--ms`` each), a few other tenants add one job each. When every
job has finished the workers stop (they write their pending counters then) and the free tier's counters are
read: ``refused`` (starts refused at the limit), ``parked`` and ``acquired`` (slots taken). Before claim-time
limits this was about one refusal per slot (0.97-0.99); the goal is at most 0.05. Counts, not times: CPU
noise moves them little.

Always runs on a private redis-server.

    .venv/bin/python bench/limit_flood.py [--jobs 300] [--ms 10] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from rq.registry import FinishedJobRegistry

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.jobs import sleep_ms
from fair_router import FairQueue, Settings
from fair_router.config.settings import ConcurrencyConfig
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.demo.redis_server import RedisServer
from fair_router.workers.limiter import ConcurrencyLimiter

PREFIX = "flood"
QUEUE = "flood"
ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=300, help="jobs of the flooding tenant")
    parser.add_argument("--ms", type=float, default=10.0, help="run time of each job (ms)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with RedisServer() as server, tempfile.TemporaryDirectory(prefix="fair-router-flood-") as tmp:
        conn = server.client()
        config = Path(tmp) / "fair_router.yaml"
        config.write_text(yaml.safe_dump({"prefix": PREFIX, "fair_queues": [QUEUE],
                                          "concurrency": {"enabled": True}}), encoding="utf-8")
        queue = FairQueue(QUEUE, connection=conn, settings=Settings(prefix=PREFIX))
        env = {k: v for k, v in os.environ.items() if not k.startswith("FAIR_ROUTER_")}
        env["FAIR_ROUTER_CONFIG"] = str(config)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        command = [sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedWorker", "--url", server.url,
                   "--logging_level", "WARNING", QUEUE]
        procs = [subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for _ in range(args.workers)]
        try:
            total = args.jobs + 5
            for _ in range(args.jobs):
                queue.enqueue(sleep_ms, args.ms, fair_tenant="hog", result_ttl=600)
            for i in range(5):
                queue.enqueue(sleep_ms, args.ms, fair_tenant=f"calm-{i}", result_ttl=600)
            finished = FinishedJobRegistry(QUEUE, connection=conn)
            deadline = time.monotonic() + 600
            while finished.count < total:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {finished.count} of {total} jobs finished")
                time.sleep(0.1)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(60)
        keys = Keys(PREFIX)
        limiter = ConcurrencyLimiter(conn, keys, TierBook(conn, keys), ConcurrencyConfig(enabled=True))
        counts = limiter.counters().get("free", {})
    acquired, refused = counts.get("acquired", 0), counts.get("refused", 0)
    print(f"{args.workers} workers, {args.jobs} jobs of one tenant at limit 1 (+5 of others), {args.ms:g} ms each:")
    print(f"  acquired {acquired}, refused at the limit {refused}, parked {counts.get('parked', 0)}: "
          f"{refused / max(1, acquired):.3f} refused per slot acquired (goal <= 0.05)")


if __name__ == "__main__":
    main()
