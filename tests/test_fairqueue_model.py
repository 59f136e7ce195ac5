"""Model-based test: a FairQueue on a real redis-server, driven by random fair pushes, pops, parks and
unparks interleaved with rq's own calls on the same queue (plain pushes, unique pushes, Job.cancel,
Job.delete, plain Queue.remove, CanceledJobRegistry.requeue, compact after an expired job), agrees with a
plain-Python model of its semantics (docs/fair-queue.md, "How it works"):
- ``count`` and rq's own ``Queue.count`` are the waiting jobs at every step, and the listing is that set;
- every pop serves exactly the model's choice: the list head when rq pushed it, else the stride choice;
- the listing's head is what the next pop serves, and each tenant's jobs are listed in FIFO order;
- no job is served twice, after its removal, or left stranded.

The second model (``StartPathMachine``) is the whole start path, driven the way a weighted worker drives it
(workers/weighted.py), on two fair queues and three workers, against a reference model of what it must do
(the issue's spec). A worker asks for work (``FairQueue.dequeue_any`` over its queues: lua/fair_pop.lua, which
claims and parks at claim time), starts the job it got (``TenantGate.checks`` + ``acquire``: pause, slot and
rate in one script; a paced tenant's report, ``FairQueue.hold``; a refusal, ``turn_away``, which parks),
finishes it (the lease's release with the unparks of ``_slot_freed``; settle where a queue charges run time)
or dies holding its slot (the lease expires a lease TTL after its last refresh). Between steps: pauses and
resumes, tier changes (limit and rate) and the clock, injected into every script (rate tokens come; live jobs'
leases are refreshed every third of their TTL, as the refresher thread does; dead ones expire). Checked after
every step:
- every start's verdict is the model's (paused, at its limit, over its rate until the model's next token, or
  admitted with the model's next start): no tenant runs over its limit or its rate (both also checked
  directly: unexpired leases, and the GCRA bound on each tenant's start times);
- every slot (unexpired lease) is held by a live job, or by a dead worker's job until its lease expires;
- work conservation: when a worker asks for work, no tenant waiting in a queue it looked at is parked there
  while it could start (not paused, below its limit counting its jobs in hand, its rate allowing one more);
- share: tenants that could start at every pop of a queue since some pop are served there in proportion to
  their weights: their weighted service differs by at most one step of each (the stride schedule's bound)."""

from __future__ import annotations

import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import fair_jobs
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from redis import Redis
from rq import Queue
from rq.job import Job
from rq.registry import CanceledJobRegistry

from fair_router import FairQueue, Settings
from fair_router.config.settings import ConcurrencyConfig, TiersConfig
from fair_router.controls.admin import TenantAdmin
from fair_router.controls.concurrency import Lease
from fair_router.controls.gate import TenantGate, Verdict
from fair_router.controls.ratelimit import RateLimiter
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys, encode
from fair_router.core.profiles import TenantOverrides
from fair_router.demo.redis_server import RedisServer
from fair_router.rq_internals.queue import PopKind
from fair_router.workers.limiter import ConcurrencyLimiter
from fair_router.workers.start_gate import turn_away

PREFIX = "fq_model"
NAME = "default"
# Weights 1, 2 and 4 through tier_resolvers.by_name: strides 1, 1/2, 1/4 are exact in floats, so the
# model's passes equal the scripts' and ties (the head entry's tenant first, else by tenant name in the sorted set)
# are real ties.
TIERS = TiersConfig(resolver="tier_resolvers:by_name", weights={"pro": 2, "enterprise": 4})
WEIGHT: dict[str | None, float] = {None: 1.0, "a": 1.0, "pro-b": 2.0, "ent-c": 4.0}  # None: jobs without one
TENANTS = ("a", "pro-b", "ent-c")  # the ones a worker can park (it parks only jobs with a tenant)
PARK_SECONDS = 600  # no park ends by itself while an example runs: only unpark (or emptying) ends one


