"""Property test: route.lua agrees with a plain-Python model of the routing semantics
(docs/internals.md, "Window semantics")."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis

from fair_router import FairRouter, Rule
from fair_router.core.keys import Keys
from fair_router.routing.placement import Route


@dataclass
class Model:
    """Window per tenant of (time ms, member): the newest max(threshold)+1 entries are kept."""

    rules: list[Rule]
    windows: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)

    def route(self, tenant: str, job_id: str, now_ms: int, base: str) -> str:
        cap = max(rule.threshold for rule in self.rules) + 1
        member = Keys.member(job_id)
        entries = self.windows.get(tenant, [])
        if member not in {m for _, m in entries}:
            entries.append((now_ms, member))
        entries = sorted(entries)[-cap:]  # Redis orders equal scores by member bytes
        self.windows[tenant] = entries
        chosen = base
        for rule in self.rules:
            if sum(1 for t, _ in entries if now_ms - rule.per_ms < t <= now_ms) > rule.threshold:
                chosen = rule.queue
        return chosen


# Windows of seconds to minutes on the injected clock: the keys' real-time PEXPIRE (the longest
# window, at least 5 s) cannot fire while one example runs.
rules_strategy = st.lists(
    st.builds(
        lambda i, threshold, per_ms: Rule(queue=f"q{i}", threshold=threshold, per=per_ms / 1000),
        st.integers(0, 9), st.integers(1, 6), st.sampled_from([5_000, 20_000, 60_000, 300_000]),
    ),
    min_size=1, max_size=3,
)
ops_strategy = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c{x}"]), st.integers(0, 90_000), st.one_of(st.none(), st.integers(0, 3))),
    min_size=1, max_size=60,
)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_700_000_000_000

    def __call__(self) -> float:
        return self.ms / 1000


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rules=rules_strategy, ops=ops_strategy)
def test_route_script_matches_model(conn: Redis, rules: list[Rule], ops: list[tuple[str, int, int | None]]) -> None:
    conn.flushall()
    clock = Clock()
    router = FairRouter(conn, clock=clock)
    model = Model(rules)
    issued: list[str] = []
    for n, (tenant, advance_ms, repeat) in enumerate(ops):
        clock.ms += advance_ms
        # A repeat re-sends one of the last few job ids (as rq would re-enqueue a recent job).
        job_id = issued[-1 - repeat % len(issued)] if repeat is not None and issued else f"job-{n}"
        issued.append(job_id)
        expected = model.route(tenant, job_id, clock.ms, "base")
        assert router.record_and_route("app.job", tenant, job_id, "base", rules) == expected, (n, tenant, job_id)


# Batches: several jobs of a tenant in one call are recorded together (lib/windows.lua record_all_and_match).
# Thresholds near 127 take windows past a listpack's 128 entries; a clock stepping back leaves entries newer than
# now (a server's TIME after a failover to a replica that is behind, or two injected clocks).
batch_rules_strategy = st.lists(
    st.builds(
        lambda i, threshold, per_ms: Rule(queue=f"q{i}", threshold=threshold, per=per_ms / 1000),
        st.integers(0, 9), st.one_of(st.integers(1, 6), st.integers(118, 130)),
        st.sampled_from([5_000, 20_000, 60_000]),
    ),
    min_size=1, max_size=3,
)
batches_strategy = st.lists(
    st.tuples(
        st.integers(-3_000, 30_000),
        st.lists(st.tuples(st.sampled_from(["a", "b", "c{x}"]), st.one_of(st.none(), st.integers(0, 5))),
                 min_size=1, max_size=150),
    ),
    min_size=1, max_size=6,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rules=batch_rules_strategy, batches=batches_strategy)
def test_a_batch_routes_as_its_jobs_would_one_by_one(conn: Redis, rules: list[Rule],
                                                     batches: list[tuple[int, list[tuple[str, int | None]]]]) -> None:
    """Each job of a batch matches the rule it would match recorded alone in turn (repeated ids included), and
    the windows keep the same entries."""
    conn.flushall()
    clock = Clock()
    router = FairRouter(conn, clock=clock)
    model = Model(rules)
    route = Route("app.job", "base", tuple(rules))
    issued: list[str] = []
    for b, (advance_ms, jobs) in enumerate(batches):
        clock.ms += advance_ms
        batch: list[tuple[str, str]] = []
        for n, (tenant, repeat) in enumerate(jobs):
            job_id = issued[-1 - repeat % len(issued)] if repeat is not None and issued else f"job-{b}-{n}"
            issued.append(job_id)
            batch.append((tenant, job_id))
        expected = [model.route(tenant, job_id, clock.ms, "base") for tenant, job_id in batch]
        got = [rule.queue if rule else "base" for rule in router.record_and_choose(route, batch)]
        assert got == expected, b
    for tenant, entries in model.windows.items():
        stored = conn.zrange(router.keys.window("app.job", tenant), 0, -1, withscores=True)
        assert sorted((int(score), member) for member, score in stored) == sorted(entries), tenant


def test_a_batch_into_a_large_window_holding_newer_entries_routes_as_one_by_one(conn: Redis) -> None:
    """A window past a listpack's size (read by ZMSCORE, not whole) whose newest entries are ahead of the clock:
    they outlive every trim, so one by one the range's count stops below the threshold; the batch must see it."""
    conn.flushall()
    clock = Clock()
    router = FairRouter(conn, clock=clock)
    rules = [Rule(queue="slow", threshold=129, per=60)]  # the newest 130 entries are kept
    model = Model(rules)
    route = Route("app.job", "base", tuple(rules))
    for step, (advance_ms, count) in enumerate([(-1_000, 125), (2_000, 5), (-1_000, 10)]):
        clock.ms += advance_ms
        batch = [("t", f"job-{step}-{i}") for i in range(count)]
        expected = [model.route(tenant, job_id, clock.ms, "base") for tenant, job_id in batch]
        assert [rule.queue if rule else "base" for rule in router.record_and_choose(route, batch)] == expected, step
    assert expected == ["base"] * 10  # the 125 in range stay 125: each add trims one of them
