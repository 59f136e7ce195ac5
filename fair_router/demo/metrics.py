"""The demo scenarios' metrics, from every finished job's rq timestamps."""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class JobTiming:
    """One finished job: tenant, tenant class and its rq timestamps (epoch seconds)."""

    tenant: str
    kind: str
    enqueued: float
    started: float
    ended: float

    @property
    def wait(self) -> float:
        return self.started - self.enqueued

    @property
    def service(self) -> float:
        return max(self.ended - self.started, 1e-6)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by nearest rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one tenant takes everything."""
    total, squares = sum(values), sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else 1.0


def makespan(timings: Sequence[JobTiming]) -> float:
    """First enqueue to last end of one run."""
    return max(t.ended for t in timings) - min(t.enqueued for t in timings)


def served_ahead(timings: Sequence[JobTiming], kind: str = "small") -> list[int]:
    """For each job of ``kind``: how many jobs started after it was enqueued and before it started; the
    machine-independent part of its wait (FIFO: the whole flood; a fair scheduler: about one job per worker)."""
    starts = sorted(t.started for t in timings)
    return [bisect.bisect_left(starts, t.started) - bisect.bisect_right(starts, t.enqueued)
            for t in timings if t.kind == kind]


def summarize(runs: Sequence[Sequence[JobTiming]]) -> dict[str, float]:
    """Per-class wait p50/p95, small jobs' served-ahead p95, median makespan and throughput, slowdown Jain."""
    pooled = [t for run in runs for t in run]
    result: dict[str, float] = {}
    for kind in ("greedy", "small"):
        waits = [t.wait for t in pooled if t.kind == kind]
        result[f"{kind}_p50"] = percentile(waits, 0.50)
        result[f"{kind}_p95"] = percentile(waits, 0.95)
    result["small_ahead_p95"] = percentile([n for run in runs for n in served_ahead(run)], 0.95)
    result["makespan"] = statistics.median(makespan(run) for run in runs)
    result["throughput"] = statistics.median(len(run) / makespan(run) for run in runs)
    per_tenant: dict[str, list[float]] = {}
    for t in pooled:
        per_tenant.setdefault(t.tenant, []).append(t.wait / t.service)
    result["jain_slowdown"] = jain([statistics.fmean(v) for v in per_tenant.values()])
    return result


def share_accuracy(timings: Sequence[JobTiming]) -> float:
    """Jain's index over each tenant's share of the first half of the dequeues / its fair share (1/n): 1.0 is a perfect
    fair share, FIFO scores about 1/n."""
    tenants = sorted({t.tenant for t in timings})
    first = sorted(timings, key=lambda t: t.started)[: len(timings) // 2]
    return jain([sum(t.tenant == tenant for t in first) / len(first) * len(tenants) for tenant in tenants])


def worker_time_shares(timings: Sequence[JobTiming]) -> dict[str, float]:
    """Each tenant's share of worker time over the jobs started while every tenant still had jobs waiting."""
    last_start: dict[str, float] = {}
    for t in timings:
        last_start[t.tenant] = max(last_start.get(t.tenant, t.started), t.started)
    cutoff = min(last_start.values())
    busy: dict[str, float] = dict.fromkeys(last_start, 0.0)
    for t in timings:
        if t.started < cutoff:
            busy[t.tenant] += t.ended - t.started
    total = sum(busy.values()) or 1.0
    return {tenant: seconds / total for tenant, seconds in busy.items()}