class FairQueueMachine(RuleBasedStateMachine):
    def __init__(self, url: str) -> None:
        super().__init__()
        self.conn = Redis.from_url(url)
        self.conn.flushdb()
        self.queue = FairQueue(NAME, connection=self.conn, prefix=PREFIX, tiers=TIERS)
        self.plain_queue = Queue(NAME, connection=self.conn)  # what rq's internals build on the same list
        self.jobs: dict[str, Job] = {}
        self.tenant_of: dict[str, str | None] = {}
        # The model. rq's list, head first; each tenant's FIFO of members, where a member rq took off the
        # list behind our back stays (stale) until the scheduler meets it.
        self.listed: list[str] = []
        self.fifo: dict[str | None, deque[str]] = {tenant: deque() for tenant in WEIGHT}
        self.stale: set[str] = set()
        self.parked: set[str | None] = set()
        # The stride scheduler: pass of each active tenant (members, not parked), pass kept by tenants that
        # went idle or were parked, virtual time (pass of the last served tenant).
        self.active: dict[str | None, float] = {}
        self.kept: dict[str | None, float] = {}
        self.vtime = 0.0
        self.in_hand: tuple[str, bool] | None = None  # the job the last pop returned, and whether fair
        self.served: set[str] = set()  # popped and not put back
        self.gone: set[str] = set()  # removed or deleted: never to be served
        self.canceled: set[str] = set()

    # -- the model ------------------------------------------------------------------------------------

    def is_member(self, job_id: str) -> bool:
        return job_id in self.fifo[self.tenant_of[job_id]]

    def activate(self, tenant: str | None) -> None:
        if tenant not in self.active:
            self.active[tenant] = max(self.vtime, self.kept.pop(tenant, self.vtime))

    def leave(self, job_id: str) -> None:
        """A member leaves its FIFO other than by a fair pop; its tenant goes idle if it was the last."""
        tenant = self.tenant_of[job_id]
        self.fifo[tenant].remove(job_id)
        self.stale.discard(job_id)
        if not self.fifo[tenant]:
            if tenant in self.active:
                self.kept[tenant] = self.active.pop(tenant)
            self.parked.discard(tenant)

    def expected_pop(self, given: str | None) -> tuple[PopKind, str | None]:
        """What fair_pop.lua must do, applied to the model."""
        entry = given if given is not None else (self.listed.pop(0) if self.listed else None)
        if entry is None:  # nothing listed: every member left is stale, dropped with its tenant's pass kept
            for tenant in WEIGHT:
                if self.fifo[tenant]:
                    self.fifo[tenant].clear()
                    if tenant in self.active:
                        self.kept[tenant] = self.active.pop(tenant)
                    self.parked.discard(tenant)
            self.stale.clear()
            return PopKind.EMPTY, None
        if not self.is_member(entry):
            return PopKind.PLAIN, entry
        # Tenants tied on the minimum pass: the entry's own tenant first when the entry is its oldest member
        # (stale ones count: the rule is decided before any is dropped). Else the lowest pass, then by name.
        own = self.tenant_of[entry]
        if own in self.active and self.active[own] == min(self.active.values()) and self.fifo[own][0] == entry:
            return self.serve(own), entry
        while True:
            if not self.active:
                members = sum(len(jobs) for jobs in self.fifo.values())
                if len(self.listed) + 1 > members:  # a plain entry further down: the head takes its slot
                    index = next(i for i, job_id in enumerate(self.listed) if not self.is_member(job_id))
                    plain, self.listed[index] = self.listed[index], entry
                    return PopKind.PLAIN, plain
                self.listed.insert(0, entry)
                return PopKind.STALLED, None
            tenant = min(self.active, key=lambda t: (self.active[t], FairQueue.tenant_key(t)))
            job_id = self.fifo[tenant][0]
            if job_id in self.stale:
                self.leave(job_id)
                continue
            if job_id != entry:  # the head entry takes the chosen job's slot
                self.listed[self.listed.index(job_id)] = entry
            return self.serve(tenant), job_id

    def serve(self, tenant: str | None) -> PopKind:
        """The stride scheduler serves ``tenant``'s oldest member: its pass advances by 1 / weight."""
        self.fifo[tenant].popleft()
        self.vtime = self.active[tenant]
        next_pass = self.vtime + 1 / WEIGHT[tenant]
        if self.fifo[tenant]:
            self.active[tenant] = next_pass
        else:  # idle: keeps its pass for its return
            del self.active[tenant]
            self.kept[tenant] = next_pass
        return PopKind.FAIR

    def check_pop(self, given: str | None, listing: list[str]) -> None:
        result = self.queue.pop_fair(given or "")
        kind, job_id = self.expected_pop(given)
        assert (result.kind, result.job_id) == (kind, job_id), (result, kind, job_id)
        self.in_hand = None
        if job_id is None:
            return
        assert job_id not in self.served, f"{job_id} popped twice"
        assert job_id not in self.gone, f"{job_id} popped after its removal"
        if given is None:
            assert listing and listing[0] == job_id, "the listing's head is what the next pop serves"
        self.served.add(job_id)
        self.in_hand = (job_id, kind == PopKind.FAIR)

    def waiting_live(self) -> list[str]:
        return list(self.listed)

    # -- our operations -------------------------------------------------------------------------------

    def push_member(self, job: Job, tenant: str | None) -> None:
        self.jobs[job.id], self.tenant_of[job.id] = job, tenant
        self.listed.append(job.id)
        self.fifo[tenant].append(job.id)
        if tenant not in self.parked:
            self.activate(tenant)

    @rule(tenant=st.sampled_from(tuple(WEIGHT)))
    def enqueue(self, tenant: str | None) -> None:
        self.push_member(self.queue.enqueue(fair_jobs.log, tenant, len(self.jobs), fair_tenant=tenant), tenant)

    @rule(tenant=st.sampled_from(TENANTS))
    def enqueue_unique(self, tenant: str) -> None:
        """rq's own script pushes the id; the job then joins its tenant's FIFO."""
        job = self.queue.enqueue(fair_jobs.log, tenant, len(self.jobs), fair_tenant=tenant,
                                 job_id=f"unique-{len(self.jobs)}", unique=True)
        self.push_member(job, tenant)

    @rule()
    def pop(self) -> None:
        self.check_pop(None, self.queue.get_job_ids())

    @rule()
    def pop_given(self) -> None:
        """A blocked worker's path: BLPOP took the list head (LPOP here: no wait), the script gets it."""
        entry = self.conn.lpop(self.queue.key)
        if entry is not None:  # else the worker would still be blocked: nothing happens
            assert self.listed and entry.decode() == self.listed[0]
            self.listed.pop(0)
            self.check_pop(entry.decode(), [])

    @precondition(lambda self: self.in_hand is not None and self.tenant_of[self.in_hand[0]] is not None)
    @rule()
    def park(self) -> None:
        """The job just popped is refused a concurrency slot: back to its tenant's front, tenant parked."""
        assert self.in_hand is not None
        job_id, fair = self.in_hand
        tenant = self.tenant_of[job_id]
        assert tenant is not None
        self.in_hand = None
        self.queue.park(self.jobs[job_id], tenant, PARK_SECONDS)
        step = 1 / WEIGHT[tenant] if fair else 0  # a fair pop's step is taken back: no turn lost
        if tenant in self.active:
            self.kept[tenant] = self.active.pop(tenant) - step
        elif fair:  # the pop took its last job: the pass it went idle with
            self.kept[tenant] -= step
        self.parked.add(tenant)
        self.fifo[tenant].appendleft(job_id)
        self.listed.insert(0, job_id)
        self.served.discard(job_id)  # a plain entry's job, too, now waits in its tenant's FIFO

    @rule(tenant=st.sampled_from(TENANTS))
    def unpark(self, tenant: str) -> None:
        self.queue.unpark(tenant)
        if tenant in self.parked:
            self.parked.discard(tenant)
            self.activate(tenant)

    @precondition(lambda self: bool(self.listed))
    @rule(pick=st.integers(0, 1000))
    def remove(self, pick: int) -> None:
        job_id = self.listed[pick % len(self.listed)]
        assert self.queue.remove(job_id) == 1
        self.forget(job_id)
        if self.is_member(job_id):
            self.leave(job_id)

    # -- rq's operations on the same list -------------------------------------------------------------

    def forget(self, job_id: str) -> None:
        self.listed.remove(job_id)
        self.gone.add(job_id)

    @rule(tenant=st.sampled_from((None, *TENANTS)))
    def enqueue_plain(self, tenant: str | None) -> None:
        """A plain push (rq's scheduler, dependents of another queue class): served as a list entry."""
        meta = None if tenant is None else {"fair_tenant": tenant}
        job = self.plain_queue.enqueue(fair_jobs.log, "plain", len(self.jobs), meta=meta)
        self.jobs[job.id], self.tenant_of[job.id] = job, tenant
        self.listed.append(job.id)

    @precondition(lambda self: bool(self.listed))
    @rule(pick=st.integers(0, 1000), how=st.sampled_from(("cancel", "delete", "remove")))
    def rq_takes_out(self, pick: int, how: str) -> None:
        """Job.cancel / Job.delete / a plain Queue.remove: rq LREMs the id through a plain Queue."""
        job_id = self.listed[pick % len(self.listed)]
        job = self.jobs[job_id]
        if how == "cancel":
            job.cancel()
            self.canceled.add(job_id)
        elif how == "delete":
            job.delete()
        else:
            self.plain_queue.remove(job_id)
        self.forget(job_id)
        if self.is_member(job_id):
            self.stale.add(job_id)

    @precondition(lambda self: bool(self.canceled))
    @rule(pick=st.integers(0, 1000))
    def rq_requeues_canceled(self, pick: int) -> None:
        """CanceledJobRegistry.requeue: a plain push of the same id. Still a (stale) member, it is live again."""
        job_id = sorted(self.canceled)[pick % len(self.canceled)]
        self.canceled.discard(job_id)
        CanceledJobRegistry(NAME, connection=self.conn).requeue(job_id)
        self.gone.discard(job_id)
        self.served.discard(job_id)
        self.listed.append(job_id)
        self.stale.discard(job_id)

    @precondition(lambda self: bool(self.listed))
    @rule(pick=st.integers(0, 1000))
    def job_expires_then_compact(self, pick: int) -> None:
        """A waiting job's hash expired; rq's compact (ours) takes its id out."""
        job_id = self.listed[pick % len(self.listed)]
        self.conn.delete(self.jobs[job_id].key)
        self.queue.compact()
        self.forget(job_id)
        if self.is_member(job_id):
            self.leave(job_id)

    # -- invariants -----------------------------------------------------------------------------------

    @invariant()
    def counts_and_listing_are_the_waiting_jobs(self) -> None:
        assert self.queue.count == self.plain_queue.count == len(self.listed), (self.queue.count, self.listed)
        ids = self.queue.get_job_ids()
        assert sorted(ids) == sorted(self.listed), (ids, self.listed)
        for tenant in WEIGHT:  # each tenant's live members in FIFO order
            live = [job_id for job_id in self.fifo[tenant] if job_id not in self.stale]
            assert [job_id for job_id in ids if job_id in live] == live

    @invariant()
    def inflight_is_the_job_in_hand(self) -> None:
        """Each pop acknowledges the previous one; a park takes its job back."""
        inflight = [raw.decode() for raw in self.conn.zrange(self.queue.fair_keys.inflight, 0, -1)]
        assert inflight == ([] if self.in_hand is None else [self.in_hand[0]])

    def teardown(self) -> None:
        try:
            if sys.exc_info()[0] is None:  # not while a failing step unwinds: its error is the report
                self.drain()
        finally:
            self.conn.close()

    def drain(self) -> None:
        """Every park ends; then pops serve each waiting job exactly once, in the model's order."""
        for tenant in TENANTS:
            self.unpark(tenant)
        listing = self.queue.get_job_ids()
        served = []
        while self.listed:
            self.check_pop(None, listing[len(served):])
            assert self.in_hand is not None, f"stranded: {self.listed}"
            served.append(self.in_hand[0])
        assert served == listing, "with no parks, the listing is the serving order"
        self.check_pop(None, [])
        assert self.queue.count == 0 and self.queue.get_job_ids() == []


