"""No module of fair_router over 400 lines, no class over 250.

A module or class past these sizes has stopped holding one idea: the next contributor has to read all of
it to change any of it. The limits are checked here, with ``ast``, so that they stay true as code grows:
the failure names each module and class over its limit, and its size.
"""

from __future__ import annotations

import ast
from pathlib import Path

import fair_router

PACKAGE = Path(fair_router.__file__).parent
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250
WHY_LINES = 514 + 298 + 63 + 4 + 5 + 12 - 9 + 45
"""``fair-router why`` / ``explain`` (observe/why.py, observe/whyplace.py, commands/why.py and their registration),
counted apart so the merge can see them; + the recorded turn-away reasons, the pause's time and ``fair-router
tenant why`` (routing/tenant_why.py); + the dashboard's why (dashboard/why.py and its route); + explain on a Redis
Cluster (either client of the pair); + a pause's own park notes its cause (controls/pauses.py);
+ the estimate's throughput measured from where the starts began (observe/whyplace.py); - the one-level org
causes of an approximate place (lua/why_place.lua counts both levels now); + the org's reasons (its pause, its
limit and running jobs, a tenant's slots read under its org's tag) in explain and ``tenant why``."""
ORG_LINES = 155 + 372 + 365 + 135 + 19 + 20 + 91 + 16
"""Organisations above tenants (fair_org=, the two-level fair pop; then the two-level listing, explain's approximate
place, org weight overrides and ``fair-router org set|show``; then the org's limits: concurrency, rate and tier
checked in the tenant's start call, org pause/resume, ``org set --concurrency/--rate``; then the dashboard's and
``/metrics``' org view (dashboard/orgread.py, OrgView, the org gauges) and charge="runtime" charging orgs; + the
dashboard's rows counting a tenant's slots under its org's tag; then the fair queue's claim-time mirror of an org's
limit: its limit and release reported to fair_park/fair_unpark; + the org's tier for its tenants without one, resolved
and cached in TierBook, org set --tier, and a tenant's pause mirrored under its orgs' tags; + the listing's reading of
an org member's 8-byte pass, and a tenant's profile on its org's tier built once while cached), counted apart
likewise."""
MESSAGE_LINES = 101 + 19
"""Where users plug fair-router in, failures that name the problem and the fix (counted apart for the merge): an
unknown settings key's did-you-mean (config/errors.py), a missing or directory settings file and a mistyped
FAIR_ROUTER_* variable logged by every process (config/location.py), a worker on another Redis than redis_url
(workers/setup.py), a job another serializer wrote in ``queue show`` (commands/queues.py); + a Django project's
commands told that Django's FAIR_ROUTER is not theirs (config/location.py), a ``--dequeue-strategy`` the weights
replace (workers/sampling.py), django-rq's worker flag in the plain-worker advice (fairqueue/stale.py)."""
# The other features: 13,596 lines after the structure round's third cut, this round's capacity work and the size
# cut (make lua's build tool to tools/, the churn scenario to bench/, docstrings restating docs/api.md), rounded up;
# + 16: a tenant's job rq pushed as a plain id (rq requeue, the scheduler, a retry) joins its FIFO when a pop meets it.
MAX_PACKAGE_LINES = 13600 + 16 + WHY_LINES + ORG_LINES + MESSAGE_LINES


def oversized(package: Path) -> list[str]:
    """``path: N lines`` for each module of ``package`` over MAX_MODULE_LINES and ``path: class C: N lines``
    for each class (nested ones too) over MAX_CLASS_LINES, from its first decorator to its last line."""
    found = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(package.parent).as_posix()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{name}: {lines} lines (limit {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
                size = node.end_lineno - first + 1
                if size > MAX_CLASS_LINES:
                    found.append(f"{name}: class {node.name}: {size} lines (limit {MAX_CLASS_LINES})")
    return found


def test_no_module_or_class_is_over_its_size_limit() -> None:
    # the walk is real: it sees the package's modules
    assert len(list(PACKAGE.rglob("*.py"))) > 20 and (PACKAGE / "routing" / "router.py").is_file()
    too_big = oversized(PACKAGE)
    assert not too_big, "over the size limits (split by concern):\n  " + "\n  ".join(too_big)


def test_the_check_finds_a_big_module_and_a_big_class(tmp_path: Path) -> None:
    """The check itself: at the limits nothing is reported; one line more, the module and the class (nested
    in a function, and counted from its first decorator) are named with their sizes."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_CLASS_LINES - 3))
    cls = "@decorated\n@twice\nclass Big:\n" + body  # MAX_CLASS_LINES lines
    nested = "def outer():\n" + "".join(f"    {line}\n" for line in cls.splitlines())
    module = package / "sub" / "mod.py"
    module.write_text(nested + "\n" * (MAX_MODULE_LINES - len(nested.splitlines())))
    assert len(module.read_text().splitlines()) == MAX_MODULE_LINES
    assert oversized(package) == []

    module.write_text(module.read_text().replace("@twice", "@twice\n    @thrice"))
    assert oversized(package) == [
        f"pkg/sub/mod.py: {MAX_MODULE_LINES + 1} lines (limit {MAX_MODULE_LINES})",
        f"pkg/sub/mod.py: class Big: {MAX_CLASS_LINES + 1} lines (limit {MAX_CLASS_LINES})",
    ]


def package_lines(package: Path) -> int:
    """Lines of every Python module of ``package``, as ``find fair_router -name '*.py' | xargs cat | wc -l``."""
    return sum(len(path.read_text().splitlines()) for path in package.rglob("*.py"))


def test_the_package_stays_within_its_line_budget() -> None:
    """All of fair_router's Python, prose included, at most MAX_PACKAGE_LINES: a maintainer has to hold the
    whole package, so a feature pays for its lines, and a growing total is a decision, not a drift (raise
    the budget in the same change, saying why)."""
    lines = package_lines(PACKAGE)
    assert lines > 5000, "the count is real: it sees the package's modules"
    assert lines <= MAX_PACKAGE_LINES, (
        f"fair_router/ is {lines} lines of Python, over its budget of {MAX_PACKAGE_LINES}: make room (dead code, "
        "repetition, prose that belongs in docs/) or raise the budget here, saying why"
    )
