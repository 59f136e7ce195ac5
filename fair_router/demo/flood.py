"""The flood scenario: one greedy tenant enqueues thousands of jobs at once while small tenants keep
arriving; real rq workers drain it. Shared by ``fair-router demo`` and ``bench/fairness.py``.

Each mode runs the same arrivals twice, with and without the flood, so that the report can say how
visible the flood is to small tenants (design.md, "Fairness metrics"):

- **isolation**: small tenants' p95 queue wait under the flood / their p95 wait without it;
- **served ahead**: for each small job, how many jobs started between its enqueue and its start (p95):
  FIFO makes it wait for the flood, a fair scheduler only for the jobs workers had in hand. Unlike
  isolation it does not depend on how fast this machine runs rq, see :func:`served_ahead`;
- **makespan ratio**: makespan / FIFO's makespan for the same jobs (work conservation, goal <= 1.05);
- **share accuracy**: every tenant backlogged (each enqueues a batch, one after another); Jain's index
  over each tenant's share of the first half of the dequeues divided by its fair share (FIFO ~ 1/n);
- **Jain's index** over per-tenant mean slowdown (wait / service time), as asked for by issue 3,
  with the caveat from design.md that FIFO scores well on it when everybody waits equally long.

Modes: ``fifo`` is plain rq (one queue, rq's SimpleWorker); ``router`` is fair-router's enqueue-time
router (throttle rules at enqueue, WeightedSimpleWorker over the base and throttled queues); ``fair``
is one FairQueue (weighted fair share across tenants at dequeue, WeightedSimpleWorker); ``fair-runtime``
is the same FairQueue charging run time instead of jobs (``charge="runtime"``).

**Worker-time share** (:func:`run_worker_time`): two tenants, backlogged, whose jobs differ in length
(10:1); Jain's index over each tenant's worker time / its fair share while both are backlogged, and the
drain throughput, for each charging mode.
"""

from __future__ import annotations

import bisect
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from redis import Redis
from rq import Queue, Worker, get_current_job
from rq.job import Job

from fair_router.config.settings import Charge, JobConfig, ObserveConfig, Settings, TiersConfig
from fair_router.fairqueue.queue import FairQueue
from fair_router.routing.decorator import fair_job
from fair_router.routing.router import FairRouter
from fair_router.routing.rules import Rule
from fair_router.store.keys import Keys

MODES = ("fifo", "router", "fair")
CHARGES: tuple[Charge, ...] = ("jobs", "runtime")
RQ_OVERHEAD_MS = 3.0  # rough per-job cost of rq itself, used only to size the arrival spread
PREFIX = "fair_router_flood"

Midway = Callable[["Mode"], None]
"""Called with the running mode once half of a flooded run's jobs are done (the demo reads its dashboard)."""


def timed_job(tenant: str, ms: float, done_key: str) -> None:
    """The scenario's job: sleeps ``ms`` (an I/O-bound task), then counts itself done."""
    time.sleep(ms / 1000)
    job = get_current_job()
    if job is not None:
        job.connection.incr(done_key)


@dataclass(frozen=True)
class FloodParams:
    """Scenario parameters; defaults are issue 3's: 2,000 greedy jobs, 40 small tenants x 3, 5 ms, 2 workers."""

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
    """The workers' ``observe.flush_interval``: a flood shorter than a couple of intervals (the tests' small
    ones) needs a shorter one for its halfway dashboard view to show the starts so far."""

    @property
    def total_jobs(self) -> int:
        return self.greedy_tenants * self.greedy_jobs + self.small_tenants * self.small_jobs

    @property
    def arrival_spread(self) -> float:
        """Seconds over which small jobs arrive: by default the expected drain time of the flood."""
        if self.spread is not None:
            return self.spread
        return self.total_jobs * (self.job_ms + RQ_OVERHEAD_MS) / 1000 / self.workers


@dataclass(frozen=True)
class Mode:
    """Queues, worker class, weights and how jobs are enqueued in one mode."""

    name: str
    queues: tuple[str, ...]
    worker_class: str
    weights: dict[str, float] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    fair: bool = False
    charge: Charge = "jobs"