def test_fair_queue_agrees_with_its_model(redis_server: RedisServer) -> None:
    run_state_machine_as_test(
        lambda: FairQueueMachine(redis_server.url),
        settings=settings(max_examples=80, stateful_step_count=50, deadline=None),
    )


# == Organisations: the listing replays the two-level pop =================================================

ORG_OF: dict[str | None, str | None] = {"a1": "A", "pro-a2": "A", "ent-a3": "A", "b1": "B", "pro-b2": "B",
                                       "c": None, "pro-d": None, None: None}
ORG_WEIGHTS = {"A": {"weight": 1}, "B": {"weight": 3}}


class OrgListingMachine(RuleBasedStateMachine):
    """Tenants in two weighted orgs beside tenants without org, pushed, popped (LPOP or given), parked, unparked and
    taken out behind the queue's back (stale members) at random: every pop serves the listing's head, and once every
    park ended the listing is the serving order job for job (fairqueue/serving_order.py against lua/fair_pop.lua)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.conn = Redis.from_url(url)
        self.conn.flushdb()
        self.queue = FairQueue(NAME, connection=self.conn,
                               settings=Settings(prefix=PREFIX, tiers=TIERS, orgs=ORG_WEIGHTS))
        self.jobs: dict[str, Job] = {}
        self.listed: list[str] = []
        self.in_hand: str | None = None

    @rule(tenant=st.sampled_from(tuple(ORG_OF)), n=st.integers(1, 3))
    def enqueue(self, tenant: str | None, n: int) -> None:
        for _ in range(n):
            job = self.queue.enqueue(fair_jobs.log, tenant, len(self.jobs), fair_tenant=tenant,
                                     fair_org=ORG_OF[tenant])
            self.jobs[job.id] = job
            self.listed.append(job.id)

    def check_pop(self, given: str, listing: list[str]) -> None:
        result = self.queue.pop_fair(given)
        self.in_hand = result.job_id
        if result.job_id is None:  # only parked tenants' jobs wait (a given entry went back)
            return
        if not given:
            assert listing[0] == result.job_id, (listing, result)
        self.listed.remove(result.job_id)  # a given entry not served takes the served job's place

    @rule()
    def pop(self) -> None:
        self.check_pop("", self.queue.get_job_ids())

    @rule()
    def pop_given(self) -> None:
        entry = self.conn.lpop(self.queue.key)
        if entry is not None:
            self.check_pop(entry.decode(), [])

    @precondition(lambda self: self.in_hand is not None and self.jobs[self.in_hand].meta.get("fair_tenant"))
    @rule()
    def park(self) -> None:
        assert self.in_hand is not None
        job = self.jobs[self.in_hand]
        self.queue.park(job, job.meta["fair_tenant"], PARK_SECONDS)
        self.listed.insert(0, job.id)
        self.in_hand = None

    @rule(tenant=st.sampled_from(tuple(t for t in ORG_OF if t)))
    def unpark(self, tenant: str) -> None:
        self.queue.unpark(tenant)

    @precondition(lambda self: bool(self.listed))
    @rule(pick=st.integers(0, 1000), how=st.sampled_from(("ours", "delete", "rq")))
    def take_out(self, pick: int, how: str) -> None:
        """FairQueue.remove, or behind its back (Job.delete, a plain Queue.remove): a stale member."""
        job_id = self.listed.pop(pick % len(self.listed))
        if how == "ours":
            assert self.queue.remove(job_id) == 1
        elif how == "delete":
            self.jobs[job_id].delete()
        else:
            Queue(NAME, connection=self.conn).remove(job_id)

    @invariant()
    def the_listing_is_the_waiting_jobs(self) -> None:
        assert sorted(self.queue.get_job_ids()) == sorted(self.listed)

    def teardown(self) -> None:
        try:
            if sys.exc_info()[0] is None:
                for tenant in ORG_OF:
                    if tenant:
                        self.unpark(tenant)
                listing, served = self.queue.get_job_ids(), []
                while self.listed:
                    self.check_pop("", listing[len(served):])
                    assert self.in_hand is not None, f"stranded: {self.listed}"
                    served.append(self.in_hand)
                assert served == listing, "with no parks, the listing is the serving order"
        finally:
            self.conn.close()


def test_the_listing_replays_the_two_level_pop(redis_server: RedisServer) -> None:
    run_state_machine_as_test(
        lambda: OrgListingMachine(redis_server.url),
        settings=settings(max_examples=80, stateful_step_count=50, deadline=None),
    )


# == The start path ======================================================================================

BUG_A_FIXED = True
"""Bug (a), fixed: a released slot unparked its tenant only in the releasing worker's own fair queues, so a
tenant parked in another fair queue waited out the lease TTL. The main test now splits the queues between
workers (while it was open, every worker had both, so a release reached every queue)."""

BUG_B_FIXED = False
"""Known bug (b): a paced tenant (a rate of its own) is parked after each take for up to 2 s (PACED_WAIT_MS,
lua/lib/claims.lua) until its start's report, and may come back later than its next token. While False the
main test does not check work conservation for a tenant paced in that queue (a rate-admitted start from it in
the last PACED_FOR_MS), and ``test_a_paced_tenant_is_parked_only_until_its_next_token`` is expected to fail.
Set True once the fix lands."""

START_PREFIX = "start_model"
START_KEYS = Keys(START_PREFIX)
LEASE_MS = 3000  # concurrency.lease_ttl; also the life of a fair queue's claim
REFRESH_MS = LEASE_MS // 3  # the lease refresher's period (ConcurrencySlots._refresh_forever)
PACED_FOR_MS = 60_000  # lua/lib/claims.lua: a tenant stays paced in a queue this long after its last report
T0_MS = 1_800_000_000_000  # the injected clock's start (epoch ms)
# Tiers: the concurrency limit (four: never reached by the three workers), and a rate of 2/s (a token every
# 500 ms) with a burst of 1 or 2.
START_TIERS = TiersConfig(default="one", priority=[],
                          concurrency={"one": 1, "two": 2, "many": 4, "paced": 3, "bursty": 3},
                          rate={"paced": "2/s", "bursty": "2/s"}, burst={"bursty": 2})
RATE_MS = {"paced": 500, "bursty": 500}
TOLERANCE_MS = {"paced": 0, "bursty": 500}  # (burst - 1) * interval
START_WEIGHTS = {"a": 1.0, "b": 2.0, "c": 1.0}  # per-tenant overrides: a tier change leaves them
FIRST_TIERS = {"a": "one", "b": "two", "c": "paced"}
START_QUEUES = ("qa", "qb")
SHARED = (("qa", "qb"), ("qb", "qa"), ("qa", "qb"))  # each worker's queues, in its fetch order
SPLIT = (("qa",), ("qb",), ("qa", "qb"))  # a release by worker 0 or 1 reaches one queue only


@dataclass
class SimWorker:
    """One weighted worker's parts (its own fair queue objects and gate, as a process has) and what it holds."""

    queues: list[FairQueue]
    gate: TenantGate
    popped: tuple[Job, FairQueue] | None = None  # a job its fetch returned, not yet started
    running: tuple[Job, FairQueue, Lease | None] | None = None  # a started job, and its slot


