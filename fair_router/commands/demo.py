"""``fair-router demo``: routing, the flood scenario and worker-time charging on real workers."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import click

from fair_router.commands.common import connect


@click.command()
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), default=Path("fair-router-demo.png"),
              show_default=True, help="Where to draw per-tenant wait distributions (PNG; needs matplotlib).")
@click.option("--no-plot", is_flag=True, help="Do not draw the plot.")
@click.option("--quick", is_flag=True, help="A smaller flood (500 greedy jobs, 10 small tenants).")
def demo(plot: Path, no_plot: bool, quick: bool) -> None:
    """Routing, the flood scenario (FIFO, router, fair queue) on real workers, with what the dashboard shows
    halfway through each flood, then mixed job lengths (job vs runtime charging), then long jobs with and without
    interruptible iteration; writes the wait plot unless --no-plot.

    Uses $REDIS_URL / $FAIR_ROUTER_REDIS_URL, else a private redis-server.
    """
    from fair_router.demo import run
    from fair_router.demo.flood import FloodParams, MixedParams
    from fair_router.demo.harness import MODES
    from fair_router.demo.long_jobs import LongParams

    url = os.environ.get("FAIR_ROUTER_REDIS_URL") or os.environ.get("REDIS_URL")
    if url:  # the user's Redis (else demo_redis starts one): check it answers before anything starts
        connect(url, ping=True)
    params = FloodParams(greedy_jobs=500, small_tenants=10) if quick else FloodParams()
    mixed = MixedParams(long_jobs=20, short_jobs=200) if quick else MixedParams(long_jobs=40, short_jobs=400)
    with run.demo_redis() as (connection, url):
        run.print_routing(run.run_routing_demo(connection))
        report = run.run_flood_demo(connection, url, params, MODES)
        worker_time = run.run_worker_time_demo(connection, url, mixed)
        long_jobs = run.run_long_jobs_demo(connection, url, LongParams())
    run.print_flood(report)
    click.echo("\n== worker-time share: job-count charging vs runtime charging (FairQueue charge=) ==")
    run.print_worker_time(worker_time)
    click.echo("\n== long jobs: small tenants' wait (enqueue -> start) without and with interruptible iteration ==")
    run.print_long_jobs(long_jobs)
    if no_plot:
        return
    if importlib.util.find_spec("matplotlib") is None:
        click.echo("\nplot not written: it needs matplotlib (pip install 'fair-router[plot]'; or pass --no-plot)")
        return
    from fair_router.demo.plot import plot_waits

    plot_waits(report, plot, long_jobs)
    click.echo(f"\nplot written to {plot}")
