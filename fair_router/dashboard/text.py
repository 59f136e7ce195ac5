"""The dashboard's figures as text (``fair-router demo``): the same Snapshot, the same columns."""

from __future__ import annotations

from fair_router.dashboard.model import Snapshot, TenantView


def format_wait(seconds: float | None) -> str:
    """A wait as the dashboard shows it."""
    if seconds is None:
        return "-"
    if seconds < 0.01:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%" if value < 0.1 else f"{100 * value:.0f}%"


def render(snap: Snapshot) -> list[str]:
    """The queues and the tenants tables of the dashboard, as lines."""
    lines = ["  queues: " + ", ".join(
        f"{q.name} (weight {q.weight if isinstance(q.weight, str) else f'{q.weight:g}'}, {q.jobs} waiting, "
        f"{q.running} running{', fair' if q.fair else ''})" for q in snap.queues)]
    lines += [f"  warning: queue {q.name}: {q.plain_pops}+ jobs taken first-in first-out by a plain rq worker; start "
              "its workers with -w fair_router.WeightedWorker" for q in snap.queues if q.plain_pops]
    header = ("tenant", "waiting", "running", "throttled by / state", "wait p50 · p95 (5 min)",
              "share of starts / fair")
    rows = [header] + [_row(row, snap) for row in snap.tenants]
    if snap.tenants:
        rows.append(_row(snap.other, snap))
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    for k, row in enumerate(rows):
        cells = [cell.ljust(width) if c in (0, 3) else cell.rjust(width)
                 for c, (cell, width) in enumerate(zip(row, widths, strict=True))]
        lines.append("  " + "  ".join(cells).rstrip())
        if k == 0:
            lines.append("  " + "-" * (sum(widths) + 2 * (len(widths) - 1)))
    everyone = snap.everyone.wait_5m
    lines.append(f"  all tenants: {everyone.starts} starts, wait p50 {format_wait(everyone.p50)}, "
                 f"p95 {format_wait(everyone.p95)} (5 min)")
    return lines


def _row(row: TenantView, snap: Snapshot) -> tuple[str, str, str, str, str, str]:
    running = "-" if row.running is None else f"{row.running}" + (f"/{row.limit}" if row.limit is not None else "")
    state = (["paused"] if row.paused else []) + (["parked in " + ", ".join(row.parked)] if row.parked else [])
    rule = "; ".join(([row.rule] if row.rule else []) + state) or "-"
    fair = " (queue to itself)" if row.alone else "" if row.fair_share is None else f" / {_share(row.fair_share)}"
    waiting = str(row.waiting_total) if any(q.fair for q in snap.queues) or snap.routed else "-"
    return (row.tenant, waiting, running, rule, f"{format_wait(row.wait_5m.p50)} · {format_wait(row.wait_5m.p95)}",
            _share(row.share_5m) + fair)
