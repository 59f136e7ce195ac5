"""Pausing a tenant: a flag per tenant in Redis, read at every job start by the pause control
(:class:`PauseCheck`, decided by ``lua/lib/start_pause.lua`` in the start script).

A paused tenant's jobs wait where they are: a weighted worker that takes one parks the tenant in that
FairQueue (pops skip it) or, on a plain queue, defers the job like a concurrency snooze. Nothing is failed
or lost, and jobs already running finish. :meth:`TenantPauses.resume` deletes the flag and unparks the
tenant at once in every fair queue rq knows, so its jobs flow again without waiting for a park to end.
"""

from __future__ import annotations

import time
from datetime import datetime
from urllib.parse import unquote

from redis import Redis
from rq import Queue

from fair_router.controls.fairstate import TENANT_FIELD, FairHoldScript, FairUnparkScript, record_org
from fair_router.controls.gate import Admission, Refusal, Section, Start, StartControl, Verdict
from fair_router.core.keys import Keys, encode
from fair_router.core.text import as_text
from fair_router.store.profile_scripts import NoteChangeScript, PauseScript, pause_time
from fair_router.store.scripts import Clock, now_arg

PAUSE_PARK = 60.0
"""Seconds a fair queue skips a paused tenant before its next pop checks again; ``resume`` unparks it at
once in every fair queue rq knows, so this only bounds a resume that missed a queue."""


