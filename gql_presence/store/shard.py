"""One shard: keys and arguments, by the names its scripts' headers give them, to one Lua
script, and its error replies to what they mean. The modules named for what they hold
(presence.py, places.py, leases.py, deployment.py, lists.py) build each call and read its
reply (replies.py); they have checked every input.

A call names each KEYS and ARGV entry as the script's header does, in the header's order
(`named(last_seen=..., online=..., ...)`): a name missing, extra or out of order is a fault
of ours, raised before Redis is asked (tests/presence/test_seam.py holds every caller to it)."""

from __future__ import annotations

import struct
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import cache
from typing import Any, NoReturn

from redis import exceptions as redis_errors

from gql_presence.store.channels import Channels
from gql_presence.store.client import AnyRedis
from gql_presence.store.config import StoreSettings
from gql_presence.store.days import days_around, local_now_ms, packed_zone
from gql_presence.store.errors import (
    BadInputError,
    LeaseLostError,
    SessionRevokedError,
    StoreUnavailableError,
    WritesRefusedError,
)
from gql_presence.store.keys import Keys, shard_of
from gql_presence.store.publishing import Publish
from gql_presence.store.scripts import Entry, ScriptError, ScriptName, Scripts, header_of
from gql_presence.store.validation import (
    AT_IN_FUTURE,
    EXPIRES_NOT_AHEAD,
    MAX_DOCUMENT_BYTES,
    WEBHOOKS_FULL,
    at_before_retention,
)

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
    ScriptError.WEBHOOKS_FULL: (BadInputError, WEBHOOKS_FULL),
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

# The fields of the `shard` argument, in the order lua/includes/options.lua unpacks them: the
# numbers (ms) first, then the names. Packed rather than JSON: Redis's Lua unpacks it faster
# than it reads as many separate arguments, where decoding JSON took a touch 3 µs more.
OPTION_NUMBERS = (
    "window_ms",
    "retention_ms",
    "revoke_ms",
    "max_sessions",
    "empty_place_ttl_ms",
    "feed_retention_ms",
    "feed_max_changes",
    "hourly_ms",
    "analytics_ms",
)
OPTION_NAMES = (
    "publish",
    "channel",
    "user_channel_prefix",
    "sessions_prefix",
    "status_prefix",
    "extras_prefix",
    "since",
    "invisible",
    "hidden",
    "status_expiries",
    "away_expiries",
    "conn_prefix",
    "revoked_prefix",
    "lease_owners",
    "lease_next",
    "lease_users_prefix",
    "lease_bits_prefix",
    "lease_places_prefix",
    "lease_members_prefix",
    "place_members_prefix",
    "place_holders_prefix",
    "place_states_prefix",
    "place_users_prefix",
    "place_channel_prefix",
    "feed",
    "version_prefix",
    "user_index",
    "online_time_prefix",
    "period_lengths_prefix",
    "zone",
    "hour_prefix",
    "week_prefix",
    "month_prefix",
    "first_day_prefix",
    "first_week_prefix",
    "first_month_prefix",
    "first_days",
    "last_seen",
    "index_prefix",
    "versions",
)
NUMBERS_FORMAT = ">" + "d" * len(OPTION_NUMBERS)


def pack_options(options: Mapping[str, str | int]) -> bytes:
    """The options as lua/includes/options.lua unpacks them (its format, a 'd' per number then 'Bc0'
    per name): each number a big-endian double, each name a byte of length then its bytes."""
    if tuple(options) != OPTION_NUMBERS + OPTION_NAMES:
        raise RuntimeError(f"options are {OPTION_NUMBERS + OPTION_NAMES}, not {tuple(options)}")
    packed = struct.pack(NUMBERS_FORMAT, *(float(options[n]) for n in OPTION_NUMBERS))
    for name in OPTION_NAMES:
        value = str(options[name]).encode()
        packed += struct.pack(">B", len(value)) + value
    return packed


def unpack_options(packed: bytes) -> dict[str, str | int]:
    """What pack_options packed (for tests and tools)."""
    numbers = struct.unpack_from(NUMBERS_FORMAT, packed)
    options: dict[str, str | int] = dict(zip(OPTION_NUMBERS, map(int, numbers), strict=True))
    at = struct.calcsize(NUMBERS_FORMAT)
    for name in OPTION_NAMES:
        size = packed[at]
        options[name] = packed[at + 1 : at + 1 + size].decode()
        at += 1 + size
    return options


# A value of a KEYS or ARGV entry: one, or the values of a range (`KEYS[8..10]`, `ARGV[4..]`).
Value = str | int | bytes
Named = dict[str, Value | Sequence[Value]]


