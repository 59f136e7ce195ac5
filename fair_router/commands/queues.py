"""``fair-router queue ...``: a queue's fairness mark (:mod:`fair_router.fairqueue.marks`): show it, set it,
and take it away (only while the queue is empty)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fair_router.commands.common import connect, load_or_exit
from fair_router.fairqueue.marks import FairnessMarks
from fair_router.store.cluster import rq_of


def _marks(config: Path | None) -> FairnessMarks:
    settings = load_or_exit(config)
    return FairnessMarks(rq_of(connect(settings.redis_url, cluster=settings.redis_cluster)), settings.prefix)


@click.group()
def queue() -> None:
    """Whether a queue is fair: once marked, every weighted worker and producer serves it as a FairQueue."""


@queue.command("show")
@click.argument("names", nargs=-1, required=True)
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def queue_show(names: tuple[str, ...], config: Path | None) -> None:
    """Print whether each of NAMES is marked fair, and the prefix of its fair state."""
    marked = _marks(config).read(names)
    for name in names:
        click.echo(f"{name}: fair (state under prefix {marked[name]!r})" if name in marked else f"{name}: plain")


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
        click.echo(f"{name}: {-result} job(s) still wait; it stays fair (drain it first)", err=True)
        sys.exit(1)
    click.echo(f"{name}: plain" if result else f"{name}: was not marked fair")
