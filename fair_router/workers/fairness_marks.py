"""A weighted worker follows the queues' fairness marks (a queue marked fair is served as a FairQueue on the mark's
prefix) and warns about plain rq workers popping its fair queues."""

from __future__ import annotations

import time

from redis.exceptions import RedisError

from fair_router.config.settings import Settings
from fair_router.fairqueue.combined import QueueClassConflict, as_fair
from fair_router.fairqueue.marks import RECHECK_EVERY, FairnessMarks
from fair_router.fairqueue.queue import FairQueue
from fair_router.fairqueue.stale import PlainPops
from fair_router.rq_internals.worker import RqWorkerSeam
from fair_router.workers.sampling import WeightedOrder


class FairnessFollower:
    """The fairness marks of one worker's queues; ``fair_queues`` is the worker's list, grown here."""

    def __init__(self, worker: RqWorkerSeam, settings: Settings, fair_queues: list[FairQueue],
                 fetch_order: WeightedOrder) -> None:
        self.worker, self.settings, self.fair_queues, self.fetch_order = worker, settings, fair_queues, fetch_order
        self.marks = FairnessMarks(worker.connection, settings.prefix)
        self._class_warned: set[str] = set()
        self._plain_pops: PlainPops | None = None
        self._plain_looked = 0.0  # monotonic time of the last look
        self._plain_warned: set[str] = set()

    def follow(self, starting: bool = False) -> None:
        """Serve every queue whose mark is set as a FairQueue (a round trip per :data:`RECHECK_EVERY` at most); a class
        that cannot be served fairly is refused when ``starting``, later warned about once and served as before."""
        worker = self.worker
        marked = self.marks.read(queue.name for queue in worker.queues)
        for queue in list(worker.queues):
            prefix = marked.get(queue.name)
            if prefix is None:
                continue
            if prefix != self.settings.prefix:
                self.marks.prefix_of(queue.name)  # logs the mismatch
            if isinstance(queue, FairQueue):
                if queue.prefix_keys.prefix != prefix:
                    queue.use_settings(self.settings, prefix)
                continue
            try:
                fair = as_fair(queue, self.settings, prefix)
            except QueueClassConflict as exc:
                if starting:
                    raise
                if queue.name not in self._class_warned:
                    self._class_warned.add(queue.name)
                    worker.log.error("Worker %s: %s. Until then this worker serves it first-in first-out.",
                                     worker.name, exc)
                continue
            worker.replace_queue(queue, fair)
            worker.queue_class = FairQueue  # its dequeue_any serves fair and plain queues alike
            self.fetch_order.replace(queue, fair)
            self.fair_queues.append(fair)
            worker.log.info("Worker %s: queue %s is marked fair: serving it as %s", worker.name, queue.name,
                            type(fair).__name__)

    def report_plain_pops(self, now: bool = False) -> None:
        """Warn, once per queue, about jobs a plain rq worker took from this worker's fair queues; at most once per
        :data:`RECHECK_EVERY` seconds unless ``now``."""
        if not self.fair_queues or self.worker.is_horse:
            return
        if not now and time.monotonic() - self._plain_looked < RECHECK_EVERY:
            return
        self._plain_looked = time.monotonic()
        try:
            if self._plain_pops is None:
                self._plain_pops = PlainPops(self.fair_queues[0].connection)
            for queue in self.fair_queues:
                report = self._plain_pops.check(queue.name, queue.fair_keys)
                if report.plain and queue.name not in self._plain_warned:
                    self._plain_warned.add(queue.name)
                    self.worker.log.warning("Worker %s: %s", self.worker.name, report.describe())
        except RedisError as exc:  # at a stopping worker's last look: it still has to register its death
            self.worker.log.warning("Worker %s: could not look for plain workers' pops (%s)", self.worker.name, exc)
