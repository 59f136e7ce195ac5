"""``fair-router queue show``: the next jobs of a queue in the order workers will serve them, with their tenants.
Real Redis, a real in-process weighted worker to check the listed order is the served one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

import fair_jobs
import pytest
from click.testing import CliRunner
from conftest import write_settings
from redis import Redis
from rq import Queue

from fair_router import FairQueue, Settings, WeightedSimpleWorker
from fair_router.cli import main
from fair_router.demo.redis_server import RedisServer

pytestmark = pytest.mark.usefixtures("isolated_settings")

BIG, SMALL = 12, 3
ROW = re.compile(r"^\s+(\d+)\. (\S+)\s+tenant=(\S+)\s+(\S+)$")


def listed(output: str, name: str) -> tuple[str, list[tuple[str, str]]]:
    """The block of ``name`` in ``queue show``'s output: its header lines, and its (job id, tenant) rows."""
    block = output.split(f"{name}: ", 1)[1]
    block = re.split(r"\n(?=\S)", block, maxsplit=1)[0]  # up to the next queue's header
    rows = [ROW.match(line) for line in block.splitlines()]
    return block, [(row[2], row[3]) for row in rows if row is not None]


def flood(queue: Queue, fair: bool) -> list[str]:
    """The big tenant's 12 jobs, then the small tenant's 3; their ids in enqueue order."""
    ids = []
    for tenant, count in (("big", BIG), ("small", SMALL)):
        for n in range(count):
            if fair:
                job = cast(FairQueue, queue).enqueue(fair_jobs.log, tenant, n, fair_tenant=tenant)
            else:
                job = queue.enqueue(fair_jobs.log, tenant, n, meta={"fair_tenant": tenant})
            ids.append(job.id)
    return ids


def test_show_lists_the_serving_order_with_tenants(conn: Redis, redis_server: RedisServer, tmp_path: Path) -> None:
    config = write_settings(tmp_path, {"prefix": "qs", "redis_url": redis_server.url})
    settings = Settings(prefix="qs")
    fair = FairQueue("qs_reports", connection=conn, settings=settings)
    plain = Queue("qs_exports", connection=conn)
    fair_ids, plain_ids = flood(fair, True), flood(plain, False)

    shown = CliRunner().invoke(main, ["queue", "show", "qs_reports", "qs_exports", "--limit", "15",
                                      "--config", str(config)])
    assert shown.exit_code == 0, shown.output
    header, fair_rows = listed(shown.output, "qs_reports")
    assert header.startswith("fair (state under prefix 'qs')")
    assert "next 15 of 15 waiting, in serving order (fair share across tenants):" in header
    tenants = [tenant for _, tenant in fair_rows]
    # the small tenant is not behind the big one's 12: the first six alternate, then the big one's rest
    assert tenants[:6] in (["big", "small"] * 3, ["small", "big"] * 3), tenants
    assert tenants[6:] == ["big"] * (BIG - 3)
    assert sorted(job_id for job_id, _ in fair_rows) == sorted(fair_ids)
    assert [job_id for job_id, _ in fair_rows] == fair.get_job_ids()

    header, plain_rows = listed(shown.output, "qs_exports")
    assert header.startswith("plain")
    assert "next 15 of 15 waiting, in rq's order (list head first):" in header
    assert plain_rows == [(job_id, "big") for job_id in plain_ids[:BIG]] + [(job_id, "small")
                                                                          for job_id in plain_ids[BIG:]]

    # the listed order is the order a weighted worker then serves
    WeightedSimpleWorker([fair], connection=conn, settings=settings).work(burst=True)
    ran = [entry.decode() for entry in cast(list[bytes], conn.lrange(fair_jobs.LOG, 0, -1))]
    assert [entry.split(":")[0] for entry in ran] == tenants


def test_show_limit(conn: Redis, redis_server: RedisServer, tmp_path: Path) -> None:
    config = write_settings(tmp_path, {"prefix": "qs", "redis_url": redis_server.url})
    fair = FairQueue("qs_limit", connection=conn, settings=Settings(prefix="qs"))
    flood(fair, True)
    runner = CliRunner()

    default = runner.invoke(main, ["queue", "show", "qs_limit", "--config", str(config)])
    assert default.exit_code == 0, default.output
    header, rows = listed(default.output, "qs_limit")
    assert "next 10 of 15 waiting" in header and len(rows) == 10
    assert [job_id for job_id, _ in rows] == fair.get_job_ids(0, 10)

    none = runner.invoke(main, ["queue", "show", "qs_limit", "--limit", "0", "--config", str(config)])
    assert none.exit_code == 0 and none.output == "qs_limit: fair (state under prefix 'qs')\n"

    refused = runner.invoke(main, ["queue", "show", "qs_limit", "--limit", "-1", "--config", str(config)])
    assert refused.exit_code == 2 and "--limit" in refused.output

    empty = runner.invoke(main, ["queue", "show", "qs_nothing", "--config", str(config)])
    assert empty.exit_code == 0 and empty.output == "qs_nothing: plain\n  no job waiting\n"


def test_show_names_jobs_another_serializer_wrote_instead_of_failing(conn: Redis, redis_server: RedisServer,
                                                                     tmp_path: Path) -> None:
    from rq.serializers import JSONSerializer

    config = write_settings(tmp_path, {"redis_url": redis_server.url})
    queue = FairQueue("qs_json", connection=conn, serializer=JSONSerializer)
    job = queue.enqueue("fair_jobs.log", "acme", 1, fair_tenant="acme")

    shown = CliRunner().invoke(main, ["queue", "show", "qs_json", "--config", str(config)])
    assert shown.exit_code == 0, shown.output
    line = next(line for line in shown.output.splitlines() if job.id in line)
    assert "unreadable with rq's default serializer" in line, shown.output
