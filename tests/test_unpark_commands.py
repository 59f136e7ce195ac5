"""What a release's unpark (lua/fair_unpark.lua) costs the fair queue's Redis, counted by the server (INFO
commandstats: the commands the script runs, each by name), and when it sweeps expired claims. Never a time."""

from __future__ import annotations

from typing import Any, cast

import fair_jobs
from redis import Redis

from fair_router import FairQueue, Settings

PREFIX = "unpark"


def script_commands(conn: Redis) -> dict[str, int]:
    """Calls per command since the last CONFIG RESETSTAT, but the script calls themselves (EVAL, EVALSHA, FCALL: the
    unpark runs as a Redis function where it can), their loading, CONFIG and INFO."""
    stats = cast(dict[str, dict[str, Any]], conn.info("commandstats"))
    return {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()
            if not name.startswith(("cmdstat_config", "cmdstat_info", "cmdstat_eval", "cmdstat_script",
                                    "cmdstat_fcall", "cmdstat_function"))}


def test_a_release_that_ends_a_park_at_the_limit_runs_nine_commands(conn: Redis) -> None:
    """The tenant's record, the virtual time and state.kept_ttl in one read, its claim ended (the count it leaves
    decides), its limit checked, its park ended, its pass back in `active`, one worker woken: 9 commands (18
    before: a read of the record, then of the claim count, a sweep of expired claims with its TIME at every
    release, an HDEL of a count back at 0, a ZSCORE of `active` before the activation, an LTRIM after every
    wake-up and a PERSIST of the kept passes, which only expire once nothing is active)."""
    queue = FairQueue("limited", connection=conn, settings=Settings(prefix=PREFIX))
    jobs = [queue.enqueue(fair_jobs.log, "hog", i, fair_tenant="hog", job_id=f"hog-{i}1").id for i in range(3)]
    queue.enqueue(fair_jobs.log, "other", 0, fair_tenant="other", job_id="other-0")  # stays active
    assert queue.unpark("hog", limit=1) == 0  # a release reports its limit while its jobs wait: learnt
    conn.config_resetstat()
    assert queue.pop_job_id() == jobs[0]  # claimed, at its limit: parked
    assert "exists" not in script_commands(conn)  # another entry stays active: the kept passes need no expiry
    assert conn.zscore(queue.fair_keys.parked, "hog") is not None
    conn.config_resetstat()
    assert queue.unpark("hog", job_id=jobs[0], limit=1) == 1  # its park ends: it may be served again
    assert script_commands(conn) == {"hmget": 1, "zrem": 3, "hincrby": 1, "hget": 1, "zscore": 1, "zadd": 1,
                                     "rpush": 1}
    assert conn.zscore(queue.fair_keys.parked, "hog") is None
    assert conn.zscore(queue.fair_keys.active, "hog") is not None
    assert conn.hget(queue.fair_keys.claimed, "hog") == b"0"  # back at 0: kept while the tenant is here
    assert queue.pop_job_id() == "other-0"  # its turn (pass 0) before hog's second (pass 1)
    assert queue.pop_job_id() == jobs[1]  # served again, and parked again at its limit
    assert conn.hget(queue.fair_keys.claimed, "hog") == b"1"


def test_a_release_with_nothing_parked_here_looks_for_no_park(conn: Redis) -> None:
    """Without state.due nothing is parked in the queue (every park sets it): a release below the limit ends its
    claim and checks its limit, and sends no ZREM of `parked` for a park it cannot have: 4 commands (5 before)."""
    queue = FairQueue("unparked", connection=conn, settings=Settings(prefix=PREFIX))
    jobs = [queue.enqueue(fair_jobs.log, "t", i, fair_tenant="t", job_id=f"t-{i}1").id for i in range(3)]
    assert queue.unpark("t", limit=5) == 0  # its limit learnt: its pops claim
    assert queue.pop_job_id() == jobs[0]  # claimed, below its limit: not parked
    assert conn.hget(queue.fair_keys.state, "due") is None
    conn.config_resetstat()
    assert queue.unpark("t", job_id=jobs[0], limit=5) == 0
    assert script_commands(conn) == {"hmget": 1, "zrem": 1, "hincrby": 1, "hget": 1}
    assert conn.hget(queue.fair_keys.claimed, "t") == b"0"
    assert queue.pop_job_id() == jobs[1]  # still active: served on


def test_a_park_that_leaves_nothing_active_lets_the_kept_passes_expire_until_its_release(conn: Redis) -> None:
    """Parking the only active tenant leaves nothing active: the kept passes expire (state.kept_ttl says so);
    the release that ends the park makes them last again (PERSIST, and the flag goes): 11 commands then."""
    queue = FairQueue("alone", connection=conn, settings=Settings(prefix=PREFIX))
    jobs = [queue.enqueue(fair_jobs.log, "hog", i, fair_tenant="hog", job_id=f"hog-{i}1").id for i in range(2)]
    assert queue.unpark("hog", limit=1) == 0
    assert queue.pop_job_id() == jobs[0]  # parked: nothing active
    assert conn.pttl(queue.fair_keys.kept) > 0 and conn.hget(queue.fair_keys.state, "kept_ttl") == b"1"
    conn.config_resetstat()
    assert queue.unpark("hog", job_id=jobs[0], limit=1) == 1
    assert script_commands(conn) == {"hmget": 1, "zrem": 3, "hincrby": 1, "hget": 1, "zscore": 1, "zadd": 1,
                                     "persist": 1, "hdel": 1, "rpush": 1}
    assert conn.ttl(queue.fair_keys.kept) == -2 or conn.pttl(queue.fair_keys.kept) == -1  # gone (emptied) or lasting
    assert conn.hget(queue.fair_keys.state, "kept_ttl") is None


