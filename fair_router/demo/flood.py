"""The flood scenario (one greedy tenant floods while small tenants keep arriving, each mode with and without the
flood) and the worker-time share scenario (:func:`run_worker_time`); the figures: docs/benchmarks.md."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from redis import Redis

from fair_router.config.settings import Charge
from fair_router.demo.harness import MODES, Midway, drain
from fair_router.demo.metrics import JobTiming, jain, makespan, share_accuracy, summarize, worker_time_shares
from fair_router.demo.timed import TimedWorker, read_spans

CHARGES: tuple[Charge, ...] = ("jobs", "runtime")
RQ_OVERHEAD_MS = 3.0  # rough per-job cost of rq itself, used only to size the arrival spread


@dataclass(frozen=True)
class FloodParams:
    """Scenario parameters; defaults: 2,000 greedy jobs, 40 small tenants x 3, 5 ms, 2 workers."""

    greedy_tenants: int = 1
    greedy_jobs: int = 2000
    small_tenants: int = 40
    small_jobs: int = 3
    spread: float | None = None
    job_ms: float = 5.0
    workers: int = 2
    seed: int = 1
    share_tenants: int = 5
    share_jobs: int = 100
    flush_interval: float = 1.0
    """The workers' ``observe.flush_interval`` (a short flood needs a short one for its halfway view)."""

    @property
    def total_jobs(self) -> int:
        return self.greedy_tenants * self.greedy_jobs + self.small_tenants * self.small_jobs

    @property
    def arrival_spread(self) -> float:
        """Seconds over which small jobs arrive: by default the expected drain time of the flood."""
        if self.spread is not None:
            return self.spread
        return self.total_jobs * (self.job_ms + RQ_OVERHEAD_MS) / 1000 / self.workers


def arrivals(params: FloodParams, flood: bool) -> list[tuple[float, str, str]]:
    """(offset seconds, tenant, kind) for every job: the flood at 0, small jobs spread at random."""
    rng = random.Random(params.seed)
    plan = [(0.0, f"greedy-{g}", "greedy") for g in range(params.greedy_tenants)
            for _ in range(params.greedy_jobs)] if flood else []
    plan += [(rng.uniform(0, params.arrival_spread), f"small-{s}", "small")
             for s in range(params.small_tenants) for _ in range(params.small_jobs)]
    return sorted(plan, key=lambda item: item[0])


def run_once(connection: Redis, url: str, mode_name: str, params: FloodParams, flood: bool,
             progress: Callable[[int], None] | None = None, midway: Midway | None = None) -> list[JobTiming]:
    """Run one mode once (with or without the flood); ``midway`` is called when half the jobs have run."""
    plan = arrivals(params, flood)
    bursts = [[tenant for _, tenant, kind in plan if kind == "greedy"]] if flood else []
    trickle = [item for item in plan if item[2] != "greedy"]
    return drain(connection, url, mode_name, params.workers, params.job_ms, bursts, "greedy", trickle, progress,
                 midway=midway, flush_interval=params.flush_interval)


@dataclass(frozen=True)
class MixedParams:
    """Worker-time share scenario: long (10x) and short jobs of two backlogged tenants; ``weights``: (long, short)."""

    long_ms: float = 20.0
    short_ms: float = 2.0
    long_jobs: int = 100
    short_jobs: int = 1000
    workers: int = 2
    weights: tuple[float, float] = (1.0, 1.0)

    @property
    def total_jobs(self) -> int:
        return self.long_jobs + self.short_jobs