def named(**entries: Value | Sequence[Value]) -> Named:
    """A script call's KEYS or ARGV, each entry by its header's name, in the header's order."""
    return entries


@cache
def _side(script: ScriptName, kind: str) -> tuple[tuple[Entry, ...], tuple[str, ...], bool]:
    """The KEYS or ARGV entries of the script's header, their names, and whether each takes
    one value: read once per script, not at each of its calls."""
    header = header_of(script)
    entries = header.keys if kind == "KEYS" else header.args
    return entries, tuple(entry.name for entry in entries), all(e.count == 1 for e in entries)


def flatten(script: ScriptName, kind: str, given: Named) -> list[Any]:
    """The values of `given` in the order of the header's KEYS or ARGV (`kind`) entries,
    which must name the same entries in the same order, each range with as many values as
    the header says."""
    entries, names, each_one_value = _side(script, kind)
    if tuple(given) != names:
        raise RuntimeError(
            f"{script}.lua's {kind} are {list(names)}, but its caller passes {list(given)}"
        )
    if each_one_value:
        return list(given.values())
    flat: list[Any] = []
    for entry, value in zip(entries, given.values(), strict=True):
        if entry.count == 1:
            flat.append(value)
            continue
        if isinstance(value, str | int):
            raise TypeError(f"{script}.lua's {kind} {entry.name} takes several values")
        if entry.count is not None and len(value) != entry.count:
            raise RuntimeError(f"{script}.lua's {kind} {entry.name} takes {entry.count} values")
        flat.extend(value)
    return flat


