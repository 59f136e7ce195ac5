"""The Queue side of the rq seam: ``RqQueueSeam`` overrides rq's internal entry points (listed in
:mod:`~fair_router.rq_internals.members`) and calls hook methods that ``FairQueue`` implements."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from enum import IntEnum
from typing import Any, NamedTuple, cast

from redis import Redis
from redis.client import Pipeline
from rq import Queue
from rq.exceptions import DequeueTimeout, NoSuchJobError
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, JobStatus
from rq.utils import as_text, backend_class

from fair_router.rq_internals.jobclock import note_wait

STALLED_POLL = 1.0
"""Seconds a worker blocks on a queue where only parked tenants' jobs wait before it looks again (an id
rq's internals push there wakes nobody)."""

BLPOP_TICK = 0.1
"""Seconds by which Redis may end a BLPOP late (its timer ticks, ``hz`` 10): a park's end nearer than this is
slept instead, a later one blocked for this much less, so the tenant is served at its token, not a tick later."""


class PopKind(IntEnum):
    """What a fair pop found."""

    EMPTY = 0  # nothing waits
    PLAIN = 1  # an id rq's internals pushed, served in list order
    FAIR = 2  # the stride scheduler's choice
    STALLED = 3  # jobs wait, but only those of parked tenants


class PopResult(NamedTuple):
    """One pop of a seam queue (fair_pop.lua's reply, or a plain LPOP's)."""

    kind: PopKind
    job_id: str | None
    wake_ms: int  # STALLED / EMPTY: when the first park ends (epoch ms), -1 if none
    seq: int | None  # FAIR: the job's place in its tenant's FIFO (for fair_park)
    now_ms: int = -1  # STALLED / EMPTY: the pop's clock (epoch ms), for a wait of wake_ms - now_ms; -1 not known


class RqPush(NamedTuple):
    """One id rq puts on a seam queue's list, with what the push hooks need to know about it."""

    job_id: str
    job: Job | None
    """The job (None: its hash is gone)."""
    at_front: bool
    new: bool
    """Pushed by an enqueue of this queue object (the job ``_enqueue_job`` was handed), not by another
    of rq's pushes, which passes no Job (the hash was read back)."""


class FairIntermediateQueue(IntermediateQueue):
    """rq's intermediate-queue maintenance hook, extended to recover fair jobs whose worker died."""

    def cleanup(self, worker: Any, queue: Queue) -> None:
        super().cleanup(worker, queue)
        if isinstance(queue, RqQueueSeam):
            queue.recover()


