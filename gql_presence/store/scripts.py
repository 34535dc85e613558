"""The Lua scripts in lua/, one per store operation, loaded once at start-up.

A script or an include may pull in a shared piece of lua/includes/ with a line
`--- @include "name"`; each piece is written in once, where it is first asked for, and only
what the script refers to is kept (lua_assembly.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from gql_presence.store.auto_pipeline import AutoPipeline
from gql_presence.store.client import AnyRedis
from gql_presence.store.lua_assembly import assemble


class ScriptName(StrEnum):
    """One member per lua/<name>.lua."""

    TOUCH = "touch"
    TOUCH_MANY = "touch_many"
    KICK = "kick"
    PRESENCE = "presence"
    SET_STATUS = "set_status"
    FRIEND_OF_EACH = "friend_of_each"
    FRIEND_COUNTS = "friend_counts"
    ONLINE_USERS = "online_users"
    ONLINE_SINCE = "online_since"
    ONLINE_FILTERED = "online_filtered"
    ONLINE_FRIENDS = "online_friends"
    ACTIVE_IN_RANGE = "active_in_range"
    WEEKLY_STATS = "weekly_stats"
    ONLINE_TIME = "online_time"
    ONLINE_PERIODS = "online_periods"
    FOLD_ONLINE_TIME = "fold_online_time"
    CARRY_ONLINE_TIME = "carry_online_time"
    ACTIVITY_PERIODS = "activity_periods"
    RETENTION = "retention"
    STICKINESS = "stickiness"
    RECORD_PEAK = "record_peak"
    COMPACT_BITMAPS = "compact_bitmaps"
    FOLD_HOUR = "fold_hour"
    PEAKS = "peaks"
    CHANGE_FRIEND_LINKS = "change_friend_links"
    SWEEP = "sweep"
    OPEN_SESSION = "open_session"
    ACQUIRE_LEASE = "acquire_lease"
    RENEW_LEASE = "renew_lease"
    CHECK_SESSIONS = "check_sessions"
    CHECK_PLACE_SESSIONS = "check_place_sessions"
    OPEN_PLACE_SESSION = "open_place_session"
    CLOSE_PLACE_SESSION = "close_place_session"
    SET_PLACE_STATE = "set_place_state"
    FLUSH_PLACE_STATE = "flush_place_state"
    PLACE_MEMBERS = "place_members"
    PLACE_COUNTS = "place_counts"
    CLOSE_SESSION = "close_session"
    SESSION_REVOKED = "session_revoked"
    TAKE_TOKEN = "take_token"  # noqa: S105 - a script name, not a password
    CURSOR_SECRET = "cursor_secret"  # noqa: S105 - a script name, not a password
    CHOOSE_PUBLISH = "choose_publish"
    PERSIST_DOCUMENT = "persist_document"
    PERSISTED_DOCUMENT = "persisted_document"
    REFRESH_DOCUMENTS = "refresh_documents"
    FEED_PAGE = "feed_page"
    FEED_TIP = "feed_tip"
    CREATE_WEBHOOK = "create_webhook"
    UPDATE_WEBHOOK = "update_webhook"
    ROTATE_WEBHOOK_SECRET = "rotate_webhook_secret"  # noqa: S105 - a script name, not a password
    DELETE_WEBHOOK = "delete_webhook"
    WEBHOOKS = "webhooks"
    RECORD_WEBHOOK_ATTEMPT = "record_webhook_attempt"
    WEBHOOK_LEASES = "webhook_leases"
    ADVANCE_WEBHOOK = "advance_webhook"
    PASS_WEBHOOKS = "pass_webhooks"  # noqa: S105 - a script name, not a password


class ScriptError(StrEnum):
    """The error replies of the scripts (`redis.error_reply(...)`), each the whole reply."""

    SESSION_REVOKED = "SESSION_REVOKED"
    AT_IN_FUTURE = "AT_IN_FUTURE"
    AT_BEFORE_RETENTION = "AT_BEFORE_RETENTION"
    DAY_NOT_GIVEN = "DAY_NOT_GIVEN"
    BAD_CHANGE = "BAD_CHANGE"
    DOCUMENT_TOO_LARGE = "DOCUMENT_TOO_LARGE"
    LEASE_LOST = "LEASE_LOST"
    NOT_IN_PLACE = "NOT_IN_PLACE"
    SESSION_NOT_LIVE = "SESSION_NOT_LIVE"
    EXPIRES_NOT_AHEAD = "EXPIRES_NOT_AHEAD"
    TOO_MANY_FRIENDS = "TOO_MANY_FRIENDS"
    TOO_MANY_SESSIONS = "TOO_MANY_SESSIONS"
    WEBHOOKS_FULL = "WEBHOOKS_FULL"

    @classmethod
    def of(cls, reply: str) -> ScriptError | None:
        """The error a script replied with, or None for an error that is not a script's own."""
        try:
            return cls(reply)
        except ValueError:
            return None