@dataclass
class Scenario:
    """Which workers serve which queues, and which conservation violations are asserted."""

    layout: tuple[tuple[str, ...], ...] = SHARED
    conserve_paced: bool = BUG_B_FIXED
    tiers: tuple[str, ...] = tuple(START_TIERS.concurrency)  # the tiers tenants start on and change to
    skip: frozenset[str] = frozenset()  # steps left out, to aim the search at one property
    batch: int = 1  # jobs an enqueue step pushes, times its n: backlogs long enough for shares to show


@dataclass
class StartModel:
    """What the start path must do: each tenant's waiting jobs, jobs in hand, slots, GCRA state and service."""

    tier: dict[str, str]
    now_ms: int = T0_MS
    paused: set[str] = field(default_factory=set)
    waiting: dict[str, dict[str, list[str]]] = field(
        default_factory=lambda: {q: {t: [] for t in START_WEIGHTS} for q in START_QUEUES})
    in_hand: dict[str, str] = field(default_factory=dict)  # job id -> tenant: popped, not yet started or refused
    leases: dict[str, dict[str, int]] = field(default_factory=lambda: {t: {} for t in START_WEIGHTS})
    tat: dict[str, int] = field(default_factory=lambda: dict.fromkeys(START_WEIGHTS, 0))
    starts: dict[str, list[int]] = field(default_factory=lambda: {t: [] for t in START_WEIGHTS})  # this rate's
    paced: dict[tuple[str, str], int] = field(default_factory=dict)  # (queue, tenant) -> last paced start there
    served: dict[str, dict[str, int]] = field(
        default_factory=lambda: {q: dict.fromkeys(START_WEIGHTS, 0) for q in START_QUEUES})
    streak: dict[str, dict[str, tuple[int, dict[str, int]]]] = field(
        default_factory=lambda: {q: {} for q in START_QUEUES})  # queue -> tenant -> (since pop #, served then)
    pops: int = 0

    def limit(self, tenant: str) -> int:
        return START_TIERS.limit(self.tier[tenant])

    def live(self, tenant: str) -> dict[str, int]:
        """The tenant's slots: unexpired leases (live jobs', and dead workers' until they expire)."""
        return {job: until for job, until in self.leases[tenant].items() if until > self.now_ms}

    def could_start(self, tenant: str) -> bool:
        """A job of ``tenant`` popped now would be admitted once its jobs in hand have started."""
        holding = sum(1 for owner in self.in_hand.values() if owner == tenant)
        if tenant in self.paused or len(self.live(tenant)) + holding >= self.limit(tenant):
            return False
        tier = self.tier[tenant]
        if tier not in RATE_MS:
            return True
        return self.schedule(tenant) + holding * RATE_MS[tier] - TOLERANCE_MS[tier] <= self.now_ms

    def schedule(self, tenant: str) -> int:
        """The tenant's theoretical arrival time as its next start sees it: GCRA's, except that a start late for its
        token by less than an interval keeps the schedule (the TAT stays in the past); T late or more, a new
        schedule begins now (lua/lib/start_rate.lua)."""
        tat = self.tat[tenant]
        return self.now_ms if tat <= self.now_ms - RATE_MS[self.tier[tenant]] else tat

    def verdict(self, tenant: str, job_id: str) -> tuple[Verdict, int]:
        """The start's verdict and its time (RATE: the next token; GRANTED: the next start, 0 = now); applied."""
        self.leases[tenant] = self.live(tenant)  # expired leases are dropped (reclaimed)
        if tenant in self.paused:
            return Verdict.PAUSED, 0
        if len(self.leases[tenant]) >= self.limit(tenant):
            return Verdict.AT_LIMIT, min(self.leases[tenant].values())  # when its first slot comes back
        tier = self.tier[tenant]
        next_ms = 0
        if tier in RATE_MS:
            first = self.schedule(tenant)
            if first - TOLERANCE_MS[tier] > self.now_ms:
                return Verdict.RATE, first - TOLERANCE_MS[tier]
            self.tat[tenant] = first + RATE_MS[tier]
            if self.tat[tenant] - TOLERANCE_MS[tier] > self.now_ms:
                next_ms = self.tat[tenant] - TOLERANCE_MS[tier]
            self.starts[tenant].append(self.now_ms)
        self.leases[tenant][job_id] = self.now_ms + LEASE_MS
        return Verdict.GRANTED, next_ms


