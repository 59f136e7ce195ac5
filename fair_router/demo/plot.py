"""``--plot``: per-tenant-class queue-wait distributions, one panel per mode, and below them the long-jobs
scenario's small-tenant waits without and with interruptible iteration (matplotlib, an extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLORS = {"whole": "tab:red", "turns": "tab:green"}
LABELS = {"whole": "long jobs in one go", "turns": "in turns"}
BELOW: dict[str, Any] = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.16), "ncol": 2, "fontsize": "small",
                         "frameon": False}
"""Legends go below their axes, clear of the data whatever the waits."""


def plot_waits(report: dict[str, Any], path: Path, long_jobs: dict[str, Any] | None = None) -> None:
    """Draw each mode's queue-wait CDF for greedy and small tenants; with ``long_jobs``, a second row for it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'fair-router[plot]'") from None
    modes = report["modes"]
    rows = 2 if long_jobs else 1
    fig = plt.figure(figsize=(5 * len(modes), 4.5 * rows))
    grid = fig.add_gridspec(rows, 2 * len(modes))
    axes = [fig.add_subplot(grid[0, 2 * i:2 * i + 2]) for i in range(len(modes))]
    for ax, (name, entry) in zip(axes, modes.items(), strict=True):
        if ax is not axes[0]:  # one x range and one y range across modes: compared by eye
            ax.sharex(axes[0])
            ax.sharey(axes[0])
        for kind, color in (("greedy", "tab:red"), ("small", "tab:blue")):
            waits = sorted(max(w, 1e-4) for w in entry["waits"][kind])
            if waits:
                ax.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post",
                        color=color, label=f"{kind} (p95 {entry['summary'][kind + '_p95']:.2f}s)")
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_xlabel("queue wait (s, log)")
        ax.grid(alpha=0.3)
        ax.legend(**BELOW)
    axes[0].set_ylabel("share of jobs waiting at most x")
    if long_jobs:
        _plot_long_jobs(fig, grid, len(modes), long_jobs)
        fig.suptitle("Queue wait under a one-tenant flood (top) and behind long jobs (bottom)")
    else:
        fig.suptitle("Queue wait under a one-tenant flood")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_long_jobs(fig: Any, grid: Any, half: int, report: dict[str, Any]) -> None:
    """The long-jobs row: small tenants' wait CDF, and each one's wait in arrival order, without and with turns."""
    params = report["params"]
    cdf = fig.add_subplot(grid[1, :half])
    order = fig.add_subplot(grid[1, half:], sharex=cdf)
    for variant, entry in report["variants"].items():
        waits, s = entry["waits"], entry["summary"]
        label = f"{LABELS[variant]} (p95 {s['p95']:.2f}s, max {s['max']:.2f}s)"
        ordered = sorted(waits)
        cdf.step([0.0, *ordered], [0.0, *((i + 1) / len(ordered) for i in range(len(ordered)))], where="post",
                 color=COLORS[variant], label=label)
        order.plot(waits, range(1, len(waits) + 1), "o-", linewidth=1, color=COLORS[variant], label=LABELS[variant])
    long_seconds = params["items"] * params["item_ms"] / 1000
    for ax in (cdf, order):
        ax.axvline(params["slice"], color="grey", linestyle="--", linewidth=1, label=f"slice {params['slice']:g}s")
        ax.axvline(long_seconds, color="grey", linestyle=":", linewidth=1, label=f"long job {long_seconds:.1f}s")
        ax.set_xlim(0, 1.1 * max(long_seconds, *(max(e["waits"]) for e in report["variants"].values())))
        ax.set_xlabel("small tenant's queue wait (s)")
        ax.grid(alpha=0.3)
    cdf.set_ylabel("share of small tenants waiting at most x")
    cdf.set_title(f"long jobs: {params['small_tenants']} small tenants behind {params['workers']} long jobs")
    for ax in (cdf, order):
        ax.legend(**BELOW)
    order.set_ylabel("small tenant (in arrival order)")
    order.set_title("each small tenant's wait")
    order.invert_yaxis()