def mode(name: str, run: str) -> Mode:
    """The named mode with queue names unique to ``run``."""
    if name == "fifo":
        return Mode(name, (f"{run}_fifo",), "rq.SimpleWorker")
    if name == "router":
        base = f"{run}_routed"
        return Mode(
            name,
            (base, f"{base}_throttled", f"{base}_superslow"),
            "fair_router.WeightedSimpleWorker",
            weights={base: 6, f"{base}_throttled": 3, f"{base}_superslow": 1},
            rules=(Rule(queue=f"{base}_throttled", threshold=20, per="1m"),
                   Rule(queue=f"{base}_superslow", threshold=100, per="1m")),
        )
    if name == "fair":
        return Mode(name, (f"{run}_fair",), "fair_router.WeightedSimpleWorker", fair=True)
    if name == "fair-runtime":
        return Mode(name, (f"{run}_fair",), "fair_router.WeightedSimpleWorker", fair=True, charge="runtime")
    raise ValueError(f"unknown mode {name!r}: choose from {', '.join(MODES)}, fair-runtime")


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
    """For each job of ``kind``: how many jobs started after it was enqueued and before it started.

    The machine-independent part of a small job's wait: FIFO makes it wait for the whole flood, a fair
    scheduler only for the jobs that workers had already taken when it arrived (about one per worker).
    What is left of its wait is the rest of the jobs then running, which no scheduler that does not
    preempt jobs can avoid."""
    starts = sorted(t.started for t in timings)
    return [bisect.bisect_left(starts, t.started) - bisect.bisect_right(starts, t.enqueued)
            for t in timings if t.kind == kind]


def summarize(runs: Sequence[Sequence[JobTiming]]) -> dict[str, float]:
    """Per-class p50/p95 wait and small jobs' p95 served-ahead count (pooled over the runs), median
    makespan and throughput, and Jain's index over per-tenant slowdown."""
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


def arrivals(params: FloodParams, flood: bool) -> list[tuple[float, str, str]]:
    """(offset seconds, tenant, kind) for every job: the flood at 0, small jobs spread at random."""
    rng = random.Random(params.seed)
    plan = [(0.0, f"greedy-{g}", "greedy") for g in range(params.greedy_tenants)
            for _ in range(params.greedy_jobs)] if flood else []
    plan += [(rng.uniform(0, params.arrival_spread), f"small-{s}", "small")
             for s in range(params.small_tenants) for _ in range(params.small_jobs)]
    return sorted(plan, key=lambda item: item[0])


@contextmanager
def workers(url: str, chosen: Mode, count: int, flush_interval: float = 1.0) -> Iterator[None]:
    """``count`` real ``rq worker`` processes of the mode's class, stopped (SIGTERM) on exit (each flushes
    its start records as it stops)."""
    with tempfile.TemporaryDirectory(prefix="fair-router-flood-") as tmp:
        config = Path(tmp) / "fair_router.yaml"
        fair_queues = list(chosen.queues) if chosen.fair else []
        settings = {"prefix": PREFIX, "queues": chosen.weights, "fair_queues": fair_queues,
                    "fair_charge": chosen.charge, "observe": {"flush_interval": flush_interval}}
        config.write_text(yaml.safe_dump(settings))
        env = {**os.environ, "FAIR_ROUTER_CONFIG": str(config)}
        command = [sys.executable, "-m", "rq.cli", "worker", "-w", chosen.worker_class, "--url", url,
                   "--logging_level", "WARNING", *chosen.queues]
        procs = [subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for _ in range(count)]
        try:
            yield
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                if proc.stderr:
                    proc.stderr.close()


def run_once(
    connection: Redis,
    url: str,
    mode_name: str,
    params: FloodParams,
    flood: bool,
    progress: Callable[[int], None] | None = None,
    midway: Midway | None = None,
) -> list[JobTiming]:
    """Run one mode once (with or without the flood) on real workers; return every job's timing.
    ``midway`` is called once, when half the jobs have run."""
    plan = arrivals(params, flood)
    bursts = [[tenant for _, tenant, kind in plan if kind == "greedy"]] if flood else []
    trickle = [item for item in plan if item[2] != "greedy"]
    return _drain(connection, url, mode_name, params, bursts, "greedy", trickle, progress, midway=midway)


