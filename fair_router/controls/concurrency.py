"""Fleet-wide per-tenant concurrency limits: the slot control of a job start (``lua/lib/start_slot.lua``) and its
leases.

A slot is a lease in Redis, so the limit holds across every worker and machine, and a SIGKILLed worker's slot expires
``lease_ttl`` after its last refresh. A job over its limit is parked (fair queue) or snoozed with jitter (plain queue),
never failed (docs/tenant-controls.md)."""

from __future__ import annotations

import calendar
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple
from urllib.parse import unquote

from redis import Redis
from redis.client import Pipeline
from rq import Queue
from rq.job import Job

from fair_router.config.sections import ConcurrencyConfig
from fair_router.controls.gate import (
    Admission,
    Lease,
    Refusal,
    Section,
    Start,
    StartControl,
    Tally,
    TenantGate,
    Verdict,
)
from fair_router.controls.orglimits import OrgPauseCheck, OrgSlot, org_parked_member
from fair_router.controls.orgs import OrgProfile
from fair_router.controls.pauses import PauseCheck
from fair_router.controls.ratelimit import RateLimiter
from fair_router.controls.tiers import TierBook
from fair_router.core.jobmeta import META_HELD
from fair_router.core.keys import Keys
from fair_router.core.text import as_text
from fair_router.store.cluster import is_rq_slot_client
from fair_router.store.luascript import Call, LuaScript
from fair_router.store.oom import execute_riding_oom
from fair_router.store.scripts import Clock

logger = logging.getLogger("fair_router")

Wake = Callable[[list[str], Pipeline], None]
"""Queues the unparks of a released slot's tenant in the fair queues named."""


class ConcurrencySlot(StartControl):
    """The start control of the tenant's concurrency limit: one lease per running job."""

    piece = "start_slot"
    verdicts = (Verdict.AT_LIMIT,)
    counter = "refused"

    def __init__(self, keys: Keys, config: ConcurrencyConfig) -> None:
        self.keys = keys
        self.config = config
        self.lease_ms = max(1, round(config.lease_ttl * 1000))

    def needed(self, start: Start) -> bool:
        """Always: with limits on, every start takes (or refreshes) a slot."""
        return True

    def section(self, start: Start) -> Section:
        """The tenant's leases; its limit (override, else tier) and the lease's life."""
        return ([self.keys.leases(start.tenant, start.org), self.keys.parked_in(start.tenant, start.org)],
                [start.profile.limit, self.lease_ms, start.fair_queue])

    def on_refused(self, admission: Admission) -> Refusal:
        """Parked until a slot frees (at most a lease's life: ``at_ms``); snoozed on a plain queue."""
        seconds = self.config.lease_ttl
        if admission.at_ms:
            seconds = min(seconds, max(0.001, (admission.at_ms - admission.now_ms) / 1000))
        return Refusal(self.counter, "at its limit", seconds, until_release=True)


class Released(NamedTuple):
    """What release.lua did: whether the job held a slot, the fair queues where its tenant was parked, and (a job
    under an org with a limit) ``(tenant, queue)`` where the org's limit parked its tenants."""

    removed: bool
    parked_in: list[str]
    org_parked: list[tuple[str, str]]


class ReleaseScript(LuaScript[Released]):
    """release.lua: give a job's slot back and take the fair queues its tenant waits in for a slot."""

    name = "release"

    def __call__(self, leases: str, parked_in: str, job_id: str, org: tuple[str, str] | None = None) -> Call[Released]:
        """KEYS = [the tenant's leases, its parked-in set] (:meth:`Keys.leases`, :meth:`Keys.parked_in`), then for
        a job under an org the org's (:meth:`Keys.org_leases`, :meth:`Keys.org_parked_in`): one tag."""
        return self.call([leases, parked_in, *(org or ())], [job_id])

    def parse(self, reply: Any) -> Released:
        removed, count, *names = reply
        texts = [as_text(name) for name in names]
        mine, org = texts[:int(count)], texts[int(count):]
        pairs = [(unquote(tenant), queue) for tenant, _, queue in (member.partition("|") for member in org)]
        return Released(int(removed) > 0, mine, pairs)


