"""Riding through a Redis outage: a redis-py ``Retry`` bounded by time, what it saw (:data:`OUTAGES`), and the
producers' error (docs/production-redis.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar, cast

from redis import Redis
from redis.backoff import EqualJitterBackoff
from redis.exceptions import AuthenticationError, AuthorizationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

F = TypeVar("F", bound=Callable[..., Any])

BACKOFF_CAP = 1.0
"""Longest wait between two attempts (seconds): a returning Redis is found within about this."""
BACKOFF_BASE = 0.05
"""First wait after a failure (seconds), doubled per failure up to the cap (with jitter)."""


_NOT_AN_OUTAGE = (AuthenticationError, AuthorizationError)
"""Connection errors that waiting does not cure (redis-py counts them as ConnectionError)."""


class RedisUnavailable(RedisConnectionError):
    """Redis at ``address`` could not be reached after the client's retries; nothing was enqueued."""

    def __init__(self, address: str, cause: BaseException) -> None:
        self.address = address
        super().__init__(f"Redis at {address} is unavailable ({type(cause).__name__}: {cause}); nothing was enqueued")


class OutageWatch:
    """When this process last met Redis unreachable (monotonic seconds; None: never)."""

    def __init__(self) -> None:
        self.last_failure: float | None = None  # when a call to Redis last failed with a connection error

    def seconds_since(self) -> float | None:
        """Seconds since the last failure seen, or None."""
        return None if self.last_failure is None else time.monotonic() - self.last_failure


OUTAGES = OutageWatch()
"""The process-wide record every :class:`GraceRetry` writes to."""


class GraceRetry(Retry):
    """redis-py's ``Retry`` until ``grace`` seconds after the outermost call's first failure in this thread."""

    def __init__(self, grace: float, watch: OutageWatch = OUTAGES) -> None:
        super().__init__(EqualJitterBackoff(cap=BACKOFF_CAP, base=BACKOFF_BASE), -1,
                         (RedisConnectionError, RedisTimeoutError, TimeoutError))
        self.grace = grace
        self.watch = watch
        self._local = threading.local()

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, GraceRetry) and other.grace == self.grace and super().__eq__(other)

    __hash__ = Retry.__hash__

    def __deepcopy__(self, memo: dict[int, Any]) -> GraceRetry:
        """Each connection's copy is a fresh retry writing to the same process-wide record."""
        return GraceRetry(self.grace, self.watch)

    def __reduce__(self) -> tuple[Any, ...]:
        """Picklable (connection kwargs get pickled): a fresh retry of the same grace."""
        return (GraceRetry, (self.grace,))

    def call_with_retry(self, do: Callable[[], Any], fail: Callable[..., Any],
                        is_retryable: Callable[[Exception], bool] | None = None,
                        with_failure_count: bool = False) -> Any:
        """redis-py's contract, with a deadline rather than a count deciding when to give up."""
        local = self._local
        outermost = not getattr(local, "active", False)
        if outermost:
            local.active, local.since = True, None
        self._backoff.reset()  # type: ignore[no-untyped-call]
        failures = 0
        try:
            while True:
                try:
                    return do()
                except self._supported_errors as error:
                    if isinstance(error, _NOT_AN_OUTAGE) or (is_retryable is not None and not is_retryable(error)):
                        raise
                    failures += 1
                    now = time.monotonic()
                    if local.since is None:
                        local.since = now
                    self.watch.last_failure = now
                    if with_failure_count:
                        fail(error, failures)
                    else:
                        fail(error)
                    left = local.since + self.grace - now
                    if left <= 0:
                        raise
                    time.sleep(min(self._backoff.compute(failures), left))
        finally:
            if outermost:
                local.active = False


def ride_outages(connection: Redis, grace: float) -> Redis:
    """Give ``connection`` (its pool's connections, and clients built later from its ``connection_kwargs``: rq's
    scheduler, a forked work horse) a :class:`GraceRetry` of ``grace`` seconds; returns it."""
    current = connection.get_connection_kwargs().get("retry")
    if not (isinstance(current, GraceRetry) and current.grace == grace):
        connection.set_retry(GraceRetry(grace))
    return connection


def redis_address(connection: Any) -> str:
    """``host:port`` (or the socket path) of ``connection``'s Redis, never its password."""
    try:
        kwargs = connection.connection_pool.connection_kwargs
    except AttributeError:
        return "an unknown address"
    if kwargs.get("path"):
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"


def naming_redis(method: F) -> F:
    """A producer's method raising :class:`RedisUnavailable` for a connection error that outlived the retries."""

    @wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except RedisUnavailable:
            raise
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise RedisUnavailable(redis_address(self.connection), exc) from exc

    return cast(F, wrapper)
