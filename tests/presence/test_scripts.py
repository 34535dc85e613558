"""The Lua scripts themselves: documented, loadable on every supported server."""

from __future__ import annotations

import re

import pytest
from redis.asyncio import Redis

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
