"""The worker's time on a job, for runtime charging: from the start of the fetch that found it (a blocking wait left
out, :func:`waited_until`) to its after-job writes. Why more than rq's ``ended_at - started_at``: docs/internals.md."""

from __future__ import annotations

import time

from rq.job import Job

WAITED_UNTIL = "fair_waited_until"
"""The attribute (of the Job object a seam queue's fetch returns, never saved) holding when the fetch's blocking
wait ended (``time.perf_counter()``), None when it found the job without waiting."""


def note_wait(job: Job, until: float | None) -> Job:
    """``job``, noted with when the blocking wait of the fetch that found it ended (None: no wait)."""
    setattr(job, WAITED_UNTIL, until)
    return job


def waited_until(job: Job) -> float | None:
    """When the blocking wait of the fetch that found ``job`` ended; None without a wait or a seam fetch."""
    return getattr(job, WAITED_UNTIL, None)


class JobClock:
    """One worker's clock of the job it runs (module docstring)."""

    def __init__(self) -> None:
        self.fetch_began: float | None = None  # the worker's last fetch began
        self.taken_at: float | None = None  # the worker's time on the running job began
        self.ended_at: float | None = None  # the running job's end was reported (its after-job writes queued)
        self.after_job = 0.0  # how long the last job's after-job writes took from there

    def fetching(self) -> None:
        """The worker starts a fetch (``dequeue_job_and_maintain_ttl``)."""
        self.fetch_began = time.perf_counter()

    def take(self, job: Job, timed_fetch: bool) -> None:
        """The worker takes up ``job``; ``timed_fetch``: its fetch went through a seam queue class (which notes
        its blocking wait on the job), so the time counts from that fetch; else from now."""
        now = time.perf_counter()
        began = now
        if timed_fetch and self.fetch_began is not None:
            waited = waited_until(job)
            began = self.fetch_began if waited is None else min(now, max(self.fetch_began, waited))
        self.taken_at, self.ended_at = began, None

    def seconds(self, run_seconds: float) -> float:
        """The worker's time on the running job, its unsent after-job writes counted as long as the last job's; else
        ``run_seconds`` (rq's measure: a spawned work horse; a forked one has its parent's clock)."""
        if self.taken_at is None:
            return run_seconds
        self.ended_at = time.perf_counter()
        return max(run_seconds, self.ended_at - self.taken_at + self.after_job)

    def done(self) -> None:
        """The worker is done with the job (``execute_job`` returns)."""
        if self.ended_at is not None:
            self.after_job = time.perf_counter() - self.ended_at
        self.taken_at = self.ended_at = None