class Shard:
    """One shard: every key it names carries its hash tag (`keys`), as do the channels its
    scripts publish on with sharded pub/sub (`channels`)."""

    def __init__(
        self,
        redis: AnyRedis,
        settings: StoreSettings,
        index: int,
        scripts: Scripts,
        observe_script: Callable[[str, int, float], None] | None = None,
        *,
        learn_publish: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.redis = redis
        self.settings = settings
        self.index = index
        self.keys = Keys.of_shard(index)
        self.channels = Channels.of_shard(index)
        self._scripts = scripts
        self._observe_script = observe_script
        # How this shard's scripts publish: classic PUBLISH without `learn_publish` (one
        # Redis); else unknown until the deployment's choice is read, which the first change
        # asks for.
        self._learn_publish = learn_publish
        self._publish: Publish | None = None if learn_publish else Publish.CLASSIC
        self._options: bytes | None = None

    def days_around(self, at_ms: int | None = None) -> tuple[list[str], tuple[int, ...]]:
        """The keys of the day holding `at_ms` (by default now) and of its neighbours, with
        their boundaries (days.days_around): what a script that counts a user as active
        takes."""
        at_ms = local_now_ms() if at_ms is None else at_ms
        labels, boundaries = days_around(at_ms, self.settings.stats_zone)
        return [self.keys.day(label) for label in labels], boundaries

    def publish_with(self, publish: Publish) -> None:
        """How this shard's scripts publish their events from now on (the deployment's)."""
        self._publish = publish
        self._options = None

    @property
    def options(self) -> bytes:
        """The scripts' `shard` argument: the deployment's options and this shard's names,
        packed once (and again once the deployment's way of publishing is known; until then,
        "" for a script that reads but does not publish). A name ending in ':' is followed
        by a user id."""
        if self._options is None:
            k, settings, publish = self.keys, self.settings, self._publish
            self._options = pack_options(
                {
                    "window_ms": settings.window_ms,
                    "retention_ms": settings.retention_ms,
                    "revoke_ms": settings.revoke_ms,
                    "max_sessions": settings.max_sessions,
                    # An emptied place's sequence (its version) outlives every kept change.
                    "empty_place_ttl_ms": max(
                        settings.empty_place_ttl_ms, settings.feed_retention_ms
                    ),
                    "feed_retention_ms": settings.feed_retention_ms,
                    "feed_max_changes": settings.feed_max_changes,
                    "hourly_ms": settings.hourly_ms,
                    "analytics_ms": settings.analytics_ms,
                    "publish": publish or "",
                    "channel": self.channels.every_user(publish or Publish.CLASSIC),
                    "user_channel_prefix": self.channels.user_events(""),
                    "sessions_prefix": k.sessions(""),
                    "status_prefix": k.status(""),
                    "extras_prefix": k.session_extras(""),
                    "since": k.online_since,
                    "invisible": k.invisible,
                    "hidden": k.hidden,
                    "status_expiries": k.status_expiries,
                    "away_expiries": k.away_expiries,
                    "conn_prefix": k.conn(""),
                    "revoked_prefix": k.revoked(""),
                    "lease_owners": k.lease_owners,
                    "lease_next": k.lease_next,
                    "lease_users_prefix": k.lease_users(""),
                    "lease_bits_prefix": k.lease_bits(""),
                    "lease_places_prefix": k.lease_places(""),
                    "lease_members_prefix": k.lease_members(""),
                    "place_members_prefix": k.place_members(""),
                    "place_holders_prefix": k.place_holders(""),
                    "place_states_prefix": k.place_states(""),
                    "place_users_prefix": k.place_users(""),
                    "place_channel_prefix": self.channels.place_events(""),
                    "feed": k.feed,
                    "version_prefix": k.version(""),
                    "user_index": k.user_index,
                    "online_time_prefix": k.online_time(),
                    "period_lengths_prefix": k.period_lengths(""),
                    "zone": packed_zone(settings.stats_zone, local_now_ms()),
                    "hour_prefix": k.hour(""),
                    "week_prefix": k.week(""),
                    "month_prefix": k.month(""),
                    "first_day_prefix": k.first_day(""),
                    "first_week_prefix": k.first_week(""),
                    "first_month_prefix": k.first_month(""),
                    "first_days": k.first_days,
                    "last_seen": k.last_seen,
                    "index_prefix": k.online_index(""),
                    "versions": k.versions,
                }
            )
        return self._options

    async def announcing(self) -> Publish:
        """How a script that publishes events publishes them: the deployment's way, asked for
        now if it is not known yet (it is in `options` from then on)."""
        if self._publish is None and self._learn_publish is not None:
            await self._learn_publish()
        if self._publish is None:
            raise RuntimeError("the deployment's way of publishing events is not known")
        return self._publish

    def call(self, script: ScriptName, keys: Named, args: Named) -> tuple[list[str], list[Value]]:
        """A call's KEYS and ARGV, in its header's order."""
        return flatten(script, "KEYS", keys), flatten(script, "ARGV", args)

    async def run(self, script: ScriptName, keys: Named, args: Named) -> Any:
        """Runs one call of the script; its reply, or the meaning of its error reply."""
        flat_keys, flat_args = self.call(script, keys, args)
        started = time.perf_counter()
        try:
            return await guarded(self._scripts.run(script, flat_keys, flat_args))
        except redis_errors.ResponseError as error:
            raise_meaning(error, self.settings)
        finally:
            if self._observe_script is not None:
                self._observe_script(script, self.index, time.perf_counter() - started)

    async def run_each(self, script: ScriptName, calls: Sequence[tuple[Named, Named]]) -> list[Any]:
        """As run for each call, all sent at once (Scripts.run_each): each call's reply, or
        the meaning of the first error, in the calls' order, once every call has run."""
        flat = [self.call(script, keys, args) for keys, args in calls]
        started = time.perf_counter()
        try:
            replies: list[Any] = await guarded(self._scripts.run_each(self.redis, script, flat))
        finally:
            if self._observe_script is not None:
                # Each call is measured as its share of the round trip they shared.
                share = (time.perf_counter() - started) / max(1, len(calls))
                for _ in calls:
                    self._observe_script(script, self.index, share)
        for reply in replies:
            if isinstance(reply, redis_errors.ResponseError):
                raise_meaning(reply, self.settings)
        return replies


def raise_meaning(error: redis_errors.ResponseError, settings: StoreSettings) -> NoReturn:
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
    """Awaits a Redis call, turning "Redis cannot be reached" into StoreUnavailableError, and a
    write Redis refuses into WritesRefusedError."""
    try:
        return await call
    except (redis_errors.ConnectionError, redis_errors.TimeoutError) as error:
        raise StoreUnavailableError(_UNREACHABLE) from error
    except redis_errors.ResponseError as error:
        # A write refused by a read-only replica or a full Redis: as a script's, above.
        if any(refused in str(error) for refused in _WRITES_REFUSED):
            raise WritesRefusedError(
                "The presence store takes no changes right now; try again shortly."
            ) from error
        raise
    except redis_errors.RedisClusterException as error:
        # No node of the cluster could be reached (or authenticated to), or a slot has no
        # master; any other is a fault of ours (keys of two slots) and must show as one.
        if isinstance(error, redis_errors.SlotNotCoveredError) or isinstance(
            error.__cause__, (redis_errors.ConnectionError, redis_errors.TimeoutError)
        ):
            raise StoreUnavailableError(_UNREACHABLE) from error
        raise


def by_shard(ids: Sequence[str], shards: int) -> dict[int, list[str]]:
    """Distinct ids grouped by the shard each lives in, in their first order."""
    groups: dict[int, list[str]] = {}
    for one in dict.fromkeys(ids):
        groups.setdefault(shard_of(one, shards), []).append(one)
    return groups
