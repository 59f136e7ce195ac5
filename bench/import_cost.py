"""Import cost benchmark: what ``import fair_router`` and a module of jobs cost a fresh interpreter, against rq.

    .venv/bin/python bench/import_cost.py [--rounds 15] [--checkout DIR]

Each round starts one fresh interpreter per case (cases interleaved, the order rotated each round) and takes
its CPU time (user + system, from the child's rusage), bytecode cached (the package and the job modules are
compiled first). Cases: ``pass`` (the interpreter alone), ``import rq``, ``import fair_router``, and what an rq
work horse pays to import the job's module: one function under rq's ``@job`` against one under ``@fair_job``
(a queue name and a tenant function: rules, rates and settings come from the settings file, read at the first
enqueue); and ``from fair_router import *`` (every public name, so pydantic, pydantic-settings and the
settings models: what a producer or worker pays once). Prints the median per case and the ratios to rq's.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import fair_router

JOB_MODULES = {
    "rq_jobs": "from redis import Redis\nfrom rq.decorators import job\n\n\n"
               "@job('default', connection=Redis())\ndef work(x):\n    return x\n",
    "fair_jobs": "from fair_router import fair_job\n\n\n"
                 "@fair_job('default', tenant=lambda x: str(x))\ndef work(x):\n    return x\n",
}
CASES = {
    "pass": "pass",
    "import rq": "import rq",
    "import fair_router": "import fair_router",
    "module with rq @job": "import rq_jobs",
    "module with @fair_job": "import fair_jobs",
    "every public name": "from fair_router import *",
}


def cpu_seconds(code: str, where: Path, checkout: Path | None) -> float:
    """User + system CPU seconds of a fresh interpreter running ``code`` in ``where`` (``checkout``'s package
    first on the path, if given)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(path) for path in (checkout, where) if path)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    child = subprocess.Popen([sys.executable, "-c", code], cwd=where, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{code!r} failed with exit code {child.returncode}")
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--checkout", type=Path, help="a checkout whose fair_router to measure (e.g. a git "
                        "worktree of an older commit), instead of the installed one")
    args = parser.parse_args()
    compileall.compile_dir(args.checkout / "fair_router" if args.checkout else Path(fair_router.__file__).parent,
                           quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        for name, text in JOB_MODULES.items():
            (where / f"{name}.py").write_text(text)
        compileall.compile_dir(where, quiet=1)
        times: dict[str, list[float]] = {case: [] for case in CASES}
        names = list(CASES)
        for round_ in range(args.rounds):
            shift = round_ % len(names)
            for case in names[shift:] + names[:shift]:
                times[case].append(cpu_seconds(CASES[case], where, args.checkout))
    median = {case: statistics.median(values) for case, values in times.items()}
    print(f"CPU time of a fresh interpreter, median of {args.rounds} rounds (bytecode cached):")
    for case, value in median.items():
        print(f"  {case:<24} {value * 1000:7.1f} ms")
    print(f"import fair_router / import rq:                  {median['import fair_router'] / median['import rq']:.2f}x")
    print(f"module with @fair_job / module with rq @job:      "
          f"{median['module with @fair_job'] / median['module with rq @job']:.2f}x")


if __name__ == "__main__":
    main()
