"""``fair-router why JOB_ID``: why a job waits, or what became of it; ``fair-router tenant why TENANT``: why a tenant's
jobs are slow (read-only; docs/why.md)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import click

from fair_router.commands.common import connect, load_or_exit
from fair_router.observe.why import Explanation, Reason, explain
from fair_router.routing.tenant_why import explain_tenant


@click.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the explanation as one JSON object.")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def why(job_id: str, as_json: bool, config: Path | None) -> None:
    """Why job JOB_ID waits: one reason (running, next, behind, concurrency_limit, rate_limit, paused, throttled,
    scheduled, deferred, retry_wait, rq_rate_limited, finished, failed, stopped, canceled, not_found), its facts
    and an estimated start. Exit 1 when no such job is found."""
    settings = load_or_exit(config)
    answer = explain(job_id, connect(settings.redis_url, cluster=settings.redis_cluster), settings)
    click.echo(json.dumps(answer.as_dict(), sort_keys=True) if as_json else describe(answer))
    if answer.reason == Reason.NOT_FOUND:
        raise SystemExit(1)


def describe(answer: Explanation) -> str:
    """The explanation as lines: the reason, the secondary ones, every fact, the estimate and its basis."""
    lines = [f"job {answer.job_id}: {answer.reason.value}"]
    if answer.secondary:
        lines.append(f"  also:            {', '.join(reason.value for reason in answer.secondary)}")
    lines += [f"  {name + ':':<16} {_shown(value)}" for name, value in answer.facts.items() if value is not None]
    start = "none" if answer.estimated_start is None else answer.estimated_start.isoformat(timespec="seconds")
    lines.append(f"  estimated start: {start} ({answer.estimate_basis})")
    lines += [f"  not recorded:    {fact}" for fact in answer.unknown]
    return "\n".join(lines)


def _shown(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value)) or "-"
    return str(value)


@click.command("why")
@click.argument("tenant_id", metavar="TENANT")
@click.option("--json", "as_json", is_flag=True, help="Print the answer as one JSON object.")
@click.option("--config", type=click.Path(path_type=Path), help="Settings file.")
def tenant_why(tenant_id: str, as_json: bool, config: Path | None) -> None:
    """Why TENANT's jobs are slow now: paused, concurrency_limit, rate_limit, throttled, backlog_cap, else
    fair_share (its jobs wait their turn) or not_waiting; its share of recent starts beside its fair share."""
    settings = load_or_exit(config)
    answer = explain_tenant(tenant_id, connect(settings.redis_url, cluster=settings.redis_cluster), settings)
    if as_json:
        click.echo(json.dumps(answer.as_dict(), sort_keys=True))
        return
    click.echo(f"tenant {answer.tenant!r}: {', '.join(reason.value for reason in answer.reasons)}")
    click.echo("\n".join(f"  {name + ':':<18} {_shown(value)}" for name, value in answer.facts.items()
                         if value is not None))
    click.echo("\n".join(f"  not recorded:      {fact}" for fact in answer.unknown) or "", nl=bool(answer.unknown))
