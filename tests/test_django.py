"""fair-router in a real Django project with django-rq (tests/django_project: sqlite, settings, the ``shop`` app
and its tasks), against a real redis-server: django-rq's ``rqworker`` with ``--worker-class
fair_router.WeightedWorker`` and nothing else serves a fair queue fairly beside a plain one; rq's
``--queue-class`` with a user's Queue class serves it fairly or is refused naming the fix; a ``@fair_job``
function stays an rq job function for every enqueue; its ``delay`` in a Django transaction waits for the commit.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job

from fair_router import FairQueue, Settings, WeightedSimpleWorker
from fair_router.fairqueue.combined import QueueClassConflict, fair_class_of
from fair_router.fairqueue.marks import FairnessMarks, mark_key

pytestmark = [pytest.mark.usefixtures("isolated_settings"),
              pytest.mark.skipif(importlib.util.find_spec("django_rq") is None,
                                 reason="the django extra (django, django-rq) is not installed")]

PROJECT = Path(__file__).parent / "django_project"
RAN = "shop:ran"
BIG, SMALL = 300, 5


def environment(redis_url: str, tmp_path: Path, fair_router: dict[str, Any] | None = None,
                **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIR_ROUTER_", "SHOP_", "DJANGO_"))}
    env.update(SHOP_REDIS_URL=redis_url, SHOP_DB=str(tmp_path / "shop.sqlite3"), **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT), env.get("PYTHONPATH")]))
    if fair_router is not None:
        env["SHOP_FAIR_ROUTER"] = json.dumps(fair_router)
    return env


def manage(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python manage.py ARGS`` in the test project."""
    return subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def shop(env: dict[str, str], *args: str) -> dict[str, Any]:
    """``manage.py shop ARGS`` (the project's own command): the JSON it printed."""
    done = manage(env, "shop", *args)
    assert done.returncode == 0, done.stderr
    return cast(dict[str, Any], json.loads(done.stdout.strip().splitlines()[-1]))


def rqworker(env: dict[str, str], *queues: str) -> subprocess.CompletedProcess[str]:
    """django-rq's ``rqworker`` with fair-router's worker class and nothing else, in burst mode."""
    done = manage(env, "rqworker", "--worker-class", "fair_router.WeightedWorker", "--burst", *queues, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def ran(conn: Redis) -> list[str]:
    return [entry.decode() for entry in cast(list[bytes], conn.lrange(RAN, 0, -1))]


def flood(queue: FairQueue) -> None:
    """The big tenant's backlog first, then the small one's jobs."""
    for n in range(BIG):
        queue.enqueue("shop.tasks.log", "big", n, fair_tenant="big")
    for n in range(SMALL):
        queue.enqueue("shop.tasks.log", "small", n, fair_tenant="small")


def last_small(order: list[str]) -> int:
    """1-based position of the small tenant's last job among the fair queue's jobs."""
    fair = [entry for entry in order if entry.split(":")[0] in ("big", "small")]
    assert len(fair) == BIG + SMALL, order
    return max(i for i, entry in enumerate(fair, 1) if entry.startswith("small:"))


# -- fair serving follows the queue, not its class ---------------------------------------------------------


def test_django_rq_rqworker_serves_its_fair_queue_fairly_beside_a_plain_one(redis_server, conn: Redis,
                                                                           tmp_path: Path) -> None:
    flood(FairQueue("fair", connection=conn))  # the producer's first fair job marks the queue fair in Redis
    for n in range(3):
        Queue("default", connection=conn).enqueue("shop.tasks.log", "plain", n)
    done = rqworker(environment(redis_server.url, tmp_path), "default", "fair")  # no FAIR_ROUTER, no QUEUE_CLASS
    order = ran(conn)
    assert sorted(entry for entry in order if entry.startswith("plain:")) == ["plain:0", "plain:1", "plain:2"]
    position = last_small(order)
    assert position <= 12, order[:20]  # first-in first-out (before the fix): 305
    assert "queue fair is marked fair: serving it as FairDjangoRQ" in done.stdout + done.stderr


def test_fair_queues_in_django_settings_make_rqworker_serve_the_queue_fairly(redis_server, conn: Redis,
                                                                           tmp_path: Path) -> None:
    flood(FairQueue("fair", connection=conn))
    conn.delete(mark_key("fair"))  # unmarked: only the worker's settings say the queue is fair
    done = rqworker(environment(redis_server.url, tmp_path, fair_router={"fair_queues": ["fair"]}), "fair")
    assert last_small(ran(conn)) <= 12
    assert conn.get(mark_key("fair")) == b"fair_router"  # the worker marked it
    assert "serving it as" not in done.stdout + done.stderr  # built fair at the start, not switched later


def test_a_django_rq_queue_served_fairly_keeps_django_rqs_own_behaviour(redis_server, tmp_path: Path) -> None:
    seen = shop(environment(redis_server.url, tmp_path), "fair-class")
    assert seen["class"] == "FairDjangoRQ" and seen["fair"]
    assert seen["mro"][:4] == ["FairDjangoRQ", "DjangoRQ", "FairQueue", "RqQueueSeam"]  # django-rq's methods first
    assert seen["commit_mode"] == "auto"  # the instance's commit_mode survives the rebuild


def test_a_fairqueue_built_by_django_rq_says_commit_mode_does_not_apply(redis_server, tmp_path: Path) -> None:
    seen = shop(environment(redis_server.url, tmp_path), "fairqueue-class")
    assert seen["class"] == "FairQueue"
    (warning,) = seen["warnings"]
    assert "'fair'" in warning and "commit_mode does not apply" in warning and "fair_class_of(DjangoRQ)" in warning


def rq_worker(redis_url: str, queue_class: str, *queues: str) -> subprocess.CompletedProcess[str]:
    """rq's own CLI: ``rq worker -w fair_router.WeightedWorker --queue-class CLASS --burst``."""
    env = environment(redis_url, Path("/nonexistent"))
    command = [sys.executable, "-m", "rq.cli", "worker", "-w", "fair_router.WeightedWorker", "--queue-class",
               queue_class, "--url", redis_url, "--burst", *queues]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=PROJECT)


