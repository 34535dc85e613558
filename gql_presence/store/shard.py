"""One shard of the store: each method builds its keys, runs one Lua script, and reads the
reply into plain dataclasses. Its callers (the PresenceStore) have checked every input."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, Literal, NoReturn

from redis import exceptions as redis_errors

from gql_presence.store.client import AnyRedis
from gql_presence.store.config import StoreSettings
from gql_presence.store.days import DAY_MS, days, days_around, from_ms, local_now_ms
from gql_presence.store.errors import (
    BadInputError,
    LeaseLostError,
    SessionRevokedError,
    StoreUnavailableError,
    WritesRefusedError,
)
from gql_presence.store.keys import Keys
from gql_presence.store.models import (
    ChosenStatus,
    DailyActiveUsers,
    HeldPlaceSession,
    HeldSession,
    KickResult,
    Lease,
    ListedUser,
    OpenedPlaceSession,
    OpenedSession,
    PlaceMember,
    Presence,
    Session,
    Status,
    SweepResult,
    Visibility,
    WeeklyStats,
)
from gql_presence.store.publishing import Publish
from gql_presence.store.scripts import ScriptCall, ScriptError, ScriptName, Scripts
from gql_presence.store.validation import (
    AT_IN_FUTURE,
    EXPIRES_NOT_AHEAD,
    MAX_DOCUMENT_BYTES,
    MAX_FUTURE_MS,
    at_before_retention,
)
from gql_presence.store.wire import custom_status_of

# Users are forgotten (and their bit index reused) this long after the retention ends, so
# that every day bitmap that could hold their bit has expired first (a day, plus DST slack).
PURGE_SLACK_MS = 2 * DAY_MS

# The most users one touch_many script call records. Redis 6.2's Lua hashes only about 32
# bytes of a longer string when it makes it, so ids of 128 characters that differ only in the
# bytes it skips share one chain of its string table, and each id the script reads walks
# every id read before it: 10,000 such ids held Redis for a second and more. A few hundred per
# call keep a call within a few milliseconds, and other clients are served between calls.
TOUCH_MANY_BATCH = 250

# The least time between two UPDATED of one place session: one that sets its state more often
# has the states between merged, the last of them announced at the end of the interval
# (docs/semantics.md, "Places").
PLACE_STATE_INTERVAL_MS = 50

# A position in a list: (-(last seen, ms), user id), the order of every list.
Position = tuple[int, str]
LinkChange = Literal["SADD", "SREM", "CHECK"]

REVOKED_SESSION = (
    "This session was kicked and is revoked for now: "
    "give touch, presenceSession or placeSession a new sessionId."
)


def friend_set_full(most: int) -> str:
    return (
        f"A user's friend set holds at most {most:,} friends (PRESENCE_MAX_FRIENDS), and "
        "this change would take one past it: remove friends first, or add fewer. Nothing "
        "was changed."
    )


def sessions_full(settings: StoreSettings) -> str:
    return (
        f"A user may have at most {settings.max_sessions:,} live sessions "
        "(PRESENCE_MAX_SESSIONS), and as many in each place: end one first (a session ends "
        "when its window passes, its subscription ends, or it is kicked), or reuse a "
        "sessionId. Nothing was changed."
    )


# What a script's error reply means for the caller, its message fixed or worded from the
# settings; a reply not here is a fault of ours.
_REFUSALS: dict[ScriptError, tuple[type[Exception], str | Callable[[StoreSettings], str]]] = {
    ScriptError.SESSION_REVOKED: (SessionRevokedError, REVOKED_SESSION),
    ScriptError.AT_IN_FUTURE: (BadInputError, AT_IN_FUTURE),
    ScriptError.NOT_IN_PLACE: (
        BadInputError,
        "This session is not in the place: a session's state can be set while a placeSession "
        "subscription holds it there.",
    ),
    ScriptError.SESSION_NOT_LIVE: (
        BadInputError,
        "This session is not live: a session can be marked idle while it is live (touched "
        "within the presence window, or held by a presenceSession).",
    ),
    ScriptError.EXPIRES_NOT_AHEAD: (BadInputError, EXPIRES_NOT_AHEAD),
    ScriptError.TOO_MANY_FRIENDS: (BadInputError, lambda s: friend_set_full(s.max_friends)),
    ScriptError.TOO_MANY_SESSIONS: (BadInputError, sessions_full),
    ScriptError.LEASE_LOST: (
        LeaseLostError,
        "This process held sessions under a lease that lapsed; subscribe again.",
    ),
    ScriptError.DOCUMENT_TOO_LARGE: (
        BadInputError,
        f"The document takes more than {MAX_DOCUMENT_BYTES:,} bytes of UTF-8, the most kept.",
    ),
    # An operator's problem, not the caller's: logged, and the client sees INTERNAL.
    ScriptError.DAY_NOT_GIVEN: (
        RuntimeError,
        "this host's clock differs from the Redis server's by more than a day",
    ),
}

_UNREACHABLE = "The presence store cannot be reached right now; try again shortly."
# A read-only replica (during a failover, or a REDIS_URL pointing at one), or maxmemory hit:
# Redis words these inside a script's own error, so they are found in its text.
_WRITES_REFUSED = ("READONLY", "read only replica", "OOM command not allowed")


@dataclass(frozen=True)
class ShardPage:
    """One shard's part of a page: the store merges them and makes the cursor."""

    total_count: int
    nodes: tuple[ListedUser, ...]
    has_next_page: bool