class StartPathMachine(RuleBasedStateMachine):
    def __init__(self, url: str, scenario: Scenario) -> None:
        super().__init__()
        self.conn = Redis.from_url(url)
        self.conn.flushdb()
        self.scenario = scenario
        first = {tenant: FIRST_TIERS[tenant] if FIRST_TIERS[tenant] in scenario.tiers else scenario.tiers[0]
                 for tenant in START_WEIGHTS}
        self.model = StartModel(first)
        self.settings = Settings(prefix=START_PREFIX, tiers=START_TIERS,
                                 concurrency=ConcurrencyConfig(enabled=True, lease_ttl=LEASE_MS / 1000))
        self.admin = TierBook(self.conn, START_KEYS, START_TIERS, cache_ttl=0)
        for tenant, weight in START_WEIGHTS.items():
            self.admin.set_overrides(tenant, TenantOverrides(weight=weight))
            self.admin.set(tenant, first[tenant])
        self.tenants = TenantAdmin(self.conn, START_KEYS, self.admin, clock=self.clock)
        self.producer = {name: self.fair_queue(name) for name in START_QUEUES}
        self.workers = [self.new_worker(names) for names in scenario.layout]
        self.jobs: dict[str, tuple[str, str]] = {}  # job id -> (tenant, queue)

    def clock(self) -> float:
        return self.model.now_ms / 1000

    def fair_queue(self, name: str) -> FairQueue:
        return FairQueue(name, connection=self.conn, settings=self.settings, clock=self.clock)

    def new_worker(self, names: tuple[str, ...]) -> SimWorker:
        """A worker's parts as workers/setup.py builds them, on the injected clock; the tier cache polls the
        profile changes at every look-up (cache_ttl 0), so a tier change takes effect at the next start."""
        book = TierBook(self.conn, START_KEYS, START_TIERS, cache_ttl=0)
        limiter = ConcurrencyLimiter(self.conn, START_KEYS, book, self.settings.concurrency, clock=self.clock)
        gate = TenantGate(limiter, RateLimiter(START_KEYS, self.settings.jobs), slots=True)
        return SimWorker([self.fair_queue(name) for name in names], gate)

    # -- the worker's steps -----------------------------------------------------------------------------

    @rule(tenant=st.sampled_from(tuple(START_WEIGHTS)), queues=st.sampled_from((("qa",), ("qb",), START_QUEUES)),
          n=st.integers(1, 2))
    def enqueue(self, tenant: str, queues: tuple[str, ...], n: int) -> None:
        for queue in queues:
            for _ in range(n * self.scenario.batch):
                job = self.producer[queue].enqueue(fair_jobs.log, tenant, len(self.jobs), fair_tenant=tenant)
                self.jobs[job.id] = (tenant, queue)
                self.model.waiting[queue][tenant].append(job.id)

    def idle(self) -> list[SimWorker]:
        """Workers with nothing in hand whose queues have jobs waiting (a fetch of empty queues checks nothing)."""
        return [w for w in self.workers if w.popped is None and w.running is None
                and any(jobs for q in w.queues for jobs in self.model.waiting[q.name].values())]

    def holding(self) -> list[SimWorker]:
        return [w for w in self.workers if w.popped is not None]

    def busy(self) -> list[SimWorker]:
        return [w for w in self.workers if w.running is not None]

    @precondition(lambda self: bool(self.idle()))
    @rule(pick=st.integers(0, 2))
    def fetch(self, pick: int) -> None:
        """A worker asks for work: rq's fetch through ``dequeue_any`` (no wait) over its queues, in order."""
        idle = self.idle()
        worker = idle[pick % len(idle)]
        model = self.model
        eligible = {q.name: {t for t, jobs in model.waiting[q.name].items() if jobs and model.could_start(t)}
                    for q in worker.queues}
        before = {name: dict(counts) for name, counts in model.served.items()}
        model.pops += 1
        got = FairQueue.dequeue_any(worker.queues, None, connection=self.conn)
        visited = [q.name for q in worker.queues]
        if got is not None:
            job, queue = got
            tenant, home = self.jobs[job.id]
            assert home == queue.name and job.id in model.waiting[home][tenant], (job.id, tenant, home)
            model.waiting[home][tenant].remove(job.id)
            model.in_hand[job.id] = tenant
            model.served[home][tenant] += 1
            worker.popped = (job, queue)
            visited = visited[:visited.index(home) + 1]
        for name in visited:
            self.check_conservation(name, eligible[name], before[name])
        if got is not None:
            self.check_share(got[1].name)

    def check_conservation(self, queue: str, eligible: set[str], before: dict[str, int]) -> None:
        """No tenant waiting in ``queue`` is parked there while it could start (as of after the pop); the tenants
        that could start at this pop and every one since their streak began keep it, the others lose theirs."""
        model = self.model
        parked = {raw.decode() for raw in self.conn.zrange(self.producer[queue].fair_keys.parked, 0, -1)}
        streak = model.streak[queue]
        for tenant in START_WEIGHTS:
            blocked = (bool(model.waiting[queue][tenant]) and model.could_start(tenant)
                       and encode(tenant) in parked)
            paced = model.now_ms < model.paced.get((queue, tenant), -PACED_FOR_MS) + PACED_FOR_MS
            assert not blocked or (paced and not self.scenario.conserve_paced), (
                f"work conservation: {tenant} waits in {queue}, could start, but is parked there"
                f" (clock +{model.now_ms - T0_MS} ms, parks {self.parks(queue)})")
            if tenant in eligible and not blocked:
                streak.setdefault(tenant, (model.pops, before))
            else:
                streak.pop(tenant, None)

    def check_share(self, queue: str) -> None:
        model = self.model
        streak, served = model.streak[queue], model.served[queue]
        for first in streak:
            for second in streak:
                if first >= second:
                    continue
                base = max(streak[first], streak[second], key=lambda s: s[0])[1]
                lead = ((served[first] - base[first]) / START_WEIGHTS[first]
                        - (served[second] - base[second]) / START_WEIGHTS[second])
                bound = 1 / START_WEIGHTS[first] + 1 / START_WEIGHTS[second]  # a step of each
                assert abs(lead) <= bound + 1e-9, (queue, first, second, lead, streak, served)

    def parks(self, queue: str) -> dict[str, int]:
        """The tenants parked in ``queue`` and until when (ms after the clock's start), for failure reports."""
        raw = self.conn.zrange(self.producer[queue].fair_keys.parked, 0, -1, withscores=True)
        return {name.decode(): int(until) - T0_MS for name, until in raw}

    @precondition(lambda self: bool(self.holding()))
    @rule(pick=st.integers(0, 2))
    def start(self, pick: int) -> None:
        """The popped job's start, as ``StartGate.run`` decides it on a fair queue: the gate's
        checks and one script call; admitted, a paced tenant's report (``job_started``: ``FairQueue.hold``);
        refused, ``turn_away`` (back to its tenant's FIFO, the tenant parked)."""
        holding = self.holding()
        worker = holding[pick % len(holding)]
        assert worker.popped is not None
        job, queue = worker.popped
        worker.popped = None
        model = self.model
        tenant = model.in_hand.pop(job.id)
        expected, at_ms = model.verdict(tenant, job.id)
        gate = worker.gate
        scopes = gate.checks(tenant, job)
        assert scopes is not None  # with concurrency slots on every start is checked
        admission, lease = gate.acquire(tenant, job, scopes, reserve=False, fair_queue=queue.name)
        assert admission.now_ms == model.now_ms
        assert admission.status == expected, (tenant, admission, expected, at_ms)
        if expected in (Verdict.RATE, Verdict.AT_LIMIT):
            assert admission.at_ms == at_ms, (tenant, admission, at_ms)
        if expected == Verdict.GRANTED:
            assert admission.next_ms == at_ms, (tenant, admission, at_ms)
            assert lease is not None
            worker.running = (job, queue, lease)
            if gate.own_rate(tenant, scopes) and admission.report:  # its rate binds, or bound: the queue hears
                queue.hold(tenant, admission.next_ms, paced=True)
                if admission.next_ms > model.now_ms:
                    model.paced[(queue.name, tenant)] = model.now_ms
                else:
                    model.paced.pop((queue.name, tenant), None)
            self.check_limits(tenant)
            return
        turn_away(gate, job, queue, tenant, admission)
        model.waiting[queue.name][tenant].insert(0, job.id)
        model.served[queue.name][tenant] -= 1  # the refused pop's step is refunded

    def check_limits(self, tenant: str) -> None:
        """Directly: the tenant's unexpired leases are within its limit, and its admitted starts under its
        current rate keep GCRA's bound (the i-th after the j-th at least (i - j - burst + 1) intervals later)."""
        model = self.model
        leases = self.conn.zrangebyscore(START_KEYS.leases(tenant), f"({model.now_ms}", "+inf")
        assert len(leases) <= model.limit(tenant), (tenant, leases)
        tier = model.tier[tenant]
        if tier in RATE_MS:
            times, burst = model.starts[tenant], TOLERANCE_MS[tier] // RATE_MS[tier] + 1
            for i, later in enumerate(times):
                for j in range(i):
                    # GCRA's bound, plus the one start a late start's kept schedule gives back
                    assert later - times[j] >= (i - j - burst) * RATE_MS[tier], (tenant, times)

    def release(self, worker: SimWorker) -> None:
        """The job ended: the worker's after-job writes (settle, for a queue charging run time), then the
        lease's release with the unparks of the tenant in the worker's own fair queues, and in every other fair
        queue where a refused start parked it (workers/unparking.py ``Unparker``, on the model's clock)."""
        assert worker.running is not None
        job, queue, lease = worker.running
        worker.running = None
        if queue.charge == "runtime":
            queue.settle(job.id, 0.01)
        if lease is None:
            return
        gate = worker.gate
        limit = gate.limiter.tiers.profile(lease.tenant).limit

        def slot_freed(pipe: Any) -> None:
            for fair in worker.queues:
                fair.unpark(lease.tenant, pipeline=pipe, job_id=lease.job_id, limit=limit)

        def wake(names: list[str], pipe: Any) -> None:
            own = {fair.name for fair in worker.queues}
            for name in names:
                if name not in own:
                    self.producer[name].unpark(lease.tenant, pipeline=pipe, job_id=lease.job_id, limit=limit)

        gate.limiter.release(lease, also=slot_freed, wake=wake)
        del self.model.leases[lease.tenant][lease.job_id]

    @precondition(lambda self: bool(self.busy()))
    @rule(pick=st.integers(0, 2))
    def finish(self, pick: int) -> None:
        busy = self.busy()
        self.release(busy[pick % len(busy)])

    @precondition(lambda self: bool(self.busy()) and "crash" not in self.scenario.skip)
    @rule(pick=st.integers(0, 2))
    def crash(self, pick: int) -> None:
        """The worker dies holding its slot: nothing is released, the lease expires a TTL after its last
        refresh; a new worker process takes its place. (Its job is left to crash recovery: not modelled.)"""
        busy = self.busy()
        index = self.workers.index(busy[pick % len(busy)])
        self.workers[index] = self.new_worker(self.scenario.layout[index])

    # -- the operator's and the clock's steps -----------------------------------------------------------

    @precondition(lambda self: "pause" not in self.scenario.skip)
    @rule(tenant=st.sampled_from(tuple(START_WEIGHTS)))
    def pause_or_resume(self, tenant: str) -> None:
        """``FairRouter.pause`` (parks it in every fair queue), or ``resume`` when it is paused (unparks it)."""
        if tenant in self.model.paused:
            self.tenants.resume(tenant)
            self.model.paused.discard(tenant)
        else:
            self.tenants.pause(tenant)
            self.model.paused.add(tenant)

    @precondition(lambda self: "tier" not in self.scenario.skip)
    @rule(tenant=st.sampled_from(tuple(START_WEIGHTS)), pick=st.integers(0, len(START_TIERS.concurrency) - 1))
    def change_tier(self, tenant: str, pick: int) -> None:
        """A limit change (and a rate change): the tenant's tier, as ``FairRouter.set_tier`` changes it."""
        tier = self.scenario.tiers[pick % len(self.scenario.tiers)]
        self.tenants.set_tier(tenant, tier)
        model = self.model
        if (RATE_MS.get(tier), TOLERANCE_MS.get(tier)) != (RATE_MS.get(model.tier[tenant]),
                                                          TOLERANCE_MS.get(model.tier[tenant])):
            model.starts[tenant] = []  # GCRA's bound holds within one rate
        model.tier[tenant] = tier

    @precondition(lambda self: "clock" not in self.scenario.skip)
    @rule(ms=st.sampled_from((100, 250, 500, 1000, 2000)))
    def advance(self, ms: int) -> None:
        """Time passes, in steps of at most the refresher's period: live jobs' leases are refreshed."""
        model = self.model
        while ms > 0:
            step = min(ms, REFRESH_MS)
            ms -= step
            model.now_ms += step
            for worker in self.workers:
                if worker.running is not None and worker.running[2] is not None:
                    lease = worker.running[2]
                    kept = worker.gate.limiter.acquire(lease.tenant, lease.job_id, refresh=True)
                    assert kept is not None, f"{lease} lost its slot"
                    model.leases[lease.tenant][lease.job_id] = model.now_ms + LEASE_MS

    # -- invariants -------------------------------------------------------------------------------------

    @invariant()
    def every_slot_is_held_by_a_live_job(self) -> None:
        """Unexpired leases in Redis are exactly the model's: live jobs', and dead workers' until they expire."""
        model = self.model
        running = {w.running[0].id for w in self.workers if w.running is not None}
        for tenant in START_WEIGHTS:
            raw = self.conn.zrangebyscore(START_KEYS.leases(tenant), f"({model.now_ms}", "+inf", withscores=True)
            held = {name.decode(): int(until) for name, until in raw}
            assert held == model.live(tenant), (tenant, held, model.live(tenant))
            for job_id in held:
                assert job_id in running or job_id not in model.in_hand

    @invariant()
    def queues_hold_the_waiting_jobs(self) -> None:
        for name, queue in self.producer.items():
            assert queue.count == sum(len(jobs) for jobs in self.model.waiting[name].values())

    def teardown(self) -> None:
        self.conn.close()


