"""``fair-router queue ...``: show, set and take away a queue's fairness mark; ``show`` lists the next jobs in serving
order."""

from __future__ import annotations

from pathlib import Path

import click
from rq import Queue
from rq.exceptions import DeserializationError
from rq.job import Job

from fair_router.commands.common import connect, load_or_exit
from fair_router.commands.failures import fail
from fair_router.core.tenancy import usable_tenant
from fair_router.fairqueue.marks import FairnessMarks
from fair_router.fairqueue.queue import FairQueue
from fair_router.store.cluster import rq_of

DEFAULT_LIMIT = 10


def _marks(config: Path | None) -> FairnessMarks:
    settings = load_or_exit(config)
    return FairnessMarks(rq_of(connect(settings.redis_url, cluster=settings.redis_cluster)), settings.prefix)


def _list_next(queue: Queue, fair: bool, limit: int, max_bytes: int) -> None:
    """Print ``queue``'s next jobs in serving order: position, job id, tenant (``-``: none, or none usable), function
    (the jobs fetched in one round trip; None: gone)."""
    waiting = queue.count
    order = "serving order (fair share across tenants)" if fair else "rq's order (list head first)"
    ids = queue.get_job_ids(0, limit)
    listed = list(zip(ids, Job.fetch_many(ids, connection=queue.connection, serializer=queue.serializer)
                      if ids else [], strict=True))
    if not listed:
        click.echo("  no job waiting")
        return
    click.echo(f"  next {len(listed)} of {waiting} waiting, in {order}:")
    shown = ["-" if job is None else usable_tenant(job.meta, max_bytes, warn=False) or "-" for _, job in listed]
    width, tenant_width = max(len(job_id) for job_id, _ in listed), max(map(len, shown))
    for position, ((job_id, job), tenant) in enumerate(zip(listed, shown, strict=True), 1):
        if job is None:
            click.echo(f"  {position:>4}. {job_id:<{width}}  (job hash gone)")
        else:
            click.echo(f"  {position:>4}. {job_id:<{width}}  tenant={tenant:<{tenant_width}}  {_function(job)}")


def _function(job: Job) -> str:
    try:
        return str(job.func_name)
    except DeserializationError:  # written by another serializer than rq's default (rq --serializer json)
        return "(unreadable with rq's default serializer, pickle: enqueued with another, e.g. rq's --serializer json)"


@click.group()
def queue() -> None:
    """Whether a queue is fair: once marked, every weighted worker and producer serves it as a FairQueue."""


@queue.command("show")
@click.argument("names", nargs=-1, required=True)
@click.option("--limit", type=click.IntRange(min=0), default=DEFAULT_LIMIT, show_default=True,
              help="Jobs listed per queue, in the order they will be served (0: none).")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def queue_show(names: tuple[str, ...], limit: int, config: Path | None) -> None:
    """Print whether each of NAMES is marked fair, and the prefix of its fair state; then its next jobs in the
    order workers will serve them, with each job's tenant. A fair queue's order is its fair share across
    tenants, not the enqueue order rq-dashboard and django-rq's admin list."""
    settings = load_or_exit(config)
    connection = rq_of(connect(settings.redis_url, cluster=settings.redis_cluster))
    marked = FairnessMarks(connection, settings.prefix).read(names)
    for name in names:
        click.echo(f"{name}: fair (state under prefix {marked[name]!r})" if name in marked else f"{name}: plain")
        if limit:  # as workers serve it: a FairQueue with its fair state under the mark's prefix, else rq's Queue
            served = (FairQueue(name, connection=connection, settings=settings, prefix=marked[name]) if name in marked
                      else Queue(name, connection=connection))
            _list_next(served, name in marked, limit, settings.tenant_max_bytes)


@queue.command("fair")
@click.argument("name")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def queue_fair(name: str, config: Path | None) -> None:
    """Mark NAME fair now (a FairQueue's first job, or a worker with NAME in fair_queues:, does it too)."""
    _marks(config).mark([name])
    click.echo(f"{name}: fair")


@queue.command("plain")
@click.argument("name")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def queue_plain(name: str, config: Path | None) -> None:
    """Take NAME's fairness mark away; refused while jobs wait in it. Producers and workers that still name
    it in fair_queues: (or pass fair=True) mark it again."""
    result = _marks(config).clear(name)
    if result < 0:
        fail(f"{name}: {-result} job(s) still wait; it stays fair (drain it first)", 1)
    click.echo(f"{name}: plain" if result else f"{name}: was not marked fair")
