"""``fair-router demo``'s scenarios with progress bars, and their printing; on ``$REDIS_URL`` /
``$FAIR_ROUTER_REDIS_URL`` when set, else a private redis-server."""

from __future__ import annotations

import os
import statistics
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from redis import Redis

from fair_router.core.rules import Rule
from fair_router.demo import flood
from fair_router.demo.flood import CHARGES, FloodParams, MixedParams
from fair_router.demo.harness import Midway, Mode, observed_settings
from fair_router.demo.long_jobs import SLICE, LongParams, run_long_jobs
from fair_router.demo.long_jobs import total_jobs as long_total_jobs
from fair_router.demo.redis_server import RedisServer
from fair_router.routing.decorator import fair_job
from fair_router.routing.router import FairRouter

DEMO_PREFIX = "fair_router_demo"
DEMO_RULES = [Rule(queue="demo_throttled", threshold=10, per="1m"),
              Rule(queue="demo_superslow", threshold=20, per="10s")]
DEMO_QUEUES = ["demo", "demo_throttled", "demo_superslow"]
DASHBOARD_TENANTS = 6
"""Tenants the demo's dashboard view names (the rest are summed as _other)."""


def work(account: str, item: int) -> int:
    """The demo's job: trivial on purpose, the routing is what is shown."""
    return item


@contextmanager
def demo_redis() -> Iterator[tuple[Redis, str]]:
    """(client, url) of the user's Redis if REDIS_URL/FAIR_ROUTER_REDIS_URL is set, else of a private one."""
    url = os.environ.get("FAIR_ROUTER_REDIS_URL") or os.environ.get("REDIS_URL")
    if url:
        click.echo(f"using Redis at {url}")
        yield Redis.from_url(url), url
        return
    with RedisServer() as server:
        click.echo(f"started redis-server {server.binary} on port {server.port}")
        yield server.client(), server.url


def run_routing_demo(connection: Redis) -> dict[str, Counter[str]]:
    """Enqueue 30 jobs for a greedy tenant and 3 each for two small ones; return tenant -> queue counts."""
    router = FairRouter(connection, prefix=DEMO_PREFIX)
    job = fair_job("demo", rules=DEMO_RULES, tenant=lambda account, item: account, router=router)(work)
    placed: dict[str, Counter[str]] = {}
    schedule = [("greedy-co", i) for i in range(30)] + [(t, i) for i in range(3) for t in ("small-a", "small-b")]
    for account, item in schedule:
        placed.setdefault(account, Counter())[job.delay(account, item).origin] += 1
    for name in DEMO_QUEUES:
        router.queue(name).empty()  # type: ignore[no-untyped-call]
    return placed


def print_routing(placed: dict[str, Counter[str]]) -> None:
    """Print a tenant x queue table."""
    click.echo("rules: " + "; ".join(rule.describe() for rule in DEMO_RULES))
    header = f"{'tenant':<12}" + "".join(f"{q:>16}" for q in DEMO_QUEUES)
    click.echo(header)
    click.echo("-" * len(header))
    for tenant, counts in placed.items():
        click.echo(f"{tenant:<12}" + "".join(f"{counts[q]:>16}" for q in DEMO_QUEUES))


def run_flood_demo(connection: Redis, url: str, params: FloodParams, modes: tuple[str, ...],
                   rounds: int = 1) -> dict[str, Any]:
    """The flood scenario with a progress bar; ``report["dashboard"][mode]``: its dashboard halfway through."""
    click.echo(f"\nflood: {params.greedy_tenants} greedy tenant(s) x {params.greedy_jobs} jobs at once, "
               f"{params.small_tenants} small tenants x {params.small_jobs} jobs over "
               f"{params.arrival_spread:.1f}s, {params.job_ms:g} ms jobs, {params.workers} workers; "
               "each mode also runs without the flood" + (f"; {rounds} rounds" if rounds > 1 else ""))
    views: dict[str, list[str]] = {}
    with click.progressbar(length=flood.total_jobs(params, modes, rounds), label="running", show_pos=True) as bar:
        report = flood.run_scenario(connection, url, params, modes, progress=bar.update, rounds=rounds,
                              midway=dashboard_view(connection, views))
    report["dashboard"] = views
    return report