class RqQueueSeam(Queue):
    """rq's Queue with its internal enqueue, dequeue and maintenance entry points routed to hook methods that a
    subclass (FairQueue) implements."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._enqueuing: Job | None = None  # the job rq's _enqueue_job is about to push (see push_job_id)
        self._batches: dict[int, list[RqPush]] = {}  # id(pipeline) -> enqueue_many's pushes on it
        self._own: set[int] = set()  # id() of the pipelines in flight that this queue executes itself

    # -- hooks, which FairQueue implements (docs/internals.md): pushes, refusals (backlog caps), pops, recovery
    push: Callable[[RqPush, Pipeline | None], None]
    push_many: Callable[[list[RqPush], Pipeline], None]
    pushed_unique: Callable[[Job, bool], None]  # rq's unique=True script already put the id on the list
    may_refuse: Callable[[dict[str, Any] | None], bool]  # whether a backlog cap applies to a new job's push
    check_room: Callable[[Sequence[dict[str, Any] | None]], None]  # raise now if new jobs would be refused
    execute_checked: Callable[[Pipeline, list[Job]], list[Any]]  # our own enqueue; a refused push undone, raised
    pop_fair: Callable[..., PopResult]  # (given=""): an entry BLPOP already took off rq's list
    adopt: Callable[[Job], bool]  # a plain entry popped: True when put into the fair structure instead
    recover: Callable[..., list[str]]  # give back jobs popped here whose worker died before starting them

    @property
    def wake_key(self) -> str:  # the list a worker blocks on while only parked tenants' jobs wait here
        raise NotImplementedError

    # -- enqueue: rq's private _enqueue_job, and the pushes it leads to --------------------------------------

    def owns(self, pipeline: Pipeline | None) -> bool:
        """Whether ``pipeline`` is one this queue made and executes itself (so a push on it may be an EVALSHA,
        retried after NOSCRIPT: :func:`fair_router.store.luascript.execute_loaded`)."""
        return pipeline is not None and id(pipeline) in self._own

    @contextmanager
    def own_pipeline(self) -> Iterator[Pipeline]:
        """A pipeline this queue makes and executes itself (:meth:`owns`)."""
        with self.connection.pipeline() as own:
            self._own.add(id(own))
            try:
                yield own
            finally:
                self._own.discard(id(own))

    def enqueue_job(self, job: Job, pipeline: Pipeline | None = None, at_front: bool = False,
                    unique: bool = False) -> Job:
        """rq's ``enqueue_job`` in one round trip where rq takes two (the queue's registration on the same pipeline);
        dependencies, rate limits, ``unique=True`` and a caller's pipeline take rq's path unchanged."""
        if pipeline is not None or unique or not self.is_async or job._dependency_ids or job.has_rate_limit:
            return super().enqueue_job(job, pipeline=pipeline, at_front=at_front, unique=unique)
        with self.own_pipeline() as own:
            job = super().enqueue_job(job, pipeline=own, at_front=at_front)
            self.execute_checked(own, [job])
        return job

    def _enqueue_job(self, job: Job, pipeline: Pipeline | None = None, at_front: bool = False,
                     unique: bool = False) -> Job:
        """Every rq enqueue path passes here (rq has no public hook): the job noted for :meth:`push_job_id`, a push
        that may be refused run by :meth:`execute_checked`, a ``unique=True`` job handed to :meth:`pushed_unique`."""
        if not self.is_async:  # rq runs the job at once: nothing is pushed
            return super()._enqueue_job(job, pipeline=pipeline, at_front=at_front, unique=unique)
        refusable = self.may_refuse(job.meta)
        in_batch = pipeline is not None and id(pipeline) in self._batches  # enqueue_many checked the batch
        ours = in_batch or self.owns(pipeline)
        if refusable and not ours and (pipeline is not None or unique):  # not ours to execute: check first
            self.check_room([job.meta])
        self._enqueuing = job
        try:
            if pipeline is None and not unique:
                with self.own_pipeline() as own:
                    job = super()._enqueue_job(job, pipeline=own, at_front=at_front)
                    self.execute_checked(own, [job])
            else:
                job = super()._enqueue_job(job, pipeline=pipeline, at_front=at_front, unique=unique)
        finally:
            self._enqueuing = None
        if unique:
            self.pushed_unique(job, bool(at_front))
        return job

    def push_job_id(self, job_id: str, pipeline: Pipeline | None = None, at_front: bool = False) -> None:
        """Where rq puts an id on the list: handed to :meth:`push` (or collected for :meth:`push_many`), so the
        fair push joins rq's own MULTI that saves the job, atomic as in rq."""
        job = self._enqueuing
        new = job is not None and job.id == job_id
        if not new:  # pushed without _enqueue_job: read the job back
            try:
                job = self.job_class.fetch(job_id, connection=self.connection, serializer=self.serializer)
            except NoSuchJobError:
                job = None
        push = RqPush(job_id, job, bool(at_front), new)  # rq's enqueue_many may pass at_front=None
        batch = None if pipeline is None else self._batches.get(id(pipeline))
        if batch is not None:
            batch.append(push)  # enqueue_many pushes the whole batch at the end of its pipeline
        else:
            self.push(push, pipeline)

    def enqueue_many(self, job_datas: Iterable[Any], pipeline: Pipeline | None = None,
                     group_id: str | None = None) -> list[Job]:
        """rq's ``enqueue_many``: pushes of jobs without dependencies collected and handed to :meth:`push_many` at the
        end of rq's MULTI that saves them; jobs with dependencies pushed one by one."""
        datas = list(job_datas)
        if any(data.depends_on for data in datas):
            return super().enqueue_many(datas, pipeline=pipeline, group_id=group_id)
        if pipeline is not None:  # the caller executes it: check before anything is queued
            self.check_room([data.meta for data in datas])
            return self._enqueue_batch(datas, pipeline, group_id)
        with self.own_pipeline() as own:
            jobs = self._enqueue_batch(datas, own, group_id)
            self.execute_checked(own, jobs)
        return jobs

    def _enqueue_batch(self, datas: list[Any], pipe: Pipeline, group_id: str | None) -> list[Job]:
        batch: list[RqPush] = []
        self._batches[id(pipe)] = batch
        try:
            return super().enqueue_many(datas, pipeline=pipe, group_id=group_id)
        finally:
            # Also when rq raised midway: the jobs it saved into a caller's pipeline get their pushes, as with
            # rq's own push per job.
            del self._batches[id(pipe)]
            self.push_many(batch, pipe)

    # -- dequeue: rq's dequeue_any contract, with fair pops ---------------------------------------------------

    @classmethod
    def dequeue_any(cls, queues: Iterable[Queue], timeout: int | None, connection: Redis,
                    job_class: type[Job] | None = None, serializer: Any = None,
                    death_penalty_class: Any = None) -> tuple[Job, Queue] | None:
        """rq's contract (the first job of ``queues`` in order, blocking up to ``timeout``, DequeueTimeout) over fair
        pops and plain LPOPs alike: one BLPOP over every list; the given queue objects are returned."""
        if timeout == 0:
            raise ValueError("RQ does not support indefinite timeouts. Please pick a timeout value > 0")
        queues = list(queues)
        waited = None  # when a blocking wait ended: the worker's time on the job leaves it out (jobclock.py)
        job_cls: type[Job] = backend_class(cls, "job_class", override=job_class)
        deadline = None if timeout is None else time.monotonic() + timeout
        by_key = {queue.key: queue for queue in queues}
        while True:
            wake_at, stalled = None, set()  # wake_at: time.monotonic() of the first park end
            for queue in queues:
                while True:
                    result = _pop(queue, connection, "")
                    if result.kind in (PopKind.EMPTY, PopKind.STALLED):
                        if result.kind == PopKind.STALLED:
                            stalled.add(queue.key)
                        if result.wake_ms > 0:
                            at = _park_end(result)
                            wake_at = at if wake_at is None else min(wake_at, at)
                        break
                    job = _served(job_cls, result, queue, connection, serializer)
                    if job is not None:
                        return note_wait(job, waited), queue
            if deadline is None:  # rq's burst: one look, no wait
                if stalled:
                    logging.getLogger("fair_router").warning(
                        "burst: jobs still wait in %s, their tenants held back by a concurrency limit, a rate or a "
                        "pause; the burst ends without them (as it does without rq's scheduled jobs). A worker "
                        "without --burst serves them when they may start",
                        ", ".join(sorted(by_key[key].name for key in stalled)))
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise DequeueTimeout(timeout, list(by_key))
            block = left
            if wake_at is not None:
                until = wake_at - time.monotonic()
                if until <= BLPOP_TICK:  # nearer than Redis times a BLPOP out: slept, then look again
                    time.sleep(max(0.001, min(until, left)))
                    continue
                block = min(block, until - BLPOP_TICK)
            if stalled:
                block = min(block, STALLED_POLL)
            keys = [cast(RqQueueSeam, by_key[key]).wake_key if key in stalled else key for key in by_key]
            popped = connection.blpop(keys, max(0.01, block))
            waited = time.perf_counter()
            if popped is None:
                if block >= left:
                    raise DequeueTimeout(timeout, list(by_key))
                continue
            key, entry = as_text(popped[0]), as_text(popped[1])
            if key not in by_key:
                continue  # a wake-up: look again
            queue = by_key[key]
            result = _pop(queue, connection, entry)
            job = None if result.job_id is None else _served(job_cls, result, queue, connection, serializer)
            if job is not None:
                return note_wait(job, waited), queue

    # -- maintenance: rq's intermediate-queue hook ----------------------------------------------------------

    @property
    def intermediate_queue(self) -> IntermediateQueue:
        """rq's maintenance calls ``queue.intermediate_queue.cleanup``: ours also runs :meth:`recover`."""
        return FairIntermediateQueue(self.key, connection=self.connection)


