"""Fairness never switches off silently: a queue marked fair in Redis (by a FairQueue's first job, or by a
weighted worker with the queue in ``fair_queues:``) is served and filled as a FairQueue by every weighted
worker and producer of ours, whatever flags they were started with; only ``fair-router queue plain`` takes
the mark away, and only while the queue is empty. Real Redis, real ``rq worker`` processes."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import cast

import fair_jobs
import pytest
from click.testing import CliRunner
from conftest import Fleet, write_settings
from redis import Redis
from rq import Queue

from fair_router import FairQueue, FairRouter, Settings, WeightedSimpleWorker, fair_job
from fair_router.cli import main
from fair_router.fairqueue.marks import FairnessMarks, mark_key

pytestmark = pytest.mark.usefixtures("isolated_settings")

BIG, SMALL = 30, 3


def ran(conn: Redis) -> list[str]:
    return [entry.decode() for entry in cast(list[bytes], conn.lrange(fair_jobs.LOG, 0, -1))]


def small_positions(order: list[str]) -> list[int]:
    return [i for i, entry in enumerate(order) if not entry.startswith("big")]


def flood(enqueue: object) -> None:
    """The greedy tenant's backlog first, then three small tenants' one job each."""
    for n in range(BIG):
        enqueue("big", n)  # type: ignore[operator]
    for tenant in ("s1", "s2", "s3"):
        enqueue(tenant, 0)  # type: ignore[operator]


def drain_with_rq_cli(redis_url: str, tmp_path: Path, config: dict[str, object], queue: str) -> Fleet:
    fleet = Fleet(redis_url, tmp_path, queues=[queue])
    fleet.config = write_settings(tmp_path, config)
    (proc,) = fleet.start(scheduler=False, burst=True)  # `rq worker -w fair_router.WeightedWorker`, no --queue-class
    assert fleet.wait_exit(proc, 60) == 0, fleet.logs()
    return fleet


def test_fair_queues_setting_alone_makes_rq_cli_workers_and_producers_fair(redis_server, conn: Redis,
                                                                           tmp_path: Path) -> None:
    config = {"prefix": "mk", "fair_queues": ["fairq"], "redis_url": redis_server.url}
    settings = Settings.model_validate(config)

    # the producer: no fair=True, only the settings' fair_queues:
    job = fair_job("fairq", tenant=lambda tenant, n: tenant, connection=conn, settings=settings)(fair_jobs.log)
    flood(job.delay)
    assert isinstance(job.fair_job.router.queue("fairq"), FairQueue)  # fair_queues: alone, at the producer
    drain_with_rq_cli(redis_server.url, tmp_path, config, "fairq")
    order = ran(conn)
    assert len(order) == BIG + SMALL
    assert max(small_positions(order)) < 8, order  # FIFO would put them at 30-32
    assert conn.get(mark_key("fairq")) == b"mk"  # the worker recorded it in Redis


def test_a_queue_marked_by_its_first_fair_job_is_fair_for_workers_and_producers_without_flags(
        redis_server, conn: Redis, tmp_path: Path) -> None:
    producer = FairQueue("imports", connection=conn, settings=Settings(prefix="mk"))
    producer.enqueue(fair_jobs.log, "big", 0, fair_tenant="big")  # the first fair job marks the queue
    assert conn.get(mark_key("imports")) == b"mk"
    router = FairRouter(conn, prefix="mk")  # a producer that never heard of fair=True
    plain_producer = router.queue("imports")
    assert isinstance(plain_producer, FairQueue)
    for n in range(1, BIG):
        plain_producer.enqueue(fair_jobs.log, "big", n, meta={"fair_tenant": "big"})
    for tenant in ("s1", "s2", "s3"):
        plain_producer.enqueue(fair_jobs.log, tenant, 0, meta={"fair_tenant": tenant})
    # no fair_queues: in the worker's settings, no --queue-class: the mark alone decides
    drain_with_rq_cli(redis_server.url, tmp_path, {"prefix": "mk"}, "imports")
    order = ran(conn)
    assert len(order) == BIG + SMALL and max(small_positions(order)) < 8, order
    assert FairQueue("imports", connection=conn, settings=Settings(prefix="mk")).count == 0


def test_a_prefix_mismatch_is_reported_and_still_served_fairly(conn: Redis, caplog: pytest.LogCaptureFixture) -> None:
    producer = FairQueue("mixed", connection=conn, settings=Settings(prefix="producers"))
    flood(lambda tenant, n: producer.enqueue(fair_jobs.log, tenant, n, fair_tenant=tenant))
    worker = WeightedSimpleWorker([Queue("mixed", connection=conn)], connection=conn,
                                  settings=Settings(prefix="workers"))
    with caplog.at_level(logging.ERROR, logger="fair_router"):
        worker.work(burst=True)
    assert "under prefix 'producers', but this process uses prefix 'workers'" in caplog.text
    order = ran(conn)
    assert len(order) == BIG + SMALL and max(small_positions(order)) < 8, order
    assert producer.count == 0 and conn.hlen(producer.fair_keys.members) == 0  # nothing left behind


def test_a_worker_already_running_picks_up_a_mark_set_later(conn: Redis) -> None:
    worker = WeightedSimpleWorker([Queue("late", connection=conn)], connection=conn, settings=Settings(prefix="mk"))
    assert not worker.fair_queues
    FairnessMarks(conn, "mk").mark(["late"])
    worker.fairness.marks._read.clear()  # what RECHECK_EVERY seconds do
    worker.duties.beat()
    assert [queue.name for queue in worker.fair_queues] == ["late"]
    assert all(isinstance(queue, FairQueue) for queue in worker.queues)


def test_queue_plain_is_refused_while_jobs_wait_and_clears_an_empty_queue(conn: Redis, tmp_path: Path,
                                                                         redis_server) -> None:
    config = write_settings(tmp_path, {"prefix": "mk", "redis_url": redis_server.url})
    queue = FairQueue("reports", connection=conn, settings=Settings(prefix="mk"))
    queue.enqueue(fair_jobs.log, "a", 0, fair_tenant="a")
    runner = CliRunner()
    shown = runner.invoke(main, ["queue", "show", "reports", "other", "--config", str(config)])
    assert shown.exit_code == 0 and "reports: fair (state under prefix 'mk')" in shown.output
    assert "other: plain" in shown.output
    refused = runner.invoke(main, ["queue", "plain", "reports", "--config", str(config)])
    assert refused.exit_code == 1 and "1 job(s) still wait" in refused.output
    assert conn.get(mark_key("reports")) == b"mk"
    WeightedSimpleWorker([queue], connection=conn, settings=Settings(prefix="mk")).work(burst=True)
    cleared = runner.invoke(main, ["queue", "plain", "reports", "--config", str(config)])
    assert cleared.exit_code == 0 and "reports: plain" in cleared.output
    assert conn.get(mark_key("reports")) is None
    marked = runner.invoke(main, ["queue", "fair", "reports", "--config", str(config)])
    assert marked.exit_code == 0 and conn.get(mark_key("reports")) == b"mk"
