"""Weighted queue order: strict queues first, then weighted sampling without replacement (Efraimidis-Spirakis
keys). Why this distribution: docs/internals.md ("Weighted fetch order")."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from typing import TypeVar

from rq import Queue

from fair_router.core.validation import QueueWeight

T = TypeVar("T")


def weighted_order(items: Iterable[tuple[T, QueueWeight]], rng: random.Random | None = None) -> list[T]:
    """Strict items first in their given order, then the weighted ones by successive weighted sampling (``rng``:
    reproducible draws). Weights are trusted: checked once, where they enter."""
    expovariate = (rng or random).expovariate
    strict: list[T] = []
    keyed: list[tuple[float, int, T]] = []
    for index, (item, weight) in enumerate(items):
        if isinstance(weight, str):  # "strict", the only word a validated Weight holds
            strict.append(item)
            continue
        # expovariate(w) is -log(1 - random()) / w: the Efraimidis-Spirakis key, u = 1 - random() in (0, 1].
        # The index breaks (practically impossible) ties by given order and keeps items uncompared.
        keyed.append((expovariate(weight), index, item))
    keyed.sort(key=lambda entry: (entry[0], entry[1]))
    return strict + [item for _, _, item in keyed]


class WeightedOrder:
    """A worker's fetch order: a fresh :func:`weighted_order` of its queues before every fetch. ``weights`` is
    None when none of its queues has a configured weight: rq's order (and ``--dequeue-strategy``) then stands."""

    def __init__(self, weights: list[tuple[Queue, QueueWeight]] | None) -> None:
        self.weights = weights
        self.strategy_said = False

    def draw(self, strategy: str | None = None) -> list[Queue] | None:
        """The order of the next fetch (None: rq's). rq's ``strategy`` (``--dequeue-strategy``) other than its default
        gives way to the weights: said once, naming the fix."""
        if self.weights is None:
            return None
        if strategy not in (None, "default") and not self.strategy_said:
            self.strategy_said = True
            logging.getLogger("fair_router").warning(
                "--dequeue-strategy %s is not applied: the queues' weights (settings' queues:, or weights=) draw the "
                "order of every fetch. Drop the weights of these queues to use rq's strategy, or drop the option",
                getattr(strategy, "value", strategy))
        return weighted_order(self.weights)

    def replace(self, old: Queue, new: Queue) -> None:
        """Serve ``new`` in ``old``'s place, with its weight (a queue marked fair)."""
        if self.weights is not None:
            self.weights = [(new if queue is old else queue, weight) for queue, weight in self.weights]
