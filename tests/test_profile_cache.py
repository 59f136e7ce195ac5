"""The tier cache (controls/tiers.py) keeps a tenant's profile until the tenant changes: a profile read once is
not read again while nothing changes, a change written anywhere through the API (another TierBook, the CLI, a
pause) is seen at the first poll after ``cache_ttl``, and a cache whose last poll is older than the changes
set's horizon starts over. Real Redis, injected clock."""

from __future__ import annotations

import math
from pathlib import Path

import tier_resolvers
from click.testing import CliRunner
from conftest import command_calls
from redis import Redis

from fair_router import FairRouter
from fair_router.cli import main
from fair_router.config.settings import TiersConfig
from fair_router.controls.pauses import TenantPauses
from fair_router.controls.tiers import MAX_AGE, POLL_CAP, TierBook
from fair_router.core.keys import Keys
from fair_router.core.profiles import TenantOverrides
from fair_router.demo.redis_server import RedisServer
from fair_router.store.profile_scripts import PROFILE_HORIZON, NoteChangeScript

KEYS = Keys()


class Ticks:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def reader(conn: Redis, ticks: Ticks, max_age: float = MAX_AGE) -> TierBook:
    return TierBook(conn, KEYS, cache_ttl=5, clock=ticks, max_age=max_age)


def test_a_profile_read_once_is_not_read_again_while_nothing_changes(conn: Redis) -> None:
    ticks = Ticks()
    book = reader(conn, ticks)
    tenants = [f"t{i}" for i in range(50)]
    before = command_calls(conn, "hgetall")
    assert {book.profile(tenant).tier for tenant in tenants} == {"free"}
    assert command_calls(conn, "hgetall") - before == 50  # each read once
    polls = command_calls(conn, "evalsha")
    for step in range(1, 11):  # ten cache_ttl periods, well inside MAX_AGE
        ticks.now = step * 5.5
        for tenant in tenants:
            assert book.profile(tenant).limit == 1
    assert ticks.now < MAX_AGE
    assert command_calls(conn, "hgetall") - before == 50  # none read again
    assert command_calls(conn, "evalsha") - polls == 10  # one poll per cache_ttl, not one per tenant


