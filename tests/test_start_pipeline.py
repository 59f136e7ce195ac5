"""The job-start pipeline itself (fair_router/controls/pipeline.py): one script for every list of controls
(lua/built/start.min.lua) runs the controls a call names in the list's order, and each refusal is counted under the
refusing control's counter.
Real Redis; the behaviour of each control is in test_controls.py and test_limits.py."""

from __future__ import annotations

from pathlib import Path

from redis import Redis

from fair_router.config.settings import ConcurrencyConfig
from fair_router.controls.concurrency import ConcurrencySlot
from fair_router.controls.pauses import PauseCheck
from fair_router.controls.pipeline import Start, StartPipeline
from fair_router.controls.ratelimit import RateLimiter, scope
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.core.rates import Rate
from fair_router.observe.counters import COUNTERS, TierCounters
from fair_router.store.scripts import Verdict

KEYS = Keys("pipe")


def start(conn: Redis, tenant: str, job_id: str, **extra: object) -> Start:
    return Start(tenant, job_id, TierBook(conn, KEYS).profile(tenant), **extra)  # type: ignore[arg-type]


def test_one_script_runs_only_the_listed_controls_in_their_order(conn: Redis) -> None:
    config = ConcurrencyConfig(enabled=True)
    pause_only = StartPipeline(conn, [PauseCheck(KEYS)], TierCounters(conn, KEYS))
    both = StartPipeline(conn, [PauseCheck(KEYS), ConcurrencySlot(KEYS, config)], TierCounters(conn, KEYS))
    slot_first = StartPipeline(conn, [ConcurrencySlot(KEYS, config), PauseCheck(KEYS)], TierCounters(conn, KEYS))
    assert pause_only.script.sha == both.script.sha == slot_first.script.sha  # one text, whatever the list
    assert both.script.source == (Path(__file__).resolve().parent.parent / "lua/built/start.min.lua").read_text()
    # pause only: no slot is taken, however many start
    assert [pause_only.run(start(conn, "acme", f"j{i}")).status for i in range(3)] == [Verdict.GRANTED] * 3
    assert not conn.exists(KEYS.leases("acme"))
    # the free tier runs one job at once: the second start is refused by the slot
    assert both.run(start(conn, "acme", "a")).status == Verdict.GRANTED
    assert both.run(start(conn, "acme", "b")).status == Verdict.AT_LIMIT
    # paused and at the limit: the list's first check decides which refusal it is
    conn.set(KEYS.paused("acme"), 1)
    assert both.run(start(conn, "acme", "b")).status == Verdict.PAUSED
    assert slot_first.run(start(conn, "acme", "b")).status == Verdict.AT_LIMIT
    assert pause_only.refusal(start(conn, "acme", "b"), pause_only.run(start(conn, "acme", "b"))) is not None


def test_refusals_are_counted_by_the_refusing_control_and_say_what_becomes_of_the_job(conn: Redis) -> None:
    counts = TierCounters(conn, KEYS)
    rates = RateLimiter(KEYS)
    pipeline = StartPipeline(conn, [PauseCheck(KEYS), ConcurrencySlot(KEYS, ConcurrencyConfig(enabled=True)),
                                    rates], counts)
    one_a_minute = (scope(KEYS.rate("bob"), Rate(1, 60), 1),)
    first = pipeline.run(start(conn, "bob", "x", rates=one_a_minute, tenant_scopes=1))
    assert first.status == Verdict.GRANTED and first.next_ms > first.now_ms  # the tenant's next start, a minute on
    conn.delete(KEYS.leases("bob"))
    refused_start = start(conn, "bob", "y", rates=one_a_minute, reserve=True)
    refused = pipeline.run(refused_start)
    assert refused.status == Verdict.RESERVED and refused.at_ms == first.next_ms
    refusal = pipeline.refusal(refused_start, refused)
    assert refusal is not None and refusal.counter == "rate_deferred" and refusal.until_ms == refused.at_ms
    assert pipeline.refusal(refused_start, first) is None
    counts.flush()
    assert counts.read()["free"] == {**dict.fromkeys(COUNTERS, 0), "acquired": 1, "rate_deferred": 1}


def test_a_start_with_every_control_costs_nine_commands_and_no_hashing_on_its_own_pipeline(conn: Redis) -> None:
    """Pause, slot and rate in one call: TIME, EXISTS (pause), ZREMRANGEBYSCORE + ZSCORE (held?), ZCARD
    (limit), MGET (reservation and TAT: one read, was two GETs), SET (TAT), ZADD + PEXPIRE (lease; no PTTL
    read first, as before): 9 (11 before). On a pipeline the start pipeline executes it goes as EVALSHA."""
    pipeline = StartPipeline(conn, [PauseCheck(KEYS), ConcurrencySlot(KEYS, ConcurrencyConfig(enabled=True)),
                                    RateLimiter(KEYS)], TierCounters(conn, KEYS))
    rate = (scope(KEYS.rate("carol"), Rate(100, 1), 10),)
    with conn.pipeline(transaction=False) as pipe:  # loads the script, once per process and server
        pipeline.run(start(conn, "carol", "warm", rates=rate, tenant_scopes=1), pipe)
    conn.delete(KEYS.leases("carol"))
    first = start(conn, "carol", "j1", rates=rate, tenant_scopes=1)  # the tier book read, not the start's
    conn.config_resetstat()
    with conn.pipeline(transaction=False) as pipe:
        admitted = pipeline.run(first, pipe)
    assert admitted.status == Verdict.GRANTED
    stats = conn.info("commandstats")
    ran = {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()
           if name not in ("cmdstat_config|resetstat", "cmdstat_evalsha", "cmdstat_info", "cmdstat_hincrby")}
    assert "cmdstat_evalsha" in stats and "cmdstat_eval" not in stats
    assert ran == {"time": 1, "exists": 1, "zremrangebyscore": 1, "zscore": 1, "zcard": 1, "mget": 1, "set": 1,
                   "zadd": 1, "pexpire": 1}, ran
    assert conn.pttl(KEYS.leases("carol")) > 86_400_000  # the set outlives its leases by a day