def test_expired_claims_are_swept_by_one_release_in_four(conn: Redis) -> None:
    """A dead worker's claim (never released) outlives its expiry until a release whose job id ends in a byte that
    is a multiple of 4 sweeps it (or a pop once a park is due); then its tenant, with nothing here, is forgotten."""
    now = [1_000_000.0]
    queue = FairQueue("swept", connection=conn, settings=Settings(prefix=PREFIX), clock=lambda: now[0])
    dead = queue.enqueue(fair_jobs.log, "dead", 0, fair_tenant="dead", job_id="dead-01").id
    live = [queue.enqueue(fair_jobs.log, "live", i, fair_tenant="live", job_id=f"live-{i}").id for i in (1, 4)]
    assert queue.unpark("dead", limit=2) == 0 and queue.unpark("live", limit=2) == 0  # limits learnt
    assert {queue.pop_job_id() for _ in range(3)} == {dead, *live}  # all claimed, none at its limit
    assert conn.zcard(queue.fair_keys.claims) == 3
    now[0] += 24 * 3600  # every claim past its expiry
    assert queue.unpark("live", job_id=live[0], limit=2) == 0  # "1": no sweep
    assert conn.zrange(queue.fair_keys.claims, 0, -1) == [b"dead|dead-01", b"live|live-4"]
    assert conn.hget(queue.fair_keys.limits, "dead") == b"2"
    assert queue.unpark("live", job_id=live[1], limit=2) == 0  # "4": swept
    assert conn.zcard(queue.fair_keys.claims) == 0
    assert conn.hgetall(queue.fair_keys.limits) == {} and conn.hgetall(queue.fair_keys.claimed) == {}


def test_a_pop_that_parks_its_tenant_runs_no_write_then_undo(conn: Redis) -> None:
    """At its known limit a pop parks its tenant without first writing its new pass into `active` (then read back
    with a ZSCORE and removed) and without reading state.due again: 3 commands fewer than before."""
    queue = FairQueue("limited", connection=conn, settings=Settings(prefix=PREFIX))
    jobs = [queue.enqueue(fair_jobs.log, "hog", i, fair_tenant="hog", job_id=f"hog-{i}1").id for i in range(3)]
    assert queue.unpark("hog", limit=1) == 0  # its limit learnt
    conn.config_resetstat()
    assert queue.pop_job_id() == jobs[0]  # claimed, at its limit: parked
    commands = script_commands(conn)
    assert "zscore" not in commands and commands.get("hget", 0) == 0, commands
    assert commands["zrem"] == 1 and commands["zadd"] == 4, commands  # active left; claims, inflight, kept, parked
    assert conn.zscore(queue.fair_keys.parked, "hog") is not None
    assert conn.zscore(queue.fair_keys.active, "hog") is None
    assert conn.zscore(queue.fair_keys.kept, "hog") == 1.0  # its pass after the take, kept for its return
    assert queue.pop_job_id() is None  # parked: its other jobs wait


def test_a_new_tenants_push_persists_the_kept_passes_only_when_they_may_expire(conn: Redis) -> None:
    """A tenant's first push activates it (lib/orgs.lua activate_entry): the virtual time and state.kept_ttl in one
    read, and a PERSIST of the kept passes only when they may expire (nothing was active); no ZCARD of the parks
    while state.due says none is parked (lua/fair_push.lua)."""
    queue = FairQueue("first", connection=conn, settings=Settings(prefix=PREFIX))
    queue.enqueue(fair_jobs.log, "a", 0, fair_tenant="a", job_id="a-0")
    conn.config_resetstat()
    queue.enqueue(fair_jobs.log, "b", 0, fair_tenant="b", job_id="b-0")  # "a" is active: nothing expires
    assert {"persist", "zcard", "hdel"}.isdisjoint(script_commands(conn)) and script_commands(conn)["hmget"] == 2
    assert queue.pop_job_id() == "a-0" and queue.pop_job_id() == "b-0"  # nothing active: the kept passes expire
    assert conn.pttl(queue.fair_keys.kept) > 0 and conn.hget(queue.fair_keys.state, "kept_ttl") == b"1"
    conn.config_resetstat()
    queue.enqueue(fair_jobs.log, "c", 0, fair_tenant="c", job_id="c-0")
    assert script_commands(conn)["persist"] == 1 and "zcard" not in script_commands(conn)
    assert conn.pttl(queue.fair_keys.kept) == -1 and conn.hget(queue.fair_keys.state, "kept_ttl") is None
