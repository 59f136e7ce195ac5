"""The fair push as a Redis function (``FairPushScript.as_function``): FCALL on the enqueue's own MULTI once its library
is loaded, and after Redis lost it (FUNCTION FLUSH, a restart without persistence) that MULTI run whole again with
the push as EVAL (fair_router.store.luascript ``execute_loaded``): nothing lost, nothing pushed twice. Real servers."""

from __future__ import annotations

import pytest
import routed_jobs
from conftest import command_calls
from redis import Redis
from rq import Queue
from worker_jobs import noop

from fair_router import FairQueue, Rule, Settings, fair_job


def functions(conn: Redis) -> bool:
    return int(str(conn.info("server")["redis_version"]).split(".")[0]) >= 7


@pytest.fixture
def queue(conn: Redis) -> FairQueue:
    if not functions(conn):
        pytest.skip("Redis < 7 has no functions (the push is EVALSHA there)")
    return FairQueue("pushes", connection=conn, settings=Settings(prefix="pfn"))


def drain(queue: FairQueue) -> list[str]:
    taken = []
    while (job_id := queue.pop_fair().job_id) is not None:
        taken.append(str(job_id))
    return taken


def test_the_push_rides_the_enqueue_multi_as_a_function(conn: Redis, queue: FairQueue) -> None:
    first = queue.enqueue(noop, 0, fair_tenant="a").id  # loads the library
    fcalls = command_calls(conn, "fcall")
    second = queue.enqueue(noop, 1, fair_tenant="b").id
    assert command_calls(conn, "fcall") - fcalls == 1
    assert drain(queue) == [first, second]


def test_an_enqueue_after_redis_lost_its_functions_is_run_again(conn: Redis, queue: FairQueue) -> None:
    first = queue.enqueue(noop, 0, fair_tenant="a").id
    conn.function_flush()  # the next push's FCALL answers "Function not found" inside the enqueue's MULTI
    second = queue.enqueue(noop, 1, fair_tenant="b").id
    assert conn.lrange(queue.key, 0, -1) == [first.encode(), second.encode()]  # listed once each
    assert queue.count == 2
    conn.function_flush()
    many = [job.id for job in queue.enqueue_many([Queue.prepare_data(noop, (i,), meta={"fair_tenant": f"t{i}"})
                                                  for i in range(3)])]
    assert drain(queue) == [first, second, *many]
    assert queue.count == 0 and conn.llen(queue.key) == 0


@pytest.mark.parametrize("scripts_too", [False, True])
def test_a_routed_enqueue_after_redis_lost_its_functions_is_run_again(conn: Redis, queue: FairQueue,
                                                                       scripts_too: bool) -> None:
    """The one-round-trip routed enqueue's MULTI holds route.lua (EVALSHA) and the fair push (FCALL): after Redis lost
    its functions the push answers "Function not found", after a restart route.lua also NOSCRIPT (first); either
    way the MULTI runs again whole."""
    echo = fair_job("default", rules=[Rule(queue="pushes_slow", threshold=1, per="1h")],
                    tenant=lambda account, item=0: account, connection=conn, settings=Settings(prefix="pfn"))(
                        routed_jobs.echo)
    slow = FairQueue("pushes_slow", connection=conn, settings=Settings(prefix="pfn"))
    first, second = echo.delay("acme", 0), echo.delay("acme", 1)  # the second goes to the rule's fair queue
    third = echo.delay("acme", 2)  # expected there: its push rides the routed MULTI
    if scripts_too:
        conn.script_flush()
    conn.function_flush()
    fourth = echo.delay("acme", 3)
    assert first.origin == "default" and {second.origin, third.origin, fourth.origin} == {"pushes_slow"}
    assert conn.lrange(slow.key, 0, -1) == [job.id.encode() for job in (second, third, fourth)]  # once each
    assert drain(slow) == [second.id, third.id, fourth.id]
