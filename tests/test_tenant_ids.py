"""One tenant type on every public path: a tenant id is a ``str`` or an ``int`` (its decimal
string); anything else raises TypeError naming the type; an empty id, one over ``tenant_max_bytes`` bytes of
UTF-8 or one with lone surrogates raises InvalidTenant (a ValueError naming the limit); and a refused call
writes nothing to Redis. Each path is driven with arbitrary values of many types (hypothesis) and checked
against :func:`expected`, a model written here independently of ``fair_router.core.tenancy``."""

from __future__ import annotations

import enum
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import routed_jobs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis
from rq.job import Job

from fair_router import FairQueue, FairRouter, Rule, fair_job
from fair_router.config.settings import Settings, TiersConfig
from fair_router.core.tenancy import InvalidTenant, tenant_id
from fair_router.demo.redis_server import RedisServer
from fair_router.fairqueue.pushing import waiting

MAX = 256


class Color(enum.IntEnum):
    RED = 7


class Shouty(str):
    def __str__(self) -> str:
        return self.upper() + "!"


VALUES = st.one_of(
    st.text(max_size=40),
    st.text(min_size=60, max_size=300),  # around the 256-byte limit (multi-byte characters count more)
    st.integers(),
    st.integers(min_value=10**250, max_value=10**400),
    st.booleans(),
    st.none(),
    st.sampled_from([bytes, bytearray, float, complex, list, tuple, dict, set, frozenset]).flatmap(st.from_type),
    st.builds(object),
    st.just(Color.RED),
    st.sampled_from(["", "\ud800", "a\udfffb", "x" * 256, "é" * 128, "é" * 129, "💥" * 64, "💥" * 65]),
)
HYPOTHESIS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def expected(value: object) -> str | type[Exception]:
    """The stored tenant for ``value``, or the exception type every path must raise for it."""
    if type(value) is bool or not isinstance(value, (str, int)):
        return TypeError
    text = str(int(value)) if isinstance(value, int) else "".join(value)  # join: the characters, not __str__
    if not text:
        return InvalidTenant
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return InvalidTenant
    return InvalidTenant if size > MAX else text


def check(conn: Redis, value: object, call: Callable[[], Any], stored: Callable[[str], bool]) -> None:
    """``call`` either raises what :func:`expected` says (naming the type, or the limit) with nothing written,
    or succeeds and ``stored(tenant)`` holds for the normalised tenant."""
    conn.flushall()
    want = expected(value)
    if isinstance(want, str):
        call()
        assert stored(want), f"{value!r} not stored as {want!r}"
        return
    with pytest.raises(want) as raised:
        call()
    if want is TypeError:
        assert type(value).__name__ in str(raised.value)
    elif len(str(value)) > 60:
        assert "tenant_max_bytes (256 bytes)" in str(raised.value)
    assert len(str(raised.value)) < 400
    assert conn.dbsize() == 0, conn.keys("*")


def test_the_model_agrees_with_the_normaliser_on_examples() -> None:
    assert tenant_id(42) == "42" and tenant_id(Color.RED) == "7" and tenant_id(Shouty("ab")) == "ab"
    for bad in (True, b"abc", 1.5, None, object(), ["a"]):
        with pytest.raises(TypeError, match=type(bad).__name__):
            tenant_id(bad)
    with pytest.raises(InvalidTenant, match=r"tenant_max_bytes \(256 bytes\)"):
        tenant_id("x" * 257)
    with pytest.raises(InvalidTenant, match=r"tenant_max_bytes \(16 bytes\)"):
        tenant_id(10**20, max_bytes=16)
    assert tenant_id("é" * 8, max_bytes=16) == "é" * 8


@HYPOTHESIS
@given(value=VALUES)
def test_router_pause_resume_and_paused(conn: Redis, value: object) -> None:
    router = FairRouter(conn)
    check(conn, value, lambda: router.pause(value),  # type: ignore[arg-type]
          lambda t: bool(conn.exists(router.keys.paused(t))) and router.paused(t))


@HYPOTHESIS
@given(value=VALUES)
def test_router_set_tenant_and_profile(conn: Redis, value: object) -> None:
    router = FairRouter(conn)
    check(conn, value, lambda: router.set_tenant(value, limit=2),  # type: ignore[arg-type]
          lambda t: conn.hget(router.keys.overrides(t), "limit") == b"2" and router.tenant(t).limit == 2)


@HYPOTHESIS
@given(value=VALUES)
def test_router_set_tier(conn: Redis, value: object) -> None:
    router = FairRouter(conn)
    check(conn, value, lambda: router.set_tier(value, "pro"),  # type: ignore[arg-type]
          lambda t: conn.hget(router.keys.tiers(), t) == b"pro" and router.get_tier(t) == "pro")


@HYPOTHESIS
@given(value=VALUES)
def test_router_record_and_route(conn: Redis, value: object) -> None:
    router = FairRouter(conn)
    rules = [Rule(queue="slow", threshold=5, per="1h")]
    check(conn, value, lambda: router.record_and_route("job", value, "j1", "base", rules),  # type: ignore[arg-type]
          lambda t: conn.zcard(router.keys.window("job", t)) == 1)


@HYPOTHESIS
@given(value=VALUES)
def test_decorator_explicit_tenant(conn: Redis, value: object) -> None:
    job = fair_job("default", rules=[Rule(queue="slow", threshold=5, per="1h")], router=FairRouter(conn),
                   job_key="app.echo")(routed_jobs.echo)
    enqueued: list[Job] = []
    if value is None:  # fair_tenant=None: no explicit tenant (and no tenant callable): base queue, unthrottled
        conn.flushall()
        assert job.enqueue("acme", fair_tenant=None).meta["fair_tenant"] is None
        return
    check(conn, value, lambda: enqueued.append(job.enqueue("acme", fair_tenant=value)),
          lambda t: enqueued[0].meta["fair_tenant"] == t
          and conn.zcard(job.fair_job.router.keys.window("app.echo", t)) == 1)


