"""One run of a demo scenario on real rq workers (modes ``fifo``, ``router``, ``fair``, ``fair-runtime``): the
worker processes, each mode's enqueueing, and :func:`drain`, which waits for every job."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from redis import Redis
from rq import Queue, Worker, get_current_job
from rq.job import Job

from fair_router.config.settings import Charge, JobConfig, ObserveConfig, Settings, TiersConfig
from fair_router.core.keys import Keys
from fair_router.core.rules import Rule
from fair_router.demo.metrics import JobTiming
from fair_router.demo.redis_server import stop_processes
from fair_router.fairqueue.queue import FairQueue
from fair_router.routing.decorator import fair_job
from fair_router.routing.router import FairRouter

MODES = ("fifo", "router", "fair")
PREFIX = "fair_router_flood"

Midway = Callable[["Mode"], None]
"""Called with the running mode once half of a flooded run's jobs are done (the demo reads its dashboard)."""


def timed_job(tenant: str, ms: float, done_key: str) -> None:
    """The scenario's job: sleeps ``ms`` (an I/O-bound task), then counts itself done."""
    time.sleep(ms / 1000)
    count_done(done_key)


def count_done(done_key: str) -> None:
    """Count the current job done (the scenario waits for its count)."""
    job = get_current_job()
    if job is not None:
        job.connection.incr(done_key)


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
        return Mode(name, (base, f"{base}_throttled", f"{base}_superslow"), "fair_router.WeightedSimpleWorker",
                    weights={base: 6, f"{base}_throttled": 3, f"{base}_superslow": 1},
                    rules=(Rule(queue=f"{base}_throttled", threshold=20, per="1m"),
                           Rule(queue=f"{base}_superslow", threshold=100, per="1m")))
    if name in ("fair", "fair-runtime"):
        return Mode(name, (f"{run}_fair",), "fair_router.WeightedSimpleWorker", fair=True,
                    charge="runtime" if name == "fair-runtime" else "jobs")
    raise ValueError(f"unknown mode {name!r}: choose from {', '.join(MODES)}, fair-runtime")


@contextmanager
def workers(url: str, chosen: Mode, count: int, flush_interval: float = 1.0) -> Iterator[None]:
    """``count`` real ``rq worker`` processes of the mode's class, stopped (SIGTERM) on exit."""
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
            stop_processes(procs, grace=15)
            for proc in procs:
                if proc.stderr:
                    proc.stderr.close()


def drain(connection: Redis, url: str, mode_name: str, worker_count: int, default_ms: float,
          bursts: Sequence[Sequence[str]], burst_kind: str, trickle: Sequence[tuple[float, str, str]],
          progress: Callable[[int], None] | None, job_ms: Mapping[str, float] | None = None,
          weights: Mapping[str, float] | None = None, midway: Midway | None = None, flush_interval: float = 1.0,
          worker_class: str | None = None) -> list[JobTiming]:
    """Start the mode's workers, enqueue each burst at once, then the trickle at its offsets; wait until every job ran
    and return their timings (``job_ms``, ``weights``: per tenant; ``worker_class``: instead of the mode's)."""
    run = run_id()
    chosen = mode(mode_name, run)
    if worker_class is not None:
        chosen = replace(chosen, worker_class=worker_class)
    done_key = f"{PREFIX}:{run}:done"
    enqueue_one, enqueue_bulk = _enqueuer(connection, chosen, weights or {})
    length = {**dict.fromkeys({t for burst in bursts for t in burst} | {t for _, t, _ in trickle}, default_ms),
              **(job_ms or {})}
    total = sum(len(burst) for burst in bursts) + len(trickle)
    _clear_observe(connection)

    pending = [midway] if midway is not None else []
    tally = Tally(connection, done_key, progress)

    def done() -> int:
        count = tally.update()
        if pending and count >= total // 2:
            pending.pop()(chosen)
        return count

    kinds: dict[str, tuple[str, str]] = {}
    with workers(url, chosen, worker_count, flush_interval):
        wait_for_workers(connection, chosen.queues, worker_count)
        for burst in bursts:
            for job in enqueue_bulk([(tenant, length[tenant], done_key) for tenant in burst]):
                kinds[job.id] = (job.args[0], burst_kind)
        # The trickle's clock starts once the bursts are queued: this one client enqueues both, and small
        # tenants' jobs held back behind the flood's enqueue calls would arrive in a clump, which
        # measures this harness rather than the queue (in production they come from other processes).
        start = time.monotonic()
        for offset, tenant, kind in trickle:
            while (delay := start + offset - time.monotonic()) > 0:
                time.sleep(min(delay, 0.05))
                done()
            kinds[enqueue_one(tenant, length[tenant], done_key).id] = (tenant, kind)
        if not wait_until(lambda: done() >= total, 120 + total * max(length.values(), default=0) / 1000):
            raise RuntimeError(f"{mode_name}: only {tally.reported} of {total} jobs finished in time")
    jobs = [job for job in Job.fetch_many(list(kinds), connection=connection) if job is not None]
    timings = [timing(job, *kinds[job.id]) for job in jobs]
    clean_up(connection, chosen, jobs, done_key)
    return timings


