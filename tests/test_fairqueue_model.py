"""Model-based test: a FairQueue on a real redis-server, driven by random fair pushes, pops, parks, unparks,
plain pushes by rq's internals and removals, agrees with a plain-Python model of its semantics (the
module docstring of fair_router/fairqueue.py): exact counts, per-tenant FIFO order, no job served twice
or stranded, parked tenants skipped, and the stride scheduler's choice for every fair pop."""

from __future__ import annotations

import sys
from collections import deque

import fair_jobs
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from redis import Redis
from rq import Queue
from rq.job import Job

from fair_router import FairQueue
from fair_router.redis_server import RedisServer
from fair_router.settings import TiersConfig

PREFIX = "fq_model"
NAME = "default"
# Weights 1, 2 and 4 through tier_resolvers.by_name: strides 1, 1/2, 1/4 are exact in floats, so the
# model's passes equal the scripts' and ties (broken by tenant name in the sorted set) are real ties.
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
        self.plain_queue = Queue(NAME, connection=self.conn)  # rq's internals: a plain push onto the same list
        self.jobs: dict[str, Job] = {}
        self.tenant_of: dict[str, str | None] = {}
        # The model. Waiting jobs: plain list entries (in list order) and each tenant's FIFO.
        self.plain: list[str] = []
        self.fifo: dict[str | None, deque[str]] = {tenant: deque() for tenant in WEIGHT}
        self.parked: set[str | None] = set()  # each with waiting jobs: a tenant that empties leaves its park
        # The stride scheduler: pass of each active tenant (waiting jobs, not parked), pass kept by tenants
        # that went idle or were parked, virtual time (pass of the last served tenant).
        self.active: dict[str | None, float] = {}
        self.kept: dict[str | None, float] = {}
        self.vtime = 0.0
        self.in_hand: tuple[str, bool] | None = None  # the job the last pop returned, and whether fair
        self.served: set[str] = set()  # popped and not put back
        self.removed: set[str] = set()

    # -- the model ------------------------------------------------------------------------------------

    def waiting(self) -> list[str]:
        return self.plain + [job_id for tenant in WEIGHT for job_id in self.fifo[tenant]]

    def activate(self, tenant: str | None) -> None:
        if tenant not in self.active:
            self.active[tenant] = max(self.vtime, self.kept.pop(tenant, self.vtime))

    def check_served(self, job_id: str) -> None:
        """``job_id`` came out of a pop: it must be the oldest plain entry, or the head of the FIFO of the
        tenant with the smallest pass (ties: the smaller encoded name, as a sorted set orders them)."""
        assert job_id not in self.served, f"{job_id} popped twice"
        assert job_id not in self.removed, f"{job_id} popped after its removal"
        if job_id in self.plain:
            assert job_id == self.plain[0], "plain entries come out in list order"
            self.plain.pop(0)
            self.in_hand = (job_id, False)
        else:
            tenant = self.tenant_of[job_id]
            assert job_id in self.fifo[tenant], f"{job_id} was not waiting"
            assert tenant not in self.parked, f"{job_id} served while {tenant} is parked"
            assert job_id == self.fifo[tenant][0], f"{job_id} is not the head of {tenant}'s FIFO"
            expected = min(self.active, key=lambda t: (self.active[t], FairQueue.tenant_key(t)))
            assert tenant == expected, f"served {tenant}, but passes are {self.active}"
            self.fifo[tenant].popleft()
            self.vtime = self.active[tenant]
            next_pass = self.vtime + 1 / WEIGHT[tenant]
            if self.fifo[tenant]:
                self.active[tenant] = next_pass
            else:  # idle: keeps its pass for its return
                del self.active[tenant]
                self.kept[tenant] = next_pass
            self.in_hand = (job_id, True)
        self.served.add(job_id)

    # -- operations -----------------------------------------------------------------------------------

    @rule(tenant=st.sampled_from(tuple(WEIGHT)))
    def enqueue(self, tenant: str | None) -> None:
        job = self.queue.enqueue(fair_jobs.log, tenant, len(self.jobs), fair_tenant=tenant)
        self.jobs[job.id], self.tenant_of[job.id] = job, tenant
        self.fifo[tenant].append(job.id)
        if tenant not in self.parked:
            self.activate(tenant)

    @rule(tenant=st.sampled_from((None, *TENANTS)))
    def enqueue_plain(self, tenant: str | None) -> None:
        """A plain push (rq's scheduler, registry requeues): served as a list entry, tenant meta or not."""
        meta = None if tenant is None else {"fair_tenant": tenant}
        job = self.plain_queue.enqueue(fair_jobs.log, "plain", len(self.jobs), meta=meta)
        self.jobs[job.id], self.tenant_of[job.id] = job, tenant
        self.plain.append(job.id)

    @rule()
    def pop(self) -> None:
        self.popped(self.queue.pop_fair()[0])

    @rule()
    def pop_given(self) -> None:
        """A blocked worker's path: BLPOP took the list head (LPOP here: no wait), the script gets it."""
        entry = self.conn.lpop(self.queue.key)
        if entry is not None:  # else the worker would still be blocked: nothing happens
            self.popped(self.queue.pop_fair(entry.decode())[0])

    def popped(self, job_id: str | None) -> None:
        self.in_hand = None
        if job_id is None:
            # A pop may hold a token while only parked tenants have fair jobs, even with a plain entry
            # further down the list (the next pop reaches it); anything else is a job left behind.
            assert not self.active, f"nothing served, yet {sorted(self.active)} could be"
            assert self.parked or not self.waiting(), "nothing parked, yet waiting jobs were not served"
            return
        self.check_served(job_id)

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
        self.served.discard(job_id)  # a plain entry's job, too, now waits in its tenant's FIFO

    @rule(tenant=st.sampled_from(TENANTS))
    def unpark(self, tenant: str) -> None:
        self.queue.unpark(tenant)
        self.parked.discard(tenant)
        if self.fifo[tenant]:
            self.activate(tenant)

    @precondition(lambda self: bool(self.waiting()))
    @rule(pick=st.integers(0, 1000))
    def remove(self, pick: int) -> None:
        waiting = self.waiting()
        job_id = waiting[pick % len(waiting)]
        assert self.queue.remove(job_id) == 1
        self.removed.add(job_id)
        if job_id in self.plain:
            self.plain.remove(job_id)
            return
        tenant = self.tenant_of[job_id]
        self.fifo[tenant].remove(job_id)
        if not self.fifo[tenant]:  # idle: keeps its pass, and its park ends
            if tenant in self.active:
                self.kept[tenant] = self.active.pop(tenant)
            self.parked.discard(tenant)

    # -- invariants -----------------------------------------------------------------------------------

    @invariant()
    def counts_and_ids_are_the_waiting_jobs(self) -> None:
        waiting = self.waiting()
        assert self.queue.count == len(waiting), (self.queue.count, len(waiting))
        ids = self.queue.get_job_ids()
        assert len(ids) == len(waiting) and set(ids) == set(waiting), (ids, waiting)
        assert ids[: len(self.plain)] == self.plain  # plain entries first, in list order
        for tenant in WEIGHT:  # then fair jobs, each tenant's in its FIFO order
            assert [job_id for job_id in ids if job_id in self.fifo[tenant]] == list(self.fifo[tenant])

    @invariant()
    def reconcile_finds_nothing_to_repair(self) -> None:
        """Without outside removals the token accounting is already exact: rq's maintenance changes nothing."""
        assert self.queue.reconcile() == (0, 0)

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
        while self.waiting():
            job_id, _ = self.queue.pop_fair()
            assert job_id is not None, f"stranded: {self.waiting()}"
            self.check_served(job_id)
        assert self.queue.pop_fair()[0] is None
        assert self.queue.count == 0 and self.queue.get_job_ids() == []


def test_fair_queue_agrees_with_its_model(redis_server: RedisServer) -> None:
    run_state_machine_as_test(
        lambda: FairQueueMachine(redis_server.url),
        settings=settings(max_examples=80, stateful_step_count=50, deadline=None),
    )