class TenantPauses:
    """pause / resume / paused: a flag per tenant that the start script reads at every job start."""

    def __init__(self, connection: Redis, keys: Keys, rq_connection: Redis | None = None,
                 clock: Clock | None = None) -> None:
        """``connection``: where the pause flags are (a RedisCluster on a cluster); ``rq_connection``: rq's
        queues and the fair queues' state (the owner of rq's slot there; else ``connection``); ``clock``: the
        fair queues' now (epoch seconds; tests inject one), else this host's clock and Redis server TIME."""
        self.connection = connection
        self.clock = clock
        self.rq = rq_connection or connection
        self.keys = keys
        self._unpark = FairUnparkScript(self.rq)
        self._hold = FairHoldScript(self.rq)
        self._note_change = NoteChangeScript(connection)
        self._pause = PauseScript(connection)

    def pause(self, tenant: str) -> None:
        """From now on no job of ``tenant`` starts (jobs already running finish). Where its jobs wait in a fair
        queue rq knows, it is parked at once (for :data:`PAUSE_PARK` at most), so no pop hands one out."""
        since = self._pause(self.keys.paused(tenant), now_arg(self.clock)).run()  # the flag holds the pause's time
        self._note_change(self.keys.profile_changes(), tenant).run()  # after the write: tier caches re-read it
        queues = sorted(as_text(raw) for raw in self.rq.smembers(Queue.redis_queues_keys))
        until_ms = round(((self.clock or time.time)() + PAUSE_PARK) * 1000)
        with self.rq.pipeline(transaction=False) as pipe:
            for key in queues:  # a plain queue has no fair state: the calls change nothing there
                self._hold(self.keys.fair_queue(key), encode(tenant), until_ms, now_ms=now_arg(self.clock)).queue(pipe)
                pipe.hget(self.keys.fair_queue(key).state, TENANT_FIELD + encode(tenant))  # its org there, if any
            replies = pipe.execute()
        held = [key for key, parked in zip(queues, replies[::2], strict=True) if int(parked)]
        orgs = sorted({unquote(org) for org in map(record_org, replies[1::2]) if org and org[0] != "#"})  # not a digest
        with self.connection.pipeline(transaction=False) as pipe:  # each park's cause, for explain (the tenant's slot)
            for key in held:
                name = key.removeprefix(Queue.redis_queue_namespace_prefix)
                pipe.set(self.keys.park_cause(tenant, name), "paused", px=round(PAUSE_PARK * 1000))
            for org in orgs:  # the orgs its jobs wait under: their starts read the mirror on the org's slot
                pipe.sadd(self.keys.paused_orgs(tenant), org)  # recorded before the mirror: resume clears both
                pipe.set(self.keys.paused(tenant, org), since)
            pipe.execute()

    def resume(self, tenant: str) -> int:
        """Let ``tenant``'s jobs start again, and unpark it at once in every fair queue rq knows (``rq:queues``);
        returns in how many of them it has jobs waiting. Deferred jobs on plain queues come back when due."""
        orgs = sorted(as_text(org) for org in self.connection.smembers(self.keys.paused_orgs(tenant)))
        with self.connection.pipeline(transaction=False) as pipe:  # the flag, then its mirrors under orgs
            pipe.delete(self.keys.paused(tenant))
            for org in orgs:
                pipe.delete(self.keys.paused(tenant, org))
            if orgs:
                pipe.srem(self.keys.paused_orgs(tenant), *orgs)
            pipe.execute()
        self._note_change(self.keys.profile_changes(), tenant).run()  # after the write: tier caches re-read it
        queues = sorted(as_text(raw) for raw in self.rq.smembers(Queue.redis_queues_keys))
        if not queues:
            return 0
        with self.rq.pipeline(transaction=False) as pipe:
            for key in queues:  # a plain queue has no parked set: the call changes nothing there
                self._unpark(self.keys.fair_queue(key), encode(tenant), now_ms=now_arg(self.clock)).queue(pipe)
            return sum(self._unpark.parse(reply) for reply in pipe.execute())

    def pause_org(self, org: str, waiting: dict[str, list[str]]) -> None:
        """From now on no job of ``org``'s tenants starts (the org's flag, read by every start of its jobs:
        controls/orglimits.py); its tenants ``waiting`` (fair queue key -> tenants) are parked there at once."""
        self._pause(self.keys.org_paused(org), now_arg(self.clock)).run()
        until_ms = round(((self.clock or time.time)() + PAUSE_PARK) * 1000)
        with self.rq.pipeline(transaction=False) as pipe:
            for key, tenants in waiting.items():
                for tenant in tenants:
                    self._hold(self.keys.fair_queue(key), encode(tenant), until_ms,
                               now_ms=now_arg(self.clock)).queue(pipe)
            pipe.execute()

    def resume_org(self, org: str, waiting: dict[str, list[str]]) -> None:
        """``org``'s jobs may start again: its tenants ``waiting`` in fair queues are unparked at once (a tenant
        paused on its own stays parked: its next start is refused again)."""
        self.connection.delete(self.keys.org_paused(org))
        with self.rq.pipeline(transaction=False) as pipe:
            for key, tenants in waiting.items():
                for tenant in tenants:
                    if not self.paused(tenant):
                        self._unpark(self.keys.fair_queue(key), encode(tenant), now_ms=now_arg(self.clock)).queue(pipe)
            pipe.execute()

    def org_paused_since(self, org: str) -> datetime | None:
        """When ``org`` was paused (UTC); None when it is not."""
        return pause_time(self.connection.get(self.keys.org_paused(org)))

    def paused(self, tenant: str) -> bool:
        return bool(self.connection.exists(self.keys.paused(tenant)))

    def paused_since(self, tenant: str) -> datetime | None:
        """When ``tenant`` was paused (UTC); None when it is not, or was paused by a version that kept no time."""
        return pause_time(self.connection.get(self.keys.paused(tenant)))


class PauseCheck(StartControl):
    """The start control of pauses: refused while the tenant's flag exists."""

    piece = "start_pause"
    verdicts = (Verdict.PAUSED,)
    counter = "paused"

    def __init__(self, keys: Keys) -> None:
        self.keys = keys

    def needed(self, start: Start) -> bool:
        """Only a tenant paused as of the tier cache (a pause reaches it within its ``cache_ttl``, 5 s); any call
        that goes reads the flag itself."""
        return start.profile.paused

    def section(self, start: Start) -> Section:
        """The tenant's pause flag; for a job under an org, whose call's keys are on the org's slot, the flag's
        mirror there (written by ``pause`` under the orgs its jobs wait under), or when the tier cache already saw
        the tenant paused, that (covers an org the pause found no job under: docs/tenant-controls.md)."""
        if start.org is None:
            return [self.keys.paused(start.tenant)], []
        return ([], [1]) if start.profile.paused else ([self.keys.paused(start.tenant, start.org)], [])

    def on_refused(self, admission: Admission) -> Refusal:
        """Parked for :data:`PAUSE_PARK` at most (resume unparks it at once); snoozed on a plain queue."""
        return Refusal(self.counter, "paused", PAUSE_PARK)