def test_changes_through_the_api_elsewhere_are_seen_at_the_next_poll(conn: Redis, tmp_path: Path,
                                                                     redis_server: RedisServer) -> None:
    ticks = Ticks()
    book = reader(conn, ticks)
    other = FairRouter(conn)  # another TierBook: another process as far as the cache knows
    assert book.profile("acme").limit == 1 and book.profile("bystander").limit == 1
    assert book.profile("beta").tier == "free"
    other.set_tenant("acme", limit=7)
    other.set_tier("beta", "pro")
    assert book.profile("beta").tier == "free"  # cached
    ticks.now = 4.9
    assert book.profile("acme").limit == 1  # the poll is not due yet
    reads = command_calls(conn, "hgetall")
    ticks.now = 5.0
    assert book.profile("acme").limit == 7 and book.profile("beta").tier == "pro"
    assert book.profile("bystander").limit == 1
    assert command_calls(conn, "hgetall") - reads == 2  # only the two changed tenants were read again

    TenantPauses(conn, KEYS).pause("acme")
    assert not book.profile("acme").paused
    ticks.now = 10.0
    assert book.profile("acme").paused
    TenantPauses(conn, KEYS).resume("acme")
    ticks.now = 15.0
    assert not book.profile("acme").paused

    config = tmp_path / "c.yaml"
    config.write_text(f"redis_url: {redis_server.url}\n")
    result = CliRunner().invoke(main, ["tenant", "set", "acme", "--weight", "3", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert book.profile("acme").weight == 1
    ticks.now = 20.0
    assert book.profile("acme").weight == 3


def test_a_write_here_is_seen_here_at_once(conn: Redis) -> None:
    ticks = Ticks()
    book = reader(conn, ticks)
    assert book.profile("acme").limit == 1
    assert book.set_overrides("acme", TenantOverrides(limit=4)).limit == 4
    book.set("acme", "enterprise")
    assert book.profile("acme").tier == "enterprise"
    router = FairRouter(conn)
    router.tenants.tiers = book
    router.pause("acme")
    assert book.profile("acme").paused


def test_a_hand_edit_is_seen_after_the_max_age(conn: Redis) -> None:
    """A write that bypasses the API notes nothing: the max age is its safety net."""
    ticks = Ticks()
    book = reader(conn, ticks)
    assert book.tier("acme") == "free"
    conn.hset(KEYS.tiers(), "acme", "pro")
    ticks.now = MAX_AGE - 0.5
    assert book.tier("acme") == "free"  # polled many times: nothing noted
    ticks.now = MAX_AGE
    assert book.tier("acme") == "pro"


def test_a_poll_older_than_the_horizon_clears_the_cache(conn: Redis) -> None:
    ticks = Ticks()
    book = reader(conn, ticks, max_age=math.inf)
    assert book.profile("acme").limit == 1
    FairRouter(conn).set_tenant("acme", limit=6)
    # a write an hour later trims acme's note from the set (as a process idle for that long could meet)
    seconds, micros = conn.time()
    later = seconds * 1000 + micros // 1000 + round(PROFILE_HORIZON * 1000) + 10_000
    NoteChangeScript(conn)(KEYS.profile_changes(), "someone-else", str(later)).run()
    assert conn.zscore(KEYS.profile_changes(), "acme") is None
    ticks.now = 5.0
    assert book.profile("acme").limit == 1  # its note is gone: a recent poll cannot know
    ticks.now = PROFILE_HORIZON + 5.0
    assert book.profile("acme").limit == 6  # the last poll is older than the horizon: everything re-read


def test_more_changes_than_the_cap_clear_the_cache(conn: Redis) -> None:
    ticks = Ticks()
    book = reader(conn, ticks, max_age=math.inf)
    assert book.profile("acme").limit == 1
    conn.hset(KEYS.overrides("acme"), "limit", 9)  # by hand: noted by nobody
    note = NoteChangeScript(conn)
    with conn.pipeline(transaction=False) as pipe:
        for i in range(POLL_CAP + 1):
            note(KEYS.profile_changes(), f"bulk-{i}").queue(pipe)
        pipe.execute()
    ticks.now = 5.0
    assert book.profile("acme").limit == 9  # acme was not among them, but the whole cache went


def test_a_resolver_is_asked_again_every_cache_ttl_without_a_read(conn: Redis) -> None:
    ticks = Ticks()
    book = TierBook(conn, KEYS, TiersConfig(resolver="tier_resolvers:from_table"), cache_ttl=5, clock=ticks)
    tier_resolvers.TABLE["acme"] = "pro"
    try:
        assert book.profile("acme").tier == "pro" and book.profile("acme").limit == 3
        reads = command_calls(conn, "hgetall")
        tier_resolvers.TABLE["acme"] = "enterprise"
        assert book.tier("acme") == "pro"
        ticks.now = 5.0
        assert book.tier("acme") == "enterprise" and book.profile("acme").limit == 5
        assert command_calls(conn, "hgetall") == reads
    finally:
        tier_resolvers.TABLE.clear()


def test_a_read_during_which_another_thread_polled_is_not_cached(conn: Redis) -> None:
    """Thread A reads acme's profile; meanwhile acme's overrides change and thread B's lookup polls (evicting
    nothing of acme, not cached yet). A's read began before the change: caching it would keep the old values
    past every later poll (they only ask for newer changes), up to MAX_AGE."""
    ticks = Ticks()
    book = TierBook(conn, KEYS, TiersConfig(resolver="tier_resolvers:interleaved"), cache_ttl=5, clock=ticks)
    writer = TierBook(conn, KEYS)
    book.profile("warm")  # the first poll is behind us

    def meanwhile() -> None:
        writer.set_overrides("acme", TenantOverrides(limit=7))
        ticks.now += 5
        book.profile("other")  # thread B's lookup, with its poll

    tier_resolvers.DURING_READ.append(meanwhile)
    assert book.profile("acme").limit != 7  # read before the change
    assert book.profile("acme").limit == 7  # not cached: read again at once
    assert book.profile("acme").limit == 7
