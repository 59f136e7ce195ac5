"""Redis out of memory under ``noeviction``: riding it through on the writes that can wait (:func:`execute_riding_oom`
resends refused commands, :func:`call_riding_oom` repeats idempotent calls)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from redis.backoff import EqualJitterBackoff
from redis.client import Pipeline
from redis.exceptions import NoScriptError, OutOfMemoryError

from fair_router.store.luascript import function_lost, sent_again
from fair_router.store.outage import BACKOFF_BASE, BACKOFF_CAP, GraceRetry

OOM_FIX = ("free memory or raise `maxmemory` (CONFIG SET maxmemory, or the plan's memory on a managed service); "
           "keep `maxmemory-policy noeviction`")
"""What to do about a Redis out of memory, for log lines and errors."""

T = TypeVar("T")

_GRACES: WeakKeyDictionary[Any, float] = WeakKeyDictionary()


def note_grace(client: Any, grace: float) -> None:
    """Remember ``grace`` for a client whose retry policy is not a :class:`GraceRetry` (a ``RedisCluster``)."""
    _GRACES[client] = grace


def grace_of(client: Any) -> float:
    """Seconds a write of ``client`` may wait for Redis: its retry's grace, a noted one, else 0."""
    try:
        retry = client.get_connection_kwargs().get("retry")
    except AttributeError:
        retry = None
    if isinstance(retry, GraceRetry):
        return retry.grace
    return _GRACES.get(client, 0.0)


def call_riding_oom(call: Callable[[], T], grace: float) -> T:
    """``call()``, made again with backoff while Redis refuses it for memory, until ``grace`` seconds have passed since
    the first refusal; for idempotent calls (a heartbeat)."""
    deadline: float | None = None
    backoff = EqualJitterBackoff(cap=BACKOFF_CAP, base=BACKOFF_BASE)
    attempts = 0
    while True:
        try:
            return call()
        except OutOfMemoryError:
            now = time.monotonic()
            deadline = now + grace if deadline is None else deadline
            if now >= deadline:
                raise
            attempts += 1
            time.sleep(min(backoff.compute(attempts), deadline - now))


def execute_riding_oom(pipe: Pipeline, connection: Any, grace: float | None = None) -> list[Any]:
    """``pipe.execute()`` riding Redis out of memory for up to ``grace`` seconds (default :func:`grace_of`): a plain
    pipeline's refused commands are sent again alone (its lost scripts' too, as EVAL: :func:`sent_again`), a refused
    transaction whole. Returns every reply, in order (an FCALL's "Function not found" among them)."""
    stack = list(pipe.command_stack)
    transaction = getattr(pipe, "transaction", False) is True
    # a transaction's FCALL answered "Function not found" (Redis lost the library) is left to its reader: it did nothing
    raising = transaction and not any(str(args[0]).upper() == "FCALL" for args, _ in stack)
    replies: list[Any] = [None] * len(stack)
    refused = list(range(len(stack)))  # what a send sends again: all of a refused transaction, else each refused
    unsent = [pipe]

    def send() -> list[Any]:
        if unsent:
            sent = list(unsent.pop().execute(raise_on_error=raising))
            replies[:], refused[:] = sent, range(len(sent))
        else:
            with connection.pipeline(transaction=transaction) as again:
                for index in refused:
                    args, options = stack[index]
                    again.pipeline_execute_command(*args, **options)
                for index, reply in zip(refused, again.execute(raise_on_error=raising), strict=True):
                    replies[index] = reply
        refused[:] = [index for index in refused if isinstance(replies[index], OutOfMemoryError)]
        if refused:
            raise replies[refused[0]]
        return replies

    call_riding_oom(send, grace := grace_of(connection) if grace is None else grace)
    refused[:] = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError) or function_lost(reply)]
    if refused and not transaction:  # Redis lost its scripts (a restart): these EVALSHAs and FCALLs did nothing
        stack[:] = [(sent_again(args) if index in refused else args, kw) for index, (args, kw) in enumerate(stack)]
        call_riding_oom(send, grace)
    for reply in replies:
        if isinstance(reply, Exception) and not (transaction and function_lost(reply)):
            raise reply
    return replies