def test_rq_cli_queue_class_of_a_user_serves_a_marked_queue_fairly(redis_server, conn: Redis) -> None:
    flood(FairQueue("fair", connection=conn))
    done = rq_worker(redis_server.url, "shop.queues.AuditedQueue", "fair")
    assert done.returncode == 0, done.stderr[-4000:]
    assert last_small(ran(conn)) <= 12
    assert "serving it as FairAuditedQueue" in done.stdout + done.stderr


def test_rq_cli_queue_class_that_cannot_serve_fairly_is_refused_naming_the_fix(redis_server, conn: Redis) -> None:
    job = FairQueue("fair", connection=conn).enqueue("shop.tasks.log", "big", 0, fair_tenant="big")
    done = rq_worker(redis_server.url, "shop.queues.OwnListingQueue", "fair")
    assert done.returncode != 0
    for named in ("'fair'", "OwnListingQueue", "get_job_ids", "fix:", "--queue-class fair_router.FairQueue"):
        assert named in done.stdout + done.stderr, done.stderr[-3000:]
    assert ran(conn) == [] and Job.fetch(job.id, connection=conn).get_status() == "queued"  # not served FIFO


def test_a_class_whose_init_needs_more_than_rqs_arguments_is_refused(conn: Redis, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(PROJECT))
    from shop.queues import TeamQueue

    FairnessMarks(conn, "fair_router").mark(["fair"])
    with pytest.raises(QueueClassConflict) as refused:
        WeightedSimpleWorker([TeamQueue("fair", team="ops", connection=conn)], connection=conn, settings=Settings())
    message = str(refused.value)
    assert "'fair'" in message and "TeamQueue.__init__" in message and "fix:" in message


