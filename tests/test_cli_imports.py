"""`fair-router worker` and `pool` import job functions from the working directory, as `rq worker` does:
run from a project's root, `myapp.tasks.process` imports without PYTHONPATH or an installed package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from redis import Redis
from rq import Queue

from fair_router.demo.redis_server import RedisServer
from fair_router.workers.pool import WorkerPool

BIN = Path(sys.executable).parent
TASKS = '''
def process(account_id, item_id):
    return f"{account_id}:{item_id}"
'''


def project(root: Path, url: str) -> Path:
    """A newcomer's project: myapp/tasks.py (a namespace package, no __init__.py) and fair_router.yaml."""
    (root / "myapp").mkdir()
    (root / "myapp" / "tasks.py").write_text(TASKS)
    (root / "fair_router.yaml").write_text(f"redis_url: {url}\nqueues:\n  default: 1\n")
    return root


def clean_env() -> dict[str, str]:
    """The shell's environment without fair-router settings or a PYTHONPATH that could hide the bug."""
    return {k: v for k, v in os.environ.items() if not k.startswith("FAIR_ROUTER_") and k != "PYTHONPATH"}


def test_fair_router_worker_imports_the_job_from_the_working_directory(
    conn: Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    root = project(tmp_path, redis_server.url)
    job = Queue("default", connection=conn).enqueue("myapp.tasks.process", "acme", 42)
    done = subprocess.run([str(BIN / "fair-router"), "worker", "--burst"], cwd=root, env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Invalid attribute name" not in done.stderr
    assert job.get_status(refresh=True) == "finished", done.stderr
    assert job.return_value() == "acme:42"


def test_fair_router_worker_path_option_names_another_directory(
    conn: Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    root = project(tmp_path, redis_server.url)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    job = Queue("default", connection=conn).enqueue("myapp.tasks.process", "globex", 7)
    done = subprocess.run([str(BIN / "fair-router"), "worker", "--burst", "--config", str(root / "fair_router.yaml"),
                           "--path", str(root)], cwd=elsewhere, env=clean_env(), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert job.get_status(refresh=True) == "finished", done.stderr


def test_pool_passes_its_import_paths_to_every_worker(tmp_path: Path) -> None:
    pool = WorkerPool({"default": 1}, "redis://127.0.0.1:1/0", paths=[".", str(tmp_path)])
    command = pool.command(("default",), scheduler=False)
    given = [command[i + 1] for i, arg in enumerate(command) if arg == "--path"]
    assert given == [str(Path(".").resolve()), str(tmp_path.resolve())]
