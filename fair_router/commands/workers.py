"""``fair-router worker`` (one weighted worker) and ``fair-router pool`` (workers per queue group)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fair_router.commands.common import connect, load_or_exit
from fair_router.commands.failures import fail

# As `rq worker --path` (default "."): a console script's sys.path holds its bin directory, not the working one.
path_option = click.option("--path", "-P", "paths", multiple=True, default=["."], show_default=True,
                           help="Directory to import job functions from (added to sys.path, as with "
                                "`rq worker --path`); repeatable.")

level_option = click.option("--logging-level", default="INFO", show_default=True,
                            type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], case_sensitive=False))


def add_import_paths(paths: tuple[str, ...]) -> list[str]:
    """Append each directory, made absolute, to ``sys.path`` (as rq's CLI appends its ``--path``)."""
    resolved = [str(Path(entry).resolve()) for entry in paths]
    sys.path.extend(entry for entry in resolved if entry not in sys.path)
    return resolved


@click.command()
@click.argument("queues", nargs=-1)
@click.option("--config", type=click.Path(path_type=Path), help="Settings file; `queues:` holds the weights.")
@click.option("--url", help="Redis URL.  [default: redis_url from settings]")
@click.option("--burst", is_flag=True, help="Quit when the queues are empty.")
@click.option("--name", help="Worker name.  [default: random]")
@level_option
@click.option("--max-jobs", type=click.IntRange(min=1), help="Quit after this many jobs.")
@click.option("--with-scheduler/--without-scheduler", default=True, show_default=True,
              help="Also run rq's scheduler, so enqueue_in/enqueue_at jobs are moved to their queues.")
@path_option
@click.option("--shard", type=click.IntRange(min=0),
              help="Serve shard I: QUEUES' members <queue>_shard<I> (default: every sharded family in `jobs:`), "
                   "on shard I's Redis when `shard_urls` is set.")
def worker(queues: tuple[str, ...], config: Path | None, url: str | None, burst: bool, name: str | None,
           logging_level: str, max_jobs: int | None, with_scheduler: bool, paths: tuple[str, ...],
           shard: int | None) -> None:
    """Run one weighted worker on QUEUES (default: every queue listed under `queues:` in the settings).

    The same as `rq worker -w fair_router.WeightedWorker QUEUES`, with URL and weights from the settings.
    """
    from fair_router.workers.weighted import WeightedWorker

    add_import_paths(paths)
    settings = load_or_exit(config)
    names = list(queues) or list(settings.queues)
    if shard is not None:
        from fair_router.workers.shard_pool import shard_queues

        names = shard_queues(settings, shard, queues)
        url = url or settings.shard_url(shard)
        if not names:
            fail(f"error: no queues for shard {shard}: no job key under `jobs:` has shards reaching shard "
                 f"{shard}; name the queue families (fair-router worker --shard {shard} default)")
    if not names:
        fail("error: no queues to work on: name them (fair-router worker default low) or list them "
             "under `queues:` in the settings")
    # An unreachable Redis fails now (exit 1); on a cluster a RedisCluster, the worker takes rq's client from it.
    connection = connect(url or settings.redis_url, ping=True, cluster=settings.redis_cluster)
    try:
        rq_worker = WeightedWorker(names, connection=connection, name=name, settings=settings)  # --config's
    except ValueError as exc:
        fail(f"error: cannot start the worker: {exc}")
    rq_worker.work(burst=burst, logging_level=logging_level.upper(), max_jobs=max_jobs, with_scheduler=with_scheduler)


@click.command()
@click.option("--config", type=click.Path(path_type=Path), help="Settings file (`pool:`); workers get it too.")
@click.option("--url", help="Redis URL.  [default: redis_url from settings]")
@click.option("--worker-class", "-w", default="fair_router.WeightedWorker", show_default=True,
              help="rq worker class every worker runs (dotted path).")
@level_option
@click.option("--with-scheduler", is_flag=True, help="Run rq's scheduler in exactly one of the workers.")
@click.option("--grace", type=click.FloatRange(min=0), default=30.0, show_default=True,
              help="Seconds a stopping worker may finish its job before it is cold-stopped.")
@path_option
def pool(config: Path | None, url: str | None, worker_class: str, logging_level: str, with_scheduler: bool,
         grace: float, paths: tuple[str, ...]) -> None:
    """Run the workers per queue group set in `pool:`; restart dead ones; stop all on SIGINT/SIGTERM.

    Unlike `rq worker-pool` (N identical workers on the same queues), each queue group gets its own
    number of workers, e.g. `pool: {analysis_priority: 5, analysis_default: 3, "scheduled,maint": 2}`.
    """
    import logging

    from fair_router.rq_internals.worker import worker_class as worker_class_named
    from fair_router.workers.pool import WorkerPool
    from fair_router.workers.shard_pool import pool_allocation

    import_paths = add_import_paths(paths)
    settings = load_or_exit(config)
    if not settings.pool:
        fail("error: no workers to run: `pool:` is empty. Set it in the settings file, e.g.\n"
             "  pool:\n    default: 2\n    default_throttled,default_superslow: 1\n"
             "or in the environment: FAIR_ROUTER_POOL='{\"default\": 2}'")
    url = url or settings.redis_url
    allocation, urls = pool_allocation(settings)  # groups of sharded families: one group per shard
    try:
        worker_class_named(worker_class)
    except (ImportError, ValueError) as exc:
        fail(f"error: cannot use worker class {worker_class!r}: {exc}")
    for server in dict.fromkeys([url, *urls.values()]):
        # An unreachable Redis fails now (exit 1), not in every worker.
        connect(server, ping=True, cluster=settings.redis_cluster and server == url)
    logging.basicConfig(level=logging_level.upper(), format="%(asctime)s fair-router pool: %(message)s",
                        datefmt="%H:%M:%S")
    workers = WorkerPool(allocation, url, worker_class=worker_class, logging_level=logging_level.upper(),
                         cluster=settings.redis_cluster, with_scheduler=with_scheduler, grace=grace, paths=import_paths,
                         env={"FAIR_ROUTER_CONFIG": str(config.resolve())} if config else None, urls=urls)
    click.echo(workers.describe())
    sys.exit(workers.run())