def test_a_queue_marked_while_the_worker_runs_is_switched_or_warned_about(conn: Redis, monkeypatch,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.syspath_prepend(str(PROJECT))
    from shop.queues import AuditedQueue, OwnListingQueue

    audited, listing = AuditedQueue("audited", connection=conn), OwnListingQueue("listing", connection=conn)
    worker = WeightedSimpleWorker([audited, listing], connection=conn, settings=Settings(),
                                  queue_class=Queue)
    assert not worker.fair_queues  # nothing marked yet
    FairnessMarks(conn, "fair_router").mark(["audited", "listing"])
    worker.fairness.marks = FairnessMarks(conn, "fair_router")  # what the worker reads again after RECHECK_EVERY
    with caplog.at_level(logging.INFO, logger="rq.worker"):
        worker.fairness.follow()
        worker.fairness.follow()
    assert [type(queue).__name__ for queue in worker.queues] == ["FairAuditedQueue", "OwnListingQueue"]
    assert worker.fair_queues == [worker.queues[0]]
    refusals = [record for record in caplog.records if "listing" in record.getMessage() and "fix:" in
                record.getMessage()]
    assert len(refusals) == 1 and refusals[0].levelno == logging.ERROR  # once, loudly, naming the fix
    assert "first-in first-out" in refusals[0].getMessage()


def test_generated_classes_are_made_once_per_class(monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(PROJECT))
    from shop.queues import AuditedQueue

    assert fair_class_of(AuditedQueue) is fair_class_of(AuditedQueue)
    assert fair_class_of(Queue) is FairQueue and fair_class_of(FairQueue) is FairQueue


# -- a decorated function stays an rq job function -----------------------------------------------------------


def test_a_fair_job_function_runs_from_rq_django_rq_and_fairqueue_enqueues(redis_server, conn: Redis,
                                                                         tmp_path: Path) -> None:
    env = environment(redis_server.url, tmp_path, fair_router={"redis_url": redis_server.url})
    jobs = shop(env, "enqueue-decorated")
    assert {job["func_name"] for job in jobs.values()} == {"shop.tasks.process"}  # by its dotted name, as rq's @job
    assert jobs["delay"]["origin"] == "fair"  # delay still routes (the decorator's fair queue)
    rqworker(env, "default", "fair")
    assert sorted(ran(conn)) == sorted(f"{name}:1" for name in jobs)


# -- Django transactions ----------------------------------------------------------------------------------------


@pytest.fixture
def project_env(redis_server, tmp_path: Path) -> dict[str, str]:
    env = environment(redis_server.url, tmp_path, fair_router={"redis_url": redis_server.url})
    done = manage(env, "migrate", "--run-syncdb", "-v0")
    assert done.returncode == 0, done.stderr
    return env


def test_delay_in_a_rolled_back_transaction_queues_nothing(project_env: dict[str, str], conn: Redis) -> None:
    seen = shop(project_env, "transaction", "rollback")
    assert seen["inside"] == {"fair": [], "default": []}
    assert seen["after"] == {"fair": [], "default": []} and seen["orders"] == []
    assert not Job.exists(seen["delay_id"], connection=conn)


def test_delay_in_a_committed_transaction_enqueues_at_the_commit_with_the_id_it_returned(
        project_env: dict[str, str], conn: Redis) -> None:
    seen = shop(project_env, "transaction", "commit")
    assert seen["inside"] == {"fair": [], "default": []} and not seen["exists_inside"]
    assert seen["after"]["fair"] == [seen["delay_id"], *seen["many_ids"], "fair-django-1"]
    assert Job.fetch("fair-django-1", connection=conn).meta["fair_tenant"] == "fair_django"
    assert len(seen["after"]["default"]) == 1  # django-rq's own enqueue, on commit too
    assert seen["orders"] == [seen["delay_id"]]  # the id delay() returned, saved in the same transaction
    job = Job.fetch(seen["delay_id"], connection=conn)
    assert job.origin == "fair" and job.meta["fair_tenant"] == "acme"


def test_commit_mode_request_finished_enqueues_when_the_request_finishes(redis_server, conn: Redis,
                                                                         tmp_path: Path) -> None:
    env = environment(redis_server.url, tmp_path, fair_router={"redis_url": redis_server.url},
                      SHOP_COMMIT_MODE="request_finished")
    seen = shop(env, "request-finished")
    assert seen["before"] == [] and seen["after"] == [seen["id"]]


def test_a_backlog_refusal_at_commit_is_logged_loudly(redis_server, tmp_path: Path, conn: Redis) -> None:
    env = environment(redis_server.url, tmp_path, fair_router={"redis_url": redis_server.url,
                                                               "tiers": {"max_backlog": {"free": 2}}})
    done = manage(env, "shop", "capped", "4")
    assert done.returncode == 0, done.stderr  # the commit itself went through
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["after"] == seen["ids"][:2]
    refused = [line for line in done.stderr.splitlines() if "was NOT enqueued when its transaction committed" in line]
    assert len(refused) == 2 and all("TenantBacklogFull" in line for line in refused), done.stderr
    assert all(job_id in done.stderr for job_id in seen["ids"][2:])


def test_django_settings_errors_name_the_fair_router_setting(redis_server, tmp_path: Path) -> None:
    env = environment(redis_server.url, tmp_path, fair_router={"redis_url": redis_server.url, "prefix": "a b"})
    done = manage(env, "shop", "enqueue-decorated")
    assert done.returncode != 0
    assert "project.settings.FAIR_ROUTER" in done.stderr and "prefix" in done.stderr


def test_importing_fair_router_does_not_import_django() -> None:
    code = "import sys, fair_router; print(any(m == 'django' or m.startswith('django.') for m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
