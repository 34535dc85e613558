"""The feed (lua/includes/feed.lua): every announced change, kept for a while in its shard's
stream, read by backends a page at a time over every shard.

A feed cursor is sealed as list cursors are (cursor.py) and holds a position per shard: the
id of the last entry read there. Each shard reads a page after its own position (XRANGE with
COUNT, lua/feed_page.lua), and the pages are merged in the order of their ids' times: per
user and per place that is the order of their versions; across shards none is promised."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from functools import cached_property

from gql_presence.store.cursor import Cursors
from gql_presence.store.deployment import Deployment
from gql_presence.store.errors import BadInputError, CursorExpiredError
from gql_presence.store.keys import shard_of
from gql_presence.store.models import PayFor
from gql_presence.store.replies import text
from gql_presence.store.scripts import ScriptName
from gql_presence.store.shard import Shard, named
from gql_presence.store.validation import check_id
from gql_presence.store.wire import (
    FEED_KINDS,
    PublishedEvent,
    PublishedPlaceEvent,
)

MAX_CHANGES_PAGE = 1000
# Entries a request examines at most in each shard, whatever its filters: a page of a filter
# that matches few changes ends early, with hasMore, rather than scan the feed.
EXAMINED_PER_SHARD = 1000
MAX_PLACE_FILTERS = 1000
# A resume (presenceChanged, placeChanged with `after`) reads at most this many changes of
# each shard it follows, a page of MAX_CHANGES_PAGE at a time; a cursor with more after it is
# refused as CURSOR_EXPIRED: reading afresh costs less than replaying more. (What it replays of
# them is bounded by the subscriber's buffer: realtime/hub.py.)
RESUME_MAX_CHANGES = 10_000
# The events whose cursors a process keeps, for the renderings of an event that come after
# the first (every subscriber given one cursor): far more than are rendered at once.
RECENT_CURSORS = 256
# The changes a process keeps decoded, at most this many a shard: its look at a shard's new
# entries and each webhook's page of the same entries decode each once (ten webhooks read
# every new entry ten times more), with room for the pages of a full backlog.
DECODED_KEPT = 2 * EXAMINED_PER_SHARD

_BAD_CURSOR = (
    "after must be a cursor of this service's feed (an event's cursor, an endCursor of "
    "changes, or feedCursor), or null for the oldest change kept."
)
_EXPIRED = (
    "This cursor is older than what the feed keeps: read the state afresh, then take "
    "feedCursor and go on from it."
)
_FEED = "feed"

Change = PublishedEvent | PublishedPlaceEvent


@dataclass(frozen=True)
class ChangePage:
    """Changes oldest first; the cursor after them; whether more were kept then."""

    nodes: tuple[Change, ...]
    end_cursor: str
    has_more: bool


def _sort_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def check_first(first: int) -> int:
    """The size of a page of changes, once it is allowed; BadInputError otherwise."""
    if not 1 <= first <= MAX_CHANGES_PAGE:
        raise BadInputError(f"first must be 1 to {MAX_CHANGES_PAGE:,}; got {first}.")
    return first


def check_places(places: Sequence[str]) -> list[str]:
    """Place ids, and prefixes ending in `*` (`*` alone: every place), as a JWT's claim."""
    if len(places) > MAX_PLACE_FILTERS:
        raise BadInputError(f"places takes at most {MAX_PLACE_FILTERS:,} entries.")
    for place in places:
        if place != "*":
            check_id(place.removesuffix("*"), "each of places")
    return list(places)


def place_matcher(places: Sequence[str]) -> Callable[[str], bool]:
    """Whether a place id is one of `places` or starts with one of its prefixes (ending in
    `*`): a set's look-up and one startswith over every prefix at once, so that a page's
    changes are matched against the most entries allowed at next to no cost."""
    ids = frozenset(p for p in places if not p.endswith("*"))
    prefixes = tuple(p[:-1] for p in places if p.endswith("*"))
    return lambda place_id: place_id in ids or place_id.startswith(prefixes)


def change_of(entry_id: str, field: str, values: str) -> Change | None:
    """The change an entry holds, or None for one that is not a change backends see (an
    event only other end users see: kind "")."""
    decoded = json.loads(values)
    if field == "p":
        return PublishedPlaceEvent._make([*decoded, entry_id])
    event = PublishedEvent._make([*decoded, entry_id])
    return event if event.kind in FEED_KINDS else None