def run_backlogged(
    connection: Redis,
    url: str,
    mode_name: str,
    params: FloodParams,
    progress: Callable[[int], None] | None = None,
) -> list[JobTiming]:
    """Every tenant backlogged: ``share_tenants`` tenants each enqueue ``share_jobs`` jobs at once, one
    tenant after another (design.md's share-accuracy scenario)."""
    bursts = [[f"tenant-{i}"] * params.share_jobs for i in range(params.share_tenants)]
    return _drain(connection, url, mode_name, params, bursts, "backlogged", [], progress)


def share_accuracy(timings: Sequence[JobTiming]) -> float:
    """Jain's index over x_i = (tenant i's share of the first half of all dequeues) / (its fair share,
    1/n with equal weights): 1.0 is a perfect fair share; FIFO, which serves one tenant after another,
    scores about 1/n."""
    tenants = sorted({t.tenant for t in timings})
    first = sorted(timings, key=lambda t: t.started)[: len(timings) // 2]
    return jain([sum(t.tenant == tenant for t in first) / len(first) * len(tenants) for tenant in tenants])


def _drain(
    connection: Redis,
    url: str,
    mode_name: str,
    params: FloodParams,
    bursts: Sequence[Sequence[str]],
    burst_kind: str,
    trickle: Sequence[tuple[float, str, str]],
    progress: Callable[[int], None] | None,
    job_ms: Mapping[str, float] | None = None,
    weights: Mapping[str, float] | None = None,
    midway: Midway | None = None,
) -> list[JobTiming]:
    """Start the mode's workers, enqueue each burst at once (in order), then the trickle at its offsets;
    wait until every job ran and return their timings. ``job_ms``: tenant -> its jobs' length (else
    ``params.job_ms``); ``weights``: tenant -> fair-share weight (fair modes; else 1). The workers' start
    records (fair_router.observe) begin empty and are deleted at the end: a run sees only its own."""
    run = f"fr{os.getpid()}_{time.monotonic_ns() % 10**9}"
    chosen = mode(mode_name, run)
    done_key = f"{PREFIX}:{run}:done"
    enqueue = _enqueuer(connection, chosen, weights or {})
    length = {**dict.fromkeys({t for burst in bursts for t in burst} | {t for _, t, _ in trickle}, params.job_ms),
              **(job_ms or {})}
    total = sum(len(burst) for burst in bursts) + len(trickle)
    _clear_observe(connection)

    pending = [midway] if midway is not None else []

    def report(reported: int) -> int:
        done = _report(connection, done_key, reported, progress)
        if pending and done >= total // 2:
            pending.pop()(chosen)
        return done
    kinds: dict[str, tuple[str, str]] = {}
    with workers(url, chosen, params.workers, params.flush_interval):
        _wait_for_workers(connection, chosen.queues, params.workers)
        for burst in bursts:
            for job in enqueue.bulk([(tenant, length[tenant], done_key) for tenant in burst]):
                kinds[job.id] = (job.args[0], burst_kind)
        # The trickle's clock starts once the bursts are queued: this one client enqueues both, and small
        # tenants' jobs held back behind the flood's enqueue calls would arrive in a clump, which
        # measures this harness rather than the queue (in production they come from other processes).
        start = time.monotonic()
        reported = 0
        for offset, tenant, kind in trickle:
            while (delay := start + offset - time.monotonic()) > 0:
                time.sleep(min(delay, 0.05))
                reported = report(reported)
            kinds[enqueue.one(tenant, length[tenant], done_key).id] = (tenant, kind)
        deadline = time.monotonic() + 120 + total * max(length.values(), default=0) / 1000
        while reported < total:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode_name}: only {reported} of {total} jobs finished in time")
            time.sleep(0.05)
            reported = report(reported)
    jobs = [job for job in Job.fetch_many(list(kinds), connection=connection) if job is not None]
    timings = [_timing(job, *kinds[job.id]) for job in jobs]
    # Finished jobs and their results go too: left to expire, they would make Redis a little bigger and
    # slower for every later run, which biases the comparison against the modes that run later.
    with connection.pipeline(transaction=False) as pipe:
        for job in jobs:
            job.delete(pipeline=pipe, remove_from_queue=False)
        pipe.execute()
    for name in chosen.queues:
        Queue(name, connection=connection).delete(delete_jobs=True)
    connection.delete(done_key)
    _clear_observe(connection)
    return timings


