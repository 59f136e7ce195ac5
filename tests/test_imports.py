"""No import cycles inside fair_router, between modules or between packages.

A cycle makes the import order matter (a module sees the other half-initialised), hides which module is
the lower layer, and gets patched with a function-level import, which only postpones it: ``router`` and
``fairqueue`` imported each other that way. So this reads every import in every module with ``ast``,
those inside functions and ``if TYPE_CHECKING:`` blocks included, and fails naming the cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import fair_router

PACKAGE = Path(fair_router.__file__).parent


def module_name(path: Path, package: Path) -> str:
    parts = [package.name, *path.relative_to(package).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(tree: ast.Module, name: str, is_package: bool) -> set[str]:
    """Every module ``name`` imports, anywhere in it, relative imports resolved. ``from pkg import x``
    counts as an import of ``pkg`` and, when that is a module, of ``pkg.x``."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module of ``package`` -> the modules of ``package`` it imports. Importing ``package.sub.mod`` runs
    ``package/sub/__init__.py`` too, so that is an edge as well; not so the top ``__init__`` (every
    import runs it, and it imports the public names), unless a module imports it by name."""
    sources = {module_name(path, package): path for path in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in sources.items():
        imported = imports_of(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py")
        parents = {".".join(parts[:n]) for parts in map(str.split, imported, ".") for n in range(2, len(parts))}
        graph[name] = {module for module in imported | parents if module in sources and module != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path ``[a, b, ..., a]``, or None (depth-first search, three colours)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            cycle = visit(start)
            if cycle:
                return cycle
    return None


FLOORS = {
    "core": 0,
    "config": 1, "store": 1,
    "controls": 2, "observe": 2, "rq_internals": 2, "iteration": 2,
    "fairqueue": 3,
    "routing": 4,
    "workers": 5, "dashboard": 5,
    "demo": 6,
    "commands": 7,
}
"""Each package's floor (docs/internals.md, "Floors"): a package imports only from lower floors. ``core`` holds
the vocabulary every feature speaks (tenants, job meta, rules, rates, keys); features never import each other
sideways, so a change to one cannot reach another except through a lower floor."""


def package_of(module: str, package: Path) -> str | None:
    """The first-level package of ``module`` (``fair_router.routing.router`` -> ``routing``), or None for a
    top-level module (``fair_router``, ``fair_router.cli``: they sit on top and import everything)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (package / parts[1]).is_dir() else None


def package_graph(package: Path) -> dict[str, dict[str, list[str]]]:
    """First-level package -> the packages it imports -> the module imports behind that edge."""
    edges: dict[str, dict[str, list[str]]] = {}
    for module, imported in import_graph(package).items():
        source = package_of(module, package)
        for target in imported:
            into = package_of(target, package)
            if source and into and into != source:
                edges.setdefault(source, {}).setdefault(into, []).append(f"{module} -> {target}")
    return edges


def test_packages_stand_on_floors() -> None:
    """Every package is on a floor, and every import between packages goes down: so the package graph has no
    cycle (``config`` and ``routing`` once imported each other, as did ``routing`` and ``fairqueue``)."""
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").exists()}
    assert packages == set(FLOORS), f"packages without a floor, or floors without a package: {packages ^ set(FLOORS)}"
    edges = package_graph(PACKAGE)
    assert edges["routing"]["core"], "the graph is real"
    upward = [f"{source} (floor {FLOORS[source]}) imports {into} (floor {FLOORS[into]}): {why[0]}"
              for source, targets in edges.items() for into, why in targets.items() if FLOORS[into] >= FLOORS[source]]
    assert not upward, "\n".join(upward)
    assert not edges.get("core"), f"core imports a feature package: {edges.get('core')}"
    graph = {source: set(targets) for source, targets in edges.items()}
    assert find_cycle(graph) is None


def test_the_floor_check_sees_a_sideways_import(tmp_path: Path) -> None:
    """The package graph of a small tree: ``pkg.low.a`` importing ``pkg.high.b`` is an edge low -> high."""
    package = tmp_path / "pkg"
    for sub in ("low", "high"):
        (package / sub).mkdir(parents=True)
        (package / sub / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "high" / "b.py").write_text("X = 1\n")
    (package / "low" / "a.py").write_text("from pkg.high.b import X\n")
    graph = package_graph(package)
    assert set(graph) == {"low"}
    assert sorted(graph["low"]["high"]) == ["pkg.low.a -> pkg.high", "pkg.low.a -> pkg.high.b"]


def test_fair_router_has_no_import_cycles() -> None:
    graph = import_graph(PACKAGE)
    # the graph is real
    assert len(graph) > 20 and "fair_router.routing.router" in graph["fair_router.routing.decorator"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in fair_router: " + " -> ".join(cycle or [])


def test_the_check_finds_a_cycle(tmp_path: Path) -> None:
    """The detector itself: modules importing each other through a relative import, a TYPE_CHECKING block
    and a function-level import are reported; without the closing edge there is no cycle."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import thing\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n")
    (package / "c.py").write_text("import json\n")
    assert find_cycle(import_graph(package)) is None
    (package / "c.py").write_text("def late():\n    from pkg import a\n")
    assert find_cycle(import_graph(package)) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
