"""The Lua scripts themselves: documented, loadable on every supported server."""

from __future__ import annotations

import re

import pytest
from redis.asyncio import Redis

from gql_presence.store.lua_assembly import LuaLayoutError, assemble
from gql_presence.store.scripts import ScriptName, lua_dir, script_source

# A header entry names one index, KEYS[3], or a range from one: KEYS[8..10], KEYS[2..n+1].
HEADER_ENTRY = re.compile(r"\b(KEYS|ARGV)\[(\d+)(\.\.)?[^\]]*\]")


@pytest.mark.parametrize("name", ScriptName)
def test_every_script_has_a_header_naming_its_keys_arguments_and_reply(name: str) -> None:
    text = (lua_dir() / f"{name}.lua").read_text()
    header, body = text.split("]]", 1)
    assert header.startswith(f"--[[\n  {name}: ")
    assert "Returns" in header
    singles = {(kind, int(i)) for kind, i, dots in HEADER_ENTRY.findall(header) if not dots}
    range_starts = [(kind, int(i)) for kind, i, dots in HEADER_ENTRY.findall(header) if dots]
    for kind, index in {(k, int(i)) for k, i in re.findall(r"\b(KEYS|ARGV)\[(\d+)\]", body)}:
        in_a_range = any(k == kind and first <= index for k, first in range_starts)
        assert (kind, index) in singles or in_a_range, (
            f"{name}.lua: {kind}[{index}] is not in its header"
        )


def test_every_lua_file_is_a_script_of_the_store() -> None:
    assert sorted(p.stem for p in lua_dir().glob("*.lua")) == sorted(ScriptName)


async def test_every_script_compiles_on_the_server(redis: Redis) -> None:
    for name in ScriptName:
        assert await redis.script_load(script_source(name))


def test_includes_are_written_in() -> None:
    for name in ScriptName:
        assert "@include" not in script_source(name)


def _assembled(script: str, includes: dict[str, str]) -> str:
    return assemble("s", lambda piece: script if piece is None else includes[piece])


def test_a_script_keeps_only_what_it_refers_to() -> None:
    lib = (
        "local SCALE = 2\n"
        "local UNUSED_LIMIT, UNUSED_RATIO = 10, math.log(2)\n"
        "local COUNTED = redis.call('INCR', 'loaded')\n"
        "local function double(x) return x * SCALE end\n"
        "local function quadruple(x)\n  return double(double(x))\nend\n"
        "local function unused(x)\n  return quadruple(x) + UNUSED_LIMIT\nend\n"
        'local function lazy()\n--- @include "inner"\n  return {inner_used = inner_used}\nend\n'
    )
    inner = "local function inner_used() return 1 end\nlocal function inner_unused() end\n"
    text = _assembled(
        '--- @include "lib"\nlocal t = {}\nt.unused = 1\nreturn quadruple(3)\n',
        {"lib": lib, "inner": inner},
    )
    assert "local function quadruple" in text
    assert "local function double" in text
    assert "local SCALE = 2" in text
    # A value that calls more than math's functions is kept: leaving it out would change state.
    assert "local COUNTED" in text
    # A field of the same name as a function is no reference to it.
    assert "unused(" not in text
    assert "UNUSED_LIMIT" not in text
    assert "lazy" not in text
    assert "inner_used" not in text


def test_a_function_made_lazily_keeps_what_it_includes_and_uses() -> None:
    lib = 'local function lazy()\n--- @include "inner"\n  return {inner_used = inner_used}\nend\n'
    inner = "local function inner_used() return 1 end\nlocal function inner_unused() end\n"
    text = _assembled(
        '--- @include "lib"\nreturn lazy().inner_used()\n', {"lib": lib, "inner": inner}
    )
    assert "local function inner_used" in text
    assert "inner_unused" not in text
    assert text.index("local function lazy") < text.index("local function inner_used")


def test_a_piece_written_inside_a_function_is_asked_for_outside_it_fails_loudly() -> None:
    lib = 'local function lazy()\n--- @include "inner"\n  return {inner_used = inner_used}\nend\n'
    inner = "local function inner_used() return 1 end\n"
    pieces = {"lib": lib, "inner": inner}
    # Asked for again inside the function that holds it, or first at the top: both see it.
    _assembled('--- @include "inner"\n--- @include "lib"\nreturn inner_used()\n', pieces)
    with pytest.raises(LuaLayoutError, match="inner"):
        _assembled('--- @include "lib"\n--- @include "inner"\nreturn inner_used()\n', pieces)


@pytest.mark.parametrize(
    "script",
    [
        "local function f()\n  if x then\n  return 1\nend\n",  # a block left open
        "local x = 1\nend\n",  # a closing word outside a block
        "local s = 'unfinished\nreturn s\n",
        "--[[ a comment never closed\nreturn 1\n",
    ],
)
def test_a_layout_the_assembly_cannot_read_fails_loudly(script: str) -> None:
    with pytest.raises(LuaLayoutError):
        _assembled(script, {})


def _without_comments(text: str) -> str:
    text = re.sub(r"--\[(=*)\[.*?\]\1\]", "", text, flags=re.DOTALL)
    return re.sub(r"--[^\n]*", "", text)


def test_every_script_keeps_each_function_of_its_includes_that_it_names() -> None:
    # Read apart from the assembly's own reading: a function left out whose name the kept
    # text still uses (but as a field) would be a nil global at run time.
    for name in ScriptName:
        whole, kept = script_source(name, whole=True), script_source(name)
        functions = set(re.findall(r"^local function (\w+)", whole, re.MULTILINE))
        left_out = functions - set(re.findall(r"^local function (\w+)", kept, re.MULTILINE))
        named = set(re.findall(r"(?<![\w.:])([A-Za-z_]\w*)", _without_comments(kept)))
        assert not left_out & named, f"{name}.lua uses {left_out & named}, left out"
        kept_lines = [line for line in kept.splitlines() if line.strip()]
        whole_lines = iter(line for line in whole.splitlines() if line.strip())
        assert all(line in whole_lines for line in kept_lines), f"{name}.lua is not a part"