def dashboard_view(connection: Redis, views: dict[str, list[str]]) -> Midway:
    """A ``midway`` callback that renders the mode's dashboard into ``views[mode]``."""
    from fair_router.dashboard.reader import SnapshotReader
    from fair_router.dashboard.text import render

    def look(chosen: Mode) -> None:
        if not chosen.worker_class.startswith("fair_router."):
            return  # rq's own workers record no starts: a dashboard would show queue lengths only
        settings = observed_settings(chosen, top_tenants=DASHBOARD_TENANTS)
        views[chosen.name] = render(SnapshotReader(connection, settings, queues=list(chosen.queues)).snapshot())

    return look


METRICS_EXPLAINED = (
    "p50 / p95 wait: how long a job waited between its enqueue and its start (half / 95 % of jobs waited less).",
    "makespan: first enqueue to last job done; against FIFO's, what fairness costs in total throughput.",
    "jobs served ahead: jobs that started between a small job's enqueue and its own start (FIFO: the flood).",
    "share accuracy: how evenly backlogged tenants share the workers (1.000 = each its equal share).",
    "isolation: small tenants' p95 wait with the flood divided by the same without it (1.0 = untouched).",
)
"""One sentence per figure of the flood tables, printed once before them."""


def verdict(mode: str, s: dict[str, float]) -> str:
    """One line saying what a mode's figures mean for a small tenant and for fairness."""
    if mode == "fifo":
        return (f"first come, first served: a small tenant waits behind the whole flood (p95 "
                f"{s['small_p95']:.2f}s, {s['small_ahead_p95']:.0f} jobs ahead of it)")
    ratio = s.get("small_p95_vs_fifo", 1.0)
    shorter = f"{1 / ratio:.0f}x shorter than FIFO's" if ratio > 0 else "no wait at all"
    fair = ("backlogged tenants get equal shares" if s["share_jain"] >= 0.95 else
            "backlogged tenants do not get equal shares (it slows the greedy one, it does not divide the queue)")
    return (f"small tenants' p95 wait {s['small_p95']:.3f}s, {shorter}; makespan "
            f"{s.get('makespan_vs_fifo', 1):.2f}x FIFO; {fair} (accuracy {s['share_jain']:.3f})")


def print_flood(report: dict[str, Any]) -> None:
    """One table per mode (waits, makespan, served ahead, share accuracy, isolation), and its dashboard view."""
    modes, views = report["modes"], report.get("dashboard") or {}
    click.echo("\nwhat the figures mean:\n" + "\n".join(f"  {line}" for line in METRICS_EXPLAINED))
    for name, entry in modes.items():
        s = entry["summary"]
        click.echo(f"\n== {name} ==")
        click.echo(f"  verdict: {verdict(name, s)}")
        click.echo(f"  {'tenant class':<14}{'p50 wait':>12}{'p95 wait':>12}")
        for kind in ("greedy", "small"):
            click.echo(f"  {kind:<14}{s[kind + '_p50']:>11.3f}s{s[kind + '_p95']:>11.3f}s")
        click.echo(f"  makespan {s['makespan']:.2f}s ({s.get('makespan_vs_fifo', 1):.3f}x FIFO), "
                   f"throughput {s['throughput']:.0f} jobs/s")
        click.echo(f"  jobs served ahead (started between a small job's enqueue and its start, p95): "
                   f"{s['small_ahead_p95']:.0f}; share accuracy (all backlogged): {s['share_jain']:.3f}")
        click.echo(f"  isolation (small p95 with flood / without): {s['isolation']:.1f}x "
                   f"(without flood p95 {s['calm_small_p95']:.3f}s); small p95 vs FIFO "
                   f"{100 * s.get('small_p95_vs_fifo', 1):.1f}%")
        if name in views:
            click.echo("  dashboard halfway through the flood (as `fair-router dashboard` shows it):\n"
                       + "\n".join("  " + line for line in views[name]))
        elif views:
            click.echo("  (no dashboard view: FIFO runs rq's own SimpleWorker, which records no waits)")


