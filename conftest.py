"""Runs the documentation: every ```python block of README.md and docs/*.md, with sybil.

Each Markdown file is one namespace (its blocks run in order, like a reader pasting them into one
session), against a private real redis-server. The blocks connect the way an application does:
``$REDIS_URL`` for a client built by hand, ``$FAIR_ROUTER_REDIS_URL`` (or ``./fair_router.yaml``) for
what fair-router builds from its settings; both point at that server while a file runs, and Redis is
flushed before each file.

A block whose first line names a file (``# myapp/tasks.py``, ``# fair_router.yaml``) is a file the reader
is told to create: it is written, not run, into a fresh project directory that is the working directory
and first on ``sys.path`` while that Markdown file runs, so a later block can ``from myapp.tasks import ...``
and settings load from ``./fair_router.yaml`` as they would in the reader's project.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser

from fair_router.demo.redis_server import RedisServer

FILE_HEADER = re.compile(r"\A# (?P<path>[\w./-]+\.(?:py|ya?ml))\n")
_server: list[RedisServer] = []


def _redis_url() -> str:
    """The session's docs server, started on first use (stopped in pytest_sessionfinish)."""
    if not _server:
        _server.append(RedisServer().start())
    return _server[0].url


def _written(source: str) -> bool:
    """Write a file block into the project directory; False if the block is not one."""
    header = FILE_HEADER.match(source)
    if header is None:
        return False
    target = Path(os.getcwd(), header["path"])
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(source)
    return True


def _python(example: Example) -> None:
    """A file block is written; any other python block runs in its Markdown file's namespace."""
    if not _written(example.parsed):
        exec(compile("\n" * example.line + example.parsed, example.path, "exec"), example.namespace)


def _yaml(example: Example) -> None:
    """A file block is written; any other YAML block must at least parse."""
    if not _written(example.parsed):
        yaml.safe_load(example.parsed)


def _setup(namespace: dict[str, Any]) -> None:
    url = _redis_url()
    project = tempfile.TemporaryDirectory(prefix="fair-router-docs-")
    saved_env = {key: value for key, value in os.environ.items() if key.startswith("FAIR_ROUTER_")}
    saved_env["REDIS_URL"] = os.environ.get("REDIS_URL", "")
    for key in saved_env:
        os.environ.pop(key, None)
    os.environ["REDIS_URL"] = url
    os.environ["FAIR_ROUTER_REDIS_URL"] = url
    namespace["__name__"] = "__main__"
    namespace["_docs_state"] = (project, os.getcwd(), saved_env, set(sys.modules))
    os.chdir(project.name)
    sys.path.insert(0, project.name)
    _server[0].client().flushall()


def _teardown(namespace: dict[str, Any]) -> None:
    project, cwd, saved_env, modules = namespace.pop("_docs_state")
    os.chdir(cwd)
    sys.path.remove(project.name)
    for name in set(sys.modules) - modules:  # the project's modules (myapp, ...) do not leak into the next file
        if getattr(sys.modules[name], "__file__", None) and sys.modules[name].__file__.startswith(project.name):
            del sys.modules[name]
    for key in [k for k in os.environ if k.startswith("FAIR_ROUTER_")] + ["REDIS_URL"]:
        os.environ.pop(key, None)
    os.environ.update({key: value for key, value in saved_env.items() if value})
    project.cleanup()


pytest_collect_file = Sybil(
    parsers=[CodeBlockParser("python", _python), CodeBlockParser("yaml", _yaml)],
    patterns=["README.md", "docs/*.md"],
    setup=_setup,
    teardown=_teardown,
).pytest()


def pytest_sessionfinish() -> None:
    for server in _server:
        server.stop()
