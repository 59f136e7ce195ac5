"""Producers that confirm each enqueue with Redis replicas (``replicas_to_wait``; docs/production-redis.md): ``WAIT``
packed into the pipeline's own write after rq's EXEC."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from pydantic import TypeAdapter, ValidationError
from redis.client import Pipeline
from redis.exceptions import RedisError

from fair_router.core.validation import Duration, Replicas
from fair_router.store.outage import redis_address

T = TypeVar("T")

_REPLICAS: TypeAdapter[int] = TypeAdapter(Replicas)
_TIMEOUT: TypeAdapter[float] = TypeAdapter(Duration)


class ReplicaSettings(Protocol):
    """The two settings (``fair_router.config.settings.Settings`` has them)."""

    @property
    def replicas_to_wait(self) -> int: ...

    @property
    def replicas_timeout(self) -> float: ...


class ReplicasNotAcknowledged(RedisError):
    """Fewer than ``wanted`` replicas acknowledged an enqueue within the timeout; the jobs are on the primary."""

    def __init__(self, address: str, acknowledged: int, wanted: int, timeout: float, job_ids: Sequence[str]) -> None:
        self.address, self.acknowledged, self.wanted, self.job_ids = address, acknowledged, wanted, list(job_ids)
        shown = ", ".join(self.job_ids[:5]) + (f" and {len(self.job_ids) - 5} more" if len(self.job_ids) > 5 else "")
        super().__init__(
            f"Redis at {address}: {acknowledged} of {wanted} replica(s) acknowledged the enqueue within {timeout:g}s "
            f"(setting replicas_to_wait / FAIR_ROUTER_REPLICAS_TO_WAIT); the job(s) {shown} are saved and queued on "
            f"the primary, but a failover before a replica has them would lose them")


class Confirmation:
    """What the replicas answered for one pipeline run (None: no WAIT was sent)."""

    def __init__(self, wait: ReplicaWait, address: str) -> None:
        self.wait, self.address = wait, address
        self.acknowledged: int | None = None

    def check(self, job_ids: Sequence[str]) -> None:
        """Raise ReplicasNotAcknowledged when fewer replicas than wanted acknowledged the write."""
        if self.acknowledged is not None and self.acknowledged < self.wait.replicas:
            raise ReplicasNotAcknowledged(self.address, self.acknowledged, self.wait.replicas, self.wait.timeout,
                                          job_ids)


class ReplicaWait:
    """How many replicas an enqueue waits for (0: none, no WAIT sent) and for how long (seconds)."""

    def __init__(self, replicas: int = 0, timeout: float = 1.0) -> None:
        self.replicas = _checked(_REPLICAS, replicas, "replicas_to_wait")
        self.timeout = _checked(_TIMEOUT, timeout, "replicas_timeout")

    @classmethod
    def of(cls, settings: ReplicaSettings) -> ReplicaWait:
        """The settings' ``replicas_to_wait`` and ``replicas_timeout`` (already validated)."""
        return cls(settings.replicas_to_wait, settings.replicas_timeout)

    @contextmanager
    def confirming(self, pipe: Pipeline) -> Iterator[Confirmation]:
        """Executing ``pipe`` here also sends ``WAIT`` in the same write; call the confirmation's ``check`` after."""
        confirmation = Confirmation(self, redis_address(pipe))
        if self.replicas <= 0:
            yield confirmation
            return
        if not vars(pipe).get("transaction"):  # the attribute (the class has a method of that name)
            raise TypeError("ReplicaWait.confirming: the WAIT follows a MULTI; this pipeline is not a transaction")
        inner = pipe._execute_transaction

        def then_wait(connection: Any, commands: Any, raise_on_error: bool) -> Any:
            wait = connection.pack_command("WAIT", self.replicas, max(1, round(self.timeout * 1000)))
            packed = _PackAfterMulti(connection, wait)
            try:
                results = inner(connection, commands, raise_on_error)
            except BaseException:
                connection.disconnect()  # the WAIT's reply may be unread: never hand this socket on
                raise
            finally:
                packed.undo()
            if not packed.sent:  # redis-py wrote the MULTI some other way: WAIT on its own, same connection
                connection.send_packed_command(wait)
            confirmation.acknowledged = int(connection.read_response())
            return results

        pipe._execute_transaction = then_wait  # type: ignore[method-assign]
        try:
            yield confirmation
        finally:
            del pipe._execute_transaction


def _checked(adapter: TypeAdapter[T], value: object, setting: str) -> T:
    """``value`` checked as the setting it stands for; ValueError naming the setting, the value and why."""
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise ValueError(f"{setting}={value!r}: {exc.errors()[0]['msg']}") from None


class _PackAfterMulti:
    """Make ``connection``'s next MULTI write carry ``wait`` (no round trip of its own), until :meth:`undo`."""

    def __init__(self, connection: Any, wait: list[bytes]) -> None:
        self.connection, self.wait, self.sent = connection, wait, False
        self.send = connection.send_packed_command
        self.multi = bytes(connection.pack_command("MULTI")[0])
        connection.send_packed_command = self._send

    def _send(self, command: Any, check_health: bool = True) -> None:
        chunks = list(command) if isinstance(command, list) else [command]
        if not self.sent and chunks and bytes(chunks[0]).startswith(self.multi):
            # Onto the last chunk (EXEC, usually a few bytes): one sendall, so one packet with the transaction's end.
            chunks[-1] = bytes(chunks[-1]) + b"".join(bytes(chunk) for chunk in self.wait)
            self.sent = True
        self.send(chunks, check_health)

    def undo(self) -> None:
        vars(self.connection).pop("send_packed_command", None)
