"""The Lua scripts as loaded: every script assembles with its includes and compiles, what runs is its
lua/built file, and every script's header states its KEYS and ARGV (the fair keys' order: test_lua_files.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from redis import Redis

from fair_router.store.luascript import built, lua_dir
from tools.build_lua import assemble, assemble_source, includes

LUA = Path(__file__).resolve().parent.parent / "lua"
SCRIPTS = sorted(path.stem for path in LUA.glob("*.lua"))


def test_the_checkout_reads_the_top_level_lua_directory() -> None:
    assert Path(str(lua_dir())).resolve() == LUA.resolve()
    assert not (LUA.parent / "fair_router" / "lua").exists()  # one place in git, not two


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_assembles_compiles_and_states_its_keys_and_argv(conn: Redis, name: str) -> None:
    text = (LUA / f"{name}.lua").read_text(encoding="utf-8")
    header = [line for line in text.splitlines()[:20] if line.startswith("--")]
    assert any(line.startswith("-- KEYS") for line in header), name
    assert any(line.startswith("-- ARGV") for line in header), name
    source = assemble(name)
    assert source.endswith(text) and built(name) == source
    for piece in includes(text):  # each piece once, in front
        marker = (LUA / "lib" / f"{piece}.lua").read_text()
        assert source.count(marker) == 1, (name, piece)
        assert source.index(marker) < source.index(text)
    assert conn.script_load(source)  # compiles


def test_a_piece_comes_after_the_pieces_it_includes() -> None:
    source = assemble("fair_remove")  # includes fifo, which includes stride and members
    order = [source.index(f"-- lib/{piece}.lua") for piece in ("members", "fifo")]
    assert source.index("local rq_list,") < order[0] < order[1] < source.index("\nbind_keys()\n")
    assert source.index("-- lib/stride.lua") < order[1]


def test_an_unknown_include_is_named() -> None:
    with pytest.raises(ValueError, match=r"probe.lua: '-- include: nope' names no lua/lib/nope.lua"):
        assemble_source("-- include: time, nope\nreturn 1", "probe.lua", lua_dir())
