"""Log-spaced wait buckets (R10 numbers, 1 ms to 100,000 s, ten per decade): a wait's bucket is one ``bisect``, an
estimated percentile is off by at most a quarter. Prometheus gets the 1-2-5 subset as ``le`` labels, each a bucket
bound, so its counts are exact."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_R10 = (1000, 1250, 1600, 2000, 2500, 3150, 4000, 5000, 6300, 8000)
BOUNDS_US: tuple[int, ...] = (*(m * 10**d for d in range(8) for m in _R10), 10**11)
"""Upper bounds of the buckets in microseconds, 1 ms .. 100,000 s."""
N_BUCKETS = len(BOUNDS_US) + 1
"""Buckets, the overflow bucket (longer than the last bound) included."""
PROMETHEUS_LE_US: tuple[int, ...] = tuple(b for b in BOUNDS_US if str(b).rstrip("0") in ("1", "2", "5"))
"""The bounds Prometheus sees (1, 2, 5 per decade)."""


def bucket_of(wait_us: int) -> int:
    """The bucket counting a wait of ``wait_us`` microseconds."""
    return bisect_left(BOUNDS_US, wait_us)


@dataclass
class Histogram:
    """Start counts by bucket, and (for cumulative records) the total wait in microseconds."""

    counts: dict[int, int] = field(default_factory=dict)
    total_us: int = 0

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    def minus(self, others: Iterable[Histogram]) -> Histogram:
        """This histogram without the others (the rest of a total), never below zero."""
        left = Histogram(dict(self.counts), self.total_us)
        for other in others:
            for bucket, n in other.counts.items():
                left.counts[bucket] = max(0, left.counts.get(bucket, 0) - n)
            left.total_us = max(0, left.total_us - other.total_us)
        left.counts = {b: n for b, n in left.counts.items() if n}
        return left

    def quantile(self, q: float) -> float | None:
        """Estimated q-quantile of the wait in seconds (None without starts), as ``histogram_quantile`` does."""
        total = self.count
        if total == 0:
            return None
        rank = q * total
        seen = 0
        for bucket in sorted(self.counts):
            n = self.counts[bucket]
            if n and seen + n >= rank:
                lower = BOUNDS_US[bucket - 1] if bucket > 0 else 0
                if bucket >= len(BOUNDS_US):
                    return lower / 1e6
                return (lower + (BOUNDS_US[bucket] - lower) * (rank - seen) / n) / 1e6
            seen += n
        return BOUNDS_US[-1] / 1e6  # unreachable with consistent counts

    def prometheus_buckets(self) -> list[tuple[str, float]]:
        """Cumulative (le, count) pairs on :data:`PROMETHEUS_LE_US`, ending with ``+Inf``."""
        pairs: list[tuple[str, float]] = []
        ordered = sorted(self.counts.items())
        seen, i = 0, 0
        for le in PROMETHEUS_LE_US:
            while i < len(ordered) and ordered[i][0] < len(BOUNDS_US) and BOUNDS_US[ordered[i][0]] <= le:
                seen += ordered[i][1]
                i += 1
            pairs.append((f"{le / 1e6:g}", float(seen)))
        pairs.append(("+Inf", float(self.count)))
        return pairs


def from_fields(fields: Mapping[str, int], *prefixes: str) -> Histogram:
    """The histogram held in a record's ``<prefix><bucket>`` fields, summed over ``prefixes`` (each ending in ``:``)."""
    counts: Counter[int] = Counter()
    for name, n in fields.items():
        head, _, tail = name.partition(":")
        if n and f"{head}:" in prefixes and tail.isdigit():
            counts[int(tail)] += n
    return Histogram(dict(counts))