def clean_up(connection: Redis, chosen: Mode, jobs: Sequence[Job], done_key: str) -> None:
    """Delete a run's jobs, queues, done counter and start records: left to expire, they would slow every
    later run and bias the comparison against the modes that run later."""
    with connection.pipeline(transaction=False) as pipe:
        for job in jobs:
            job.delete(pipeline=pipe, remove_from_queue=False)
        pipe.execute()
    for name in chosen.queues:
        Queue(name, connection=connection).delete(delete_jobs=True)
    connection.delete(done_key)
    _clear_observe(connection)


def _clear_observe(connection: Redis) -> None:
    """Delete the start records and counters under the scenario's prefix."""
    keys = list(connection.scan_iter(match=Keys(PREFIX).observe_pattern(), count=1000))
    if keys:
        connection.delete(*keys)


def observed_settings(chosen: Mode, top_tenants: int = 10) -> Settings:
    """The settings a dashboard of this mode's run uses: the workers', plus the router's rules."""
    jobs = {f"{PREFIX}.{chosen.queues[0]}": JobConfig(queue=chosen.queues[0], rules=list(chosen.rules))}
    return Settings(prefix=PREFIX, queues=chosen.weights, fair_queues=list(chosen.queues) if chosen.fair else [],
                    fair_charge=chosen.charge,
                    jobs=jobs if chosen.rules else {}, observe=ObserveConfig(top_tenants=top_tenants))


def timing(job: Job, tenant: str, kind: str) -> JobTiming:
    """A finished job's rq timestamps as a JobTiming."""
    if job.enqueued_at is None or job.started_at is None or job.ended_at is None:
        raise RuntimeError(f"job {job.id} of {tenant} finished without rq timestamps")
    return JobTiming(tenant, kind, job.enqueued_at.timestamp(), job.started_at.timestamp(), job.ended_at.timestamp())


def run_id(suffix: str = "") -> str:
    """Queue and key names unique to one run of this process."""
    return f"fr{os.getpid()}_{time.monotonic_ns() % 10**9}{suffix}"


@dataclass
class Tally:
    """The jobs a run counted done (its ``done_key``), reported to ``progress`` as they grow."""

    connection: Redis
    done_key: str
    progress: Callable[[int], None] | None
    reported: int = 0

    def update(self) -> int:
        done = int(self.connection.get(self.done_key) or 0)
        if self.progress is not None and done > self.reported:
            self.progress(done - self.reported)
        self.reported = max(done, self.reported)
        return self.reported


def wait_until(ready: Callable[[], bool], seconds: float, step: float = 0.05) -> bool:
    """Poll ``ready`` every ``step`` seconds until it is true (True) or ``seconds`` have passed (False)."""
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def wait_for_workers(connection: Redis, queues: Sequence[str], count: int) -> None:
    """Block until ``count`` workers listen on these queues, so start-up is not counted as wait."""
    if not wait_until(lambda: len(Worker.all(queue=Queue(queues[0], connection=connection))) >= count, 60):
        raise RuntimeError("rq workers did not start within 60 s")


Enqueuers = tuple[Callable[[str, float, str], Job], Callable[[list[tuple[str, float, str]]], list[Job]]]


def _enqueuer(connection: Redis, chosen: Mode, weights: Mapping[str, float]) -> Enqueuers:
    """How the mode enqueues one job, and a batch: plain rq, ``@fair_job``, or a FairQueue (``weights`` through tiers
    named after them)."""
    if chosen.fair:
        tiers = TiersConfig(default="w1", priority=[], concurrency={"w1": 1, **{_tier(w): 1 for w in weights.values()}},
                            weights={_tier(w): w for w in weights.values()})
        fair = FairQueue(chosen.queues[0], connection=connection, prefix=PREFIX, tiers=tiers, charge=chosen.charge)
        for tenant, weight in weights.items():
            fair.tier_book.set(tenant, _tier(weight))
        return (lambda tenant, *rest: fair.enqueue(timed_job, tenant, *rest, fair_tenant=tenant, result_ttl=600),
                lambda items: fair.enqueue_many([Queue.prepare_data(timed_job, args, result_ttl=600,
                                                                    meta={"fair_tenant": args[0]}) for args in items]))
    if not chosen.rules:
        queue = Queue(chosen.queues[0], connection=connection)
        return (lambda *args: queue.enqueue(timed_job, *args, result_ttl=600),
                lambda items: queue.enqueue_many([Queue.prepare_data(timed_job, args, result_ttl=600)
                                                  for args in items]))
    router = FairRouter(connection, prefix=PREFIX)
    job = fair_job(chosen.queues[0], rules=chosen.rules, tenant=lambda tenant, *_: tenant, router=router,
                   job_key=f"{PREFIX}.{chosen.queues[0]}", result_ttl=600)(timed_job)
    return job.delay, lambda items: job.enqueue_many([(args, {}) for args in items])


def _tier(weight: float) -> str:
    return f"w{weight:g}"