def _clear_observe(connection: Redis) -> None:
    """Delete the start records and counters under the scenario's prefix."""
    keys = list(connection.scan_iter(match=Keys(PREFIX).observe_pattern(), count=1000))
    if keys:
        connection.delete(*keys)


def observed_settings(chosen: Mode, top_tenants: int = 10) -> Settings:
    """The settings a dashboard of this mode's run would use: the workers' (prefix, weights, fair queues),
    plus the router's rules under its job key, so that the throttling rule shows."""
    jobs = {f"{PREFIX}.{chosen.queues[0]}": JobConfig(queue=chosen.queues[0], rules=list(chosen.rules))}
    return Settings(prefix=PREFIX, queues=chosen.weights, fair_queues=list(chosen.queues) if chosen.fair else [],
                    fair_charge=chosen.charge,
                    jobs=jobs if chosen.rules else {}, observe=ObserveConfig(top_tenants=top_tenants))


def _timing(job: Job, tenant: str, kind: str) -> JobTiming:
    if job.enqueued_at is None or job.started_at is None or job.ended_at is None:
        raise RuntimeError(f"job {job.id} of {tenant} finished without rq timestamps")
    return JobTiming(tenant, kind, job.enqueued_at.timestamp(), job.started_at.timestamp(),
                     job.ended_at.timestamp())


def _report(connection: Redis, done_key: str, reported: int, progress: Callable[[int], None] | None) -> int:
    done = int(connection.get(done_key) or 0)
    if progress is not None and done > reported:
        progress(done - reported)
    return max(done, reported)


def _wait_for_workers(connection: Redis, queues: Sequence[str], count: int) -> None:
    """Block until ``count`` workers listen on these queues, so start-up is not counted as wait."""
    deadline = time.monotonic() + 60
    while len(Worker.all(queue=Queue(queues[0], connection=connection))) < count:
        if time.monotonic() > deadline:
            raise RuntimeError("rq workers did not start within 60 s")
        time.sleep(0.05)


@dataclass
class _Enqueuer:
    one: Callable[[str, float, str], Job]
    bulk: Callable[[list[tuple[str, float, str]]], list[Job]]


def _enqueuer(connection: Redis, chosen: Mode, weights: Mapping[str, float]) -> _Enqueuer:
    """How the mode enqueues: plain rq for FIFO, ``@fair_job`` for the router, FairQueue for fair (tenants'
    ``weights`` through tiers named after them, written where the queue's TierBook reads them)."""
    if chosen.fair:
        tiers = TiersConfig(default="w1", priority=[], concurrency={"w1": 1, **{_tier(w): 1 for w in weights.values()}},
                            weights={_tier(w): w for w in weights.values()})
        fair = FairQueue(chosen.queues[0], connection=connection, prefix=PREFIX, tiers=tiers, charge=chosen.charge)
        for tenant, weight in weights.items():
            fair.tier_book.set(tenant, _tier(weight))
        return _Enqueuer(
            one=lambda tenant, *rest: fair.enqueue(timed_job, tenant, *rest, fair_tenant=tenant, result_ttl=600),
            bulk=lambda items: fair.enqueue_many(
                [Queue.prepare_data(timed_job, args, result_ttl=600, meta={"fair_tenant": args[0]})
                 for args in items]),
        )
    if not chosen.rules:
        queue = Queue(chosen.queues[0], connection=connection)
        return _Enqueuer(
            one=lambda *args: queue.enqueue(timed_job, *args, result_ttl=600),
            bulk=lambda items: queue.enqueue_many(
                [Queue.prepare_data(timed_job, args, result_ttl=600) for args in items]),
        )
    router = FairRouter(connection, prefix=PREFIX)
    job = fair_job(chosen.queues[0], rules=chosen.rules, tenant=lambda tenant, *_: tenant, router=router,
                   job_key=f"{PREFIX}.{chosen.queues[0]}", result_ttl=600)(timed_job)
    return _Enqueuer(one=job.delay, bulk=lambda items: job.enqueue_many([(args, {}) for args in items]))