START_SETTINGS = settings(max_examples=200, stateful_step_count=50, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
"""Derandomized (a fixed search, the same on every run) and without the example database, so CI does not flake."""
KNOWN_BUG = settings(START_SETTINGS, max_examples=1000, stateful_step_count=30,
                     phases=[Phase.explicit, Phase.reuse, Phase.generate])
"""A known bug's test stops at its first failing example (found within about 100 by the aimed scenarios); no
shrinking, which would take minutes. Once the bug is fixed, all 1000 run (about a minute): lower it then."""


def run_start_path(redis_server: RedisServer, scenario: Scenario, how: settings = START_SETTINGS) -> None:
    run_state_machine_as_test(lambda: StartPathMachine(redis_server.url, scenario), settings=how)


def test_the_start_path_agrees_with_its_model(redis_server: RedisServer) -> None:
    run_start_path(redis_server, Scenario(layout=SPLIT if BUG_A_FIXED else SHARED))


def test_tenants_that_could_start_share_by_weight(redis_server: RedisServer) -> None:
    """Share, aimed: no tenant ever reaches its limit (three workers, limit four), none is paused or paced, and
    backlogs are long, so waiting tenants could start at every pop and the share check sees long streaks."""
    run_start_path(redis_server, Scenario(tiers=("many",), skip=frozenset({"crash", "pause", "tier"}), batch=4),
                   settings(START_SETTINGS, max_examples=100))


def test_a_release_reaches_every_fair_queue(redis_server: RedisServer) -> None:
    """Work conservation with workers serving different queues: a release by a worker of one queue must end
    the tenant's park in the other (bug (a), fixed: lua/release.lua, workers/unparking.py). Aimed: limits only,
    no crash, pause, tier change or clock; the search that found the bug within about 100 examples."""
    run_start_path(redis_server, Scenario(layout=SPLIT, tiers=("one", "two"),
                                          skip=frozenset({"crash", "pause", "tier", "clock"})),
                   settings(KNOWN_BUG, max_examples=300))


@pytest.mark.xfail(not BUG_B_FIXED, strict=True, reason="bug (b): a paced tenant is parked after each take until "
                   "its start's report (up to PACED_WAIT_MS, lua/lib/claims.lua), and may come back after its token")
def test_a_paced_tenant_is_parked_only_until_its_next_token(redis_server: RedisServer) -> None:
    """Work conservation for paced tenants too (every worker on both queues: bug (a) cannot show). Aimed: every
    tenant at 2/s with a burst of 2, no crash, pause or tier change."""
    run_start_path(redis_server, Scenario(conserve_paced=True, tiers=("bursty",),
                                          skip=frozenset({"crash", "pause", "tier"})), KNOWN_BUG)