def lua_dir() -> Path:
    """lua/ as installed in the package, or at the top of a source checkout."""
    package = Path(__file__).parent.parent
    packaged = package / "lua"
    return packaged if packaged.is_dir() else package.parent / "lua"


@cache
def script_source(name: str, *, whole: bool = False) -> str:
    """The script's text with its includes written in, less the functions and constants it
    never refers to (lua_assembly.py; with `whole`, all of them)."""
    folder = lua_dir()

    def read(piece: str | None) -> str:
        path = folder / f"{name}.lua" if piece is None else folder / "includes" / f"{piece}.lua"
        return path.read_text(encoding="utf-8")

    return assemble(name, read, whole=whole)


# One entry of a script's header: `  KEYS[3]  name ...`, `  ARGV[7..10]  name ...` (a fixed
# range), `  ARGV[4..]  name ...` or `  KEYS[1..n]  name ...` (as many as the caller gives).
_HEADER_ENTRY = re.compile(r"^  (KEYS|ARGV)\[([^\]]+)\]\s+([a-z_0-9]+)\b", re.MULTILINE)


@dataclass(frozen=True)
class Entry:
    """A KEYS or ARGV entry of a script's header: its name and how many values it takes
    (None: as many as the caller gives)."""

    name: str
    count: int | None


@dataclass(frozen=True)
class Header:
    """What a script's header names, in order: the caller passes these, by these names."""

    keys: tuple[Entry, ...]
    args: tuple[Entry, ...]


@cache
def header_of(name: str) -> Header:
    """The KEYS and ARGV entries that lua/<name>.lua's header names."""
    text = (lua_dir() / f"{name}.lua").read_text(encoding="utf-8").split("]]", 1)[0]
    keys: list[Entry] = []
    args: list[Entry] = []
    for kind, index, entry in _HEADER_ENTRY.findall(text):
        first, dots, last = index.partition("..")
        count: int | None = 1
        if dots:
            count = int(last) - int(first) + 1 if first.isdigit() and last.isdigit() else None
        (keys if kind == "KEYS" else args).append(Entry(entry, count))
    return Header(tuple(keys), tuple(args))


@dataclass(frozen=True)
class Scripts:
    """Registered scripts: each re-loads itself if Redis answers NOSCRIPT (after a restart)."""

    by_name: dict[ScriptName, AsyncScript]
    # On one Redis, calls made in the same turn of the event loop leave together.
    auto_pipeline: AutoPipeline | None = None

    @classmethod
    def register(cls, client: AnyRedis) -> Scripts:
        by_name = {name: client.register_script(script_source(name)) for name in ScriptName}
        if isinstance(client, Redis):
            return cls(by_name, AutoPipeline(client))
        return cls(by_name)

    async def load(self, client: AnyRedis) -> None:
        """Loads the scripts Redis does not hold (all of them on a new Redis, or after a
        restart or SCRIPT FLUSH), so that a script Redis rejects fails now. One it holds was
        compiled from this very text already: its sha is the text's. On Redis Cluster the
        client asks every primary, and loads on every primary."""
        held = await client.script_exists(*(script.sha for script in self.by_name.values()))
        for name, present in zip(self.by_name, held, strict=True):
            if not present:
                await client.script_load(script_source(name))

    async def run(self, name: ScriptName, keys: list[str], args: list[str | int | bytes]) -> Any:
        if self.auto_pipeline is not None:
            return await self.auto_pipeline.run(self.by_name[name], keys, args)
        return await self.by_name[name](keys=keys, args=args)

    async def run_each(
        self, client: AnyRedis, name: ScriptName, calls: Sequence[ScriptCall]
    ) -> list[Any]:
        """Calls of one script sent together, in one round trip: not a transaction, so each
        runs on its own and other clients are served between them (no call holds Redis for
        the time of all). Each call's reply, or the ResponseError it got. Calls that found the
        script missing (Redis restarted, or its scripts flushed) are sent again once it is
        loaded, as `run` does."""
        script = self.by_name[name]
        replies = await _pipelined(client, script.sha, calls)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            await client.script_load(script.script)
            again = await _pipelined(client, script.sha, [calls[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies


# The keys and the arguments of one script call.
ScriptCall = tuple[list[str], list[str | int | bytes]]


async def _pipelined(client: AnyRedis, sha: str, calls: Sequence[ScriptCall]) -> list[Any]:
    pipeline = client.pipeline(transaction=False)
    for keys, args in calls:
        # As a command, not `evalsha()`: redis-py's cluster pipeline refuses that method (it
        # does not load missing scripts, which run_each does), and routes EVALSHA by its keys.
        pipeline.execute_command("EVALSHA", sha, len(keys), *keys, *args)
    return await pipeline.execute(raise_on_error=False)
