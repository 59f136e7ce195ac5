"""``import fair_router`` and a module of ``@fair_job`` functions load no more than rq does.

An rq work horse imports the module of every job it runs; pydantic, pydantic-settings, YAML and the settings
models cost it about as much again as rq itself (bench/import_cost.py has the times). So the public names are
imported on first use (``fair_router.HOMES``) and ``@fair_job`` with a queue name checks it without pydantic.
These tests count modules, in fresh interpreters: they never time anything.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import fair_router

HEAVY = ("pydantic", "pydantic_settings", "yaml", "difflib", "fair_router.config.settings")


def modules_after(code: str, where: Path) -> set[str]:
    """The names in ``sys.modules`` after a fresh interpreter runs ``code`` in ``where``."""
    script = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", script], cwd=where, capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_import_fair_router_loads_no_settings_machinery(tmp_path: Path) -> None:
    loaded = modules_after("import fair_router", tmp_path)
    assert "rq" in loaded and "fair_router.rq_internals.guard" in loaded  # the rq check still runs at import
    assert not loaded & set(HEAVY)


def test_a_module_of_fair_jobs_loads_no_settings_machinery(tmp_path: Path) -> None:
    (tmp_path / "jobs.py").write_text(textwrap.dedent("""
        from fair_router import fair_job

        @fair_job("emails", tenant=lambda account: account)
        def send(account):
            return account
    """))
    loaded = modules_after("import jobs\nassert jobs.send('a') == 'a' and jobs.send.job_key == 'jobs.send'", tmp_path)
    assert not loaded & set(HEAVY)
    # its first enqueue loads the settings (and reads a rule's queue with pydantic): that is where they are used
    loaded = modules_after("import jobs\njobs.send.fair_job.settings", tmp_path)
    assert "fair_router.config.settings" in loaded and "pydantic_settings" in loaded


def test_every_public_name_has_a_home_and_resolves() -> None:
    assert set(fair_router.HOMES) | {"RqVersionError", "RqVersionWarning"} == set(fair_router.__all__)
    for name in fair_router.__all__:
        value = getattr(fair_router, name)
        assert getattr(value, "__name__", name) == name
    assert set(fair_router.__all__) <= set(dir(fair_router))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        fair_router.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018


def test_the_import_cost_bench_runs(tmp_path: Path) -> None:
    bench = Path(__file__).parent.parent / "bench" / "import_cost.py"
    out = subprocess.run([sys.executable, str(bench), "--rounds", "1"], capture_output=True, text=True, check=True)
    assert "import fair_router / import rq:" in out.stdout and "module with @fair_job" in out.stdout
