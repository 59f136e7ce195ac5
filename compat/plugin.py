"""pytest plugin that runs rq's own test suite against fair-router's classes (``-p compat.plugin``).

The variant comes from ``$RQ_SUITE_VARIANT`` (see ``VARIANTS``). We substitute what a user
substitutes, and nothing inside rq:

- ``workers`` / ``workers-limits``: ``rq.Worker`` and ``rq.SimpleWorker`` become ``WeightedWorker``
  and ``WeightedSimpleWorker`` (so does ``rq.worker.Worker`` / ``.SimpleWorker``, the other public
  path tests and the CLI's ``-w`` import from), and the tests' ``WorkerPool`` builds WeightedWorkers
  by default;
- ``fairqueue``: ``rq.Queue`` becomes ``FairQueue`` and every worker's ``queue_class`` is FairQueue:
  what ``rq worker --queue-class fair_router.FairQueue`` does. ``rq.queue.Queue`` stays rq's own,
  because rq's internals (``Job.cancel``, registries, the scheduler) build a plain ``Queue`` on our
  queue's keys, and serving that correctly is the contract under test;
- ``rq``: nothing substituted (a baseline to tell an environment problem from ours).

Test modules bind these names when they are imported; after collection every name in a ``tests``
module that still holds one of rq's originals is rebound to ours. The session then checks, and stops
with an error otherwise, that each test module's names and rq's public names are ours and that the
Redis redirect (``compat/site/sitecustomize.py``) is in place; at the end it writes a JSON report
(``$RQ_SUITE_REPORT``) with the outcome of every test and how many of our objects the tests built,
and fails the session if the tests never built one.

Allowlisted tests (``compat/allowlist.txt``) are marked ``xfail(strict=False)``: a failure there is
reported as xfailed, a pass as XPASS; neither fails the run.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import pkgutil
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import rq
import rq.worker
from redis.connection import Connection
from rq.queue import Queue
from rq.worker import BaseWorker
from rq.worker_pool import WorkerPool

from compat.allowlist import load_allowlist
from fair_router import FairQueue, WeightedSimpleWorker, WeightedWorker

VARIANT_ENV = "RQ_SUITE_VARIANT"
REPORT_ENV = "RQ_SUITE_REPORT"
PORT_ENV = "RQ_SUITE_REDIS_PORT"
PARTIAL_ENV = "RQ_SUITE_PARTIAL"

class WeightedWorkerPool(WorkerPool):
    """rq's WorkerPool whose workers are WeightedWorkers unless told otherwise: what a user writes as
    ``WorkerPool(..., worker_class=WeightedWorker)`` or ``rq worker-pool -w fair_router.WeightedWorker``."""

    def __init__(self, *args: Any, worker_class: type[BaseWorker] = WeightedWorker, **kwargs: Any) -> None:
        super().__init__(*args, worker_class=worker_class, **kwargs)  # type: ignore[misc]


WORKERS: dict[type, type] = {
    rq.worker.Worker: WeightedWorker,
    rq.worker.SimpleWorker: WeightedSimpleWorker,
    WorkerPool: WeightedWorkerPool,
}

#: variant -> {rq's class: ours}
VARIANTS: dict[str, dict[type, type]] = {
    "rq": {},
    "workers": WORKERS,
    "workers-limits": WORKERS,
    "fairqueue": {Queue: FairQueue},
}

#: variant -> settings its weighted workers must show: queue weights and concurrency limits on (from
#: compat/limits.yaml) or off (defaults); checked on every WeightedWorker / WeightedSimpleWorker built
FEATURES: dict[str, bool] = {"workers": False, "workers-limits": True}
LIMITS, WEIGHTS = "with concurrency limits", "with queue weights"

#: the public modules whose names a user's ``import`` or rq's CLI (``-w rq.Worker``, ``--queue-class
#: rq.Queue``) resolves; rq.queue is deliberately absent (see the module docstring), and WorkerPool is
#: only substituted where the tests name it.
PUBLIC_MODULES = {"Worker": (rq, rq.worker), "SimpleWorker": (rq, rq.worker), "Queue": (rq,), "WorkerPool": ()}


class RqSuite:
    """State of one session: the variant's substitutions, the allowlist, the outcomes."""

    def __init__(self, variant: str) -> None:
        if variant not in VARIANTS:
            raise pytest.UsageError(f"{VARIANT_ENV}={variant!r}: expected one of {', '.join(VARIANTS)}")
        self.variant = variant
        self.substitutes = VARIANTS[variant]
        self.allowlist = load_allowlist().get(variant, {})
        self.outcomes: dict[str, str] = {}
        self.built: Counter[str] = Counter()
        self.rebound: Counter[str] = Counter()
        self.pid = os.getpid()

    def substitute_public_names(self) -> None:
        """Rebind rq's public names before any test module imports them."""
        # Import all of rq first, so its own modules bind rq's classes (e.g. WorkerPool's default
        # worker_class), exactly as in a user's process where rq is imported before any rebinding.
        for info in pkgutil.walk_packages(rq.__path__, "rq."):
            with contextlib.suppress(ImportError):  # optional integrations, e.g. rq.contrib.sentry
                importlib.import_module(info.name)
        for original, ours in self.substitutes.items():
            for module in PUBLIC_MODULES[original.__name__]:
                setattr(module, original.__name__, ours)
            self._count_constructions(ours)
        if Queue in self.substitutes:
            BaseWorker.queue_class = FairQueue  # every worker: `rq worker --queue-class fair_router.FairQueue`

    def _count_constructions(self, cls: type) -> None:
        """Count instances of ``cls`` (and subclasses) the tests build in this process."""
        original: Callable[..., None] = cls.__init__  # type: ignore[misc]
        built = self.built

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            built[cls.__name__] += 1
            original(self, *args, **kwargs)
            if getattr(self, "limiter", None) is not None:
                built[f"{cls.__name__} {LIMITS}"] += 1
            if getattr(self, "fetch_weights", None) is not None:
                built[f"{cls.__name__} {WEIGHTS}"] += 1

        cls.__init__ = __init__  # type: ignore[misc]

    def substitute_in_test_modules(self) -> list[str]:
        """Rebind rq's originals in every imported ``tests`` module; return what is still wrong."""
        problems: list[str] = []
        modules = [(name, mod) for name, mod in list(sys.modules.items())
                   if mod is not None and (name == "tests" or name.startswith("tests."))]
        if not modules:
            problems.append("no module of rq's tests package was imported")
        for name, module in modules:
            for attr, value in list(vars(module).items()):
                ours = self.substitutes.get(value) if isinstance(value, type) else None
                if ours is not None:
                    setattr(module, attr, ours)
                    self.rebound[f"{name}.{attr}"] += 1
            for original, ours in self.substitutes.items():
                bound = getattr(module, original.__name__, None)
                if bound is not None and bound is not ours:
                    problems.append(f"{name}.{original.__name__} is {bound!r}, not {ours!r}")
        for original, ours in self.substitutes.items():
            for module in PUBLIC_MODULES[original.__name__]:
                if getattr(module, original.__name__) is not ours:
                    problems.append(f"{module.__name__}.{original.__name__} is not {ours!r}")
        if Queue in self.substitutes and BaseWorker.queue_class is not FairQueue:
            problems.append("BaseWorker.queue_class is not FairQueue")
        if self.substitutes and not self.rebound and not any(
            getattr(module, original.__name__, None) is not None
            for _, module in modules for original in self.substitutes
        ):
            problems.append("no test module binds any substituted name")
        return problems

    def report(self, exitstatus: int) -> dict[str, Any]:
        """What the runner reads: outcomes per node id, constructions, the allowlist applied."""
        missing = self.check_constructions()
        return {
            "variant": self.variant,
            "rq_version": rq.__version__,
            "exitstatus": exitstatus,
            "outcomes": self.outcomes,
            "built": dict(self.built),
            "substituted": {f"{o.__module__}.{o.__qualname__}": f"{c.__module__}.{c.__qualname__}"
                            for o, c in self.substitutes.items()},
            "rebound_in_tests": sorted(self.rebound),
            "allowlisted": sorted(self.allowlist),
            "problems": missing,
        }

    def check_constructions(self) -> list[str]:
        """Each substituted class must have been built by the tests, else they did not test it (not
        checked on a partial run, e.g. ``-k`` or the re-run of a few failures)."""
        if os.environ.get(PARTIAL_ENV):
            return []
        problems = [f"the tests never built a {ours.__name__}" for ours in self.substitutes.values()
                    if self.built[ours.__name__] == 0]
        if self.variant in FEATURES:
            on = FEATURES[self.variant]
            for feature in (LIMITS, WEIGHTS):
                n = self.built[f"{WeightedWorker.__name__} {feature}"]
                if bool(n) != on:
                    problems.append(f"{n} WeightedWorker(s) built {feature}: expected {'some' if on else 'none'}")
        return problems

    # pytest hooks (this object is registered as a plugin by pytest_configure below)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        problems = self.substitute_in_test_modules()
        if problems:
            raise pytest.UsageError("rq-suite: the substitution did not take effect:\n  " + "\n  ".join(problems))
        for item in items:
            reason = self.allowlist.get(item.nodeid)
            if reason is not None:
                item.add_marker(pytest.mark.xfail(reason=f"allowlisted: {reason}", strict=False))
        for nodeid in sorted(set(self.allowlist) - {item.nodeid for item in items}):
            print(f"\nrq-suite: allowlist entry for {self.variant} matches no collected test: {nodeid}",
                  file=sys.stderr)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if hasattr(report, "wasxfail"):
            outcome = "xpassed" if report.passed else "xfailed"
        elif report.failed:
            outcome = "failed" if report.when == "call" else "error"
        elif report.skipped:
            outcome = "skipped"
        elif report.when == "call":
            outcome = "passed"
        else:
            return
        # A later phase only overrides with worse news (a teardown error after a pass).
        if self.outcomes.get(report.nodeid) in (None, "passed") or outcome in ("failed", "error"):
            self.outcomes[report.nodeid] = outcome

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.outcomes[report.nodeid or "<collection>"] = "error"

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        report = self.report(int(exitstatus))
        if report["problems"] and session.testscollected:
            print("\nrq-suite: " + "; ".join(report["problems"]), file=sys.stderr)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            report["exitstatus"] = int(session.exitstatus)
        path = os.environ.get(REPORT_ENV)
        if path:
            Path(path).write_text(json.dumps(report, indent=1, sort_keys=True))

    def pytest_unconfigure(self) -> None:
        """Kill what the suite left running (e.g. a WorkerPool's workers after a failed assertion skipped
        its ``stop_workers()``): multiprocessing would otherwise make pytest wait for them at exit."""
        if os.getpid() != self.pid:
            return  # a forked test process that unwound into pytest: not ours to clean up
        leftovers = psutil.Process().children(recursive=True)
        for process in leftovers:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(leftovers, timeout=5)
        if leftovers:
            print(f"\nrq-suite: killed {len(leftovers)} process(es) the tests left running", file=sys.stderr)


def pytest_configure(config: pytest.Config) -> None:
    """Check the Redis redirect, substitute rq's public names, register the session's RqSuite."""
    variant = os.environ.get(VARIANT_ENV)
    if not variant:
        raise pytest.UsageError(f"compat.plugin needs {VARIANT_ENV}; run it through `python -m compat.run`")
    port = getattr(Connection.__init__, "rq_suite_redirect", None)
    if port is None or str(port) != os.environ.get(PORT_ENV):
        raise pytest.UsageError("the localhost:6379 redirect (compat/site/sitecustomize.py) is not installed; "
                                "run the suite through `python -m compat.run`")
    suite = RqSuite(variant)
    suite.substitute_public_names()
    config.pluginmanager.register(suite, "rq-suite")