class ConcurrencySlots:
    """acquire / release / keep_alive / snooze of per-tenant concurrency slots."""

    def __init__(self, connection: Redis, keys: Keys, tiers: TierBook, config: ConcurrencyConfig, tally: Tally,
                 clock: Clock | None = None, rng: random.Random | None = None) -> None:
        """``tally``: where the counts go (the workers' :class:`~fair_router.workers.limiter.ConcurrencyLimiter`)."""
        self.connection, self.keys, self.tiers, self.config, self.clock = connection, keys, tiers, config, clock
        self.tally = tally
        self._rng = rng or random.Random()
        self.pause, self.slot = PauseCheck(keys), ConcurrencySlot(keys, config)
        self.org_controls = (OrgPauseCheck(keys), OrgSlot(keys, config))
        self.org_profile: Callable[[str], OrgProfile] | None = None  # set by the worker's build (settings orgs)
        # unparks (tenant, fair queue) pairs an org's release took (workers/unparking.py sets it)
        self.wake_org: Callable[[list[tuple[str, str]], Pipeline, str | None], None] | None = None
        # a slot's own checks (the lease refresh): pause, slot, and a reserved start's early return
        self._checks = TenantGate(self, RateLimiter(keys), slots=True)
        self._release = ReleaseScript(connection)
        self._held: dict[str, Lease] = {}
        self._refresher: threading.Thread | None = None
        self._lock, self._flushing = threading.RLock(), threading.Lock()  # _flushing: one flush at a time

    def acquire(
        self, tenant: str, job_id: str, pipeline: Pipeline | None = None, refresh: bool = False,
        org: str | None = None,
    ) -> Lease | None:
        """Take a slot for ``job_id`` (idempotent); None when the tenant is at its limit (or paused). ``pipeline``: ride
        its round trip; ``refresh``: the job already runs in this slot; ``org``: the job's organisation (its slot
        too)."""
        profile = self.tiers.profile(tenant, org)
        org_profile = None if org is None or self.org_profile is None else self.org_profile(org)
        start = Start(tenant, job_id, profile, refresh=refresh, org=org, org_profile=org_profile)
        admitted = self._checks.run(start, pipeline).admitted
        return Lease(tenant, profile.tier, job_id, org) if admitted else None

    def release(self, lease: Lease, also: Callable[[Pipeline], None] | None = None, wake: Wake | None = None) -> None:
        """Give the slot back (idempotent), with pending counters and ``also``'s writes in the same round trip. ``wake``
        is called with the fair queues where the tenant was parked waiting for a release."""
        self._drop(lease, "released", also, wake)

    def reclaim(self, tenant: str, job_id: str, also: Callable[[Pipeline], None] | None = None,
                wake: Wake | None = None, org: str | None = None) -> bool:
        """Free a dead worker's job's slot now rather than at lease expiry; True if it still held one."""
        return self._drop(Lease(tenant, self.tiers.tier(tenant, org), job_id, org), "reclaimed", also, wake)

    def _drop(self, lease: Lease, counter: str, also: Callable[[Pipeline], None] | None, wake: Wake | None) -> bool:
        with self.connection.pipeline(transaction=False) as pipe:
            place = len(pipe)
            org = None if lease.org is None else (self.keys.org_leases(lease.org), self.keys.org_parked_in(lease.org))
            self._release(self.keys.leases(lease.tenant, lease.org), self.keys.parked_in(lease.tenant, lease.org),
                          lease.job_id, org).queue_loaded(pipe)  # EVALSHA: resent after NOSCRIPT below
            self.tally.queue(pipe)
            if also is not None:
                also(pipe)
            # a Redis out of memory still takes the release (it only frees memory); the rest is sent again
            released = self._release.parse(execute_riding_oom(pipe, self.connection)[place])
        self.tally.add(lease.tier, counter, int(released.removed))  # with the next round trip (or flush())
        if (released.parked_in or released.org_parked) and wake is not None:
            with self.connection.pipeline(transaction=False) as pipe:
                wake(released.parked_in, pipe)
                if released.org_parked and self.wake_org is not None:
                    self.wake_org(released.org_parked, pipe, lease.org)
                if len(pipe):
                    pipe.execute()
        return released.removed

    def parked_in(self, tenant: str, queue: str, also: Callable[[Pipeline], None] | None = None,
                  org: str | None = None, org_release: bool = False) -> bool:
        """Whether ``queue`` is still recorded as a fair queue where ``tenant`` waits for a release (``org_release``:
        of its org ``org``): False after a refused start means a release came first, and the caller unparks it
        itself. ``also``: more writes."""
        with self.connection.pipeline(transaction=False) as pipe:
            self.tally.queue(pipe)
            if also is not None:
                also(pipe)
            place = len(pipe)
            if org_release and org is not None:
                pipe.sismember(self.keys.org_parked_in(org), org_parked_member(tenant, queue))
            else:
                pipe.sismember(self.keys.parked_in(tenant, org), queue)
            return bool(pipe.execute()[place])

    def snooze(self, job: Job, queue: Queue, lease_tier: str, held: str = "") -> datetime:
        """Reschedule ``job`` to its own queue after snooze + U(0, jitter); not a failure (``held``: :meth:`defer`)."""
        delay = self.config.snooze + self._rng.uniform(0, self.config.jitter)
        when = datetime.now(timezone.utc) + timedelta(seconds=delay)
        self.tally.add(lease_tier, "snoozed")
        self.defer(job, queue, when, held)
        return when

    def defer(self, job: Job, queue: Queue, when: datetime, held: str = "") -> None:
        """Put ``job`` in its queue's ScheduledJobRegistry for ``when``, with pending counters. ``held``: the control
        that turned its start away, recorded in its meta (:data:`META_HELD`) by the job save rq's scheduling makes."""
        if held:
            job.meta[META_HELD] = {"reason": held, "until": calendar.timegm(when.utctimetuple())}
        with job.connection.pipeline() as pipe:
            pipe.lrem(queue.intermediate_queue_key, 1, job.id)  # rq parks single-queue fetches there
            queue.schedule_job(job, when, pipeline=pipe)
            if not is_rq_slot_client(job.connection):  # on a cluster the counters are on another slot
                self.tally.queue(pipe)
            pipe.execute()

    @contextmanager
    def keep_alive(self, lease: Lease, also: Callable[[Pipeline], None] | None = None,
                   wake: Wake | None = None) -> Iterator[None]:
        """Refresh the lease (every lease_ttl / 3) while the block runs, then release it however the block ends; one
        refresher thread per limiter serves every lease."""
        with self._lock:
            self._held[lease.job_id] = lease
            if self._refresher is None:
                self._refresher = threading.Thread(target=self._refresh_forever, name="fair-router-leases",
                                                   daemon=True)
                self._refresher.start()
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(lease.job_id, None)
            self.release(lease, also, wake)

    def _refresh_forever(self) -> None:
        """Extend every held lease each lease_ttl / 3, and write the counts of slots taken and released that no round
        trip took since (a worker gone idle); a lost slot is logged, a Redis blip retried."""
        while True:
            time.sleep(self.config.lease_ttl / 3)
            try:
                self.flush(due=True)
            except Exception:
                logger.exception("writing the slot counters failed")
            with self._lock:
                held = list(self._held.values())
            for lease in held:
                try:
                    with self._lock:  # still held? (else a refresh would re-take a just-released slot)
                        if lease.job_id not in self._held:
                            continue
                        kept = self.acquire(lease.tenant, lease.job_id, refresh=True, org=lease.org)
                    if kept is None:
                        logger.warning("job %s lost its %s slot (lease expired and was taken)",
                                       lease.job_id, lease.tenant)
                except Exception:
                    logger.exception("refreshing the lease of job %s failed", lease.job_id)

    def flush(self, due: bool = False, also: Callable[[Pipeline], None] | None = None) -> None:
        """Write pending counts now (the worker's stop waits for the refresher's in flight), with ``also``'s writes;
        ``due``: only those due."""
        with self._flushing, self.connection.pipeline(transaction=False) as pipe:
            if also is not None:
                also(pipe)
            if self.tally.queue(pipe, force=not due) or len(pipe):
                execute_riding_oom(pipe, self.connection)

