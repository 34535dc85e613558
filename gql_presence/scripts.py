"""The Lua scripts in lua/, one per store operation, loaded once at start-up.

A script may pull in a shared piece of lua/includes/ with a line `--- @include "name"`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from redis.commands.core import AsyncScript

from gql_presence.connection import AnyRedis

SCRIPT_NAMES = (
    "touch",
    "touch_many",
    "kick",
    "presence",
    "online_users",
    "online_friends",
    "active_in_range",
    "weekly_stats",
    "change_friend_links",
    "sweep",
    "take_token",
)

_INCLUDE = re.compile(r'^--- @include "([a-z_]+)"$', re.MULTILINE)


def lua_dir() -> Path:
    """lua/ as installed in the package, or at the top of a source checkout."""
    packaged = Path(__file__).parent / "lua"
    return packaged if packaged.is_dir() else Path(__file__).parent.parent / "lua"


@cache
def script_source(name: str) -> str:
    """The script's text with its includes written in."""
    folder = lua_dir()
    text = (folder / f"{name}.lua").read_text(encoding="utf-8")
    return _INCLUDE.sub(lambda m: (folder / "includes" / f"{m[1]}.lua").read_text("utf-8"), text)


@dataclass(frozen=True)
class Scripts:
    """Registered scripts: each re-loads itself if Redis answers NOSCRIPT (after a restart)."""

    by_name: dict[str, AsyncScript]

    @classmethod
    def register(cls, client: AnyRedis) -> Scripts:
        return cls({name: client.register_script(script_source(name)) for name in SCRIPT_NAMES})

    async def load(self, client: AnyRedis) -> None:
        """Loads the scripts Redis does not hold (all of them on a new Redis, or after a
        restart or SCRIPT FLUSH), so that a script Redis rejects fails now. One it holds was
        compiled from this very text already: its sha is the text's. On Redis Cluster the
        client asks every primary, and loads on every primary."""
        held = await client.script_exists(*(self.by_name[name].sha for name in SCRIPT_NAMES))
        for name, present in zip(SCRIPT_NAMES, held, strict=True):
            if not present:
                await client.script_load(script_source(name))

    async def run(self, name: str, keys: list[str], args: list[str | int]) -> Any:
        return await self.by_name[name](keys=keys, args=args)
