"""The import-time rq check (fair_router/rq_internals/guard.py): the installed rq passes; a real rq 2.12 is
refused at ``import fair_router``; a member removed or changed is named; the list of members matches the
code's overrides and private rq names, the docs' table and pyproject's pin."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
import types
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import rq
from rq.worker import BaseWorker

import fair_router
from fair_router.rq_internals import guard
from fair_router.rq_internals.guard import (
    RQ_RANGE,
    RqVersionError,
    RqVersionWarning,
    check_installed_rq,
    in_range,
    member_problem,
    parse_minor,
    shape_of,
    signature_shape,
)
from fair_router.rq_internals.members import ATTRIBUTE, MEMBERS, PROPERTY, RqMember

ROOT = Path(__file__).resolve().parent.parent
OLD_RQ = "2.12.0"


def test_installed_rq_passes() -> None:
    version, _ = guard.installed_rq()
    assert in_range(version), version
    assert guard.problems() == []
    check_installed_rq()  # no error, no warning


def test_range_and_pin_agree() -> None:
    """pyproject's rq pin is the range the guard checks."""
    pins = re.findall(r'^\s*"rq([^"]*)",', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert pins == [RQ_RANGE]


@pytest.mark.parametrize(("version", "inside"), [
    ("3.0.0", True), ("3.0.7", True), ("3.0.1rc1", True), ("3.1.0", False), ("3.1.0rc1", False),
    ("2.12.0", False), ("4.0", False), ("dev", False),
])
def test_in_range(version: str, inside: bool) -> None:
    assert in_range(version) is inside


def test_parse_minor() -> None:
    assert parse_minor("3.10.2") == (3, 10)
    assert parse_minor("x") is None


def test_shape_from_code_matches_inspect_signature() -> None:
    """The fast path (code object) gives inspect.signature's text, for every listed callable and odd forms."""
    def odd(a, /, b, *args, c, d=1, **kw):  # type: ignore[no-untyped-def]
        return a

    def kwonly(a, *, b):  # type: ignore[no-untyped-def]
        return a

    for function in (odd, kwonly, lambda: None):
        assert shape_of(function) == signature_shape(function)
    assert shape_of(odd) == "(a, /, b, *args, c, d, **kw)"
    assert shape_of(kwonly) == "(a, *, b)"
    for member in MEMBERS:
        if member.shape.startswith("("):
            raw = inspect.getattr_static(guard._owner(member.owner), member.name)
            function = getattr(raw, "__func__", raw)
            assert shape_of(function) == signature_shape(function) == member.shape, member.path


# -- the checker on a copy of rq's BaseWorker with a member removed or changed ------------------------------


def _copy_of_base_worker(drop: str = "", **replace: object) -> type:
    """rq's BaseWorker rebuilt from its class dict, ``drop`` left out, ``replace`` swapped in."""
    body = {k: v for k, v in BaseWorker.__dict__.items() if k not in (drop, "__dict__", "__weakref__")}
    body.update(replace)
    return type("BaseWorkerCopy", BaseWorker.__bases__, body)


@pytest.fixture
def copy_module(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """A module ``rqguard_copy`` the checker resolves owners in (so rq itself stays untouched)."""
    module = types.ModuleType("rqguard_copy")
    monkeypatch.setitem(sys.modules, "rqguard_copy", module)
    yield module


def _as_listed(path: str, owner: str = "rqguard_copy.BaseWorker") -> RqMember:
    listed = next(member for member in MEMBERS if member.path == path)
    return listed._replace(owner=owner)


def test_an_unchanged_copy_passes(copy_module: types.ModuleType) -> None:
    copy_module.BaseWorker = _copy_of_base_worker()  # type: ignore[attr-defined]
    worker_members = [m._replace(owner="rqguard_copy.BaseWorker") for m in MEMBERS if m.owner == "rq.worker.BaseWorker"]
    assert len(worker_members) > 20
    assert guard.problems(worker_members) == []


def test_a_removed_method_is_named(copy_module: types.ModuleType) -> None:
    copy_module.BaseWorker = _copy_of_base_worker(drop="_finalize_success")  # type: ignore[attr-defined]
    member = _as_listed("rq.worker.BaseWorker._finalize_success")
    assert member_problem(member) == "missing"
    assert guard.problems([member]) == ["rqguard_copy.BaseWorker._finalize_success (feature): missing"]


def test_a_changed_signature_is_named(copy_module: types.ModuleType) -> None:
    def maintain_heartbeats(self, job):  # type: ignore[no-untyped-def]  # rq 2.12's
        return None

    copy_module.BaseWorker = _copy_of_base_worker(maintain_heartbeats=maintain_heartbeats)  # type: ignore[attr-defined]
    member = _as_listed("rq.worker.BaseWorker.maintain_heartbeats")
    assert member_problem(member) == "has (self, job), fair-router expects (self, job, execution)"


def test_an_added_parameter_is_named(copy_module: types.ModuleType) -> None:
    def prepare_execution(self, job, pipeline):  # type: ignore[no-untyped-def]
        return None

    copy_module.BaseWorker = _copy_of_base_worker(prepare_execution=prepare_execution)  # type: ignore[attr-defined]
    assert member_problem(_as_listed("rq.worker.BaseWorker.prepare_execution")) == (
        "has (self, job, pipeline), fair-router expects (self, job)")


def test_an_attribute_no_longer_set_in_init_is_named(copy_module: types.ModuleType) -> None:
    def __init__(self, queues):  # type: ignore[no-untyped-def]  # sets nothing fair-router reads
        self.queues = queues

    copy_module.BaseWorker = _copy_of_base_worker(__init__=__init__)  # type: ignore[attr-defined]
    for name in ("executions", "_state", "_ordered_queues", "_exc_handlers", "_stop_requested"):
        assert member_problem(_as_listed(f"rq.worker.BaseWorker.{name}")) == "missing", name


def test_a_property_turned_method_is_named(copy_module: types.ModuleType) -> None:
    copy_module.BaseWorker = _copy_of_base_worker(is_horse=lambda self: False)  # type: ignore[attr-defined]
    assert member_problem(_as_listed("rq.worker.BaseWorker.is_horse")) == "no longer a property (function)"


def test_a_missing_owner_is_named() -> None:
    member = RqMember("rq.worker.NoSuchWorker", "heartbeat", "(self)", "feature")
    assert member_problem(member) == "rq.worker.NoSuchWorker is missing"
    assert member_problem(member._replace(owner="rq.no_such_module.Worker")) == "rq.no_such_module.Worker is missing"


def test_check_raises_naming_version_member_and_range(copy_module: types.ModuleType,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    copy_module.BaseWorker = _copy_of_base_worker(drop="_finalize_success")  # type: ignore[attr-defined]
    member = _as_listed("rq.worker.BaseWorker._finalize_success")
    monkeypatch.delenv(guard.SKIP_ENV, raising=False)
    with pytest.raises(RqVersionError) as raised:
        check_installed_rq([member])
    message = str(raised.value)
    assert isinstance(raised.value, ImportError)
    assert f"rq {rq.__version__} is installed" in message
    assert "rqguard_copy.BaseWorker._finalize_success (feature): missing" in message
    assert f"supports rq {RQ_RANGE}" in message and "FAIR_ROUTER_SKIP_RQ_CHECK=1" in message


def test_skip_variable_turns_the_error_into_a_warning(copy_module: types.ModuleType,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    copy_module.BaseWorker = _copy_of_base_worker(drop="_finalize_success")  # type: ignore[attr-defined]
    member = _as_listed("rq.worker.BaseWorker._finalize_success")
    monkeypatch.setenv(guard.SKIP_ENV, "1")
    with pytest.warns(RqVersionWarning, match=r"_finalize_success \(feature\): missing"):
        check_installed_rq([member])
    monkeypatch.setenv(guard.SKIP_ENV, "perhaps")
    with pytest.raises(RqVersionError, match="FAIR_ROUTER_SKIP_RQ_CHECK='perhaps': expected 1"):
        check_installed_rq([member])
    monkeypatch.setenv(guard.SKIP_ENV, "0")
    with pytest.raises(RqVersionError, match="_finalize_success"):
        check_installed_rq([member])


def test_the_escape_hatch_is_a_known_variable() -> None:
    """``fair-router check`` does not report FAIR_ROUTER_SKIP_RQ_CHECK as an unknown variable."""
    from fair_router.config.crosscheck import unknown_variables

    assert unknown_variables({guard.SKIP_ENV: "1"}) == []
    assert [finding.where for finding in unknown_variables({"FAIR_ROUTER_SKIP_RQ_CHEK": "1"})] == [
        "FAIR_ROUTER_SKIP_RQ_CHEK"]


def test_exported() -> None:
    assert fair_router.RqVersionError is RqVersionError and issubclass(RqVersionError, ImportError)
    assert fair_router.RqVersionWarning is RqVersionWarning


# -- the list is complete: every override, every private rq name fair_router uses ---------------------------


def _rq_classes_overridden() -> dict[str, set[str]]:
    """rq member path -> the fair_router classes overriding it, over every fair_router class built on rq's."""
    import importlib
    import pkgutil

    found: dict[str, set[str]] = {}
    for info in pkgutil.walk_packages(fair_router.__path__, "fair_router."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if not (isinstance(obj, type) and obj.__module__ == module.__name__):
                continue
            rq_bases = [base for base in obj.__mro__ if base.__module__.split(".")[0] == "rq"]
            ours = [base for base in obj.__mro__ if base.__module__.startswith("fair_router.")]
            for base in ours:
                for name in base.__dict__:
                    if name.startswith("__"):
                        continue
                    owners = [rq_base for rq_base in rq_bases if name in rq_base.__dict__]
                    if owners:
                        found.setdefault(f"{owners[0].__module__}.{owners[0].__name__}.{name}", set()).add(
                            f"{base.__module__}.{base.__name__}")
    return found


def _listed_resolved() -> set[str]:
    """The listed members, by where rq defines them (``rq.worker.BaseWorker`` is ``rq.worker.base.BaseWorker``)."""
    resolved = set()
    for member in MEMBERS:
        owner = guard._owner(member.owner)
        if isinstance(owner, type):
            for base in owner.__mro__:
                if member.name in base.__dict__:
                    owner = base
                    break
            resolved.add(f"{owner.__module__}.{owner.__name__}.{member.name}")
    return resolved


def test_every_override_of_an_rq_member_is_listed() -> None:
    overridden = _rq_classes_overridden()
    assert "rq.queue.Queue._enqueue_job" in overridden  # the walk finds the seam
    missing = {path: sorted(by) for path, by in overridden.items() if path not in _listed_resolved()}
    assert missing == {}, "add these to fair_router/rq_internals/members.py and docs/compatibility.md"


#: Names of rq's private members that also name attributes of fair_router's own objects (same spelling, ours).
OWN_NAMES = {
    "_connection": "FairJob's and LuaScript's own connection",
    "_job": "JobBeat's own job",
    "_queue_names": "the dashboard reader's own method",
    "_queue": "StagedRegistry's own queue",
    "_process": "the demo's RedisServer's own server process",
}


def _rq_private_names() -> set[str]:
    """The private member names of rq's classes fair_router meets (defined on them, or set in their __init__)."""
    import rq.executions
    import rq.intermediate_queue
    import rq.job
    import rq.queue
    import rq.registry
    import rq.scheduler
    import rq.worker

    rq_classes = [rq.queue.Queue, rq.job.Job, rq.worker.BaseWorker, rq.worker.Worker, rq.worker.SimpleWorker,
                  rq.registry.StartedJobRegistry, rq.executions.Execution, rq.scheduler.RQScheduler,
                  rq.intermediate_queue.IntermediateQueue]
    private: set[str] = set()
    for cls in rq_classes:
        for base in cls.__mro__:
            private |= {name for name in base.__dict__ if name.startswith("_") and not name.startswith("__")}
            init = base.__dict__.get("__init__")
            if init is not None and hasattr(init, "__code__"):
                private |= {name for name in init.__code__.co_names if name.startswith("_")
                            and not name.startswith("__")}
    return private


def _private_used(path: Path) -> set[str]:
    """``path``'s ``._name`` attributes naming a private member of rq's classes (OWN_NAMES left out)."""
    return set(re.findall(r"\.(_[a-z]\w*)\b", path.read_text())) & _rq_private_names() - set(OWN_NAMES)


def test_every_private_rq_name_used_is_listed() -> None:
    """Each ``._name`` in fair_router/ that names a private member of one of rq's classes is listed (or is one
    of our own attributes by the same name, OWN_NAMES)."""
    used = set()
    for path in (ROOT / "fair_router").rglob("*.py"):
        used |= _private_used(path)
    listed = {member.name for member in MEMBERS}
    assert {"_enqueue_job", "_ordered_queues", "_dependency_ids"} <= used
    assert used - listed == set()


def test_rq_private_names_stay_inside_rq_internals() -> None:
    """rq's private members and its undocumented helpers (``rq.utils``) are reached only from
    ``fair_router/rq_internals/``: an rq upgrade is checked there, and nowhere else."""
    inside = ROOT / "fair_router" / "rq_internals"
    outside = {path.relative_to(ROOT).as_posix(): sorted(_private_used(path))
               for path in (ROOT / "fair_router").rglob("*.py") if inside not in path.parents}
    assert any(_private_used(path) for path in inside.glob("*.py"))  # the scan sees the seam's own
    assert {path: names for path, names in outside.items() if names} == {}
    helpers = [path.relative_to(ROOT).as_posix() for path in (ROOT / "fair_router").rglob("*.py")
               if inside not in path.parents and re.search(r"\brq\.utils\b", path.read_text())]
    assert helpers == []


def test_rq_utils_names_used_are_listed() -> None:
    used = set()
    for path in (ROOT / "fair_router").rglob("*.py"):
        for names in re.findall(r"from rq\.utils import ([\w, ]+)", path.read_text()):
            used |= {name.strip() for name in names.split(",")}
    listed = {member.name for member in MEMBERS if member.owner == "rq.utils"}
    assert used and used == listed


# -- the docs' table ------------------------------------------------------------------------------------------


def test_docs_table_matches_the_list() -> None:
    """docs/compatibility.md's table of rq members: one row per listed member, same signature and kind."""
    text = (ROOT / "docs" / "compatibility.md").read_text()
    section = text.split("## The rq members fair-router relies on", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([\w.]+)` \| `([^`]+)` \| (feature|speed-up) \| (.+) \|$", section, re.MULTILINE)
    assert [(path, shape, kind) for path, shape, kind, _ in rows] == [
        (member.path, member.shape, member.kind) for member in MEMBERS]
    assert all(len(breaks.strip()) > 10 for *_, breaks in rows)
    assert {PROPERTY, ATTRIBUTE} <= {member.shape for member in MEMBERS}


# -- for real: rq 2.12 installed beside fair_router -----------------------------------------------------------


@pytest.fixture(scope="module")
def old_rq(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rq 2.12.0 alone (no dependencies: the venv's redis and click serve) in a throwaway target directory."""
    target = tmp_path_factory.mktemp("rq-2.12")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                          f"rq=={OLD_RQ}"], capture_output=True, text=True)
    if pip.returncode != 0:
        pytest.fail(f"pip could not install rq {OLD_RQ} into {target}:\n{pip.stderr}")
    return target


def _import_beside(old_rq: Path, skip: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != guard.SKIP_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(old_rq), str(ROOT)])
    if skip is not None:
        env[guard.SKIP_ENV] = skip
    code = "import rq, fair_router; print('imported beside rq', rq.__version__)"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=old_rq)


def test_import_beside_rq_2_12_fails_naming_the_fix(old_rq: Path) -> None:
    result = _import_beside(old_rq, None)
    assert result.returncode == 1 and "imported beside rq" not in result.stdout
    assert "fair_router.rq_internals.guard.RqVersionError: fair-router" in result.stderr
    assert f"rq {OLD_RQ} is installed ({old_rq}" in result.stderr
    assert f"rq {OLD_RQ} is outside >=3.0,<3.1" in result.stderr
    # what killed the worker at the first job before the guard, and what else rq 2.12 lacks
    assert "rq.worker.BaseWorker.executions (feature): missing" in result.stderr
    assert "rq.worker.BaseWorker._finalize_success (feature): missing" in result.stderr
    assert ("rq.worker.BaseWorker.maintain_heartbeats (feature): has (self, job), fair-router expects "
            "(self, job, execution)") in result.stderr
    assert "pip install 'fair-router<0.2'" in result.stderr


def test_import_beside_rq_2_12_with_the_escape_hatch_warns(old_rq: Path) -> None:
    result = _import_beside(old_rq, "1")
    assert result.returncode == 0, result.stderr
    assert f"imported beside rq {OLD_RQ}" in result.stdout
    assert "RqVersionWarning: fair-router" in result.stderr and "rq.worker.BaseWorker.executions" in result.stderr


def test_no_warning_on_the_supported_rq() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_installed_rq()