def _pop(queue: Queue, connection: Redis, given: str) -> PopResult:
    """One pop from one queue: :meth:`RqQueueSeam.pop_fair` for a seam queue, else LPOP / the entry BLPOP took."""
    if isinstance(queue, RqQueueSeam):
        return queue.pop_fair(given)
    if given:
        return PopResult(PopKind.PLAIN, given, -1, None)
    raw = cast(bytes | None, connection.lpop(queue.key))
    if raw is None:
        return PopResult(PopKind.EMPTY, None, -1, None)
    return PopResult(PopKind.PLAIN, as_text(raw), -1, None)


def _park_end(result: PopResult) -> float:
    """When (``time.monotonic()``) the first park a pop reported ends: ``wake_ms - now_ms`` from now, both on the
    pop's clock, so a worker whose clock differs from Redis' wakes on time (without the pop's clock: this one)."""
    if result.now_ms >= 0:
        return time.monotonic() + (result.wake_ms - result.now_ms) / 1000
    return time.monotonic() + result.wake_ms / 1000 - time.time()


def _served(job_cls: type[Job], result: PopResult, queue: Queue, connection: Redis, serializer: Any) -> Job | None:
    """The popped job, or None when it no longer exists or was canceled (skipped, as rq skips missing jobs) or a seam
    queue took the plain entry into its fair structure (then pop again)."""
    job_id = cast(str, result.job_id)
    try:
        job = job_cls.fetch(job_id, connection=connection, serializer=serializer)
    except NoSuchJobError:
        return None
    except Exception as exc:
        exc.job_id = job_id  # type: ignore[attr-defined]  # as rq does, for its error report
        exc.queue = queue  # type: ignore[attr-defined]
        raise
    if job.get_status(refresh=False) == JobStatus.CANCELED:
        return None
    adopted = result.kind == PopKind.PLAIN and isinstance(queue, RqQueueSeam) and queue.adopt(job)
    return None if adopted else job
