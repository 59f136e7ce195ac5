"""``python -m compat.run --rq newest|VERSION`` (compat/run.py): rq's own suite on an rq other than the installed
one, in a folder of its own; skipped when it is the installed rq; failing CI only for an rq inside the pin."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version as installed_version
from pathlib import Path

import pytest

from compat import run
from compat.run import RqUnder, unmet_requirements, verdict

ROOT = Path(__file__).resolve().parent.parent


def test_the_installed_rq_is_the_same_run_and_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    installed = installed_version("rq")
    assert run.main(["--rq", installed]) == 0
    out = capsys.readouterr().out
    assert f"rq {installed} is the installed rq" in out and "the same run, skipped" in out
    assert not list((run.CACHE / "logs").glob(f"rq-{installed}-*.log"))  # nothing ran


@pytest.mark.parametrize(("version", "ok", "code", "says"), [
    ("3.1.0", True, 0, "PASS rq 3.1.0's own suite; it can join the pin"),
    ("3.1.0", False, 0, "outside the pin, so users cannot get it with fair-router yet: CI goes on (exit 0)"),
    ("2.12.0", False, 0, "outside the pin rq>=3.0,<3.1): our classes FAIL"),
    ("3.0.9", True, 0, "PASS rq 3.0.9's own suite; the pin holds"),
    ("3.0.9", False, 1, "inside the pin, so users get it today: this fails CI"),
])
def test_verdict(version: str, ok: bool, code: int, says: str) -> None:
    lines, exit_code = verdict("rq-suite --rq newest", RqUnder(version, Path("/nowhere")), ok)
    assert exit_code == code
    assert any(says in line for line in lines), lines
    assert any(line.startswith("rq-suite --rq newest: RESULT rq ") for line in lines)
    assert any(line == "!" * 100 for line in lines) is (not ok)


def test_skip_check_only_outside_the_pin(tmp_path: Path) -> None:
    assert RqUnder("3.1.0", tmp_path).skip_check and RqUnder("2.12.0", tmp_path).skip_check
    assert not RqUnder("3.0.4", tmp_path).skip_check
    env = run.suite_environment("workers", 1234, tmp_path / "r.json", False, RqUnder("3.1.0", tmp_path))
    assert env["FAIR_ROUTER_SKIP_RQ_CHECK"] == "1" and env["PYTHONPATH"].split(":")[1] == str(tmp_path)
    assert "FAIR_ROUTER_SKIP_RQ_CHECK" not in run.suite_environment("workers", 1234, tmp_path / "r.json", False)


def test_unmet_requirements(tmp_path: Path) -> None:
    """Only what the venv does not meet goes beside the other rq (as ``pip install -U rq`` would pick)."""
    info = tmp_path / "rq-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: rq\nVersion: 9.9.9\n"
        "Requires-Dist: redis>=3.5\nRequires-Dist: redis>=99\nRequires-Dist: no-such-package-rqguard\n"
        'Requires-Dist: also-missing; extra == "docs"\n')
    assert unmet_requirements(tmp_path, "9.9.9") == ["redis>=99", "no-such-package-rqguard"]


def test_an_old_rq_outside_the_pin_fails_loudly_with_exit_0() -> None:
    """For real, partly: rq 2.12.0 into .rq-suite/site-rq-2.12.0/, four of its worker tests with our classes
    (with FAIR_ROUTER_SKIP_RQ_CHECK=1, set by the runner): they fail, the run says so, and exits 0."""
    result = subprocess.run(
        [sys.executable, "-m", "compat.run", "--rq", "2.12.0", "workers", "-j1", "--",
         "tests/test_worker.py", "-k", "test_work_and_quit or test_job_times"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    assert "import fair_router beside it: RqVersionError: fair-router" in out
    assert "rq.worker.BaseWorker.executions (feature): missing" in out
    assert "running rq 2.12.0's suite with FAIR_ROUTER_SKIP_RQ_CHECK=1" in out
    assert "rq-suite workers (rq 2.12.0): 0 passed" in out
    assert ("rq-suite --rq 2.12.0: RESULT rq 2.12.0 (outside the pin rq>=3.0,<3.1): our classes FAIL rq 2.12.0's "
            "own suite") in out
    assert (run.CACHE / "site-rq-2.12.0" / "rq" / "__init__.py").is_file()
