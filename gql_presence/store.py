"""The presence store: each operation builds its keys, runs one Lua script, and returns
plain dataclasses. It knows Redis and the rules of docs/semantics.md, and nothing of GraphQL."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from redis import exceptions as redis_errors
from redis.asyncio import ConnectionPool, RedisCluster

from gql_presence.connection import AnyRedis
from gql_presence.cursor import decode_cursor, encode_cursor
from gql_presence.errors import (
    BadInputError,
    SessionRevokedError,
    StoreUnavailableError,
)
from gql_presence.keys import Keys
from gql_presence.scripts import Scripts
from gql_presence.settings import Settings
from gql_presence.timeline import days, days_around, from_ms, local_date, to_ms
from gql_presence.validation import check_id, check_ids, check_page_size

DEFAULT_SESSION = "default"
MAX_FUTURE_MS = 5000
DAY_MS = 86_400_000
# Users are forgotten (and their bit index reused) this long after the retention ends, so
# that every day bitmap that could hold their bit has expired first (a day, plus DST slack).
PURGE_SLACK_MS = 2 * DAY_MS
SWEEP_BATCH = 1000

_AT_IN_FUTURE = f"at may lie at most {MAX_FUTURE_MS // 1000} seconds ahead of the server's clock."
_AT_BEFORE_RETENTION = "at lies further back than the retention (PRESENCE_RETENTION_DAYS) allows."
# The first and last end dates whose seven days can be written as dates.
_FIRST_END_DATE = date.min + timedelta(days=6)
_LAST_END_DATE = date.max - timedelta(days=1)

# What a script's error reply means for the caller.
_SCRIPT_REFUSALS: dict[str, tuple[type[Exception], str]] = {
    "SESSION_REVOKED": (
        SessionRevokedError,
        "This session was kicked and is revoked for now; touch with a new sessionId.",
    ),
    "AT_IN_FUTURE": (BadInputError, _AT_IN_FUTURE),
    "AT_BEFORE_RETENTION": (BadInputError, _AT_BEFORE_RETENTION),
    # An operator's problem, not the caller's: logged, and the client sees INTERNAL.
    "DAY_NOT_GIVEN": (
        RuntimeError,
        "this host's clock differs from the Redis server's by more than a day",
    ),
}

_UNREACHABLE = "The presence store cannot be reached right now; try again shortly."
# A read-only replica (during a failover, or a REDIS_URL pointing at one), or maxmemory hit.
_WRITES_REFUSED = ("READONLY", "read only replica", "OOM command not allowed")


@dataclass(frozen=True)
class Session:
    session_id: str
    last_seen: datetime


@dataclass(frozen=True)
class Presence:
    user_id: str
    online: bool
    last_seen: datetime | None
    sessions: tuple[Session, ...]


@dataclass(frozen=True)
class ListedUser:
    """A user on a page of a list; their sessions are read separately, when asked for."""

    user_id: str
    online: bool
    last_seen: datetime


@dataclass(frozen=True)
class Page:
    total_count: int
    nodes: tuple[ListedUser, ...]
    has_next_page: bool
    end_cursor: str | None


@dataclass(frozen=True)
class KickResult:
    user_id: str
    kicked_sessions: int
    online: bool


@dataclass(frozen=True)
class DailyActiveUsers:
    day: date
    active_users: int


@dataclass(frozen=True)
class WeeklyStats:
    start_date: date
    end_date: date
    days: tuple[DailyActiveUsers, ...]
    unique_users: int
    active_every_day: int
    new_on_end_date: int


@dataclass(frozen=True)
class SweepResult:
    offline: int
    purged: int
    online: int


class PresenceStore:
    """The store of one shard: every key it names carries its shard's hash tag (`keys`).
    With one shard, it is the whole store; gql_presence/shards.py spreads users over more."""

    def __init__(
        self,
        redis: AnyRedis,
        settings: Settings,
        keys: Keys | None = None,
        observe_script: Callable[[str, float], None] | None = None,
    ) -> None:
        self._redis = redis
        self._observe_script = observe_script
        self._settings = settings
        self._keys = keys or Keys()
        self._scripts = Scripts.register(redis)
        self._zone = settings.stats_zone

    @property
    def connection_pool(self) -> ConnectionPool:
        assert not isinstance(self._redis, RedisCluster), "a cluster client has a pool per node"
        return self._redis.connection_pool

    @property
    def events_channel(self) -> str:
        """The pub/sub channel on which the scripts announce presence events."""
        return self._keys.events

    async def load_scripts(self) -> None:
        """Makes sure Redis holds every script, loading what it lacks: at start-up, so that a
        broken script fails the boot, and for readiness. Raises StoreUnavailableError when
        Redis cannot be reached."""
        await self._guarded(self._scripts.load(self._redis))

    async def takes_changes(self) -> bool:
        """Whether the Redis answering is a primary (a replica refuses every change); on Redis
        Cluster, whose client sends changes to primaries only, whether every slot is served."""
        if isinstance(self._redis, RedisCluster):
            cluster = await self._guarded(self._redis.cluster_info())
            return bool(cluster.get("cluster_state") == "ok")
        replication = await self._guarded(self._redis.info("replication"))
        return bool(replication.get("role") == "master")

    async def touch(
        self, user_id: str, session_id: str | None = None, at: datetime | None = None
    ) -> Presence:
        check_id(user_id, "userId")
        session = DEFAULT_SESSION if session_id is None else check_id(session_id, "sessionId")
        at_ms = None if at is None else self._plausible_at(to_ms(at))
        estimate_ms = _local_now_ms() if at_ms is None else at_ms
        labels, boundaries = days_around(estimate_ms, self._zone)
        k = self._keys
        reply = await self._run(
            "touch",
            [
                k.last_seen,
                k.online,
                k.sessions(user_id),
                k.revoked(user_id),
                k.user_index,
                k.next_index,
                k.free_indexes,
                *map(k.day, labels),
            ],
            [
                user_id,
                session,
                "" if at_ms is None else at_ms,
                self._settings.window_ms,
                self._settings.retention_ms,
                MAX_FUTURE_MS,
                *boundaries,
                k.events,
            ],
        )
        sessions = _sessions(reply[2:])
        return Presence(user_id, bool(sessions), from_ms(int(reply[1])), sessions)

    def _plausible_at(self, at_ms: int) -> int:
        """Refuses an `at` that is a day or more outside what the script will accept, by this
        host's clock; the script checks the exact bounds by the server's."""
        now_ms = _local_now_ms()
        if at_ms > now_ms + DAY_MS:
            raise BadInputError(_AT_IN_FUTURE)
        if at_ms < now_ms - self._settings.retention_ms - DAY_MS:
            raise BadInputError(_AT_BEFORE_RETENTION)
        return at_ms

    async def touch_many(self, user_ids: Sequence[str]) -> int:
        users = check_ids(user_ids, "userIds")
        if not users:
            return 0
        labels, boundaries = days_around(_local_now_ms(), self._zone)
        k = self._keys
        recorded = await self._run(
            "touch_many",
            [
                k.last_seen,
                k.online,
                k.user_index,
                k.next_index,
                k.free_indexes,
                *map(k.day, labels),
            ],
            [
                self._settings.window_ms,
                self._settings.retention_ms,
                *boundaries,
                k.events,
                # The script derives each user's keys: passing 2 keys per user cost more
                # than the rest of the call.
                k.sessions(""),
                k.revoked(""),
                # One argument instead of one per user: ids hold no control characters.
                # Sorted, the users' sorted-set entries are written next to each other,
                # which takes Redis a third less time than in the caller's order.
                "\n".join(sorted(users)),
            ],
        )
        return int(recorded)

    async def kick(self, user_id: str, session_id: str | None = None) -> KickResult:
        check_id(user_id, "userId")
        if session_id is not None:
            check_id(session_id, "sessionId")
        k = self._keys
        kicked, online = await self._run(
            "kick",
            [k.online, k.sessions(user_id), k.revoked(user_id)],
            [
                user_id,
                session_id or "",
                self._settings.window_ms,
                self._settings.revoke_ms,
                k.events,
            ],
        )
        return KickResult(user_id, int(kicked), bool(online))

    async def presence(self, user_id: str) -> Presence:
        check_id(user_id, "userId")
        (found,) = await self.presence_many([user_id])
        return found

    async def presence_many(self, user_ids: Sequence[str]) -> list[Presence]:
        """The presence of each user, in the order given, read at one moment."""
        if not user_ids:
            return []
        k = self._keys
        reply = await self._run(
            "presence",
            [k.last_seen, k.online, *map(k.sessions, user_ids)],
            [self._settings.window_ms, self._settings.retention_ms, *user_ids],
        )
        found = []
        for user_id, (last_seen_ms, live) in zip(user_ids, reply, strict=True):
            sessions = _sessions(live)
            last_seen = None if int(last_seen_ms) < 0 else from_ms(int(last_seen_ms))
            found.append(Presence(user_id, bool(sessions), last_seen, sessions))
        return found

    async def online_users(self, first: int = 50, after: str | None = None) -> Page:
        check_page_size(first)
        k = self._keys
        return await self._page(
            "online_users", [k.last_seen, k.online], [self._settings.window_ms, first], after
        )

    async def online_friends(self, user_id: str, first: int = 50, after: str | None = None) -> Page:
        check_id(user_id, "userId")
        check_page_size(first)
        k = self._keys
        return await self._page(
            "online_friends",
            [k.friends(user_id), k.online, k.last_seen, k.scratch],
            [first],
            after,
        )

    async def active_in_range(
        self, start: datetime, end: datetime, first: int = 50, after: str | None = None
    ) -> Page:
        check_page_size(first)
        if start > end:
            raise BadInputError("from must not be later than to.")
        k = self._keys
        return await self._page(
            "active_in_range",
            [k.last_seen, k.online],
            [to_ms(start), to_ms(end), self._settings.retention_ms, first],
            after,
        )

    async def today(self) -> date:
        """Today in the stats time zone, by the Redis server's clock."""
        seconds, micros = await self._guarded(self._redis.time())
        return local_date(seconds * 1000 + micros // 1000, self._zone)

    async def weekly_stats(self, end_date: date | None = None) -> WeeklyStats:
        if end_date is None:
            end_date = await self.today()
        if not _FIRST_END_DATE <= end_date <= _LAST_END_DATE:
            raise BadInputError(
                f"endDate must lie between {_FIRST_END_DATE} and {_LAST_END_DATE}, "
                "so that its seven days are calendar dates."
            )
        start_date = end_date - timedelta(days=6)
        labels, boundaries = days(start_date, 7, self._zone)
        k = self._keys
        reply = [
            int(n)
            for n in await self._run(
                "weekly_stats",
                [*map(k.day, labels), k.scratch],
                [self._settings.retention_ms, *boundaries],
            )
        ]
        daily = tuple(DailyActiveUsers(start_date + timedelta(days=i), reply[i]) for i in range(7))
        return WeeklyStats(start_date, end_date, daily, reply[7], reply[8], reply[9])

    async def friends(self, user_id: str) -> list[str]:
        check_id(user_id, "userId")
        members = await self._guarded(self._redis.smembers(self._keys.friends(user_id)))
        return sorted(_text(m) for m in members)

    async def add_friends(
        self, user_id: str, friend_ids: Sequence[str], mutual: bool = True
    ) -> int:
        """Adds friends, all of them kept in this shard (a deployment of one shard)."""
        return await self._change_friends("SADD", user_id, friend_ids, mutual)

    async def remove_friends(
        self, user_id: str, friend_ids: Sequence[str], mutual: bool = True
    ) -> int:
        """Removes friends, all of them kept in this shard (a deployment of one shard)."""
        return await self._change_friends("SREM", user_id, friend_ids, mutual)

    async def add_friend_links(self, links: Mapping[str, Sequence[str]]) -> dict[str, int]:
        """Adds to each owner's friend set in this shard the given friends (who must live in
        this shard), in one atomic step. Ids must be valid, distinct per owner and not the
        owner's own. Returns how many links each owner's set gained."""
        return await self._change_links("SADD", links)

    async def remove_friend_links(self, links: Mapping[str, Sequence[str]]) -> dict[str, int]:
        """The reverse of add_friend_links: returns how many links each owner's set lost."""
        return await self._change_links("SREM", links)

    async def sweep(self, batch: int = SWEEP_BATCH) -> SweepResult:
        """Removes up to `batch` expired online entries and `batch` users past the retention."""
        k = self._keys
        offline, purged, online = await self._run(
            "sweep",
            [k.online, k.last_seen, k.user_index, k.free_indexes],
            [batch, self._settings.retention_ms + PURGE_SLACK_MS, k.events],
        )
        return SweepResult(int(offline), int(purged), int(online))

    async def _change_friends(
        self, change: str, user_id: str, friend_ids: Sequence[str], mutual: bool
    ) -> int:
        check_id(user_id, "userId")
        others = [f for f in check_ids(friend_ids, "friendIds") if f != user_id]
        if not others:
            return 0
        links = {other: [user_id] for other in others} if mutual else {}
        links[user_id] = others  # last: its FRIENDS event follows the friends' own
        return (await self._change_links(change, links))[user_id]

    async def _change_links(
        self, change: str, links: Mapping[str, Sequence[str]]
    ) -> dict[str, int]:
        """Runs change_friend_links: `change` is "SADD" or "SREM"."""
        owners = [owner for owner, friend_ids in links.items() if friend_ids]
        if not owners:
            return dict.fromkeys(links, 0)
        k = self._keys
        args: list[str | int] = [change, k.events]
        for owner in owners:
            args += [owner, len(links[owner]), *links[owner]]
        reply = await self._run("change_friend_links", list(map(k.friends, owners)), args)
        changed = dict.fromkeys(links, 0)
        changed.update((owner, int(n)) for owner, n in zip(owners, reply, strict=True))
        return changed

    async def _page(
        self, script: str, keys: list[str], args: list[str | int], after: str | None
    ) -> Page:
        cursor = ("", "") if after is None else decode_cursor(after)
        reply = await self._run(script, keys, [*args, *cursor])
        nodes = tuple(
            ListedUser(_text(reply[i]), bool(reply[i + 2]), from_ms(int(reply[i + 1])))
            for i in range(2, len(reply), 3)
        )
        end_cursor = (
            encode_cursor(-to_ms(nodes[-1].last_seen), nodes[-1].user_id) if nodes else None
        )
        return Page(int(reply[0]), nodes, bool(reply[1]), end_cursor)

    async def take_token(self, caller: str, rate: float, burst: int) -> int:
        """Takes one token from the caller's bucket (rate per second, at most burst).
        Returns 0 when granted, else how many ms until a token is there."""
        granted, retry_after_ms = await self._run(
            "take_token", [self._keys.rate_bucket(caller)], [repr(rate), burst, uuid.uuid4().hex]
        )
        return 0 if int(granted) else max(1, int(retry_after_ms))

    async def _run(self, script: str, keys: list[str], args: list[str | int]) -> Any:
        started = time.perf_counter()
        try:
            return await self._guarded(self._scripts.run(script, keys, args))
        except redis_errors.ResponseError as error:
            for code, (refusal, message) in _SCRIPT_REFUSALS.items():
                if code in str(error):
                    raise refusal(message) from None
            # Redis refuses a script's first write: nothing of it was applied, and the store
            # takes changes again once a primary with room answers (after a failover).
            if any(refused in str(error) for refused in _WRITES_REFUSED):
                raise StoreUnavailableError(
                    "The presence store takes no changes right now; try again shortly."
                ) from error
            raise
        finally:
            if self._observe_script is not None:
                self._observe_script(script, time.perf_counter() - started)

    @staticmethod
    async def _guarded(call: Awaitable[Any]) -> Any:
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


def _local_now_ms() -> int:
    """This process's clock: only good for guessing which day the server's clock is in."""
    return time.time_ns() // 1_000_000


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _sessions(flat: Sequence[Any]) -> tuple[Session, ...]:
    """Live sessions from {id, ms, id, ms, ...}, most recently active first, ties by id."""
    pairs = [(_text(flat[i]), int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]
    pairs.sort(key=lambda pair: (-pair[1], pair[0]))
    return tuple(Session(session_id, from_ms(ms)) for session_id, ms in pairs)
