"""weighted_order: strict first, then successive weighted sampling (first with probability w / W)."""

from __future__ import annotations

import random
from collections import Counter
from itertools import permutations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fair_router.workers.sampling import weighted_order

# 50,000 draws: the sd of a share is at most sqrt(0.25 / 50,000) = 0.22 points, so the required
# 1-point tolerance is >= 4.5 sd. The generator is seeded, so a pass is reproducible, not luck.
DRAWS = 50_000
TOLERANCE = 0.01


def draw(weights: dict[str, float], n: int = DRAWS, seed: int = 1) -> list[list[str]]:
    rng = random.Random(seed)
    items = list(weights.items())
    return [weighted_order(items, rng) for _ in range(n)]


def exact_position_shares(weights: dict[str, float], position: int) -> dict[str, float]:
    """P(item at `position`) under successive sampling, summed over every possible prefix."""
    shares = dict.fromkeys(weights, 0.0)
    for order in permutations(weights, position + 1):
        p, remaining = 1.0, sum(weights.values())
        for name in order:
            p *= weights[name] / remaining
            remaining -= weights[name]
        shares[order[-1]] += p
    return shares


@pytest.mark.parametrize("weights", [{"a": 6, "b": 3, "c": 1}, {"a": 0.5, "b": 2.5, "c": 7}])
def test_first_position_share_is_w_over_total(weights: dict[str, float]) -> None:
    firsts = Counter(order[0] for order in draw(weights))
    total = sum(weights.values())
    for name, weight in weights.items():
        assert firsts[name] / DRAWS == pytest.approx(weight / total, abs=TOLERANCE), name


def test_second_position_follows_successive_sampling() -> None:
    weights = {"a": 0.5, "b": 2.5, "c": 7}
    # exact: P(b second) = P(a)P(b|a gone) + P(c)P(b|c gone) = .05*2.5/9.5 + .7*2.5/3 = 0.5965...
    expected = exact_position_shares(weights, 1)
    assert expected["b"] == pytest.approx(0.05 * 2.5 / 9.5 + 0.7 * 2.5 / 3)
    seconds = Counter(order[1] for order in draw(weights, seed=2))
    for name in weights:
        assert seconds[name] / DRAWS == pytest.approx(expected[name], abs=TOLERANCE), name


def test_whole_order_distribution_matches_successive_sampling() -> None:
    weights = {"a": 6, "b": 3, "c": 1}
    orders = Counter(tuple(order) for order in draw(weights, seed=3))
    for order in permutations(weights):
        expected = weights[order[0]] / 10 * weights[order[1]] / (10 - weights[order[0]])
        assert orders[order] / DRAWS == pytest.approx(expected, abs=TOLERANCE), order


def test_strict_items_come_first_in_given_order_then_weighted() -> None:
    items: list[tuple[str, float | str]] = [("a", 1.0), ("s1", "strict"), ("b", 5.0), ("s2", "strict")]
    rng = random.Random(4)
    orders = {tuple(weighted_order(items, rng)) for _ in range(200)}  # type: ignore[arg-type]
    assert orders == {("s1", "s2", "a", "b"), ("s1", "s2", "b", "a")}


@given(
    weights=st.lists(
        st.one_of(st.just("strict"), st.floats(min_value=1e-6, max_value=1e6)), max_size=12
    ),
    seed=st.integers(0, 2**32),
)
def test_order_is_a_permutation_with_strict_prefix(weights: list[float | str], seed: int) -> None:
    items = list(enumerate(weights))
    order = weighted_order(items, random.Random(seed))  # type: ignore[arg-type]
    assert sorted(order) == list(range(len(weights)))
    strict = [i for i, w in items if w == "strict"]
    assert order[: len(strict)] == strict


def test_same_seed_same_order_and_default_generator_works() -> None:
    items = [(name, float(i + 1)) for i, name in enumerate("abcdefgh")]
    assert weighted_order(items, random.Random(7)) == weighted_order(items, random.Random(7))
    assert sorted(weighted_order(items)) == list("abcdefgh")
