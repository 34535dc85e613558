"""The Lua scripts in lua/, one per store operation, loaded once at start-up.

A script or an include may pull in a shared piece of lua/includes/ with a line
`--- @include "name"`; each piece is written in once, where it is first asked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

from redis.commands.core import AsyncScript

from gql_presence.connection import AnyRedis


class ScriptName(StrEnum):
    """One member per lua/<name>.lua."""

    TOUCH = "touch"
    TOUCH_MANY = "touch_many"
    KICK = "kick"
    PRESENCE = "presence"
    ONLINE_USERS = "online_users"
    ONLINE_FRIENDS = "online_friends"
    ACTIVE_IN_RANGE = "active_in_range"
    WEEKLY_STATS = "weekly_stats"
    CHANGE_FRIEND_LINKS = "change_friend_links"
    SWEEP = "sweep"
    OPEN_SESSION = "open_session"
    RENEW_SESSIONS = "renew_sessions"
    CLOSE_SESSION = "close_session"
    SESSION_REVOKED = "session_revoked"
    TAKE_TOKEN = "take_token"  # noqa: S105 - a script name, not a password
    CURSOR_SECRET = "cursor_secret"  # noqa: S105 - a script name, not a password
    PERSIST_DOCUMENT = "persist_document"
    PERSISTED_DOCUMENT = "persisted_document"


class ScriptError(StrEnum):
    """The error replies of the scripts (`redis.error_reply(...)`), each the whole reply."""

    SESSION_REVOKED = "SESSION_REVOKED"
    AT_IN_FUTURE = "AT_IN_FUTURE"
    AT_BEFORE_RETENTION = "AT_BEFORE_RETENTION"
    DAY_NOT_GIVEN = "DAY_NOT_GIVEN"
    BAD_CHANGE = "BAD_CHANGE"

    @classmethod
    def of(cls, reply: str) -> ScriptError | None:
        """The error a script replied with, or None for an error that is not a script's own."""
        try:
            return cls(reply)
        except ValueError:
            return None


_INCLUDE = re.compile(r'^--- @include "([a-z_]+)"$', re.MULTILINE)


def lua_dir() -> Path:
    """lua/ as installed in the package, or at the top of a source checkout."""
    package = Path(__file__).parent.parent
    packaged = package / "lua"
    return packaged if packaged.is_dir() else package.parent / "lua"


@cache
def script_source(name: str) -> str:
    """The script's text with its includes written in."""
    folder = lua_dir()
    return _with_includes((folder / f"{name}.lua").read_text(encoding="utf-8"), folder, set())


def _with_includes(text: str, folder: Path, included: set[str]) -> str:
    def include(match: re.Match[str]) -> str:
        if match[1] in included:
            return ""
        included.add(match[1])
        piece = (folder / "includes" / f"{match[1]}.lua").read_text(encoding="utf-8")
        return _with_includes(piece, folder, included)

    return _INCLUDE.sub(include, text)


@dataclass(frozen=True)
class Scripts:
    """Registered scripts: each re-loads itself if Redis answers NOSCRIPT (after a restart)."""

    by_name: dict[ScriptName, AsyncScript]

    @classmethod
    def register(cls, client: AnyRedis) -> Scripts:
        return cls({name: client.register_script(script_source(name)) for name in ScriptName})

    async def load(self, client: AnyRedis) -> None:
        """Loads the scripts Redis does not hold (all of them on a new Redis, or after a
        restart or SCRIPT FLUSH), so that a script Redis rejects fails now. One it holds was
        compiled from this very text already: its sha is the text's. On Redis Cluster the
        client asks every primary, and loads on every primary."""
        held = await client.script_exists(*(script.sha for script in self.by_name.values()))
        for name, present in zip(self.by_name, held, strict=True):
            if not present:
                await client.script_load(script_source(name))

    async def run(self, name: ScriptName, keys: list[str], args: list[str | int]) -> Any:
        return await self.by_name[name](keys=keys, args=args)
