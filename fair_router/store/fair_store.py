"""Where a fair queue's state lives: :class:`FairStore`, the few operations a
:class:`~fair_router.fairqueue.queue.FairQueue` asks of it, and :class:`RedisFairStore`, the one implementation
(the fair queue's keys from the key builder and its ``lua/fair_*.lua`` scripts through the typed wrappers of
:mod:`fair_router.fairqueue.scripts`).

The queue decides *what* to do (which tenant a job joins, its weight and charge, when a refusal parks a
tenant); the store does it, each change atomically. Every method is one script call, run now or queued on a
pipeline the caller executes (``pipeline``; then it returns the pipeline, or None for ``push``, whose
``loaded=True`` queues an EVALSHA: only on a pipeline run by :func:`~fair_router.store.luascript.execute_loaded`).
Tenants are given in their stored form
(:func:`fair_router.fairqueue.config.tenant_key`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar, cast

from redis import Redis
from redis.client import Pipeline

from fair_router.core.keys import FairQueueKeys
from fair_router.fairqueue.scripts import (
    TENANT_FIELD,
    FairHoldScript,
    FairMigrateScript,
    FairParkScript,
    FairPopScript,
    FairPushScript,
    FairReconcileScript,
    FairRecountScript,
    FairRemoveScript,
    FairSettleScript,
    FairUnmarkScript,
    FairUnparkScript,
    PopResult,
    PushEntry,
    ReconcileResult,
    record_waiting,
)
from fair_router.store.luascript import Call, LuaScript
from fair_router.store.scripts import Clock, now_arg

_S = TypeVar("_S", bound=LuaScript[Any])


class FairStore(Protocol):
    """The fair state of one queue: per-tenant FIFOs beside rq's list, the stride schedule, parks, charges."""

    @property
    def connection(self) -> Redis:
        """The Redis holding rq's list, so that readers (listings, recovery) share the store's server."""

    @property
    def keys(self) -> FairQueueKeys:
        """Where the state lives, for reads that need no script (listings, recovery) and for tests."""

    def push(self, entries: Sequence[PushEntry], pipeline: Pipeline | None = None, loaded: bool = False) -> int | None:
        """Jobs join rq's list and their FIFOs together, so rq's tools see the true backlog (how many joined)."""

    def waiting(self, tenants: Sequence[str]) -> dict[str, int]:
        """How many jobs each of ``tenants`` has waiting (those with none left out), for caps and admin reads."""

    def recount(self, tenants: Sequence[str]) -> dict[str, int]:
        """:meth:`waiting` after checking each tenant's jobs against rq's list (those rq removed are dropped), so
        a backlog cap never refuses a tenant for jobs that no longer wait."""

    def reconcile(self, bound: int, adopt: Sequence[PushEntry] = ()) -> ReconcileResult:
        """Make the counts agree with rq's list after rq's own commands (bounded by ``bound`` entries), adopting
        the listed ids of ``adopt``, so that readers show what waits."""

    def reconcile_call(self, bound: int, adopt: Sequence[PushEntry] = ()) -> Call[ReconcileResult]:
        """:meth:`reconcile`, not yet run."""

    def pop(self, given: str, acks: Sequence[str], runtime: bool, lease_ms: int) -> PopResult:
        """The next job by fair share, so that the choice and its bookkeeping are one atomic step."""

    def park(self, job_id: str, tenant: str, weight: float, until_ms: int, seq: int | None,
             limit: int | None, exact: bool = False) -> int:
        """A refused job goes back to its FIFO place and its tenant is skipped, so the refusal costs no turn
        (``exact``: until ``until_ms``, a rate's next token, on the dot)."""

    def unpark(self, tenant: str, job_id: str = "", limit: int | None = None,
               pipeline: Pipeline | None = None) -> int | Pipeline:
        """A tenant's slot was released: it may be served again, and a blocked worker is woken."""

    def hold(self, tenant: str, until_ms: int, paced: bool = False, pipeline: Pipeline | None = None) -> int | Pipeline:
        """Pops skip the tenant until ``until_ms``, so none hands out a job its start would refuse."""

    def settle(self, job_id: str, seconds: float | None, trust: bool,
               pipeline: Pipeline | None = None) -> int | Pipeline:
        """A popped job's estimated charge becomes its real cost, so runtime shares stay exact."""

    def remove(self, job_id: str, pipeline: Pipeline | None = None) -> int | Pipeline:
        """Take one job out of rq's list and the fair state together (rq's LREM result)."""

    def unmark(self, mark: str) -> int:
        """Remove the queue's fairness mark ``mark`` only while nothing waits, so no fair job is stranded."""


