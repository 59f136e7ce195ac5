"""No import cycles inside fair_router.

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
