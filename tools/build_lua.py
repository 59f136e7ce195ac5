"""``make lua``: writes ``lua/built`` (the texts Redis runs, checked in) from the scripts of ``lua/`` and the pieces of
``lua/lib`` they include; tests/test_lua_files.py fails when a built file is not current. docs/internals.md has the
details."""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fair_router.store.luascript import BUILT, MINIFIED, lua_dir, script_names

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

_INCLUDE = re.compile(r"--\s*include:\s*(.*)")
_DEFINES = re.compile(r"^local\s+(?:function\s+)?([A-Za-z_][\w\s,]*?)\s*(?:=|\(|$)", re.MULTILINE)
_FUNCTION_SLOT = "@@function@@"
"""Stands for a library's function name while its text is hashed (the name is made from the hash)."""
FUNCTIONS = ("fair_pop", "route", "start", "fair_unpark", "fair_push")
"""The scripts that also run as a Redis function library (``lua/built/<name>.library.lua``)."""
FUNCTION_FLAGS = {"fair_pop": "{'allow-oom'}"}
"""A library's function flags (none: ``{}``, refused upfront when Redis is out of memory, as a write should be).
The pop's allow-oom: as a script's, the call is not refused upfront when Redis is out of memory (a pop frees
memory)."""


def includes(source: str) -> list[str]:
    """The pieces named by the ``-- include:`` lines of a script's leading comment block."""
    wanted: list[str] = []
    for line in source.splitlines():
        if not line.startswith("--"):
            break
        match = _INCLUDE.match(line)
        if match:
            wanted += [name.strip() for name in match.group(1).split(",") if name.strip()]
    return wanted


def defines(source: str) -> set[str]:
    """The top-level names a piece or script defines (``local x``, ``local a, b``, ``local function f``)."""
    names: set[str] = set()
    for match in _DEFINES.finditer(source):
        names.update(name.strip() for name in match.group(1).split(",") if name.strip())
    return names


def assemble(name: str) -> str:
    """The source of ``lua/<name>.lua`` with every piece it includes in front: each once, after the pieces it
    includes itself (what ``make lua`` writes to ``lua/built/<name>.lua``)."""
    lua = lua_dir()
    return assemble_source(lua.joinpath(f"{name}.lua").read_text(encoding="utf-8"), f"lua/{name}.lua", lua)


def assemble_source(source: str, where: str, lua: Traversable) -> str:
    """``source`` (named ``where`` in errors) with the pieces of ``lua``/lib it includes in front."""
    return "\n".join(_pieces(source, where, lua))


def assemble_library(name: str) -> str:
    """``lua/<name>.lua`` as a Redis function library named after the hash of its text, with KEYS and ARGV as
    locals each call sets; flags: :data:`FUNCTION_FLAGS` (docs/internals.md, "Transport")."""
    lua = lua_dir()
    *pieces, body = _pieces(lua.joinpath(f"{name}.lua").read_text(encoding="utf-8"), f"lua/{name}.lua", lua)
    flags = FUNCTION_FLAGS.get(name, "{}")
    text = "\n".join([f"#!lua name={_FUNCTION_SLOT}", "local KEYS, ARGV", *pieces,
                      f"redis.register_function{{function_name='{_FUNCTION_SLOT}', flags={flags}, "
                      f"callback=function(keys, args)\nKEYS, ARGV = keys, args\n{body}\nend}}\n"])
    function = f"fair_router_{name}_{hashlib.sha1(text.encode()).hexdigest()[:16]}"
    return text.replace(_FUNCTION_SLOT, function)


def _pieces(source: str, where: str, lua: Traversable) -> list[str]:
    """The pieces ``source`` includes, each once, after the pieces it includes itself; ``source`` last. A name
    defined at the top level of two of them is refused: one would silently replace the other."""
    parts: list[str] = []
    seen: set[str] = set()
    owners: dict[str, str] = {}

    def add(text: str, origin: str) -> None:
        for piece in includes(text):
            if piece in seen:
                continue
            seen.add(piece)
            path = lua.joinpath("lib").joinpath(f"{piece}.lua")
            if not path.is_file():
                raise ValueError(f"{origin}: '-- include: {piece}' names no lua/lib/{piece}.lua")
            add(path.read_text(encoding="utf-8"), f"lua/lib/{piece}.lua")
        for defined in sorted(defines(text)):
            if defined in owners:
                raise ValueError(f"{origin} defines '{defined}', as {owners[defined]} does (one flat namespace)")
            owners[defined] = origin
        parts.append(text)

    add(source, where)
    return parts


def compact(source: str) -> str:
    """``source`` without comment lines and indentation (our scripts hold no multi-line strings)."""
    return "".join(line.strip() + "\n" for line in source.splitlines()
                   if line.strip() and not line.strip().startswith("--"))


def generate() -> dict[str, str]:
    """``lua/built`` by name: each script assembled, :data:`FUNCTIONS` as libraries, :data:`MINIFIED` compacted."""
    texts = {f"{name}.lua": assemble(name) for name in script_names()}
    texts.update({f"{name}.library.lua": assemble_library(name) for name in FUNCTIONS})
    # one comment line kept, so MONITOR and the slow log still name the script
    texts.update({f"{name}.min.lua": f"-- lua/built/{name}.min.lua: lua/{name}.lua without comments (make lua)\n"
                  + compact(texts[f"{name}.lua"]) for name in MINIFIED})
    return texts


def write_built(target: Path) -> list[str]:
    """Write :func:`generate`'s files into ``target``, removing any other ``.lua``; the names of those changed."""
    target.mkdir(exist_ok=True)
    texts = generate()
    changed = [name for name, text in texts.items()
               if not (target / name).is_file() or (target / name).read_text(encoding="utf-8") != text]
    for name in changed:
        (target / name).write_text(texts[name], encoding="utf-8", newline="")
    for stale in target.glob("*.lua"):
        if stale.name not in texts:
            stale.unlink()
            changed.append(stale.name)
    return changed


def main() -> int:
    """Write ``lua/built`` from ``lua/`` (in a checkout) and name the files that changed."""
    target = Path(str(lua_dir())) / BUILT
    for name in write_built(target):
        print(f"lua/{BUILT}/{name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
