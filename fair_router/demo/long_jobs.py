"""The "long jobs" scenario: one tenant's long jobs hold every worker while small tenants arrive; with
``@interruptible`` a small job waits about one slice. The job functions live here for the workers to import."""
from __future__ import annotations

import time
from collections.abc import Callable, Generator
from dataclasses import asdict, dataclass
from typing import Any

from redis import Redis
from rq.job import Job

from fair_router.demo import harness
from fair_router.demo.metrics import percentile
from fair_router.fairqueue.queue import FairQueue
from fair_router.iteration.decorator import interruptible
from fair_router.iteration.turns import TURNS

SLICE = 0.3
"""Seconds per turn of :func:`long_job_in_turns`."""
LONG_TENANT = "long"
VARIANTS = ("whole", "turns")
"""Without interruptible iteration (each long job in one go), then with it (in turns of ``SLICE``)."""


def _items(items: int, item_ms: float, cursor: int | None) -> Generator[int, None, int]:
    """The long job's work: ``items`` items of ``item_ms`` (I/O-bound), from ``cursor`` on."""
    for i in range(cursor or 0, items):
        time.sleep(item_ms / 1000)
        yield i + 1  # everything before i + 1 is done
    return items


@interruptible(slice=SLICE)
def long_job_in_turns(tenant: str, items: int, item_ms: float, done_key: str,
                      cursor: int | None = None) -> Generator[int, None, int]:
    """The long job, interruptible: it gives its worker up at the first checkpoint after each slice."""
    done = yield from _items(items, item_ms, cursor)
    harness.count_done(done_key)
    return done


def long_job_whole(tenant: str, items: int, item_ms: float, done_key: str) -> int:
    """The same work in one go, as a plain job function."""
    for _ in _items(items, item_ms, None):
        pass
    harness.count_done(done_key)
    return items


@dataclass(frozen=True)
class LongParams:
    """Scenario parameters; defaults: 2 workers, each held by a 60 x 20 ms job, 8 small tenants x 10 ms."""

    items: int = 60
    item_ms: float = 20.0
    workers: int = 2
    small_tenants: int = 8
    small_ms: float = 10.0
    spread: float = 0.75
    """Small tenants arrive evenly over this fraction of a long job's length, from its start on."""

    @property
    def long_seconds(self) -> float:
        return self.items * self.item_ms / 1000

    @property
    def jobs_per_variant(self) -> int:
        return self.workers + self.small_tenants


def run_variant(connection: Redis, url: str, params: LongParams, turns: bool,
                progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """One run on real workers: the long jobs (``turns``: interruptible), then the small tenants once every long job has
    started. Returns the small tenants' waits and each long job's turns and result."""
    run = harness.run_id("_long")
    chosen = harness.mode("fair", run)
    queue = FairQueue(chosen.queues[0], connection=connection, settings=harness.observed_settings(chosen))
    done_key = f"{harness.PREFIX}:{run}:done"
    func: Callable[..., Any] = long_job_in_turns if turns else long_job_whole
    arrive = [params.spread * params.long_seconds * k / params.small_tenants for k in range(params.small_tenants)]
    tally = harness.Tally(connection, done_key, progress)

    with harness.workers(url, chosen, params.workers):
        harness.wait_for_workers(connection, chosen.queues, params.workers)
        longs = [queue.enqueue(func, LONG_TENANT, params.items, params.item_ms, done_key, fair_tenant=LONG_TENANT,
                               result_ttl=600) for _ in range(params.workers)]
        ids = [job.id for job in longs]
        if not harness.wait_until(lambda: all(job is not None and job.started_at is not None
                                              for job in Job.fetch_many(ids, connection=connection)), 30, step=0.01):
            raise RuntimeError("timed out after 30s waiting for the long jobs to start")
        start = time.monotonic()
        smalls: list[Job] = []
        for k, offset in enumerate(arrive):
            time.sleep(max(0.0, start + offset - time.monotonic()))
            smalls.append(queue.enqueue(harness.timed_job, f"small-{k}", params.small_ms, done_key,
                                        fair_tenant=f"small-{k}", result_ttl=600))
            tally.update()
        if not harness.wait_until(lambda: tally.update() >= params.jobs_per_variant,
                                  60 + params.workers * params.long_seconds):
            raise RuntimeError(f"long jobs: only {tally.reported} of {params.jobs_per_variant} jobs finished in time")
    fetched = [job for job in Job.fetch_many([j.id for j in [*longs, *smalls]], connection=connection) if job]
    by_id = {job.id: job for job in fetched}
    waits = [harness.timing(by_id[job.id], "", "small").wait for job in smalls]
    long_runs = [{"turns": int(by_id[job.id].meta.get(TURNS) or 1), "result": by_id[job.id].return_value()}
                 for job in longs]
    harness.clean_up(connection, chosen, fetched, done_key)
    return {"waits": waits, "long": long_runs}


def run_long_jobs(connection: Redis, url: str, params: LongParams,
                  progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Both variants (without turns first), then each one's small-tenant wait p50/p95/max and the verdict."""
    report: dict[str, Any] = {"params": {**asdict(params), "slice": SLICE}, "variants": {}}
    for variant in VARIANTS:
        entry = run_variant(connection, url, params, turns=variant == "turns", progress=progress)
        waits = entry["waits"]
        entry["summary"] = {"p50": percentile(waits, 0.50), "p95": percentile(waits, 0.95), "max": max(waits)}
        report["variants"][variant] = entry
    report["verdict"] = verdict(report["variants"]["whole"]["summary"]["max"],
                                report["variants"]["turns"]["summary"]["max"], params)
    return report


def verdict(whole_max: float, turns_max: float, params: LongParams) -> str:
    """One line: how much interruptible iteration shortened the small tenants' longest wait, if it did."""
    if turns_max < whole_max:
        return (f"with turns, small tenants wait at most {turns_max:.2f}s (about one {SLICE:g}s slice) instead of "
                f"{whole_max:.2f}s (up to a whole {params.long_seconds:.1f}s long job): "
                f"{whole_max / max(turns_max, 1e-6):.1f}x shorter")
    return (f"turns did not shorten the small tenants' longest wait in this run ({turns_max:.2f}s with turns, "
            f"{whole_max:.2f}s without): the machine may be too loaded for {SLICE:g}s slices")


def total_jobs(params: LongParams) -> int:
    """Jobs run by run_long_jobs (for a progress bar)."""
    return len(VARIANTS) * params.jobs_per_variant

