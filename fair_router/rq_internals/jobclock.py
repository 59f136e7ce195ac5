"""The worker's time on a job, for runtime charging: from the start of the fetch that found it (a blocking wait
left out: the seam queue's fetch notes when it ended, :data:`FETCH_CLOCK`) to its after-job writes, whose own time
counts as long as the last job's took. Why more than rq's ``ended_at - started_at``: docs/internals.md."""

from __future__ import annotations

import threading
import time


class FetchClock(threading.local):
    """When the blocking wait of this thread's last fetch (``RqQueueSeam.dequeue_any``) ended
    (``time.perf_counter()``), None when it found a job without waiting."""

    waited_until: float | None = None


FETCH_CLOCK = FetchClock()


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

    def take(self, timed_fetch: bool) -> None:
        """The worker takes up a job; ``timed_fetch``: its fetch went through a seam queue class (which notes
        its blocking wait), so the time counts from that fetch; else from now."""
        now = time.perf_counter()
        began = now
        if timed_fetch and self.fetch_began is not None:
            waited = FETCH_CLOCK.waited_until
            began = self.fetch_began if waited is None else min(now, max(self.fetch_began, waited))
        self.taken_at, self.ended_at = began, None

    def seconds(self, run_seconds: float) -> float:
        """The worker's time on the running job, its after-job writes (not yet sent) as long as the last job's;
        ``run_seconds`` (rq's measure) when the job was not taken up by this clock (a spawned work horse; a
        forked one has its parent's clock, so its time counts from the parent's fetch, the fork included)."""
        if self.taken_at is None:
            return run_seconds
        self.ended_at = time.perf_counter()
        return max(run_seconds, self.ended_at - self.taken_at + self.after_job)

    def done(self) -> None:
        """The worker is done with the job (``execute_job`` returns)."""
        if self.ended_at is not None:
            self.after_job = time.perf_counter() - self.ended_at
        self.taken_at = self.ended_at = None
