"""Every ``fair-router`` command fails cleanly: against a Redis that is down, a malformed URL and a
Redis that refuses the credentials, each command (found by walking the click group, so new commands are
covered without a change here) prints one line naming what failed and where, exits 1 (2 for bad input), and
never prints a traceback unless ``--debug`` is given. Run as the real console entry point, in subprocesses
with timeouts, so a long-running command that failed to fail fast cannot hang the suite."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from redis import Redis

from fair_router.cli import main

NEED_NO_REDIS = {"check"}
"""Commands that never connect: they must still exit 0 and print no traceback."""
ARGUMENTS = {"tier set": ["acme", "pro"], "stats": ["--limits"], "check": ["settings.yaml"]}
"""Arguments that take a command to Redis (else each argument gets ``acme``)."""


def leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaf_commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


COMMANDS = list(leaf_commands(main))


def argv(path: tuple[str, ...], command: click.Command, config: Path) -> list[str]:
    args = list(ARGUMENTS.get(" ".join(path), []))
    if not args:
        args = ["acme" for param in command.params if isinstance(param, click.Argument)]
    if any(isinstance(param, click.Option) and "--config" in param.opts for param in command.params):
        args += ["--config", str(config)]
    return [*path, *args]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(args: list[str], url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "settings.yaml"
    config.write_text(f"redis_url: '{url}'\npool: {{default: 1}}\nqueues: {{default: 1}}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIR_ROUTER_", "REDIS_URL"))}
    env.update(FAIR_ROUTER_REDIS_URL=url, FAIR_ROUTER_CONFIG=str(config))
    return subprocess.run([sys.executable, "-m", "fair_router.cli", *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=90)


def test_every_command_is_enumerated() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"check", "stats", "worker", "pool", "dashboard", "demo", "tier set", "tenant pause"} <= names


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(path) for path, _ in COMMANDS])
@pytest.mark.parametrize("case", ["down", "malformed"])
def test_a_command_against_a_stopped_redis_or_a_malformed_url(path: tuple[str, ...], command: click.Command,
                                                             case: str, tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0" if case == "down" else "nonsense://nowhere"
    done = run(argv(path, command, tmp_path / "settings.yaml"), url, tmp_path)
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    if case == "malformed":  # the settings name the key and the value: bad input, exit 2
        assert done.returncode == 2 and "nonsense://nowhere" in done.stderr, output
        assert "redis_url" in done.stderr or "Redis URL" in done.stderr, output
        return
    if path[0] in NEED_NO_REDIS:
        assert done.returncode == 0, output
        return
    lines = done.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("error: "), output
    if case == "down":
        assert done.returncode == 1, output
        assert "cannot reach Redis at redis://127.0.0.1:" in lines[-1]


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    plain = run(["tenant", "pause", "acme"], url, tmp_path)
    debug = run(["--debug", "tenant", "pause", "acme"], url, tmp_path)
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    assert len(plain.stderr.strip().splitlines()) == 1
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "ConnectionError" in debug.stderr


@pytest.fixture
def password_redis(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--requirepass", "s3cret", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                Redis(port=port, password="s3cret").ping()
                break
            except Exception:
                time.sleep(0.05)
        yield port
    finally:
        server.terminate()
        server.wait(10)


@pytest.mark.parametrize("auth", ["", ":wrong@"])
@pytest.mark.parametrize("args", [["tenant", "pause", "acme"], ["stats", "--limits"], ["tier", "get", "acme"],
                                  ["worker", "default", "--burst"], ["pool"]])
def test_refused_credentials_are_one_line(password_redis: int, auth: str, args: list[str], tmp_path: Path) -> None:
    url = f"redis://{auth}127.0.0.1:{password_redis}/0"
    done = run(args, url, tmp_path)
    assert "Traceback" not in done.stdout + done.stderr
    assert done.returncode == 1, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: Redis at redis://{':***@' if auth else ''}127.0.0.1:{password_redis}/0 refused "
                           "the credentials"), line
    assert "wrong" not in done.stderr
    ok = run(["tenant", "pause", "acme"], f"redis://:s3cret@127.0.0.1:{password_redis}/0", tmp_path)
    assert ok.returncode == 0 and "acme: paused" in ok.stdout