class Shard:
    """The store of one shard: every key it names carries its shard's hash tag (`keys`)."""

    def __init__(
        self,
        redis: AnyRedis,
        settings: StoreSettings,
        keys: Keys,
        scripts: Scripts,
        observe_script: Callable[[str, int, float], None] | None = None,
        *,
        learn_publish: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._redis = redis
        self._settings = settings
        self._keys = keys
        self._scripts = scripts
        self._observe_script = observe_script
        self._zone = settings.stats_zone
        # How this shard's scripts publish, and the channel of every user they publish on:
        # classic PUBLISH without `learn_publish` (one Redis); else unknown until the
        # deployment's choice is read, which the first change asks for.
        self._learn_publish = learn_publish
        self._publish: Publish | None = None if learn_publish else Publish.CLASSIC
        self._every_user = keys.events

    def publish_with(self, publish: Publish) -> None:
        """How this shard's scripts publish their events from now on (the deployment's)."""
        self._publish = publish
        k = self._keys
        self._every_user = k.events if publish is Publish.CLASSIC else k.shard_events

    async def _announcing(self) -> tuple[str, Publish]:
        """The channel of every user and the command of a script that publishes events."""
        if self._publish is None and self._learn_publish is not None:
            await self._learn_publish()
        if self._publish is None:
            raise RuntimeError("the deployment's way of publishing events is not known")
        return self._every_user, self._publish

    @property
    def user_channel_prefix(self) -> str:
        """A user of this shard's events channel is this followed by their id."""
        return self._keys.user_events("")

    async def choose_publish(self, candidate: Publish) -> Publish:
        """The deployment's way of publishing: the one recorded, or else `candidate`, recorded
        now (shard 0's)."""
        chosen = await self._run(ScriptName.CHOOSE_PUBLISH, [self._keys.publish], [candidate])
        try:
            return Publish(_text(chosen))
        except ValueError:
            raise RuntimeError(
                f"{self._keys.publish} holds {_text(chosen)!r}: it must be PUBLISH or SPUBLISH"
            ) from None

    def place_events_channel(self, place_id: str) -> str:
        return self._keys.place_events(place_id)

    async def touch(
        self,
        user_id: str,
        session_id: str,
        at_ms: int | None,
        device: str | None = None,
        *,
        idle: bool = False,
    ) -> Presence:
        labels, boundaries = days_around(local_now_ms() if at_ms is None else at_ms, self._zone)
        every_user, publish = await self._announcing()
        k = self._keys
        reply = await self._run(
            ScriptName.TOUCH,
            [
                k.last_seen,
                k.online,
                k.sessions(user_id),
                k.revoked(user_id),
                k.user_index,
                k.next_index,
                k.free_indexes,
                *map(k.day, labels),
                k.conn(user_id),
                k.leases,
            ],
            [
                user_id,
                session_id,
                "" if at_ms is None else at_ms,
                self._settings.window_ms,
                self._settings.retention_ms,
                MAX_FUTURE_MS,
                *boundaries,
                every_user,
                k.user_events(""),
                k.prefix,
                device or "",
                int(idle),
                publish,
                self._settings.max_sessions,
            ],
        )
        return seen_of(user_id, reply[1])

    async def touch_many(self, user_ids: Sequence[str]) -> int:
        """One script call per TOUCH_MANY_BATCH users, all sent at once."""
        labels, boundaries = days_around(local_now_ms(), self._zone)
        every_user, publish = await self._announcing()
        k = self._keys
        keys = [k.last_seen, k.online, k.user_index, k.next_index, k.free_indexes]
        keys += [*map(k.day, labels), k.leases]
        # The script derives each user's keys: passing 2 keys per user cost more than the
        # rest of the call.
        args: list[str | int] = [self._settings.window_ms, self._settings.retention_ms]
        args += [*boundaries, every_user, k.sessions(""), k.revoked("")]
        # Sorted, the users' sorted-set entries are written next to each other, which takes
        # Redis a third less time than in the caller's order.
        ordered = sorted(user_ids)
        after = [k.conn(""), k.user_events(""), k.prefix, publish]
        calls = [
            # One argument instead of one per user: ids hold no control characters.
            (keys, [*args, "\n".join(ordered[first : first + TOUCH_MANY_BATCH]), *after])
            for first in range(0, len(ordered), TOUCH_MANY_BATCH)
        ]
        return sum(int(recorded) for recorded in await self._run_each(ScriptName.TOUCH_MANY, calls))

    async def kick(self, user_id: str, session_id: str | None) -> KickResult:
        every_user, publish = await self._announcing()
        k = self._keys
        kicked, online = await self._run(
            ScriptName.KICK,
            [
                k.online,
                k.sessions(user_id),
                k.revoked(user_id),
                k.conn(user_id),
                k.last_seen,
                k.user_index,
                k.leases,
            ],
            [
                user_id,
                session_id or "",
                self._settings.window_ms,
                self._settings.revoke_ms,
                every_user,
                k.user_events(""),
                k.prefix,
                publish,
            ],
        )
        return KickResult(user_id, int(kicked), bool(online))

    async def acquire_lease(self, token: str) -> Lease:
        """A new lease of this shard for the process whose token is given."""
        slot = await self._run(
            ScriptName.ACQUIRE_LEASE, [self._keys.leases], [token, self._settings.connection_ttl_ms]
        )
        return Lease(self._keys.shard, int(slot), token)

    async def renew_lease(self, lease: Lease, at_ms: int | None, *, give_up: bool = False) -> bool:
        """Renews the lease (or gives it up); False if it had lapsed or is not its own."""
        labels, boundaries = days_around(local_now_ms() if at_ms is None else at_ms, self._zone)
        renewed = await self._run(
            ScriptName.RENEW_LEASE,
            [self._keys.leases, *map(self._keys.day, labels)],
            [
                lease.slot,
                lease.token,
                0 if give_up else self._settings.connection_ttl_ms,
                "" if at_ms is None else at_ms,
                self._settings.retention_ms,
                *boundaries,
            ],
        )
        return bool(renewed)

    async def open_session(
        self, user_id: str, session_id: str, lease: Lease, device: str | None = None
    ) -> OpenedSession:
        labels, boundaries = days_around(local_now_ms(), self._zone)
        every_user, publish = await self._announcing()
        k = self._keys
        generation, opened_ms = await self._run(
            ScriptName.OPEN_SESSION,
            [
                k.last_seen,
                k.online,
                k.sessions(user_id),
                k.revoked(user_id),
                k.conn(user_id),
                k.generations,
                k.user_index,
                k.next_index,
                k.free_indexes,
                *map(k.day, labels),
                k.leases,
            ],
            [
                user_id,
                session_id,
                lease.slot,
                lease.token,
                self._settings.window_ms,
                self._settings.retention_ms,
                *boundaries,
                every_user,
                k.user_events(""),
                k.prefix,
                device or "",
                publish,
                self._settings.max_sessions,
            ],
        )
        held = HeldSession(user_id, session_id, int(generation), lease)
        return OpenedSession(held, from_ms(int(opened_ms)))

    async def check_sessions(self, held: Sequence[HeldSession]) -> list[HeldSession]:
        """Of the sessions (at most CHECK_BATCH), those no longer held by their holder."""
        k = self._keys
        args: list[str | int] = [k.sessions(""), k.conn("")]
        for one in held:
            args += [one.user_id, one.session_id, one.generation]
        lost = await self._run(ScriptName.CHECK_SESSIONS, [k.leases], args)
        return [held[int(position) - 1] for position in lost]

    async def close_session(self, held: HeldSession) -> bool:
        labels, boundaries = days_around(local_now_ms(), self._zone)
        every_user, publish = await self._announcing()
        k = self._keys
        closed, _ = await self._run(
            ScriptName.CLOSE_SESSION,
            [
                k.last_seen,
                k.online,
                k.sessions(held.user_id),
                k.conn(held.user_id),
                k.user_index,
                k.next_index,
                k.free_indexes,
                *map(k.day, labels),
                k.leases,
            ],
            [
                held.user_id,
                held.session_id,
                held.generation,
                self._settings.window_ms,
                self._settings.retention_ms,
                *boundaries,
                every_user,
                k.user_events(""),
                k.prefix,
                publish,
            ],
        )
        return bool(closed)

    # --- places: this shard is the place's ----------------------------------------------

    def _place_keys(self, place_id: str) -> list[str]:
        k = self._keys
        return [
            k.place_members(place_id),
            k.place_holders(place_id),
            k.place_states(place_id),
            k.place_users(place_id),
        ]

    async def open_place_session(
        self, place_id: str, user_id: str, session_id: str, state: str | None, lease: Lease
    ) -> OpenedPlaceSession:
        _, publish = await self._announcing()
        k = self._keys
        generation, joined_ms = await self._run(
            ScriptName.OPEN_PLACE_SESSION,
            [*self._place_keys(place_id), k.generations, k.leases],
            [
                place_id,
                user_id,
                session_id,
                lease.slot,
                lease.token,
                state or "",
                k.place_events(place_id),
                publish,
                self._settings.max_sessions,
            ],
        )
        held = HeldPlaceSession(place_id, user_id, session_id, int(generation), lease)
        return OpenedPlaceSession(held, from_ms(int(joined_ms)))

    async def check_place_sessions(
        self, held: Sequence[HeldPlaceSession]
    ) -> list[HeldPlaceSession]:
        """Of the place sessions (at most CHECK_BATCH), those no longer held by their holder."""
        k = self._keys
        args: list[str | int] = [k.place_holders("")]
        for one in held:
            args += [one.place_id, f"{one.user_id}\0{one.session_id}", one.generation]
        lost = await self._run(ScriptName.CHECK_PLACE_SESSIONS, [k.leases], args)
        return [held[int(position) - 1] for position in lost]

    async def close_place_session(self, held: HeldPlaceSession) -> bool:
        _, publish = await self._announcing()
        k = self._keys
        left = await self._run(
            ScriptName.CLOSE_PLACE_SESSION,
            [*self._place_keys(held.place_id), k.leases],
            [
                held.place_id,
                held.user_id,
                held.session_id,
                held.generation,
                k.place_events(held.place_id),
                publish,
                self._settings.empty_place_ttl_ms,
            ],
        )
        return bool(left)

    async def set_place_state(
        self, place_id: str, user_id: str, session_id: str, state: str
    ) -> tuple[PlaceMember, int]:
        """The member with its state; and, when the state waits to be announced and no
        announcement of it was planned, in how many ms to call flush_place_state, else 0."""
        _, publish = await self._announcing()
        k = self._keys
        joined_ms, flush_in_ms = await self._run(
            ScriptName.SET_PLACE_STATE,
            [*self._place_keys(place_id), k.leases, k.place_flushes],
            [
                place_id,
                user_id,
                session_id,
                state,
                k.place_events(place_id),
                publish,
                PLACE_STATE_INTERVAL_MS,
            ],
        )
        member = PlaceMember(
            place_id, user_id, session_id, from_ms(int(joined_ms)), state, -int(joined_ms)
        )
        return member, int(flush_in_ms)

    async def flush_place_state(self, place_id: str, user_id: str, session_id: str) -> int:
        """Announces the session's waiting state, if it still waits and is due; when it waits
        for a later moment, in how many ms it is due, else 0."""
        _, publish = await self._announcing()
        k = self._keys
        _, due_in_ms = await self._run(
            ScriptName.FLUSH_PLACE_STATE,
            [*self._place_keys(place_id), k.leases, k.place_flushes],
            [
                place_id,
                user_id,
                session_id,
                k.place_events(place_id),
                publish,
                PLACE_STATE_INTERVAL_MS,
            ],
        )
        return int(due_in_ms)

    async def place_members(
        self, place_id: str, first: int, after: Position | None
    ) -> tuple[int, int, tuple[PlaceMember, ...], bool, int]:
        """(sessions, users, members of the page, whether more follow, the number of the
        place's last event that the page reflects)."""
        reply = await self._run(
            ScriptName.PLACE_MEMBERS,
            [*self._place_keys(place_id), self._keys.leases],
            [place_id, first, *(after or ("", ""))],
        )
        nodes = []
        for i in range(4, len(reply), 3):
            user_id, _, session_id = _text(reply[i]).partition("\0")
            score = int(reply[i + 1])
            state = None if reply[i + 2] is None else _text(reply[i + 2])
            nodes.append(PlaceMember(place_id, user_id, session_id, from_ms(-score), state, score))
        return int(reply[0]), int(reply[1]), tuple(nodes), bool(reply[2]), int(reply[3])

    async def place_counts(self, place_ids: Sequence[str]) -> list[tuple[int, int]]:
        """(sessions, users) of each place, in the order given."""
        k = self._keys
        reply = await self._run(
            ScriptName.PLACE_COUNTS,
            [*map(k.place_members, place_ids), *map(k.place_users, place_ids), k.leases],
            list(place_ids),
        )
        return [(int(reply[i]), int(reply[i + 1])) for i in range(0, len(reply), 2)]

    async def session_revoked(self, user_id: str, session_id: str) -> bool:
        revoked = await self._run(
            ScriptName.SESSION_REVOKED, [self._keys.revoked(user_id)], [session_id]
        )
        return bool(revoked)

    async def presence_many(self, user_ids: Sequence[str]) -> list[Presence]:
        """The presence of each user, in the order given, read at one moment, as backends
        and the user see it."""
        k = self._keys
        reply = await self._run(
            ScriptName.PRESENCE,
            [k.last_seen, k.online, k.leases],
            [self._settings.window_ms, self._settings.retention_ms, k.prefix, *user_ids],
        )
        return [seen_of(user_id, entry) for user_id, entry in zip(user_ids, reply, strict=True)]

    async def friend_of_each(self, user_id: str, owners: Sequence[str]) -> list[bool]:
        """Whether user_id, who lives in this shard, is in each owner's friend set."""
        if not owners:
            return []
        found = await self._run(
            ScriptName.FRIEND_OF_EACH, [self._keys.friends(owner) for owner in owners], [user_id]
        )
        return [bool(f) for f in found]

    async def friend_counts(self, owners: Sequence[str]) -> list[int]:
        """How many friends each owner's friend set keeps in this shard."""
        if not owners:
            return []
        counts = await self._run(
            ScriptName.FRIEND_COUNTS, [self._keys.friends(owner) for owner in owners], []
        )
        return [int(c) for c in counts]

    async def set_status(self, user_id: str, change: str, *values: str | int) -> Presence:
        """One change of how the user appears (lua/set_status.lua); the user's presence
        after it, as they and backends see it."""
        every_user, publish = await self._announcing()
        k = self._keys
        padded = [*values, "", "", ""][:3]
        entry = await self._run(
            ScriptName.SET_STATUS,
            [k.last_seen, k.online, k.leases],
            [
                user_id,
                change,
                *padded,
                self._settings.window_ms,
                self._settings.retention_ms,
                k.prefix,
                every_user,
                k.user_events(""),
                publish,
            ],
        )
        return seen_of(user_id, entry)

    async def online_users(
        self, first: int, after: Position | None, *, hide_invisible: bool
    ) -> ShardPage:
        k = self._keys
        return await self._page(
            ScriptName.ONLINE_USERS,
            [k.last_seen, k.online, k.leases],
            [self._settings.window_ms, first],
            after,
            [k.sessions(""), int(hide_invisible), k.prefix],
        )

    async def online_since(
        self, first: int, after: Position | None, *, hide_invisible: bool
    ) -> ShardPage:
        """A page of the users online, most recently come online first: each node's
        position is -(onlineSince ms)."""
        k = self._keys
        return await self._page(
            ScriptName.ONLINE_SINCE,
            [k.online_since, k.online, k.last_seen, k.leases],
            [self._settings.window_ms, first],
            after,
            [k.sessions(""), int(hide_invisible), k.prefix],
        )

    async def online_friends(
        self, user_id: str, first: int, after: Position | None, *, hide_invisible: bool
    ) -> ShardPage:
        k = self._keys
        return await self._page(
            ScriptName.ONLINE_FRIENDS,
            [k.friends(user_id), k.online, k.last_seen, k.scratch, k.leases, k.invisible],
            [first],
            after,
            [k.sessions(""), self._settings.window_ms, int(hide_invisible)],
        )

    async def active_in_range(
        self,
        start_ms: int,
        end_ms: int,
        first: int,
        after: Position | None,
        *,
        hide_invisible: bool,
    ) -> ShardPage:
        k = self._keys
        return await self._page(
            ScriptName.ACTIVE_IN_RANGE,
            [k.last_seen, k.online, k.leases],
            [start_ms, end_ms, self._settings.retention_ms, first],
            after,
            [
                self._settings.connection_ttl_ms // 2,
                k.sessions(""),
                self._settings.window_ms,
                int(hide_invisible),
                k.prefix,
            ],
        )

    async def weekly_stats(self, end_date: date) -> WeeklyStats:
        start_date = end_date - timedelta(days=6)
        labels, boundaries = days(start_date, 7, self._zone)
        k = self._keys
        reply = [
            int(n)
            for n in await self._run(
                ScriptName.WEEKLY_STATS,
                [*map(k.day, labels), k.scratch],
                [self._settings.retention_ms, *boundaries],
            )
        ]
        daily = tuple(DailyActiveUsers(start_date + timedelta(days=i), reply[i]) for i in range(7))
        return WeeklyStats(start_date, end_date, daily, reply[7], reply[8], reply[9])

    async def friends(self, user_id: str) -> list[str]:
        """The user's friends who live in this shard."""
        return [_text(m) for m in await guarded(self._redis.smembers(self._keys.friends(user_id)))]

    async def friends_among(self, user_id: str, user_ids: Sequence[str]) -> set[str]:
        """Which of user_ids, who live in this shard, are in user_id's friend set."""
        found = await guarded(self._redis.smismember(self._keys.friends(user_id), list(user_ids)))
        return {user for user, member in zip(user_ids, found, strict=True) if member}

    async def change_links(
        self,
        change: LinkChange,
        links: Mapping[str, Sequence[str]],
        owner_channel_prefix: Callable[[str], str],
        kept_elsewhere: Mapping[str, int] | None = None,
    ) -> dict[str, int]:
        """Adds (SADD) to or removes (SREM) from each owner's friend set in this shard the
        given friends (who live in this shard), in one atomic step; or (CHECK) writes nothing
        and returns the size each owner's set here would have after SADD. Ids are valid, distinct
        per owner and not the owner's own. Returns how many links each owner's set changed.
        An addition that would take an owner's set past max_friends, counting the friends
        `kept_elsewhere` (in other shards), is refused whole with BadInputError.
        An owner's events channel is `owner_channel_prefix(owner)` followed by their id: in
        the owner's own shard, which may not be this one. With sharded pub/sub, an owner's
        FRIENDS events go on the owner's channel in this shard instead, as a script publishes
        only on channels of its own slot (PresenceStore.friend_set_channels)."""
        owners = [owner for owner, friend_ids in links.items() if friend_ids]
        if not owners:
            return dict.fromkeys(links, 0)
        every_user, publish = await self._announcing()
        k = self._keys
        args: list[str | int] = [change, every_user, publish]
        most = self._settings.max_friends
        for owner in owners:
            own = publish is Publish.CLASSIC
            prefix = owner_channel_prefix(owner) if own else k.user_events("")
            room = most - (kept_elsewhere or {}).get(owner, 0)
            args += [owner, prefix, room, len(links[owner]), *links[owner]]
        reply = await self._run(ScriptName.CHANGE_FRIEND_LINKS, list(map(k.friends, owners)), args)
        changed = dict.fromkeys(links, 0)
        changed.update((owner, int(n)) for owner, n in zip(owners, reply, strict=True))
        return changed

    async def sweep(self, batch: int, lapsed_batch: int) -> SweepResult:
        """Removes up to `batch` expired online entries and `batch` users past the retention,
        ends the sessions of up to `lapsed_batch` users and place sessions of lapsed leases,
        and announces up to `lapsed_batch` place states whose process did not in time."""
        labels, boundaries = days_around(local_now_ms(), self._zone)
        every_user, publish = await self._announcing()
        k = self._keys
        reply = await self._run(
            ScriptName.SWEEP,
            [
                k.online,
                k.last_seen,
                k.user_index,
                k.free_indexes,
                k.leases,
                k.place_flushes,
                *map(k.day, labels),
            ],
            [
                batch,
                self._settings.retention_ms + PURGE_SLACK_MS,
                every_user,
                k.user_events(""),
                k.sessions(""),
                k.conn(""),
                self._settings.window_ms,
                self._settings.retention_ms,
                *boundaries,
                k.place_members(""),
                k.place_holders(""),
                k.place_states(""),
                k.place_users(""),
                k.place_events(""),
                lapsed_batch,
                k.prefix,
                publish,
                # Overdue: a state its process would have announced an interval ago.
                PLACE_STATE_INTERVAL_MS,
                self._settings.empty_place_ttl_ms,
            ],
        )
        offline, purged, online, lapsed, ended_statuses, flushed = reply
        return SweepResult(
            int(offline), int(purged), int(online), int(lapsed), int(ended_statuses), int(flushed)
        )

    async def take_token(
        self, caller: str, rate: float, burst: int, cost: int, *, owed: bool
    ) -> int:
        """Takes `cost` tokens from the caller's bucket (rate per second, at most burst).
        Returns 0 when granted, else how many ms until a token is there."""
        granted, retry_after_ms = await self._run(
            ScriptName.TAKE_TOKEN,
            [self._keys.rate_bucket(caller)],
            [repr(rate), burst, uuid.uuid4().hex, cost, int(owed)],
        )
        return 0 if int(granted) else max(1, int(retry_after_ms))

    async def cursor_secret(self, candidate: str) -> str:
        """The deployment's cursor secret, `candidate` if it has none yet ("": none is made,
        and "" is the answer then)."""
        secret = await self._run(ScriptName.CURSOR_SECRET, [self._keys.cursor_secret], [candidate])
        return _text(secret)

    async def persist_document(
        self, sha256: str, document: str, max_count: int, registered_age_ms: int
    ) -> None:
        k = self._keys
        await self._run(
            ScriptName.PERSIST_DOCUMENT,
            [k.persisted_documents, k.persisted_documents_used],
            [sha256, document, max_count, MAX_DOCUMENT_BYTES, registered_age_ms],
        )

    async def refresh_documents(self, sha256s: Sequence[str]) -> int:
        refreshed = await self._run(
            ScriptName.REFRESH_DOCUMENTS, [self._keys.persisted_documents_used], list(sha256s)
        )
        return int(refreshed)

    async def persisted_document(self, sha256: str) -> str | None:
        k = self._keys
        document = await self._run(
            ScriptName.PERSISTED_DOCUMENT,
            [k.persisted_documents, k.persisted_documents_used],
            [sha256],
        )
        return None if document is None else _text(document)

    async def _page(
        self,
        script: ScriptName,
        keys: list[str],
        args: list[str | int],
        after: Position | None,
        more: Sequence[str | int] = (),
    ) -> ShardPage:
        reply = await self._run(script, keys, [*args, *(after or ("", "")), *more])
        nodes = tuple(
            ListedUser(
                _text(reply[i]), bool(reply[i + 3]), from_ms(int(reply[i + 2])), int(reply[i + 1])
            )
            for i in range(2, len(reply), 4)
        )
        return ShardPage(int(reply[0]), nodes, bool(reply[1]))

    async def _run(self, script: ScriptName, keys: list[str], args: list[str | int]) -> Any:
        started = time.perf_counter()
        try:
            return await guarded(self._scripts.run(script, keys, args))
        except redis_errors.ResponseError as error:
            _raise_meaning(error, self._settings)
        finally:
            if self._observe_script is not None:
                self._observe_script(script, self._keys.shard, time.perf_counter() - started)

    async def _run_each(self, script: ScriptName, calls: Sequence[ScriptCall]) -> list[Any]:
        """As _run for each call, all sent at once (Scripts.run_each): each call's reply, or
        the meaning of the first error, in the calls' order, once every call has run."""
        started = time.perf_counter()
        try:
            replies: list[Any] = await guarded(self._scripts.run_each(self._redis, script, calls))
        finally:
            if self._observe_script is not None:
                # Each call is measured as its share of the round trip they shared.
                share = (time.perf_counter() - started) / max(1, len(calls))
                for _ in calls:
                    self._observe_script(script, self._keys.shard, share)
        for reply in replies:
            if isinstance(reply, redis_errors.ResponseError):
                _raise_meaning(reply, self._settings)
        return replies


def _raise_meaning(error: redis_errors.ResponseError, settings: StoreSettings) -> NoReturn:
    """Raises what a script's error reply means for the caller; a reply not known is a fault
    of ours, raised as it is."""
    code = ScriptError.of(str(error))
    if code is ScriptError.AT_BEFORE_RETENTION:
        raise BadInputError(
            at_before_retention(time.time_ns() // 1_000_000, settings.retention_ms)
        ) from None
    if code is not None and code in _REFUSALS:
        refusal, message = _REFUSALS[code]
        raise refusal(message if isinstance(message, str) else message(settings)) from None
    # Redis refuses a script's first write: nothing of it was applied, and the store
    # takes changes again once a primary with room answers (after a failover).
    if any(refused in str(error) for refused in _WRITES_REFUSED):
        raise WritesRefusedError(
            "The presence store takes no changes right now; try again shortly."
        ) from error
    raise error


async def guarded(call: Awaitable[Any]) -> Any:
    """Awaits a Redis call, turning "Redis cannot be reached" into StoreUnavailableError."""
    try:
        return await call
    except (redis_errors.ConnectionError, redis_errors.TimeoutError) as error:
        raise StoreUnavailableError(_UNREACHABLE) from error
    except redis_errors.RedisClusterException as error:
        # No node of the cluster could be reached (or authenticated to), or a slot has no
        # master; any other is a fault of ours (keys of two slots) and must show as one.
        if isinstance(error, redis_errors.SlotNotCoveredError) or isinstance(
            error.__cause__, (redis_errors.ConnectionError, redis_errors.TimeoutError)
        ):
            raise StoreUnavailableError(_UNREACHABLE) from error
        raise


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def seen_of(user_id: str, entry: Sequence[Any]) -> Presence:
    """A user's presence from a presence_entry of lua/includes/status.lua."""
    last_seen_ms, live, status, chosen, custom, visible, hidden_ms, since_ms = entry
    sessions = []
    for i in range(0, len(live), 5):
        session_id, activity_ms, started_ms, idle, device = live[i : i + 5]
        sessions.append(
            Session(
                _text(session_id),
                from_ms(int(activity_ms)),
                from_ms(int(started_ms)),
                bool(int(idle)),
                _text(device) or None,
            )
        )
    sessions.sort(key=lambda session: (-session.last_seen.timestamp(), session.session_id))
    return Presence(
        user_id,
        online=bool(sessions),
        last_seen=_time_or_none(last_seen_ms),
        sessions=tuple(sessions),
        status=Status(_text(status)),
        custom=custom_status_of(custom),
        chosen=ChosenStatus(_text(chosen)),
        visible_to=Visibility(_text(visible)),
        online_since=_time_or_none(since_ms),
        hidden_last_seen=_time_or_none(hidden_ms),
    )


def _time_or_none(ms: Any) -> datetime | None:
    return None if int(ms) < 0 else from_ms(int(ms))


def _sessions(flat: Sequence[Any]) -> tuple[Session, ...]:
    """Live sessions from {id, ms, id, ms, ...}, most recently active first, ties by id."""
    pairs = [(_text(flat[i]), int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]
    pairs.sort(key=lambda pair: (-pair[1], pair[0]))
    return tuple(Session(session_id, from_ms(ms)) for session_id, ms in pairs)
