"""The churn scenario: waves of ``visitor-`` tenants run a few jobs through one FairQueue with the tenant controls on,
then go; what they leave in Redis without a TTL (bench/bounded_state.py, tests/test_bounded_state.py)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis import Redis

from fair_router.config.sections import ConcurrencyConfig, TiersConfig
from fair_router.config.settings import Charge, Settings
from fair_router.core.text import as_text
from fair_router.demo.harness import timed_job
from fair_router.fairqueue.queue import FairQueue
from fair_router.workers.weighted import WeightedSimpleWorker

PREFIX = "bounded"
QUEUE = "bounded"
TENANT = "visitor-"  # every scenario tenant's id starts so (encoded alike): what the count looks for
DONE = "bench:bounded:done"


@dataclass
class Leftover:
    """What a run left: per key without a TTL, its entries naming a scenario tenant (also midway); used_memory."""

    tenants: int
    jobs: int
    per_key: dict[str, int] = field(default_factory=dict)
    midway: dict[str, int] = field(default_factory=dict)  # the same, halfway through the last wave's drain
    memory_before: int = 0
    memory_after: int = 0

    @property
    def entries(self) -> int:
        return sum(self.per_key.values())


def tenant_entries(conn: Redis, key: bytes) -> int:
    """How many entries of ``key`` (or the key's own name) name a scenario tenant."""
    kind = as_text(conn.type(key))
    entries: dict[str, Callable[[bytes], Any]] = {
        "hash": conn.hkeys, "zset": lambda k: conn.zrange(k, 0, -1), "set": conn.smembers,
        "list": lambda k: conn.lrange(k, 0, -1)}
    if TENANT.encode() in key:
        return 1 if kind not in entries else max(1, len(entries[kind](key)))
    return sum(TENANT.encode() in name for name in entries[kind](key)) if kind in entries else 0


def leftover(conn: Redis) -> dict[str, int]:
    """Per key without a TTL: its entries naming a scenario tenant (keys with none left out)."""
    found: dict[str, int] = {}
    for key in conn.scan_iter(count=1000):
        if conn.ttl(key) != -1:
            continue
        n = tenant_entries(conn, key)
        if n:
            found[as_text(key)] = n
    return found


def run(conn: Redis, tenants: int = 2000, jobs: int = 2, wave: int = 250, charge: Charge = "runtime",
        rate: str = "100/s") -> Leftover:
    """The scenario on ``conn`` (flushed first): see the module docstring."""
    conn.flushall()
    settings = Settings(prefix=PREFIX, fair_charge=charge,
                        concurrency=ConcurrencyConfig(enabled=True), tiers=TiersConfig(rate={"free": rate}))
    queue = FairQueue(QUEUE, connection=conn, settings=settings)
    worker = WeightedSimpleWorker([queue], connection=conn, settings=settings)
    result = Leftover(tenants, jobs)
    result.memory_before = int(conn.info("memory")["used_memory"])
    for first in range(0, tenants, wave):
        names = [f"{TENANT}{i:06d}" for i in range(first, min(first + wave, tenants))]
        queue.enqueue_many([FairQueue.prepare_data(timed_job, (name, 0, DONE), meta={"fair_tenant": name},
                                                   result_ttl=0) for name in names for _ in range(jobs)])
        worker.work(burst=True, max_jobs=len(names) * jobs // 2, logging_level="WARNING")
        result.midway = leftover(conn)  # the wave's tenants, half of their jobs run
        worker.work(burst=True, logging_level="WARNING")
    if queue.count or int(conn.get(DONE) or 0) != tenants * jobs:
        raise RuntimeError(f"the drain left {queue.count} jobs; {conn.get(DONE)!r} of {tenants * jobs} ran")
    conn.delete(DONE)
    result.per_key = leftover(conn)
    result.memory_after = int(conn.info("memory")["used_memory"])
    return result
