"""Weighted workers follow the queues' fairness marks (:mod:`fair_router.fairqueue.marks`): a queue marked
fair is served as a FairQueue on the mark's prefix, whatever the worker was started with."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from redis.exceptions import RedisError
from rq import Queue

from fair_router.core.validation import QueueWeight
from fair_router.fairqueue.combined import QueueClassConflict, as_fair
from fair_router.fairqueue.marks import RECHECK_EVERY, FairnessMarks
from fair_router.fairqueue.queue import FairQueue
from fair_router.fairqueue.stale import PlainPops
from fair_router.workers.turnhooks import InterruptibleTurns

if TYPE_CHECKING:
    from fair_router.config.settings import Settings


class FollowsFairnessMarks(InterruptibleTurns):
    """The marks part of the weighted workers; the worker sets the attributes below when it is built."""

    settings: Settings
    marks: FairnessMarks
    fair_queues: list[FairQueue]
    fetch_weights: list[tuple[Queue, QueueWeight]] | None

    _class_warned: set[str] | None = None

    def follow_fairness_marks(self, starting: bool = False) -> None:
        """Serve every queue whose fairness mark is set as a FairQueue on the mark's prefix, whatever this
        worker was started with (no ``--queue-class``, another prefix, django-rq's or a user's Queue class:
        :mod:`fair_router.fairqueue.combined`): fairness never switches off because one process was started
        with the wrong flags. One round trip per :data:`RECHECK_EVERY` at most. A queue whose class cannot
        serve it fairly is refused when ``starting`` (QueueClassConflict, naming the fix); marked later, it is
        warned about once and served as before until the worker is restarted with the fix."""
        marked = self.marks.read(queue.name for queue in self.queues)
        for queue in list(self.queues):
            prefix = marked.get(queue.name)
            if prefix is None:
                continue
            if prefix != self.settings.prefix:
                self.marks.prefix_of(queue.name)  # logs the mismatch
            if isinstance(queue, FairQueue):
                if queue.prefix_keys.prefix != prefix:
                    queue.use_settings(self.settings, prefix)
            else:
                try:
                    fair = as_fair(queue, self.settings, prefix)
                except QueueClassConflict as exc:
                    if starting:
                        raise
                    warned = self._class_warned if self._class_warned is not None else set()
                    self._class_warned = warned
                    if queue.name not in warned:
                        warned.add(queue.name)
                        self.log.error("Worker %s: %s. Until then this worker serves it first-in first-out.",
                                       self.name, exc)
                    continue
                self._replace_queue(queue, fair)
                self.log.info("Worker %s: queue %s is marked fair: serving it as %s", self.name, queue.name,
                              type(fair).__name__)

    _plain_pops: PlainPops | None = None
    _plain_looked = 0.0  # monotonic time of the last look
    _plain_warned: set[str] | None = None

    def report_plain_pops(self, now: bool = False) -> None:
        """Look at this worker's fair queues for jobs a plain rq worker took (:mod:`fair_router.fairqueue.stale`;
        this also keeps their tenants' counts exact when the queue is empty) and log a warning, once per queue,
        naming it and what to do. At most once per :data:`RECHECK_EVERY` seconds unless ``now``."""
        if not self.fair_queues or self.is_horse or (not now and time.monotonic() - self._plain_looked < RECHECK_EVERY):
            return
        try:
            self._report_plain_pops()
        except RedisError as exc:  # at a stopping worker's last look: it still has to register its death
            self.log.warning("Worker %s: could not look for plain workers' pops (%s)", self.name, exc)

    def _report_plain_pops(self) -> None:
        self._plain_looked = time.monotonic()
        if self._plain_pops is None:
            self._plain_pops, self._plain_warned = PlainPops(self.fair_queues[0].connection), set()
        warned = self._plain_warned if self._plain_warned is not None else set()
        for queue in self.fair_queues:
            report = self._plain_pops.check(queue.name, queue.fair_keys)
            if report.plain and queue.name not in warned:
                warned.add(queue.name)
                self.log.warning("Worker %s: %s", self.name, report.describe())

    def _replace_queue(self, old: Queue, new: FairQueue) -> None:
        self.queues = [new if queue is old else queue for queue in self.queues]
        self._ordered_queues = [new if queue is old else queue for queue in self._ordered_queues]
        if self.fetch_weights is not None:
            self.fetch_weights = [(new if queue is old else queue, weight) for queue, weight in self.fetch_weights]
        self.fair_queues.append(new)
        self.queue_class = FairQueue
