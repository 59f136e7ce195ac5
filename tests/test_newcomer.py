"""A new user's first hour, scripted: build the wheel, install it into a fresh venv (no access to this
checkout's packages), and walk README.md's quickstart as written: its files, its producer, the worker
commands it shows, and `fair-router check` failing on the mistakes a newcomer makes.

The code is read from README.md itself (fenced blocks under "## Quickstart"), so the README cannot drift
from what works. The one substitution: the README's `redis://localhost:6379/0` becomes this test's private
server. Slow (a wheel build and a pip install, once per session): marked ``slow_newcomer``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job
from rq.registry import FinishedJobRegistry

from fair_router.demo.redis_server import RedisServer

pytestmark = pytest.mark.slow_newcomer

ROOT = Path(__file__).resolve().parents[1]
README_URL = "redis://localhost:6379/0"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def quickstart_blocks() -> list[tuple[str, str]]:
    """(language, text) of every fenced block in the README's Quickstart section, in order."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quickstart", 1)[1].split("\n## ", 1)[0]
    return [(match[1], match[2]) for match in FENCE.finditer(section)]


def commands(blocks: list[tuple[str, str]]) -> list[str]:
    """The shell commands of the quickstart's ``sh`` blocks, comments dropped."""
    lines = [line.split("#", 1)[0].strip() for lang, text in blocks if lang == "sh" for line in text.splitlines()]
    return [line for line in lines if line]


@pytest.fixture(scope="session")
def newcomer_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the built wheel (with the dashboard extra, as the README installs it)."""
    base = tmp_path_factory.mktemp("newcomer")
    wheels = base / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("fair_router-*.whl")
    tops = {name.split("/", 1)[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"fair_router"}, tops
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", f"fair-router[dashboard] @ {wheel.as_uri()}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return venv


@pytest.fixture
def app(newcomer_venv: Path, redis_server: RedisServer, conn: Redis, tmp_path: Path) -> Iterator[Path]:
    """The quickstart's project directory: its file blocks written as the README names them."""
    for lang, text in quickstart_blocks():
        header = re.match(r"# (\S+\.(?:py|ya?ml))\n", text)
        if lang in ("python", "yaml") and header:
            target = tmp_path / header[1]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text.replace(README_URL, redis_server.url))
    assert (tmp_path / "myapp" / "tasks.py").is_file() and (tmp_path / "fair_router.yaml").is_file()
    yield tmp_path


