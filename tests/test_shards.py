"""Shuffle-sharding's deal: shards_of is deterministic, distinct, even and stable."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from itertools import combinations
from math import comb

import pytest
from pydantic import ValidationError

from fair_router import Shards, shards_of
from fair_router.core.shards import shard_queue

# Computed once with this implementation; a change to the deal moves every tenant's jobs to other shards,
# so it must fail here first.
EXPECTED = {
    ("acme", 8, 2): (3, 7),
    ("user-42", 8, 2): (0, 4),
    ("", 8, 2): (3, 4),
    ("ünïcødé", 8, 2): (1, 4),
    ("acme", 16, 3): (3, 6, 14),
    ("user-42", 16, 3): (8, 11, 14),
    ("ünïcødé", 16, 3): (1, 2, 11),
    ("acme", 1024, 4): (515, 629, 636, 761),
    ("x" * 300, 1024, 4): (22, 434, 733, 738),
}


@pytest.mark.parametrize(("tenant", "count", "per_tenant"), sorted(EXPECTED))
def test_fixed_table(tenant: str, count: int, per_tenant: int) -> None:
    assert shards_of(tenant, count, per_tenant) == EXPECTED[(tenant, count, per_tenant)]


def test_same_in_another_process() -> None:
    """No per-process salt (``hash()`` would differ with PYTHONHASHSEED)."""
    code = "from fair_router import shards_of; print([shards_of(t, 8, 2) for t in ('acme', 'user-42')])"
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout
        assert out.strip() == str([shards_of("acme", 8, 2), shards_of("user-42", 8, 2)])


def test_int_tenant_is_its_string() -> None:
    assert shards_of(7, 8, 2) == shards_of("7", 8, 2)


def test_distinct_in_range() -> None:
    for count, per_tenant in [(1, 1), (2, 2), (8, 2), (8, 8), (5, 3), (1024, 7)]:
        for n in range(300):
            dealt = shards_of(f"t{n}", count, per_tenant)
            assert len(set(dealt)) == per_tenant == len(dealt)
            assert all(0 <= shard < count for shard in dealt)
            assert list(dealt) == sorted(dealt)


def test_every_shard_equally_often_over_100k_tenants() -> None:
    """Each shard is dealt to 100k * k / N tenants; a chi-square over the 8 shards stays far below what a
    skewed deal gives (99.9th percentile of chi-square with 7 degrees of freedom: 24.3)."""
    tenants = 100_000
    counts = Counter(shard for n in range(tenants) for shard in shards_of(f"tenant-{n}", 8, 2))
    expected = tenants * 2 / 8
    chi2 = sum((counts[shard] - expected) ** 2 / expected for shard in range(8))
    assert chi2 < 24.3, counts


def test_every_pair_equally_often() -> None:
    """Every set of 2 of 8 shards is equally likely: 28 sets (chi-square with 27 degrees of freedom, 99.9th
    percentile 55.5). This is what makes the hog's exact set 1 in C(8, 2)."""
    tenants = 56_000
    sets = Counter(shards_of(f"tenant-{n}", 8, 2) for n in range(tenants))
    assert set(sets) == set(combinations(range(8), 2))
    expected = tenants / comb(8, 2)
    chi2 = sum((seen - expected) ** 2 / expected for seen in sets.values())
    assert chi2 < 55.5, sets


def test_stable_while_count_unchanged() -> None:
    before = {n: shards_of(f"t{n}", 8, 2) for n in range(1000)}
    shards_of("someone-else", 16, 4)  # other deals in between change nothing
    assert {n: shards_of(f"t{n}", 8, 2) for n in range(1000)} == before
    assert Shards(count=8, per_tenant=2).of("t5") == before[5]


@pytest.mark.parametrize(("count", "per_tenant", "message"), [
    (8, 9, "per_tenant (9) cannot exceed count (8)"),
    (0, 1, "count"),
    (8, 0, "per_tenant"),
    (1025, 2, "count"),
])
def test_bad_counts_are_refused(count: int, per_tenant: int, message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Shards(count=count, per_tenant=per_tenant)
    with pytest.raises(ValidationError):
        shards_of("acme", count, per_tenant)


def test_bad_tenant_is_refused() -> None:
    with pytest.raises(TypeError, match="tenant must be a str or int"):
        shards_of(None, 8, 2)  # type: ignore[arg-type]


def test_queue_names() -> None:
    assert shard_queue("default_throttled", 3) == "default_throttled_shard3"
    assert Shards(count=3, per_tenant=1).queues("q") == ["q_shard0", "q_shard1", "q_shard2"]