def run_worker_time(connection: Redis, url: str, params: MixedParams, charge: Charge,
                    progress: Callable[[int], None] | None = None) -> dict[str, float]:
    """Drain the mixed-length backlog on a FairQueue charging ``charge``: the long tenant's share of worker time, Jain's
    index over worker time / fair share (``jain_run``: rq's run times, ``jain_cycle``: cycles), the throughput."""
    tenants = {"long": (params.long_ms, params.long_jobs, params.weights[0]),
               "short": (params.short_ms, params.short_jobs, params.weights[1])}
    # One batch (one MULTI): both tenants are backlogged from the first pop on.
    bursts = [[name for name, (_, jobs, _) in tenants.items() for _ in range(jobs)]]
    read_spans(connection)  # none left from an earlier run
    timings = drain(connection, url, "fair-runtime" if charge == "runtime" else "fair", params.workers,
                    FloodParams.job_ms, bursts, "mixed", [], progress,
                    job_ms={name: ms for name, (ms, _, _) in tenants.items()},
                    weights={name: weight for name, (_, _, weight) in tenants.items()},
                    worker_class=f"{TimedWorker.__module__}.{TimedWorker.__name__}")
    worker, cycle = read_spans(connection)
    if len(worker) != len(timings):
        raise RuntimeError(f"{len(worker)} worker times noted for {len(timings)} jobs")
    total_weight = sum(weight for _, _, weight in tenants.values())

    def share_jain(measured: list[JobTiming]) -> tuple[float, float]:
        shares = worker_time_shares(measured)
        return shares.get("long", 0.0), jain([shares.get(name, 0.0) / (weight / total_weight)
                                              for name, (_, _, weight) in tenants.items()])

    long_share, fairness = share_jain(worker)
    return {"long_share": long_share, "jain": fairness, "jain_run": share_jain(timings)[1],
            "jain_cycle": share_jain(cycle)[1], "throughput": len(timings) / makespan(timings),
            "makespan": makespan(timings)}


def run_scenario(connection: Redis, url: str, params: FloodParams, modes: Sequence[str] = MODES,
                 progress: Callable[[int], None] | None = None, rounds: int = 1,
                 midway: Midway | None = None) -> dict[str, Any]:
    """Every mode without and with the flood, ``rounds`` times (order rotated, seed + round), then once all backlogged;
    the makespan ratio is the median over rounds of each mode's against FIFO's in the same round."""
    report: dict[str, Any] = {"params": {**asdict(params), "rounds": rounds}, "modes": {}}
    calm: dict[str, list[list[JobTiming]]] = {name: [] for name in modes}
    flooded: dict[str, list[list[JobTiming]]] = {name: [] for name in modes}
    for number in range(rounds):
        varied = replace(params, seed=params.seed + number)
        shift = number % len(modes)  # each round starts with another mode: no mode always runs last
        for name in [*modes[shift:], *modes[:shift]]:
            calm[name].append(run_once(connection, url, name, varied, flood=False, progress=progress))
            flooded[name].append(run_once(connection, url, name, varied, flood=True, progress=progress,
                                          midway=midway if number == 0 else None))
    for name in modes:
        summary = summarize(flooded[name])
        summary["calm_small_p95"] = summarize(calm[name])["small_p95"]
        summary["isolation"] = summary["small_p95"] / max(summary["calm_small_p95"], 1e-6)
        # Every tenant backlogged: share_tenants each enqueue share_jobs jobs, one after another.
        backlogged = [[f"tenant-{i}"] * params.share_jobs for i in range(params.share_tenants)]
        summary["share_jain"] = share_accuracy(drain(connection, url, name, params.workers, params.job_ms, backlogged,
                                                     "backlogged", [], progress, flush_interval=params.flush_interval))
        if "fifo" in flooded:
            summary["makespan_vs_fifo"] = statistics.median(
                makespan(mine) / makespan(fifo) for mine, fifo in zip(flooded[name], flooded["fifo"], strict=True))
        waits = {kind: [t.wait for run in flooded[name] for t in run if t.kind == kind] for kind in ("greedy", "small")}
        report["modes"][name] = {"summary": summary, "waits": waits}
    fifo_entry = report["modes"].get("fifo")
    if fifo_entry:
        for entry in report["modes"].values():
            entry["summary"]["small_p95_vs_fifo"] = entry["summary"]["small_p95"] / fifo_entry["summary"]["small_p95"]
    return report


def total_jobs(params: FloodParams, modes: Sequence[str], rounds: int = 1) -> int:
    """Jobs run by run_scenario (for a progress bar)."""
    per_round = params.total_jobs + params.small_tenants * params.small_jobs
    return len(modes) * (rounds * per_round + params.share_tenants * params.share_jobs)