def _tier(weight: float) -> str:
    return f"w{weight:g}"


@dataclass(frozen=True)
class MixedParams:
    """Worker-time share scenario: a tenant with long jobs and one with short jobs (10:1), both backlogged
    from the start, each with about the same total work; ``weights``: (long tenant's, short tenant's)."""

    long_ms: float = 20.0
    short_ms: float = 2.0
    long_jobs: int = 100
    short_jobs: int = 1000
    workers: int = 2
    weights: tuple[float, float] = (1.0, 1.0)

    @property
    def total_jobs(self) -> int:
        return self.long_jobs + self.short_jobs


def run_worker_time(
    connection: Redis,
    url: str,
    params: MixedParams,
    charge: Charge,
    progress: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Drain the mixed-length backlog on a FairQueue charging ``charge`` with real workers. Returns the long
    tenant's share of worker time while both were backlogged (``long_share``; fair: w_long / sum w), Jain's
    index over each tenant's worker time / its fair share (``jain``), and the drain throughput (jobs/s)."""
    tenants = {"long": (params.long_ms, params.long_jobs, params.weights[0]),
               "short": (params.short_ms, params.short_jobs, params.weights[1])}
    # One batch (one MULTI): both tenants are backlogged from the first pop on.
    bursts = [[name for name, (_, jobs, _) in tenants.items() for _ in range(jobs)]]
    flood = FloodParams(workers=params.workers)
    timings = _drain(connection, url, "fair-runtime" if charge == "runtime" else "fair", flood, bursts, "mixed",
                     [], progress, job_ms={name: ms for name, (ms, _, _) in tenants.items()},
                     weights={name: weight for name, (_, _, weight) in tenants.items()})
    shares = worker_time_shares(timings)
    total_weight = sum(weight for _, _, weight in tenants.values())
    return {
        "long_share": shares.get("long", 0.0),
        "jain": jain([shares.get(name, 0.0) / (weight / total_weight) for name, (_, _, weight) in tenants.items()]),
        "throughput": len(timings) / makespan(timings),
        "makespan": makespan(timings),
    }


def worker_time_shares(timings: Sequence[JobTiming]) -> dict[str, float]:
    """Each tenant's share of the worker time (ended - started) of the jobs that started while every tenant
    still had jobs waiting, that is before the first tenant's last job started."""
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


def run_scenario(
    connection: Redis,
    url: str,
    params: FloodParams,
    modes: Sequence[str] = MODES,
    progress: Callable[[int], None] | None = None,
    rounds: int = 1,
    midway: Midway | None = None,
) -> dict[str, Any]:
    """Every mode without and with the flood, ``rounds`` times (modes interleaved within a round, the
    order rotated each round, seed + round number), then once all backlogged; returns params, per-mode
    summaries and raw waits. ``midway`` is called once per mode, halfway through its first flooded run.

    Waits are pooled over the rounds. The makespan ratio is the median over rounds of each mode's
    makespan / FIFO's in the same round, so that this shared machine's drift between runs cancels."""
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
        summary["share_jain"] = share_accuracy(run_backlogged(connection, url, name, params, progress=progress))
        if "fifo" in flooded:
            summary["makespan_vs_fifo"] = statistics.median(
                makespan(mine) / makespan(fifo) for mine, fifo in zip(flooded[name], flooded["fifo"], strict=True))
        report["modes"][name] = {
            "summary": summary,
            "waits": {kind: [t.wait for run in flooded[name] for t in run if t.kind == kind]
                      for kind in ("greedy", "small")},
        }
    fifo_entry = report["modes"].get("fifo")
    if fifo_entry:
        for entry in report["modes"].values():
            entry["summary"]["small_p95_vs_fifo"] = entry["summary"]["small_p95"] / fifo_entry["summary"]["small_p95"]
    return report


def total_jobs(params: FloodParams, modes: Sequence[str], rounds: int = 1) -> int:
    """Jobs run by run_scenario (for a progress bar)."""
    per_round = params.total_jobs + params.small_tenants * params.small_jobs
    return len(modes) * (rounds * per_round + params.share_tenants * params.share_jobs)
