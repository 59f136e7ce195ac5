"""Cost of interruptible iteration per checkpoint, against the same generator run as a plain loop.

A job whose items do no work at all (so the figures are the checkpoint's own cost) runs ``--items``
checkpoints in one turn (slice of an hour), through rq's own ``Job.perform`` as a weighted worker runs it:

- plain: the generator function called and iterated to its end (what a job without checkpoints costs);
- interruptible, ``save_every=1``: every checkpoint saves the cursor (one HSET of the job's meta);
- interruptible, ``save_every=100``: one save per 100 checkpoints.

Prints the median over ``--rounds`` of the time per checkpoint above the plain loop, and the Redis commands
each variant sent per checkpoint (INFO commandstats deltas: at most one per saved checkpoint). Runs against a
private redis-server, or ``$REDIS_URL`` when set (it then only creates and deletes its own job keys).

    .venv/bin/python bench/interruptible.py [--items N] [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Generator
from typing import Any, cast

from redis import Redis
from rq import Queue
from rq.job import Job

from fair_router import interruptible
from fair_router.demo.redis_server import RedisServer
from fair_router.iteration.turns import HOST


def steps(n: int, cursor: int | None = None) -> Generator[int, None, int]:
    for i in range(cursor or 0, n):
        yield i + 1
    return n


@interruptible(slice="1h")
def saved_each(n: int, cursor: int | None = None) -> Generator[int, None, int]:
    return (yield from steps(n, cursor))


@interruptible(slice="1h", save_every=100)
def saved_every_100(n: int, cursor: int | None = None) -> Generator[int, None, int]:
    return (yield from steps(n, cursor))


def commands(conn: Redis) -> int:
    return int(cast(dict[str, Any], conn.info("stats"))["total_commands_processed"])


def run_plain(n: int) -> None:
    for _ in steps(n):
        pass


def timed(conn: Redis, queue: Queue, func: Callable[..., Any] | None, n: int) -> tuple[float, int]:
    """Seconds and Redis commands for ``n`` checkpoints of ``func`` run as a worker's job (None: plain loop)."""
    if func is None:
        before, start = commands(conn), time.perf_counter()
        run_plain(n)
        return time.perf_counter() - start, commands(conn) - before - 1
    job = Job.create(func, args=(n,), connection=conn, origin=queue.name)
    job.save()
    HOST.hosting(True)
    try:
        before, start = commands(conn), time.perf_counter()
        result = job.perform()
        elapsed = time.perf_counter() - start
        sent = commands(conn) - before - 1  # the INFO call itself
    finally:
        HOST.hosting(False)
        job.delete()
    assert result == n, result
    return elapsed, sent


def measure(conn: Redis, n: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Variant -> (median microseconds per checkpoint above the plain loop, Redis commands per checkpoint)."""
    queue = Queue(f"bench_interruptible_{os.getpid()}", connection=conn)
    variants: dict[str, Callable[..., Any] | None] = {"plain": None, "save_every=1": saved_each,
                                                      "save_every=100": saved_every_100}
    samples: dict[str, list[tuple[float, int]]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, func in variants.items():
            samples[name].append(timed(conn, queue, func, n))
    plain = statistics.median(seconds for seconds, _ in samples["plain"])
    return {name: ((statistics.median(s for s, _ in runs) - plain) / n * 1e6,
                   statistics.median(c for _, c in runs) / n)
            for name, runs in samples.items() if name != "plain"} | {"plain": (plain / n * 1e6, 0.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    url = os.environ.get("REDIS_URL")
    if url:
        figures = measure(Redis.from_url(url), args.items, args.rounds)
    else:
        with RedisServer() as server:
            figures = measure(server.client(), args.items, args.rounds)
    print(f"interruptible iteration, {args.items} checkpoints per run, median of {args.rounds} runs")
    print(f"  plain generator loop: {figures.pop('plain')[0]:.3f} us per item")
    for name, (extra_us, sent) in figures.items():
        print(f"  {name:<15} +{extra_us:.1f} us per checkpoint, {sent:.3f} Redis commands per checkpoint")


if __name__ == "__main__":
    main()