@HYPOTHESIS
@given(value=VALUES)
def test_decorator_tenant_callable(conn: Redis, value: object) -> None:
    job = fair_job("default", tenant=lambda account, item=0: account, router=FairRouter(conn))(routed_jobs.echo)
    enqueued: list[Job] = []
    if value is None:  # the callable returning None: no tenant, as documented
        conn.flushall()
        assert job.delay(None).meta["fair_tenant"] is None  # type: ignore[arg-type]
        return
    check(conn, value, lambda: enqueued.append(job.delay(value)),  # type: ignore[arg-type]
          lambda t: Job.fetch(enqueued[0].id, connection=conn).meta["fair_tenant"] == t)


@HYPOTHESIS
@given(values=st.lists(VALUES.filter(lambda v: v is not None), min_size=1, max_size=4))
def test_decorator_enqueue_many_refuses_the_whole_batch(conn: Redis, values: list[object]) -> None:
    job = fair_job("default", rules=[Rule(queue="slow", threshold=50, per="1h")], router=FairRouter(conn),
                   job_key="app.many")(routed_jobs.echo)
    conn.flushall()
    wants = [expected(value) for value in values]
    items = [(("acme", i), {"fair_tenant": value}) for i, value in enumerate(values)]
    refusal = next((want for want in wants if not isinstance(want, str)), None)
    if refusal is None:
        jobs = job.enqueue_many(items)
        assert [j.meta["fair_tenant"] for j in jobs] == wants
        return
    with pytest.raises((TypeError, InvalidTenant)):
        job.enqueue_many(items)
    assert conn.dbsize() == 0


@HYPOTHESIS
@given(value=VALUES)
def test_fair_queue_enqueue(conn: Redis, value: object, isolated_settings: None) -> None:
    queue = FairQueue("fq", connection=conn, prefix="fr", tiers=TiersConfig())  # tenant_max_bytes: the default
    enqueued: list[Job] = []
    if value is None:
        conn.flushall()
        assert queue.enqueue(routed_jobs.echo, "acme", fair_tenant=None).meta.get("fair_tenant") is None
        return
    check(conn, value, lambda: enqueued.append(queue.enqueue(routed_jobs.echo, "acme", fair_tenant=value)),
          lambda t: enqueued[0].meta["fair_tenant"] == t
          and waiting(conn, queue.fair_keys, [queue.tenant_key(t)]) == {queue.tenant_key(t): 1})


@HYPOTHESIS
@given(value=VALUES.filter(lambda v: v is not None))
def test_fair_queue_enqueue_many_checks_the_meta_s_tenant(conn: Redis, value: object) -> None:
    queue = FairQueue("fq", connection=conn, settings=Settings())
    check(conn, value,
          lambda: queue.enqueue_many([FairQueue.prepare_data(routed_jobs.echo, ("a",), meta={"fair_tenant": value})]),
          lambda t: waiting(conn, queue.fair_keys, [queue.tenant_key(t)]) == {queue.tenant_key(t): 1})


def test_fair_queue_and_router_read_tenant_max_bytes_from_the_settings(conn: Redis) -> None:
    queue = FairQueue("fq", connection=conn, settings=Settings(tenant_max_bytes=16))
    with pytest.raises(InvalidTenant, match=r"tenant_max_bytes \(16 bytes\)"):
        queue.enqueue(routed_jobs.echo, "a", fair_tenant="x" * 17)
    assert queue.enqueue(routed_jobs.echo, "a", fair_tenant="x" * 16).meta["fair_tenant"] == "x" * 16
    job = fair_job("default", connection=conn, settings=Settings(tenant_max_bytes=16))(routed_jobs.echo)
    with pytest.raises(InvalidTenant):
        job.enqueue("a", fair_tenant="y" * 17)
    assert conn.keys("*y*") == []


def test_an_int_tenant_and_its_string_are_one_tenant(conn: Redis) -> None:
    router = FairRouter(conn)
    rules = [Rule(queue="slow", threshold=1, per="1h")]
    assert router.record_and_route("k", 42, "j1", "base", rules) == "base"
    assert router.record_and_route("k", "42", "j2", "base", rules) == "slow"
    router.pause(42)
    assert router.paused("42")


@pytest.mark.parametrize("tenant", ["acme", "ünïcödé-☃", "x" * 256, "x" * 257, "", "é" * 129])
def test_cli_tenant_commands(redis_server: RedisServer, conn: Redis, tenant: str, tmp_path: Path) -> None:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("FAIR_ROUTER_")},
           "FAIR_ROUTER_REDIS_URL": redis_server.url}
    want = expected(tenant)
    for command in (["tenant", "pause"], ["tenant", "set", "--limit", "2"], ["tier", "set"], ["tenant", "show"]):
        conn.flushall()
        args = [*command, tenant] + (["pro"] if command == ["tier", "set"] else [])
        done = subprocess.run([sys.executable, "-m", "fair_router.cli", *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert "Traceback" not in done.stderr + done.stdout
        if isinstance(want, str):
            assert done.returncode == 0, done.stderr
        else:
            assert done.returncode == 2, (args, done.stderr)
            assert done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
            assert "empty" in done.stderr if not tenant else "tenant_max_bytes (256 bytes)" in done.stderr
            assert conn.dbsize() == 0