class RedisFairStore:
    """:class:`FairStore` on the fair queue's keys, each operation one ``lua/fair_*.lua`` script call. The
    wrappers are built (script read, assembled, registered) on first use, once per store."""

    def __init__(self, connection: Redis, keys: FairQueueKeys, clock: Clock | None = None) -> None:
        """``clock``: the scripts' now (epoch seconds; tests inject one), else Redis server TIME."""
        self._connection, self._keys, self._clock = connection, keys, clock
        self._scripts: dict[type[LuaScript[Any]], LuaScript[Any]] = {}

    @property
    def connection(self) -> Redis:
        return self._connection

    @property
    def keys(self) -> FairQueueKeys:
        return self._keys

    def _script(self, kind: type[_S]) -> _S:
        script = self._scripts.get(kind)
        if script is None:
            script = self._scripts[kind] = kind(self._connection)
        return cast(_S, script)

    def migrate(self, legacy: Sequence[str]) -> int:
        """Move state left in an earlier layout (``Keys.fair_queue_legacy``) into today's, so an upgrade strands
        no waiting job; the tenants moved."""
        return self._script(FairMigrateScript)(self._keys, legacy).run()

    def waiting(self, tenants: Sequence[str]) -> dict[str, int]:
        if not tenants:
            return {}
        records = self._connection.hmget(self._keys.state, [TENANT_FIELD + tenant for tenant in tenants])
        counts = zip(tenants, map(record_waiting, records), strict=True)
        return {tenant: count for tenant, count in counts if count > 0}

    def recount(self, tenants: Sequence[str]) -> dict[str, int]:
        if not tenants:
            return {}
        counts = zip(tenants, self._script(FairRecountScript)(self._keys, tenants).run(), strict=True)
        return {tenant: count for tenant, count in counts if count > 0}

    def reconcile(self, bound: int, adopt: Sequence[PushEntry] = ()) -> ReconcileResult:
        return self.reconcile_call(bound, adopt).run()

    def reconcile_call(self, bound: int, adopt: Sequence[PushEntry] = ()) -> Call[ReconcileResult]:
        """:meth:`reconcile` as a call, to queue on a pipeline beside other queues' (readers)."""
        return self._script(FairReconcileScript)(self._keys, bound, adopt)

    def push(self, entries: Sequence[PushEntry], pipeline: Pipeline | None = None, loaded: bool = False) -> int | None:
        call = self._script(FairPushScript)(self._keys, entries)
        if pipeline is None:
            return call.run()
        call.queue_loaded(pipeline) if loaded else call.queue(pipeline)
        return None

    def pop(self, given: str, acks: Sequence[str], runtime: bool, lease_ms: int) -> PopResult:
        return self._script(FairPopScript)(self._keys, given, acks, now_arg(self._clock), runtime, lease_ms).run()

    def park(self, job_id: str, tenant: str, weight: float, until_ms: int, seq: int | None,
             limit: int | None, exact: bool = False) -> int:
        return self._script(FairParkScript)(self._keys, job_id, tenant, weight, until_ms, seq, limit, exact).run()

    def unpark(self, tenant: str, job_id: str = "", limit: int | None = None,
               pipeline: Pipeline | None = None) -> int | Pipeline:
        return self._script(FairUnparkScript)(self._keys, tenant, job_id, limit,
                                              now_arg(self._clock)).run_or_queue(pipeline)

    def hold(self, tenant: str, until_ms: int, paced: bool = False, pipeline: Pipeline | None = None) -> int | Pipeline:
        return self._script(FairHoldScript)(self._keys, tenant, until_ms, paced,
                                            now_arg(self._clock)).run_or_queue(pipeline)

    def settle(self, job_id: str, seconds: float | None, trust: bool,
               pipeline: Pipeline | None = None) -> int | Pipeline:
        return self._script(FairSettleScript)(self._keys, job_id, seconds, trust,
                                              now_arg(self._clock)).run_or_queue(pipeline)

    def remove(self, job_id: str, pipeline: Pipeline | None = None) -> int | Pipeline:
        return self._script(FairRemoveScript)(self._keys, job_id).run_or_queue(pipeline)

    def unmark(self, mark: str) -> int:
        return self._script(FairUnmarkScript)(self._keys.rq_list, self._keys.members, mark).run()
