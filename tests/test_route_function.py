"""route.lua as a Redis function (fair_router.store.luascript ``as_function``): a router's own route call
(``FairRouter.place``: the two-step path, batches, ``record_and_route``) is an FCALL where the server has
functions, with the windows EVALSHA would record; over maxmemory the function is refused upfront (no allow-oom
flag: it writes), recording nothing; the one-round-trip enqueue's MULTI keeps EVALSHA. Real servers."""

from __future__ import annotations

import pytest
from conftest import command_calls
from redis import Redis
from redis.exceptions import OutOfMemoryError

from fair_router import FairRouter, Rule
from fair_router.demo.redis_server import RedisServer

RULES = (Rule(queue="slow", threshold=2, per="1h"),)


def functions(conn: Redis) -> bool:
    return int(str(conn.info("server")["redis_version"]).split(".")[0]) >= 7


def rejected_fcalls(conn: Redis) -> int:
    return int(conn.info("commandstats").get("cmdstat_fcall", {}).get("rejected_calls", 0))


def routes(router: FairRouter, n: int) -> list[str]:
    return [router.record_and_route("job", "acme", f"j{i}", "default", RULES) for i in range(n)]


def test_a_routers_own_route_call_is_a_function_recording_what_evalsha_records(conn: Redis) -> None:
    if not functions(conn):
        pytest.skip("Redis < 7 has no functions")
    conn.function_flush()
    router = FairRouter(conn, prefix="rfn")
    fcalls, evalshas = command_calls(conn, "fcall"), command_calls(conn, "evalsha")
    assert routes(router, 4) == ["default", "default", "slow", "slow"]  # the third passes threshold 2
    # The first call rides the route's announcement in a pipeline (EVAL); the next three are FCALLs (the first of
    # them met "Function not found" and loaded the library: counted twice)
    assert command_calls(conn, "fcall") - fcalls == 4
    assert command_calls(conn, "evalsha") - evalshas == 0
    assert any(entry[entry.index(b"library_name") + 1].startswith(b"fair_router_route_")
               for entry in conn.function_list())
    as_script = FairRouter(conn, prefix="rsc")  # the same calls as EVALSHA: the same answers and windows
    as_script._route.function = None
    assert routes(as_script, 4) == ["default", "default", "slow", "slow"]
    windows = {prefix: [conn.zcard(key) for key in conn.scan_iter(match=f"{prefix}:*win*")]
               for prefix in ("rfn", "rsc")}
    assert windows["rfn"] == windows["rsc"] == [3]  # the newest cap (threshold + 1) entries kept


def test_over_maxmemory_the_route_function_is_refused_and_records_nothing() -> None:
    with RedisServer() as server:
        conn = server.client()
        if not functions(conn):
            pytest.skip("Redis < 7 has no functions")
        router = FairRouter(conn, prefix="oom")
        assert routes(router, 2) == ["default", "default"]  # the second an FCALL: the library is loaded
        refused = rejected_fcalls(conn)
        conn.config_set("maxmemory", 1)
        try:
            with pytest.raises(OutOfMemoryError, match="maxmemory"):
                routes(router, 1)
        finally:
            conn.config_set("maxmemory", 0)
        assert rejected_fcalls(conn) - refused == 1  # refused upfront, before it ran
        assert [conn.zcard(key) for key in conn.scan_iter(match="oom:*win*")] == [2]  # the refused call: nothing
        conn.close()
