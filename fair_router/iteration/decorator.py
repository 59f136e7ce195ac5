"""``@interruptible(slice="1s", save_every=1)``: a generator job function that runs in turns, resumed from its
saved cursor (docs/interruptible.md)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar, cast

from pydantic import TypeAdapter
from rq import get_current_job
from rq.job import Job

from fair_router.config.errors import validated
from fair_router.core.validation import AtLeastOne, Duration
from fair_router.iteration.turns import CURSOR, HOST, ITEMS, MARKER, TURN_END, TURNS

P = ParamSpec("P")
R = TypeVar("R")

_SLICE: TypeAdapter[float] = TypeAdapter(Duration)
_EVERY: TypeAdapter[int] = TypeAdapter(AtLeastOne)


@dataclass(frozen=True)
class Slicing:
    """How an interruptible function runs: ``slice`` seconds per turn, a save every ``save_every`` checkpoints."""

    slice: float
    save_every: int


def interruptible(slice: str | float | timedelta = "1s",
                  save_every: int = 1) -> Callable[[Callable[P, Generator[Any, Any, R]]], Callable[P, R]]:
    """Make a generator job function interruptible (docs/interruptible.md): it runs in turns of about ``slice``, saving
    its cursor every ``save_every`` checkpoints. Put it under ``@fair_job(...)``; bad values raise SettingsError."""
    slicing = Slicing(validated(_SLICE, slice, "interruptible(slice=...)"),
                      validated(_EVERY, save_every, "interruptible(save_every=...)"))

    def decorate(func: Callable[P, Generator[Any, Any, R]]) -> Callable[P, R]:
        @functools.wraps(func)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            job = get_current_job()
            if job is None or not HOST.active:
                return _to_the_end(func(*args, **kwargs))  # nobody can queue a turn again: run it all
            return _turn(job, slicing, func, args, kwargs)

        setattr(run, MARKER, slicing)
        return run

    return decorate


def _to_the_end(steps: Generator[Any, Any, R]) -> R:
    """Run a generator to its return value (or return a plain function's result as it is)."""
    if not isinstance(steps, Generator):
        return steps
    while True:
        try:
            next(steps)
        except StopIteration as end:
            result: R = end.value
            return result


def _turn(job: Job, slicing: Slicing, func: Callable[..., Generator[Any, Any, R]], args: Any, kwargs: Any) -> R:
    """One turn of an interruptible job in a weighted worker, from the saved cursor to the end of the slice (or a warm
    shutdown): :data:`TURN_END` (typed as R: the worker takes it, never a caller), or the generator's return value."""
    meta = job.meta
    if CURSOR in meta:
        kwargs = {**kwargs, "cursor": meta[CURSOR]}
    items = int(meta.get(ITEMS) or 0)
    meta[TURNS] = int(meta.get(TURNS) or 0) + 1
    steps = func(*args, **kwargs)
    if not isinstance(steps, Generator):
        return steps  # not a generator function after all: its result
    deadline = time.monotonic() + slicing.slice
    pending, dirty = 0, True  # checkpoints not saved yet; the new turn count is not saved either
    while True:
        try:
            cursor = next(steps)
        except StopIteration as end:
            if dirty:  # the final counts (rq's success handling does not write the meta)
                job.save_meta()  # type: ignore[no-untyped-call]
            result: R = end.value
            return result
        items += 1
        meta[CURSOR], meta[ITEMS] = cursor, items
        if HOST.stopping or time.monotonic() >= deadline:
            steps.close()  # the generator's finally blocks run now, not at garbage collection
            return cast(R, TURN_END)  # the worker saves the meta as it queues the job again
        pending += 1
        if pending >= slicing.save_every:
            job.save_meta()  # type: ignore[no-untyped-call]
            pending, dirty = 0, False
        else:
            dirty = True