@dataclass(frozen=True)
class Replay:
    """What a resume read: the changes after its cursor that it follows, in the feed's
    order (per user and per place, the order of their versions), with the kind "" changes
    that only other end users see; and in each shard read, the id of the last entry read
    there (None for a shard not read). A live event of a read shard whose entry is at or
    before that id was in the read."""

    changes: tuple[Change, ...]
    positions: tuple[str | None, ...]

    @cached_property
    def _reached(self) -> tuple[tuple[int, int] | None, ...]:
        return tuple(None if p is None else _sort_key(p) for p in self.positions)

    def passed(self, user_or_place_id: str, feed_id: str) -> bool:
        """Whether the read passed this event of this user or place (its entry `feed_id`):
        asked of every live event a resumed subscription is offered."""
        reached = self._reached[shard_of(user_or_place_id, len(self.positions))]
        return reached is not None and bool(feed_id) and _sort_key(feed_id) <= reached


class Feed:
    """The feed of every shard."""

    def __init__(self, shards: Sequence[Shard], deployment: Deployment) -> None:
        self._shards = shards
        self._deployment = deployment
        self._event_cursors: EventCursors | None = None
        # The changes decoded lately, by shard and entry id (emptied when full: the entries
        # read are mostly the newest, so what is dropped is seldom read again).
        self._decoded: list[dict[str, Change]] = [{} for _ in shards]

    async def _positions(self, after: str | None) -> list[str]:
        """Each shard's position in a cursor ("" for every one when None)."""
        if after is None:
            return [""] * len(self._shards)
        position = (await self._deployment.cursors(make=False)).unseal(after, _BAD_CURSOR)
        match position:
            case [str(kind), list(ids)] if kind == _FEED and len(ids) == len(self._shards):
                if all(isinstance(i, str) and _is_id(i) for i in ids):
                    return [str(i) for i in ids]
            case [str(kind), int(shard), str(entry_id)] if (
                kind == _FEED and 0 <= shard < len(self._shards) and _is_id(entry_id)
            ):
                # An event's cursor: its shard's entry, and every other shard at its moment.
                ms = _sort_key(entry_id)[0]
                around = f"{ms - 1}-18446744073709551615"
                return [entry_id if i == shard else around for i in range(len(self._shards))]
        raise BadInputError(_BAD_CURSOR)

    @property
    def shards(self) -> int:
        return len(self._shards)

    async def positions(self, after: str | None) -> list[str]:
        """Each shard's position in a cursor of this feed ("" for every one when None);
        BadInputError for anything else."""
        return await self._positions(after)

    async def shard_page(
        self, index: int, after: str, count: int
    ) -> list[tuple[str, Change | None]]:
        """Up to `count` entries of one shard after the entry `after`, oldest first, each with
        its change (None for one backends see nothing of); CursorExpiredError when changes
        after `after` may be gone."""
        _, flat = await self._read(self._shards[index], after, count)
        return self._entries(index, flat)

    async def shard_look(
        self, index: int, after: str, count: int
    ) -> tuple[str, list[tuple[str, Change | None]]]:
        """Up to `count` entries of one shard after the entry `after`, oldest first, each with
        its change (None for one backends see nothing of), and the bound of the look: the last
        entry returned when there are `count`, else the shard's present (every entry added
        after this call comes after it). What is between `after` and the bound is exactly the
        entries returned: CursorExpiredError when entries after `after` may be gone (but not
        for an `after` older than the retention with nothing gone after it, as shard_page)."""
        bound, flat = await self._read(self._shards[index], after, count, ScriptName.FEED_TIP)
        return bound, self._entries(index, flat)

    def _entries(self, index: int, flat: Sequence[str]) -> list[tuple[str, Change | None]]:
        """A shard's entries read (id, field and JSON, flat), each with its change."""
        entries: list[tuple[str, Change | None]] = []
        decoded = self._decoded[index]
        for i in range(0, len(flat), 3):
            entry_id = flat[i]
            change = decoded.get(entry_id)
            if change is None:
                # An entry's id names what it holds for good: the stream never changes it.
                change = change_of(*flat[i : i + 3])
                if change is not None:
                    if len(decoded) >= DECODED_KEPT:
                        decoded.clear()
                    decoded[entry_id] = change
            entries.append((entry_id, change))
        return entries

    @property
    def retention_ms(self) -> int:
        """How long the feed keeps a change."""
        return self._shards[0].settings.feed_retention_ms

    async def shard_start(self, index: int) -> str:
        """Just before the oldest change a shard keeps (its present when it keeps none)."""
        position, flat = await self._read(self._shards[index], "", 1)
        return _just_before(flat[0]) if flat else position

    async def _seal(self, positions: Sequence[str]) -> str:
        return (await self._deployment.cursors(make=True)).seal([_FEED, list(positions)])

    async def seal(self, positions: Sequence[str]) -> str:
        """The cursor of a position in each shard."""
        return await self._seal(positions)

    async def event_cursor(self, shard: int, entry_id: str) -> str:
        """The cursor of an event: its entry in its shard's feed."""
        return (await self.event_cursors()).of_shard(shard, entry_id)

    async def event_cursors(self) -> EventCursors:
        """What seals events' cursors with no wait (an event is rendered synchronously)."""
        if self._event_cursors is None:
            cursors = await self._deployment.cursors(make=True)
            self._event_cursors = EventCursors(cursors, len(self._shards))
        return self._event_cursors

    async def present(self, user_or_place_id: str) -> str:
        """The present of the shard of this user or place: an entry id no later than any
        change announced there after this call."""
        shard = self._shards[shard_of(user_or_place_id, len(self._shards))]
        return (await self._read(shard, "", 0))[0]

    async def _read(
        self, shard: Shard, after: str, count: int, script: ScriptName = ScriptName.FEED_PAGE
    ) -> tuple[str, list[str]]:
        """A read of a shard's feed by feed_page.lua (or feed_tip.lua, which answers alike):
        its position and the entries' id, field and JSON, flat."""
        reply = await shard.run(
            script,
            named(feed=shard.keys.feed),
            named(after=after, count=count, shard=shard.options),
        )
        if int(reply[0]):
            raise CursorExpiredError(_EXPIRED)
        return text(reply[1]), [text(v) for v in reply[2:]]

    async def cursor(self) -> str:
        """The present of every shard: the changes after it are still to come."""
        positions = [(await self._read(shard, "", 0))[0] for shard in self._shards]
        return await self._seal(positions)

    async def changes(
        self,
        after: str | None,
        first: int,
        kinds: Sequence[str] | None = None,
        places: Sequence[str] | None = None,
    ) -> ChangePage:
        """The kept changes after `after` (the oldest kept when None), oldest first, at most
        `first` (1 to MAX_CHANGES_PAGE), of `kinds` (ChangeKind values) and `places`."""
        check_first(first)
        if kinds is not None and not kinds:
            # It would match nothing, and a reader paging with it would read nothing ever.
            raise BadInputError("kinds must name at least one kind (null: every kind).")
        wanted = None if kinds is None else set(kinds)
        place_filter = None if places is None else place_matcher(check_places(places))
        positions = await self._positions(after)
        count = max(first, min(EXAMINED_PER_SHARD, first * 4))
        read: list[tuple[tuple[int, int], int, str, Change | None]] = []
        full: set[int] = set()
        for index, shard in enumerate(self._shards):
            position, flat = await self._read(shard, positions[index], count)
            if not positions[index]:
                # From the oldest kept: the shard's present when it has none, else just
                # before the first read, so that what is not taken now comes next time.
                positions[index] = _just_before(flat[0]) if flat else position
            if len(flat) // 3 == count:
                full.add(index)
            for i in range(0, len(flat), 3):
                entry_id = flat[i]
                read.append((_sort_key(entry_id), index, entry_id, change_of(*flat[i : i + 3])))
        read.sort(key=lambda one: (one[0], one[1]))
        nodes: list[Change] = []
        taken = 0
        for _, index, entry_id, change in read:
            if len(nodes) == first:
                break
            taken += 1
            positions[index] = entry_id
            if change is not None and _wanted(change, wanted, place_filter):
                nodes.append(change)
        has_more = taken < len(read) or bool(full)
        return ChangePage(tuple(nodes), await self._seal(positions), has_more)

    async def replay(
        self,
        after: str,
        users: Collection[str] | None,
        place_id: str | None,
        reading_on: PayFor | None = None,
    ) -> Replay:
        """The changes after `after` of `users` (every user's when None), or of the place:
        every shard they are in read to its present, RESUME_MAX_CHANGES at most in each, a
        page at a time (`reading_on` paid before each page after a shard's first).
        BadInputError for no cursor of this deployment; CursorExpiredError for one older than
        what is kept, or with too many changes after it."""
        positions = await self._positions(after)
        count = len(self._shards)
        if place_id is not None:
            wanted = {shard_of(place_id, count)}
        elif users is None:
            wanted = set(range(count))
        else:
            wanted = {shard_of(user_id, count) for user_id in users}
        read: list[tuple[tuple[int, int], int, Change]] = []
        reached: list[str | None] = [None] * count
        for index in sorted(wanted):
            reached[index], changes = await self._replay_shard(
                self._shards[index], positions[index], users, place_id, reading_on
            )
            read.extend((_sort_key(change.feed_id), index, change) for change in changes)
        read.sort(key=lambda one: (one[0], one[1]))
        return Replay(tuple(change for _, _, change in read), tuple(reached))

    async def _replay_shard(
        self,
        shard: Shard,
        position: str,
        users: Collection[str] | None,
        place_id: str | None,
        reading_on: PayFor | None,
    ) -> tuple[str, list[Change]]:
        """One shard's part of a replay: the id of the last entry read (`position` when none
        was), and the changes followed."""
        changes: list[Change] = []
        examined = 0
        while True:
            # One more entry past the limit, to learn whether the limit was passed.
            page = min(MAX_CHANGES_PAGE, RESUME_MAX_CHANGES - examined) or 1
            if examined and reading_on is not None:
                await reading_on(page)
            _, flat = await self._read(shard, position, page)
            if flat and examined >= RESUME_MAX_CHANGES:
                raise CursorExpiredError(
                    f"More than {RESUME_MAX_CHANGES:,} changes of the feed follow this "
                    "cursor: read the state afresh and subscribe without after."
                )
            for i in range(0, len(flat), 3):
                change = _followed(flat[i], flat[i + 1], flat[i + 2], users, place_id)
                if change is not None:
                    changes.append(change)
            examined += len(flat) // 3
            if flat:
                position = flat[-3]
            if len(flat) // 3 < page:
                return position, changes


