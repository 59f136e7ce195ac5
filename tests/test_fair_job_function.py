"""A ``@fair_job`` function stays an rq job function, as with rq's own ``@job``: the decorated name is a plain
function that rq's, FairQueue's and rq's ``enqueue_many`` take and store by its dotted name, and a real
worker runs; its ``delay`` still routes; ``@interruptible`` under it still marks it; mypy sees ``.delay``."""

from __future__ import annotations

import inspect
import pickle
import subprocess
import sys
from pathlib import Path
from typing import cast

import decorated_jobs
import pytest
import routed_jobs
from redis import Redis
from rq import Queue, SimpleWorker

from fair_router import FairJob, FairQueue, Settings, fair_job
from fair_router.iteration.turns import MARKER

pytestmark = pytest.mark.usefixtures("isolated_settings")


def ran(conn: Redis) -> list[str]:
    return sorted(entry.decode() for entry in cast(list[bytes], conn.lrange(decorated_jobs.LOG, 0, -1)))


def test_every_rq_enqueue_takes_the_decorated_function_by_its_dotted_name(redis_server, conn: Redis,
                                                                         monkeypatch) -> None:
    monkeypatch.setenv("FAIR_ROUTER_REDIS_URL", redis_server.url)  # where the module-level decorator enqueues
    process = decorated_jobs.process
    assert inspect.isfunction(process)
    plain, fair = Queue("plain", connection=conn), FairQueue("fair", connection=conn)
    jobs = [
        plain.enqueue(process, "rq", 1),
        plain.enqueue_many([Queue.prepare_data(process, ("rq_many", 1))])[0],
        fair.enqueue(process, "fairqueue", 1, fair_tenant="fairqueue"),
        process.fair_job.router.queue("routed").enqueue(process, "router_queue", 1),
    ]
    assert {job.func_name for job in jobs} == {"decorated_jobs.process"}  # as before the decorator
    assert all(job.instance is None for job in jobs)  # a function, never a pickled object
    routed = process.delay("delay", 1)
    assert routed.origin == "routed" and routed.meta["fair_tenant"] == "delay"  # delay still routes
    SimpleWorker([plain, fair, Queue("routed", connection=conn)], connection=conn).work(burst=True)
    assert ran(conn) == ["delay:1", "fairqueue:1", "router_queue:1", "rq:1", "rq_many:1"]


def test_the_decorated_function_is_a_copy_carrying_the_routing(conn: Redis) -> None:
    settings = Settings()
    one = fair_job("a", connection=conn, settings=settings)(routed_jobs.echo)
    two = fair_job("b", connection=conn, settings=settings)(routed_jobs.echo)
    assert one is not routed_jobs.echo and not hasattr(routed_jobs.echo, "delay")  # the original is untouched
    assert (one.__module__, one.__qualname__, one.__name__) == ("routed_jobs", "echo", "echo")
    assert one("acme", 7) == 7 and one.__code__ is routed_jobs.echo.__code__
    assert one.job_key == "routed_jobs.echo" and isinstance(one.fair_job, FairJob)
    assert one.delay("acme", 1).origin == "a" and two.delay("acme", 1).origin == "b"  # independent routings
    assert pickle.loads(pickle.dumps(decorated_jobs.process)) is decorated_jobs.process  # by reference


def test_interruptible_under_fair_job_keeps_its_mark_and_runs(conn: Redis) -> None:
    steps = decorated_jobs.steps
    assert inspect.isfunction(steps) and getattr(steps, MARKER).slice == 10.0
    job = Queue("plain", connection=conn).enqueue(steps, "acme", 3)
    assert job.func_name == "decorated_jobs.steps"
    SimpleWorker([Queue("plain", connection=conn)], connection=conn).work(burst=True)
    job.refresh()
    assert job.get_status() == "finished" and job.return_value() == 3


def test_a_callable_that_is_not_a_function_gets_the_fair_job_itself(conn: Redis) -> None:
    class Service:
        def run(self, tenant: str) -> str:
            return tenant

    routed = fair_job("default", connection=conn, settings=Settings())(Service().run)  # a bound method
    assert isinstance(routed, FairJob) and routed.fair_job is routed and routed("acme") == "acme"


def test_mypy_sees_the_decorated_functions_methods_and_arguments(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from fair_router import fair_job\n"
        "@fair_job('default')\n"
        "def process(tenant: str, n: int) -> str:\n"
        "    return tenant\n"
        "reveal_type(process.delay)\n"
        "result: str = process('acme', 1)\n"
        "process.delay('acme', 1)\n"
        "process.enqueue_many([(('acme', 1), {})])\n"
        "process.fair_job.router\n"
        "process.delay('acme', 'one')\n"  # the only error: a str where the function takes an int
    )
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(sample)],
                          capture_output=True, text=True, cwd=tmp_path)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "sample.py:10:" in errors[0] and '"int"' in errors[0], done.stdout
    assert "def (tenant: str, n: int) -> rq.job.Job" in done.stdout, done.stdout
