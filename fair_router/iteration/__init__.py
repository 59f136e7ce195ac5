"""Interruptible iteration: a long generator job gives up its worker at a checkpoint once its time slice is
used, and is queued again under the same job id to resume from its saved cursor in its next turn.

With a FairQueue a turn goes to the back of its tenant's FIFO, so another tenant's job waits at most about
one slice for a worker instead of one whole long job. Usage and semantics: ``docs/interruptible.md``.

- :mod:`~fair_router.iteration.turns`: what a job, the worker running it and crash recovery share (the
  ``job.meta`` keys, the end-of-turn marker, the per-process flags a worker sets);
- :mod:`~fair_router.iteration.decorator`: :func:`~fair_router.iteration.decorator.interruptible`.

The worker side is ``turns.HostedTurns``, a part of the weighted workers; its rq seam (ending a turn without
rq's success handling, warm shutdown reaching the job) is :mod:`fair_router.rq_internals.turns`; resuming after
a crash is in :mod:`fair_router.workers.recovery`. This package's ``__init__`` imports nothing.
"""