def run(venv: Path, project: Path, command: str, url: str, env: dict[str, str] | None = None,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """A README command as the newcomer types it, in the project, with the venv's bin first on PATH."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("FAIR_ROUTER_", "RQ_")) and k not in ("PYTHONPATH", "VIRTUAL_ENV", "REDIS_URL")}
    clean["PATH"] = f"{venv / 'bin'}{os.pathsep}{clean.get('PATH', '')}"
    return subprocess.run(command.replace(README_URL, url), shell=True, cwd=project, env={**clean, **(env or {})},
                          input=stdin, capture_output=True, text=True, timeout=180)


def producer(blocks: list[tuple[str, str]]) -> str:
    """The quickstart's producer: its python block that is not a file."""
    (text,) = [text for lang, text in blocks if lang == "python" and text.startswith("from myapp.tasks import")]
    return text


def test_the_quickstart_runs_as_written(newcomer_venv: Path, app: Path, redis_server: RedisServer,
                                        conn: Redis) -> None:
    blocks = quickstart_blocks()
    steps = commands(blocks)
    check, worker, rq_worker = (next(c for c in steps if c.startswith(p))
                                for p in ("fair-router check", "fair-router worker", "rq worker"))
    done = run(newcomer_venv, app, check, redis_server.url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().endswith("settings OK"), done.stdout + done.stderr

    for command in (worker, rq_worker):
        conn.flushall()
        done = run(newcomer_venv, app, "python -", redis_server.url, stdin=producer(blocks))
        assert done.returncode == 0, done.stderr
        job_id, *_, origin = done.stdout.split()  # "<id> waits in default"
        assert origin == "default"
        done = run(newcomer_venv, app, f"{command} --burst", redis_server.url)
        assert done.returncode == 0, done.stderr
        assert "processing item 42 of acme" in done.stdout + done.stderr, done.stderr
        job = Job.fetch(job_id, connection=conn)
        assert job.get_status() == "finished", (command, done.stderr)
        assert len(Queue("default", connection=conn)) == 0 and job_id in FinishedJobRegistry("default", connection=conn)


@pytest.mark.parametrize(("mistake", "edit", "env", "expected"), [
    ("a rule queue with no weight", ("default_superslow: 1\n", ""), {}, "is 'default_superslow', which has no weight"),
    ("a misspelt job key", ("myapp.tasks.process:", "myapp.tasks.proces:"), {}, "did you mean 'process'?"),
    ("redis_url notaurl", (README_URL, "notaurl"), {}, "got 'notaurl'"),
    ("redis_url port 99999", (README_URL, "redis://localhost:99999/0"), {}, "Port out of range"),
    ("a misspelt variable", ("", ""), {"FAIR_ROUTER_QUEUS": '{"default": 1}'}, "did you mean FAIR_ROUTER_QUEUES?"),
])
def test_check_fails_on_each_newcomer_mistake(newcomer_venv: Path, app: Path, redis_server: RedisServer,
                                              mistake: str, edit: tuple[str, str], env: dict[str, str],
                                              expected: str) -> None:
    settings = app / "fair_router.yaml"
    text = settings.read_text().replace(redis_server.url, README_URL)
    if edit[0]:
        assert edit[0] in text, mistake
        text = text.replace(edit[0], edit[1])
    settings.write_text(text.replace(README_URL, redis_server.url))
    done = run(newcomer_venv, app, "fair-router check", redis_server.url, env=env)
    assert done.returncode == 2, (mistake, done.stdout, done.stderr)
    assert expected in done.stderr, (mistake, done.stderr)
    assert "settings OK" not in done.stdout


def test_check_ping_exits_1_when_the_readme_redis_is_not_there(newcomer_venv: Path, app: Path) -> None:
    from fair_router.demo.redis_server import free_port

    done = run(newcomer_venv, app, "fair-router check --ping", README_URL,
               env={"FAIR_ROUTER_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    assert done.returncode == 1 and "cannot reach Redis" in done.stderr, done.stderr


def test_fair_queues_alone_makes_the_queue_fair_under_rq_worker(newcomer_venv: Path, app: Path,
                                                                redis_server: RedisServer, conn: Redis) -> None:
    settings = app / "fair_router.yaml"
    settings.write_text(settings.read_text() + "fair_queues: [default]\n")
    flood = ("from myapp.tasks import process\n"
             "for i in range(30):\n    process.delay('big', i)\n"
             "small = process.delay('small', 0)\nprint(small.id)\n")
    done = run(newcomer_venv, app, "python -", redis_server.url, stdin=flood)
    assert done.returncode == 0, done.stderr
    small_id = done.stdout.split()[-1]
    done = run(newcomer_venv, app, f"rq worker -w fair_router.WeightedWorker --url {redis_server.url} --burst "
               "default default_throttled default_superslow", redis_server.url)
    assert done.returncode == 0, done.stderr
    jobs = sorted(Job.fetch_many(list(FinishedJobRegistry("default", connection=conn).get_job_ids()),
                                 connection=conn), key=lambda job: job.started_at)
    order = [job.id for job in jobs]
    assert small_id in order and order.index(small_id) <= 2, order.index(small_id) if small_id in order else order


@pytest.mark.parametrize("throttled", ["fair", "plain"])
def test_a_modest_tenant_past_a_rule_competes_fairly_in_the_throttled_queue(
        newcomer_venv: Path, app: Path, redis_server: RedisServer, conn: Redis, throttled: str) -> None:
    """The quickstart's own rules: a tenant sending 20 jobs crosses the 10-per-minute rule beside one sending 500.
    Its jobs 11-20 go to default_superslow, which is fair by default (``throttled_queues``), so they are served
    between the greedy tenant's there, not behind its whole backlog (``throttled_queues: plain``, first in, first
    out). Counted as the small tenant's last finish among all the jobs, one worker."""
    if throttled == "plain":
        settings = app / "fair_router.yaml"
        settings.write_text(settings.read_text() + "throttled_queues: plain\n")
    flood = ("from myapp.tasks import process\n"
             "for i in range(500):\n    process.delay('big', i)\n"
             "for i in range(20):\n    print(process.delay('small', i).id)\n")
    done = run(newcomer_venv, app, "python -", redis_server.url, stdin=flood)
    assert done.returncode == 0, done.stderr
    small = set(done.stdout.split())
    assert len(small) == 20
    done = run(newcomer_venv, app, "fair-router worker --burst", redis_server.url)
    assert done.returncode == 0, done.stderr
    finished = [job_id for name in ("default", "default_throttled", "default_superslow")
                for job_id in FinishedJobRegistry(name, connection=conn).get_job_ids()]
    assert len(finished) == 520
    order = [job.id for job in sorted(Job.fetch_many(finished, connection=conn), key=lambda job: job.ended_at)]
    last_small = max(order.index(job_id) for job_id in small) + 1
    if throttled == "fair":  # 20 in default, then the small tenant's 10 alternate with the greedy one's
        assert last_small <= 60, last_small
    else:  # behind the greedy tenant's 490 in default_superslow
        assert last_small > 480, last_small


def test_the_readmes_install_lines_work_as_written(tmp_path: Path) -> None:
    """Each line of the README's Install block, in a fresh venv: from a checkout (its path substituted), editable
    in the checkout, and `make dist` then the built wheel. None names the package index (not published yet)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Install", 1)[1].split("\n## ", 1)[0]
    (block,) = [body for lang, body in FENCE.findall(section) if lang == "sh"]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert len(lines) == 3 and not any(re.fullmatch(r"pip install '?fair-router(\[\w+\])?'?", line) for line in lines)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    for line in lines:
        done = run(venv, ROOT, line.replace("/path/to/fair-router", str(ROOT)), README_URL,
                   env={"PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}"})
        assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-2000:])
        shown = subprocess.run([str(venv / "bin" / "pip"), "show", "flask", "fair-router"], capture_output=True,
                               text=True, timeout=60)
        assert "Name: fair-router" in shown.stdout and "Name: Flask" in shown.stdout, (line, shown.stderr)
