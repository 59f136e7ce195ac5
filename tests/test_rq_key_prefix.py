"""rq 3.0's ``RQ_KEY_PREFIX`` (read from the environment once, when rq is imported): fair-router keys that
share a script call with an rq key (FairQueue state, crash recovery's staging keys) take their cluster slot
from rq's actual key; our other keys keep our prefix; nothing assumes ``rq:``. Each case runs in a fresh
interpreter, since rq fixes its prefix at import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import TESTS
from redis import Redis
from redis.crc import key_slot

from fair_router.core.keys import Keys, slot_of
from fair_router.demo.redis_server import RedisServer

SCRIPT = textwrap.dedent("""
    import json, sys
    from redis import Redis
    from rq import Queue
    from rq.registry import StartedJobRegistry
    import fair_jobs
    from fair_router import FairQueue, Settings, WeightedSimpleWorker
    from fair_router.core.keys import Keys

    conn = Redis.from_url(sys.argv[1])
    settings = Settings(prefix="fr")
    queue = FairQueue("imports", connection=conn, settings=settings)
    for n in range(6):
        queue.enqueue(fair_jobs.log, "big", n, fair_tenant="big")
    queue.enqueue(fair_jobs.log, "small", 0, fair_tenant="small")
    pending = sorted(k.decode() for k in conn.keys("*"))  # while jobs wait: the fair state exists
    WeightedSimpleWorker([queue], connection=conn, settings=settings).work(burst=True)
    keys = Keys("fr")
    print(json.dumps({
        "rq_list": queue.key,
        "fair": queue.fair_keys.all(),
        "started": StartedJobRegistry("imports", connection=conn).key,
        "abandoned": keys.abandoned(StartedJobRegistry("imports", connection=conn).key),
        "turn": keys.recovery_turn(queue.key),
        "pending": pending,
        "order": [e.decode() for e in conn.lrange(fair_jobs.LOG, 0, -1)],
    }))
""")


def run_with_prefix(url: str, prefix: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RQ_", "FAIR_ROUTER_"))}
    if prefix is not None:
        env["RQ_KEY_PREFIX"] = prefix
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", SCRIPT, url], env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("prefix", [None, "myapp", "{myapp}"])
def test_fair_state_shares_rqs_slot_under_any_rq_key_prefix(redis_server: RedisServer, conn: Redis,
                                                             prefix: str | None) -> None:
    result = run_with_prefix(redis_server.url, prefix)
    rq_prefix = prefix or "rq"
    rq_list = str(result["rq_list"])
    assert rq_list == f"{rq_prefix}:queue:imports"
    together = [*result["fair"], result["turn"]]  # type: ignore[misc]
    assert {key_slot(str(k).encode()) for k in together} == {key_slot(rq_list.encode())}
    assert key_slot(str(result["abandoned"]).encode()) == key_slot(str(result["started"]).encode())
    # every key is rq's (under its prefix) or ours (under ours): none assumes rq's default prefix
    pending = [str(k) for k in result["pending"]]  # type: ignore[attr-defined]
    assert any(k.startswith("fr:") and ":fq:" in k for k in pending), pending
    marks = [k for k in pending if k.startswith("fair_router:mark:")]  # prefix-independent by design (marks.py)
    assert marks == [Keys.fair_mark(rq_list)] and key_slot(marks[0].encode()) == key_slot(rq_list.encode())
    assert all(k.startswith((f"{rq_prefix}:", "fr:")) or k in ("test:fair:order", *marks) for k in pending), pending
    if prefix is not None:
        assert not any(k.startswith("rq:") for k in pending), pending
    order = result["order"]
    assert isinstance(order, list) and len(order) == 7 and order.index("small:0") <= 1, order  # fair, not FIFO


def test_slot_of_takes_the_tag_redis_cluster_uses() -> None:
    assert slot_of("rq:queue:a") == "{rq:queue:a}"
    assert slot_of("{myapp}:queue:a") == "{myapp}:myapp:queue:a"
    assert slot_of("{myapp}:queue:a") != slot_of("{myapp}:queue:b")
    for key in ("rq:queue:a", "{myapp}:queue:a", "x{t}y"):
        assert key_slot(f"fr:{slot_of(key)}:fq:members".encode()) == key_slot(key.encode())
    with pytest.raises(ValueError, match="no hash tag"):
        slot_of("{}:queue:a")
    assert Keys("fr").fair_queue("rq:queue:a").members == "fr:{rq:queue:a}:fq:members"  # unchanged layout