def _followed(
    entry_id: str, field: str, values: str, users: Collection[str] | None, place_id: str | None
) -> Change | None:
    """The change an entry holds, when a replay of `users` or of the place follows it (an
    event only other end users see, kind "", included)."""
    if field == "p":
        if place_id is None:
            return None
        place_event = PublishedPlaceEvent._make([*json.loads(values), entry_id])
        return place_event if place_event.place_id == place_id else None
    if place_id is not None:
        return None
    event = PublishedEvent._make([*json.loads(values), entry_id])
    return event if users is None or event.user_id in users else None


class EventCursors:
    """Seals the cursors of events: an event's entry in its shard's feed, and every other
    shard at the entry's moment (Feed._positions). An event is rendered for each document
    that follows it, and for each view of it, close together: the cursors of the latest
    events are kept, so that each event's is sealed once and every subscriber is given the
    same."""

    __slots__ = ("_cursors", "_recent", "_shards")

    def __init__(self, cursors: Cursors, shards: int) -> None:
        self._cursors = cursors
        self._shards = shards
        self._recent: dict[tuple[int, str], str] = {}

    def of(self, user_or_place_id: str, entry_id: str) -> str:
        """The cursor of an event of this user or place whose entry is `entry_id`."""
        return self.of_shard(shard_of(user_or_place_id, self._shards), entry_id)

    def of_change(self, change: Change, entry_id: str) -> str:
        """The cursor of a change: its entry is in the shard of its place or user."""
        if isinstance(change, PublishedPlaceEvent):
            return self.of(change.place_id, entry_id)
        return self.of(change.user_id, entry_id)

    def of_shard(self, shard: int, entry_id: str) -> str:
        """The cursor of an entry of a shard's feed (the end of each webhook's batch that ends
        there too)."""
        key = (shard, entry_id)
        cursor = self._recent.get(key)
        if cursor is None:
            cursor = self._recent[key] = self._cursors.seal_fixed([_FEED, shard, entry_id])
            if len(self._recent) > RECENT_CURSORS:
                del self._recent[next(iter(self._recent))]  # the oldest
        return cursor


def _wanted(change: Change, kinds: set[str] | None, places: Callable[[str], bool] | None) -> bool:
    if kinds is not None and change.kind not in kinds:
        return False
    if places is not None and isinstance(change, PublishedPlaceEvent):
        return places(change.place_id)
    return True


def _just_before(entry_id: str) -> str:
    ms, seq = _sort_key(entry_id)
    return f"{ms}-{seq - 1}" if seq else f"{ms - 1}-18446744073709551615"


def _is_id(value: str) -> bool:
    ms, dash, seq = value.partition("-")
    return bool(dash) and ms.isdigit() and seq.isdigit()
