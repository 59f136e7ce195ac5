"""A weighted worker that cannot go on exits non-zero. rq's ``work`` loop ends on any exception but ``SystemExit``
and returns normally, so ``rq worker`` exits 0 and a supervisor restarting only on failure leaves it down. The
seam runs rq's loop steps (``bootstrap``, ``check_for_suspension``, ``run_maintenance_tasks``, the fetch,
``execute_job``, ``heartbeat``) under :meth:`FatalRedisExits.exit_on_fatal_redis`: Redis unreachable past the
client's retries (``redis_outage_grace``), a refused login, or Redis out of memory on a write that cannot be
skipped ends the worker with a logged reason and ``SystemExit(1)``; a running work horse is killed first (its
job stays in rq's StartedJobRegistry, handed back by crash recovery), and the teardown does not wait for Redis.
Writes that can wait ride an out-of-memory Redis instead (:mod:`fair_router.store.oom`).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from rq.utils import now
from rq.worker import BaseWorker

from fair_router.store.oom import OOM_FIX, grace_of
from fair_router.store.outage import redis_address


class FatalRedisExits(BaseWorker):
    """rq's loop steps under :meth:`exit_on_fatal_redis` (a base of the seam's worker)."""

    def heartbeat_due(self) -> None:
        """The worker process sent a heartbeat of its own: time for duties done once per beat (a hook)."""

    def worker_starting(self) -> None:
        """rq's bootstrap is done (logging set up, the worker registered), before the first fetch (a hook)."""

    _fatal: BaseException | None = None
    """The Redis error that ends this worker (then its teardown does not wait for Redis)."""

    @contextmanager
    def exit_on_fatal_redis(self) -> Iterator[None]:
        """Turn a Redis error the worker cannot go on from into ``SystemExit(1)`` (in the worker process; a work
        horse's errors are rq's to handle): Redis unreachable after the client's retries, a refused login, Redis
        out of memory. Logs the cause and the fix, and kills a running work horse first."""
        try:
            yield
        except (RedisConnectionError, RedisTimeoutError, OutOfMemoryError) as exc:
            if self.is_horse or self._fatal is not None:
                raise
            self._fatal = exc
            self.log.error("Worker %s: %s; exiting with status 1", self.name, self._fatal_reason(exc))
            if self.horse_pid:
                self.kill_horse(signal.SIGKILL)
            raise SystemExit(1) from exc

    def _fatal_reason(self, exc: BaseException) -> str:
        where, grace = redis_address(self.connection), grace_of(self.connection)
        if isinstance(exc, OutOfMemoryError):
            return (f"Redis at {where} is out of memory (OOM: maxmemory reached under noeviction) and refused a "
                    f"write the worker cannot skip, or could wait no longer than redis_outage_grace ({grace:g} s) "
                    f"for ({exc}); {OOM_FIX}")
        if isinstance(exc, RedisConnectionError) and "auth" in type(exc).__name__.lower():
            return f"Redis at {where} refused the worker's login ({type(exc).__name__}: {exc}); fix the credentials"
        return (f"Redis at {where} unreachable past redis_outage_grace ({grace:g} s; {type(exc).__name__}: {exc}); "
                "bring Redis back, or raise redis_outage_grace to ride longer outages")

    _duties_put_off = False

    def beat_duties(self) -> None:
        """``heartbeat_due``, put off to the next beat while Redis is out of memory (crash recovery, start records
        and fairness marks can wait; each is made to be repeated); warned about once per stretch."""
        try:
            self.heartbeat_due()
        except OutOfMemoryError as exc:
            if not self._duties_put_off:
                self.log.warning("Worker %s: heartbeat duties (crash recovery, start records, fairness marks) put "
                                 "off: Redis at %s is out of memory (%s); %s", self.name,
                                 redis_address(self.connection), exc, OOM_FIX)
            self._duties_put_off = True
        else:
            self._duties_put_off = False

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        """rq's (logging, registration), then ``worker_starting``; a Redis that cannot serve ends the worker."""
        with self.exit_on_fatal_redis():
            super().bootstrap(*args, **kwargs)
            self.worker_starting()

    def check_for_suspension(self, burst: bool) -> None:
        """rq's, under :meth:`exit_on_fatal_redis`."""
        with self.exit_on_fatal_redis():
            super().check_for_suspension(burst)

    def run_maintenance_tasks(self) -> None:
        """rq's, under :meth:`exit_on_fatal_redis`; put off to the next ``maintenance_interval`` while Redis is out of
        memory (registry cleaning can wait, and is made to be repeated)."""
        with self.exit_on_fatal_redis():
            try:
                super().run_maintenance_tasks()  # type: ignore[no-untyped-call]
            except OutOfMemoryError as exc:
                self.last_cleaned_at = now()  # type: ignore[assignment]  # rq types it None
                self.log.warning("Worker %s: maintenance put off: Redis at %s is out of memory (%s); %s", self.name,
                                 redis_address(self.connection), exc, OOM_FIX)

    def teardown_without_redis(self) -> None:
        """rq's teardown (its register_death) once, without waiting for Redis: after a fatal Redis error."""
        self.connection.set_retry(Retry(NoBackoff(), 0))
        try:
            super().teardown()  # type: ignore[no-untyped-call]
        except RedisError as exc:
            self.log.warning("Worker %s: could not register its death (%s); it expires with its heartbeat",
                             self.name, exc)
