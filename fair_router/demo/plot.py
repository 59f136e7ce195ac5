"""``--plot``: per-tenant-class queue-wait distributions, one panel per mode (matplotlib, an extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_waits(report: dict[str, Any], path: Path) -> None:
    """Draw the empirical CDF of queue wait for greedy and small tenants in each mode, side by side."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'fair-router[plot]'") from None
    modes = report["modes"]
    fig, axes = plt.subplots(1, len(modes), figsize=(5 * len(modes), 4), sharey=True, squeeze=False)
    for ax, (name, entry) in zip(axes[0], modes.items(), strict=True):
        for kind, color in (("greedy", "tab:red"), ("small", "tab:blue")):
            waits = sorted(max(w, 1e-4) for w in entry["waits"][kind])
            if waits:
                ax.step(waits, [(i + 1) / len(waits) for i in range(len(waits))], where="post",
                        color=color, label=f"{kind} (p95 {entry['summary'][kind + '_p95']:.2f}s)")
        ax.set_xscale("log")
        ax.set_title(name)
        ax.set_xlabel("queue wait (s, log)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    axes[0][0].set_ylabel("share of jobs waiting at most x")
    fig.suptitle("Queue wait under a one-tenant flood")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
