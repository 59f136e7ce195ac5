"""A weighted worker that cannot go on exits non-zero (rq's ``work`` loop would return normally, and ``rq worker``
exit 0): docs/recovery.md ("Redis outages")."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry
from rq.worker import BaseWorker

from fair_router.store.oom import OOM_FIX, grace_of
from fair_router.store.outage import redis_address


class FatalRedisExits:
    """Turns a Redis error the worker cannot go on from into ``SystemExit(1)``, and puts off what can wait."""

    def __init__(self, worker: BaseWorker) -> None:
        self.worker = worker
        self.error: BaseException | None = None  # the Redis error that ends the worker
        self._duties_put_off = False

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Redis unreachable past the client's retries, a refused login or out of memory ends the worker process
        (a work horse's errors are rq's): logged with the fix, a running work horse killed first."""
        worker = self.worker
        try:
            yield
        except (RedisConnectionError, RedisTimeoutError, OutOfMemoryError) as exc:
            if worker.is_horse or self.error is not None:
                raise
            self.error = exc
            worker.log.error("Worker %s: %s; exiting with status 1", worker.name, self.reason(exc))
            if worker.horse_pid:
                worker.kill_horse(signal.SIGKILL)
            raise SystemExit(1) from exc

    def reason(self, exc: BaseException) -> str:
        """What went wrong, and the fix."""
        where, grace = redis_address(self.worker.connection), grace_of(self.worker.connection)
        if isinstance(exc, OutOfMemoryError):
            return (f"Redis at {where} is out of memory (OOM: maxmemory reached under noeviction) and refused a "
                    f"write the worker cannot skip, or could wait no longer than redis_outage_grace ({grace:g} s) "
                    f"for ({exc}); {OOM_FIX}")
        if isinstance(exc, RedisConnectionError) and "auth" in type(exc).__name__.lower():
            return f"Redis at {where} refused the worker's login ({type(exc).__name__}: {exc}); fix the credentials"
        return (f"Redis at {where} unreachable past redis_outage_grace ({grace:g} s; {type(exc).__name__}: {exc}); "
                "bring Redis back, or raise redis_outage_grace to ride longer outages")

    def warn_put_off(self, what: str, exc: BaseException) -> None:
        """Log that ``what`` waits for the next time: Redis is out of memory."""
        worker = self.worker
        worker.log.warning("Worker %s: %s put off: Redis at %s is out of memory (%s); %s", worker.name, what,
                           redis_address(worker.connection), exc, OOM_FIX)

    def put_off_duties(self, duties: Callable[[], None]) -> None:
        """Run the heartbeat duties, put off to the next beat while Redis is out of memory (each is made to be
        repeated); warned about once per stretch."""
        try:
            duties()
        except OutOfMemoryError as exc:
            if not self._duties_put_off:
                self.warn_put_off("heartbeat duties (crash recovery, start records, fairness marks)", exc)
            self._duties_put_off = True
        else:
            self._duties_put_off = False

    def teardown_without_redis(self, teardown: Callable[[], Any]) -> None:
        """rq's teardown (its register_death) once, without waiting for Redis: after a fatal Redis error."""
        self.worker.connection.set_retry(Retry(NoBackoff(), 0))
        try:
            teardown()
        except RedisError as exc:
            self.worker.log.warning("Worker %s: could not register its death (%s); it expires with its heartbeat",
                                    self.worker.name, exc)
