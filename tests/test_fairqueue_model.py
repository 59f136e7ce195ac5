"""Model-based test: a FairQueue on a real redis-server, driven by random fair pushes, pops, parks and
unparks interleaved with rq's own calls on the same queue (plain pushes, unique pushes, Job.cancel,
Job.delete, plain Queue.remove, CanceledJobRegistry.requeue, compact after an expired job), agrees with a
plain-Python model of its semantics (the package docstring of fair_router/fairqueue/__init__.py):
- ``count`` and rq's own ``Queue.count`` are the waiting jobs at every step, and the listing is that set;
- every pop serves exactly the model's choice: the list head when rq pushed it, else the stride choice;
- the listing's head is what the next pop serves, and each tenant's jobs are listed in FIFO order;
- no job is served twice, after its removal, or left stranded."""

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
from rq.registry import CanceledJobRegistry

from fair_router import FairQueue
from fair_router.config.settings import TiersConfig
from fair_router.demo.redis_server import RedisServer
from fair_router.store.fair_scripts import PopKind

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
