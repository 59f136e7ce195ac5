"""The heartbeat thread of an in-process worker's running job (rq's SimpleWorker sends none while a job runs)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from rq.job import Job

logger = logging.getLogger("fair_router")


class JobBeat:
    """Heartbeats an in-process worker's running job every ``every`` seconds, from one thread per worker, not job."""

    def __init__(self, every: float, beat: Callable[[Job], None]) -> None:
        self.every = every
        self._beat = beat
        self._job: Job | None = None
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def follow(self, job: Job) -> None:
        """Heartbeat ``job`` from now on (the first beat within ``every`` seconds)."""
        with self._lock:
            self._job = job
            if self._thread is None:
                self._closed = threading.Event()
                self._thread = threading.Thread(target=self._run, args=(self._closed,), name="fair-router-job-beat",
                                                daemon=True)
                self._thread.start()

    def stop(self) -> None:
        """No more beats for the current job; returns after a beat in flight has landed."""
        with self._lock:
            self._job = None

    def close(self) -> None:
        """End the thread (the worker is stopping); a later ``follow`` starts a new one."""
        with self._lock:
            self._job = None
            self._closed.set()
            self._thread = None

    def _run(self, closed: threading.Event) -> None:
        while not closed.wait(self.every):
            with self._lock:
                if self._job is None:
                    continue
                try:
                    self._beat(self._job)
                except Exception:
                    logger.warning("heartbeat of job %s failed", self._job.id, exc_info=True)