def run_worker_time_demo(connection: Redis, url: str, params: MixedParams, rounds: int = 1) -> dict[str, Any]:
    """The worker-time scenario per charging mode and round, with a progress bar; per-mode medians."""
    click.echo(f"\nworker time: 2 backlogged tenants, {params.long_jobs} x {params.long_ms:g} ms jobs and "
               f"{params.short_jobs} x {params.short_ms:g} ms jobs, weights {params.weights[0]:g}:"
               f"{params.weights[1]:g}, {params.workers} workers, one FairQueue"
               + (f"; {rounds} rounds" if rounds > 1 else ""))
    per_round: list[dict[str, dict[str, float]]] = []
    with click.progressbar(length=rounds * len(CHARGES) * params.total_jobs, label="running", show_pos=True) as bar:
        for number in range(rounds):
            order = CHARGES[number % 2:] + CHARGES[:number % 2]
            per_round.append({charge: flood.run_worker_time(connection, url, params, charge, progress=bar.update)
                              for charge in order})
    medians = {charge: {name: statistics.median(r[charge][name] for r in per_round) for name in per_round[0][charge]}
               for charge in CHARGES}
    return {"params": params, "rounds": per_round, "modes": medians}


def print_worker_time(report: dict[str, Any]) -> None:
    """Both charging modes side by side: long tenant's share, Jain (worker time, rq run, cycle), throughput."""
    params: MixedParams = report["params"]
    modes = report["modes"]
    fair_long = params.weights[0] / sum(params.weights)
    click.echo(f"  {'charge':<10}{'long share':>12}{'(fair ' + format(fair_long, '.3f') + ')':>14}"
               f"{'Jain':>8}{'rq run':>8}{'cycle':>8}{'jobs/s':>9}{'vs jobs':>9}")
    for charge in CHARGES:
        m = modes[charge]
        relative = m["throughput"] / modes["jobs"]["throughput"]
        click.echo(f"  {charge:<10}{m['long_share']:>12.3f}{'':>14}{m['jain']:>8.3f}{m['jain_run']:>8.3f}"
                   f"{m['jain_cycle']:>8.3f}{m['throughput']:>9.0f}{relative:>8.3f}x")


def run_long_jobs_demo(connection: Redis, url: str, params: LongParams) -> dict[str, Any]:
    """The long-jobs scenario, without then with interruptible iteration, with a progress bar."""
    click.echo(f"\nlong jobs: {params.workers} x {params.items} items x {params.item_ms:g} ms "
               f"({params.long_seconds:.1f}s) of one tenant hold all {params.workers} workers of a FairQueue; "
               f"{params.small_tenants} small tenants then enqueue one {params.small_ms:g} ms job each; "
               f"without turns, then @interruptible(slice=\"{SLICE:g}s\")")
    with click.progressbar(length=long_total_jobs(params), label="running", show_pos=True) as bar:
        return run_long_jobs(connection, url, params, progress=bar.update)


def print_long_jobs(report: dict[str, Any]) -> None:
    """Small tenants' waits (p50, p95, max) without and with turns, the long jobs' turns, the verdict."""
    click.echo(f"  {'long jobs':<26}{'p50 wait':>10}{'p95 wait':>10}{'max wait':>10}{'turns':>8}")
    labels = {"whole": "in one go (no turns)", "turns": f"in turns of {SLICE:g}s"}
    for variant, entry in report["variants"].items():
        s = entry["summary"]
        turns = "/".join(str(run["turns"]) for run in entry["long"])
        click.echo(f"  {labels[variant]:<26}{s['p50']:>9.3f}s{s['p95']:>9.3f}s{s['max']:>9.3f}s{turns:>8}")
    click.echo(f"  verdict: {report['verdict']}")
