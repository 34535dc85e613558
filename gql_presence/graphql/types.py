"""The GraphQL types: scalars, objects and enums, each mapped from the store's results.

Docstrings and descriptions here are what frontend developers read in GraphiQL.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date, datetime
from enum import Enum
from typing import Annotated, Any, ClassVar

import strawberry
from strawberry.types.nodes import SelectedField, Selection

from gql_presence.graphql.context import Context
from gql_presence.graphql.plan_run import NEVER_AWAITABLE
from gql_presence.graphql.scalars import JSONObject
from gql_presence.realtime.delivery import PresenceChange
from gql_presence.realtime.held import Ended, SessionHold
from gql_presence.store import PlaceKind, PublishedPlaceEvent, models
from gql_presence.store.days import from_ms
from gql_presence.store.feed import ChangePage as ChangesRead
from gql_presence.store.feed import EventCursors
from gql_presence.store.replies import PresenceReply

ID = strawberry.ID


@strawberry.enum(
    description="How a user appears to the one who reads it, from their live sessions and their own choice."
)
class PresenceStatus(Enum):
    ONLINE = strawberry.enum_value(
        "ONLINE", description="Live, with at least one live session that is not idle."
    )
    AWAY = strawberry.enum_value(
        "AWAY", description="Live, and every live session is idle, or the user chose AWAY."
    )
    BUSY = strawberry.enum_value(
        "BUSY", description="Live, and the user chose BUSY (do not disturb)."
    )
    INVISIBLE = strawberry.enum_value(
        "INVISIBLE",
        description="Live, but the user chose INVISIBLE: shown only to the user themself and to backends.",
    )
    OFFLINE = strawberry.enum_value(
        "OFFLINE",
        description="No live session, or (to everyone else) a user who chose INVISIBLE.",
    )


@strawberry.enum(
    description="What a user chose for their status. AUTO follows their sessions (ONLINE, or AWAY when all are idle)."
)
class ChosenStatus(Enum):
    AUTO = "AUTO"
    AWAY = "AWAY"
    BUSY = "BUSY"
    INVISIBLE = "INVISIBLE"


@strawberry.enum(description="Who may see when a user was last seen.")
class Visibility(Enum):
    EVERYONE = "EVERYONE"
    FRIENDS = "FRIENDS"
    NOBODY = "NOBODY"


@strawberry.enum(description="The order of onlineUsers.")
class OnlineOrder(Enum):
    LAST_SEEN = strawberry.enum_value(
        "LAST_SEEN", description="Most recent activity first (the default, as before)."
    )
    ONLINE_SINCE = strawberry.enum_value(
        "ONLINE_SINCE",
        description="Most recently come online first: an online list by login time.",
    )


@strawberry.input(
    description="Which online users onlineUsers keeps: those that match every field given."
)
class OnlineFilter:
    user_id_prefix: str | None = strawberry.field(
        default=None,
        description="Users whose id starts with this (1 to 128 characters, compared exactly).",
    )
    device: str | None = strawberry.field(
        default=None, description="Users with a live session whose device is exactly this."
    )
    statuses: list[PresenceStatus] | None = strawberry.field(
        default=None, description="Users whose status, as the reader sees it, is one of these."
    )
    online_since_from: datetime | None = strawberry.field(
        default=None, description="Users whose onlineSince is at or after this time."
    )
    online_since_to: datetime | None = strawberry.field(
        default=None, description="Users whose onlineSince is at or before this time."
    )

    def kept(self) -> models.OnlineFilter:
        """The store's filter."""
        return models.OnlineFilter(
            user_id_prefix=self.user_id_prefix,
            device=self.device,
            statuses=(
                None
                if self.statuses is None
                else tuple(models.Status(s.name) for s in self.statuses)
            ),
            online_since_from=self.online_since_from,
            online_since_to=self.online_since_to,
        )


@strawberry.type(
    description="A line of text a user shows beside their name, with an optional emoji and end."
)
class CustomStatus:
    text: str = strawberry.field(description="1 to 128 characters, no control characters.")
    emoji: str | None = strawberry.field(description="At most 16 characters.")
    expires_at: datetime | None = strawberry.field(
        description="When it stops being shown; null: until changed."
    )

    @classmethod
    def of(cls, custom: models.CustomStatus | None) -> CustomStatus | None:
        if custom is None:
            return None
        return cls(text=custom.text, emoji=custom.emoji, expires_at=custom.expires_at)


@strawberry.type(description="One live session of a user (a device, a tab).")
class Session:
    session_id: ID = strawberry.field(
        description="The session's id; `default` when none was given."
    )
    last_seen: datetime = strawberry.field(description="The session's last activity.")
    started_at: datetime = strawberry.field(
        description="When this session became live: the activity that started it (a backfilled `at` included)."
    )
    device: str | None = strawberry.field(
        description='What the client said it is ("web", "ios", "desktop"…): 1 to 32 characters, or null.'
    )
    idle: bool = strawberry.field(
        description="Whether the client said its user is idle on it (a hidden tab, a locked screen)."
    )

    @classmethod
    def of(cls, session: models.Session) -> Session:
        return cls(
            session_id=ID(session.session_id),
            last_seen=session.last_seen,
            started_at=session.started_at or session.last_seen,
            device=session.device,
            idle=session.idle,
        )


@strawberry.type(description="A user's presence: online or not, when last seen, and where.")
class UserPresence:
    # Plain values, not resolvers: a list of 1,000 presences completes without a task each.
    user_id: ID = strawberry.field(description="The user's id.")
    online: bool = strawberry.field(
        description="Whether at least one of the user's sessions is live."
    )
    last_seen: datetime | None = strawberry.field(
        description="The last recorded activity; null when none is kept, or when this reader may not see it."
    )
    sessions: list[Session] = strawberry.field(
        description="The live sessions, most recently active first."
    )
    status: PresenceStatus = strawberry.field(
        description="As this reader may see it (an invisible user is OFFLINE to other end users)."
    )
    custom_status: CustomStatus | None = strawberry.field(
        description="Null when none is set, it expired, or this reader may not see it."
    )
    chosen_status: ChosenStatus | None = strawberry.field(
        description="The user's own choice: shown to the user themself and to backends, null to everyone else."
    )
    last_seen_visible_to: Visibility | None = strawberry.field(
        description="Who may see lastSeen: shown to the user themself and to backends, null to everyone else."
    )
    online_since: datetime | None = strawberry.field(
        description="When the user's current online period began (the activity that brought them online); null when offline, and to a reader who may not see lastSeen."
    )
    version: int | None = strawberry.field(
        default=None,
        description="The version of the user's last announced change (0 if none): the same as the `version` of the event that told of the state read, so a reader can tell whether what it read is older or newer than what it was told. Null for end users other than the user themself.",
    )

    @classmethod
    def of(cls, presence: models.Presence) -> UserPresence:
        # Field by field as _CONVERSIONS, written out: a list of presences makes many.
        return cls(
            user_id=ID(presence.user_id),
            online=presence.online,
            last_seen=presence.last_seen,
            sessions=[Session.of(s) for s in presence.sessions],
            status=PresenceStatus(presence.status.value),
            custom_status=CustomStatus.of(presence.custom),
            chosen_status=None if presence.chosen is None else ChosenStatus(presence.chosen.value),
            last_seen_visible_to=(
                None if presence.visible_to is None else Visibility(presence.visible_to.value)
            ),
            online_since=presence.online_since,
            version=presence.version,
        )

    @classmethod
    def read(cls, presence: PresenceReply) -> UserPresence:
        """The same as `of(presence.presence())`, each field converted when first read."""
        return _ReadUserPresence(presence)

    @classmethod
    def listed(cls, user: models.ListedUser) -> UserPresence:
        """A list's node as the list knows it (id, online, lastSeen as backends see it): for
        a selection that asks for nothing more."""
        return _ListedUserPresence(user)


_Fields = models.Presence | PresenceReply

# How each field of UserPresence is made from the store's presence.
_CONVERSIONS: dict[str, Callable[[_Fields], Any]] = {
    "user_id": lambda p: ID(p.user_id),
    "online": lambda p: p.online,
    "last_seen": lambda p: p.last_seen,
    "sessions": lambda p: [Session.of(s) for s in p.sessions],
    "status": lambda p: PresenceStatus(p.status.value),
    "custom_status": lambda p: CustomStatus.of(p.custom),
    "chosen_status": lambda p: None if p.chosen is None else ChosenStatus(p.chosen.value),
    "last_seen_visible_to": lambda p: (
        None if p.visible_to is None else Visibility(p.visible_to.value)
    ),
    "online_since": lambda p: p.online_since,
    "version": lambda p: p.version,
}


class _MadeWhenRead(UserPresence):
    """A UserPresence whose fields are made when first read (by a plan's getattr or
    Strawberry's resolver of a plain field, the only readers), each by its entry of `_makers`
    from `_source`."""

    _makers: ClassVar[dict[str, Callable[[Any], Any]]]
    _source: Any

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        # Its makers are fields of the schema, never `__await__`: no instance is awaitable.
        NEVER_AWAITABLE.add(cls)

    def __getattr__(self, name: str) -> Any:
        make = self._makers.get(name)
        if make is None:
            raise AttributeError(name)
        value = make(self._source)
        setattr(self, name, value)
        return value


class _ReadUserPresence(_MadeWhenRead):
    """A UserPresence read from the store's reply: an answer that asks for `online` alone
    converts no session, status or time, and the store decodes none."""

    _makers = _CONVERSIONS

    def __init__(self, presence: PresenceReply) -> None:  # the dataclass's is not called
        self._source = presence
        # UserPresence has a class attribute for it (its default), which __getattr__ would
        # never be asked for.
        self.version = presence.version


# What a listed node answers for the fields a list does not know, from the listed user.
_UNLISTED: dict[str, Callable[[models.ListedUser], Any]] = {
    "sessions": lambda _: [],
    "status": lambda user: PresenceStatus.ONLINE if user.online else PresenceStatus.OFFLINE,
    "custom_status": lambda _: None,
    "chosen_status": lambda _: None,
    "last_seen_visible_to": lambda _: None,
    "online_since": lambda _: None,
}


class _ListedUserPresence(_MadeWhenRead):
    """A list's node (UserPresence.listed): the three fields a list knows set at once, and
    the others, which no selection answered from the list reads, made only if read. A page
    makes one per user, in a fifth of the time the dataclass's constructor takes."""

    _makers = _UNLISTED

    def __init__(self, user: models.ListedUser) -> None:  # the dataclass's is not called
        self._source = user
        self.user_id = ID(user.user_id)
        self.online = user.online
        self.last_seen = user.last_seen


# What a list's node knows without reading the users' presence: for a backend, lastSeen too.
_LISTED = frozenset({"userId", "online", "__typename"})
_LISTED_FOR_BACKENDS = _LISTED | {"lastSeen"}


def _selected_names(selections: list[Selection]) -> set[str]:
    """The names of the fields selected, through fragments."""
    names: set[str] = set()
    for selection in selections:
        if isinstance(selection, SelectedField):
            names.add(selection.name)
        else:
            names |= _selected_names(selection.selections)
    return names


@strawberry.type(description="Whether there are more users after this page, and where it ended.")
class PageInfo:
    has_next_page: bool = strawberry.field(description="Whether a next page has users.")
    end_cursor: str | None = strawberry.field(
        description="Pass as `after` to get the next page; null on an empty page."
    )


@strawberry.type(description="One page of a list of users, most recently active first.")
class PresenceConnection:
    total_count: int = strawberry.field(description="How many users match, over all pages.")
    listed: strawberry.Private[tuple[models.ListedUser, ...]]

    @strawberry.field(description="The users on this page, in order.")
    async def nodes(self, info: strawberry.Info[Context, None]) -> list[UserPresence]:
        reader = info.context.reader
        wanted = set().union(*(_selected_names(f.selections) for f in _fields(info)))
        if wanted <= (_LISTED if reader is not None else _LISTED_FOR_BACKENDS):
            return [UserPresence.listed(user) for user in self.listed]
        # Their presence as this reader may see it: the page's users in one read per shard.
        found = await info.context.store.presence_many([u.user_id for u in self.listed], reader)
        return [UserPresence.of(presence) for presence in found]

    page_info: PageInfo = strawberry.field(description="Where this page ended.")

    @classmethod
    def of(cls, page: models.Page) -> PresenceConnection:
        return cls(
            total_count=page.total_count,
            listed=page.nodes,
            page_info=PageInfo(has_next_page=page.has_next_page, end_cursor=page.end_cursor),
        )


def asks_total(info: strawberry.Info[Context, None]) -> bool:
    """Whether the document selects the connection's totalCount (a filtered list counts its
    matches only then: with several fields, counting costs a pass over them)."""

    def selects(selections: list[Selection]) -> bool:
        for selection in selections:
            if not isinstance(selection, SelectedField):
                if selects(selection.selections):
                    return True
            elif selection.name == "totalCount":
                return True
        return False

    try:
        return selects(info.selected_fields[0].selections)
    except (IndexError, AttributeError):
        return True


def _fields(info: strawberry.Info[Context, None]) -> list[SelectedField]:
    return [f for f in info.selected_fields if isinstance(f, SelectedField)]


@strawberry.type(description="What a kick ended.")
class KickResult:
    user_id: ID = strawberry.field(description="The user who was kicked.")
    kicked_sessions: int = strawberry.field(description="How many live sessions were ended.")
    online: bool = strawberry.field(
        description="Whether the user is still online after the kick (another session still live)."
    )


@strawberry.type(description="The distinct users active on one day of the stats time zone.")
class DailyActiveUsers:
    date: date = strawberry.field(description="The day, in the stats time zone.")
    active_users: int = strawberry.field(description="Distinct users with any activity that day.")


@strawberry.type(description="Exact daily active users over seven days, and how they overlap.")
class WeeklyStats:
    start_date: date = strawberry.field(
        description="The first of the seven days (endDate minus 6)."
    )
    end_date: date = strawberry.field(description="The last of the seven days.")
    days: list[DailyActiveUsers] = strawberry.field(description="Seven entries, oldest first.")
    unique_users: int = strawberry.field(
        description="Users active on at least one of the seven days."
    )
    active_every_day: int = strawberry.field(
        description="Users active on every one of the seven days."
    )
    new_on_end_date: int = strawberry.field(
        description="Users active on endDate who were not active on the day before it."
    )

    @classmethod
    def of(cls, stats: models.WeeklyStats) -> WeeklyStats:
        return cls(
            start_date=stats.start_date,
            end_date=stats.end_date,
            days=[DailyActiveUsers(date=d.day, active_users=d.active_users) for d in stats.days],
            unique_users=stats.unique_users,
            active_every_day=stats.active_every_day,
            new_on_end_date=stats.new_on_end_date,
        )


@strawberry.enum(description="What changed in a user's presence.")
class PresenceEventKind(Enum):
    ONLINE = strawberry.enum_value(
        "ONLINE", description="The user came online: their first live session began."
    )
    OFFLINE = strawberry.enum_value(
        "OFFLINE", description="The user went offline: their last live session expired."
    )
    KICKED = strawberry.enum_value(
        "KICKED", description="A session, or every session, of the user was kicked."
    )
    STATUS = strawberry.enum_value(
        "STATUS",
        description="The status or custom status changed as subscribers see it (ONLINE, AWAY, BUSY; set, changed, cleared or expired).",
    )


# Its fields read only the event, never the caller: one rendering of an event is shared by
# every subscriber of the same document who sees it alike (event_rendering.py; the hub hands
# other end users the event as its user lets them see it). Keep it so.
@strawberry.type(description="One change of one user's presence.")
class PresenceEvent:
    user_id: ID = strawberry.field(description="The user whose presence changed.")
    kind: PresenceEventKind = strawberry.field(description="What changed.")
    at: datetime = strawberry.field(
        description="When the change happened, on the one clock (the Redis server's)."
    )
    session_id: ID | None = strawberry.field(
        description="The session concerned, for KICKED of one session; null otherwise."
    )
    online: bool = strawberry.field(description="Whether the user is online after this event.")
    status: PresenceStatus = strawberry.field(
        description="The user's status after this event, as this subscriber may see it."
    )
    custom_status: CustomStatus | None = strawberry.field(
        description="The custom status after this event, as this subscriber may see it."
    )
    cursor: str = strawberry.field(
        description="Where this event stands in the feed: pass it as `after` to resume just after it. Opaque."
    )
    version: int | None = strawberry.field(
        default=None,
        description="The user's presence version after this event: 1 for the user's first announced change, then one more for each. Null for end users other than the user themself.",
    )

    @classmethod
    def of(cls, event: PresenceChange, cursor: str) -> PresenceEvent:
        return cls(
            user_id=ID(event.user_id),
            kind=PresenceEventKind(event.kind),
            at=event.at,
            session_id=None if event.session_id is None else ID(event.session_id),
            online=event.online,
            status=PresenceStatus(event.status.value),
            custom_status=CustomStatus.of(event.custom),
            cursor=cursor,
            version=event.version,
        )


@strawberry.enum(description="Why the service ended a presenceSession or a placeSession.")
class SessionEndReason(Enum):
    KICKED = strawberry.enum_value(
        "KICKED",
        description="The session, or every session of the user, was kicked; its id is revoked as for any kick.",
    )
    REPLACED = strawberry.enum_value(
        "REPLACED",
        description="Another subscription holding the same session (of the same place, for a placeSession) took over.",
    )


@strawberry.type(description="The state of a connection-bound session (presenceSession).")
class SessionState:
    user_id: ID = strawberry.field(description="The user whose session this is.")
    session_id: ID = strawberry.field(description="The session (device, tab) kept live.")
    live: bool = strawberry.field(
        description="True while the session is live; false in the last message."
    )
    at: datetime = strawberry.field(description="When this state began, on the one clock.")
    end_reason: SessionEndReason | None = strawberry.field(
        description="Why the service ended the session; null while live."
    )

    @classmethod
    def of(cls, hold: SessionHold) -> SessionState:
        """The state of a held session: live, or how the service ended it."""
        held, ended = hold.held, hold.outcome
        if not isinstance(ended, Ended):  # live (a lost session ends with an error instead)
            return cls(
                user_id=ID(held.user_id),
                session_id=ID(held.session_id),
                live=True,
                at=hold.opened_at,
                end_reason=None,
            )
        return cls(
            user_id=ID(held.user_id),
            session_id=ID(held.session_id),
            live=False,
            at=ended.at,
            end_reason=SessionEndReason(ended.reason.value),
        )


def _state(text: str | None) -> JSONObject | None:
    return None if text is None else JSONObject(json.loads(text))


@strawberry.type(description="A session in a place.")
class PlaceMember:
    place_id: ID = strawberry.field(description="The place.")
    user_id: ID = strawberry.field(description="Whose session this is.")
    session_id: ID = strawberry.field(description="The session (device, tab) in the place.")
    joined_at: datetime = strawberry.field(description="When this session joined the place.")
    state: JSONObject | None = strawberry.field(
        description='The session\'s state in the place (a cursor, a selection, "typing"), as last set; null when none.'
    )

    @classmethod
    def of(cls, member: models.PlaceMember) -> PlaceMember:
        return _ReadPlaceMember(member)


class _ReadPlaceMember(PlaceMember):
    """A PlaceMember read from the store, its fields set at once: a page makes one per
    session in 1.3 µs against the dataclass constructor's 1.6 (most of either is the
    state's JSON: 0.9), 15 µs less for a page of 50."""

    def __init__(self, member: models.PlaceMember) -> None:  # the dataclass's is not called
        self.place_id = ID(member.place_id)
        self.user_id = ID(member.user_id)
        self.session_id = ID(member.session_id)
        self.joined_at = member.joined_at
        text = member.state
        self.state = None if text is None else JSONObject(json.loads(text))


NEVER_AWAITABLE.add(_ReadPlaceMember)  # 50 a page, each written without asking


@strawberry.type(description="One page of the sessions in a place, most recently joined first.")
class PlaceMemberConnection:
    total_count: int = strawberry.field(description="Sessions in the place now, over all pages.")
    users: int = strawberry.field(description="Distinct users in the place now.")
    nodes: list[PlaceMember] = strawberry.field(description="The sessions on this page, in order.")
    page_info: PageInfo = strawberry.field(description="Where this page ended.")
    version: int = strawberry.field(
        description="The place's version when these members were read (0 if nothing ever happened there, or nothing for longer than the feed keeps changes): the `version` of the last place event this read reflects."
    )

    @classmethod
    def of(cls, page: models.PlacePage) -> PlaceMemberConnection:
        return cls(
            total_count=page.total_count,
            users=page.users,
            nodes=[PlaceMember.of(member) for member in page.nodes],
            page_info=PageInfo(has_next_page=page.has_next_page, end_cursor=page.end_cursor),
            version=page.version,
        )


@strawberry.type(description="How many sessions and users are in a place now.")
class PlaceCount:
    place_id: ID = strawberry.field(description="The place.")
    sessions: int = strawberry.field(description="Sessions in the place now.")
    users: int = strawberry.field(description="Distinct users in the place now.")


@strawberry.enum(description="What happened in a place.")
class PlaceEventKind(Enum):
    JOINED = strawberry.enum_value(
        "JOINED",
        description="A session joined (also sent for each member present when a placeChanged subscription starts).",
    )
    UPDATED = strawberry.enum_value("UPDATED", description="A session's state changed.")
    LEFT = strawberry.enum_value(
        "LEFT",
        description="A session left: its subscription ended, its socket closed, it was kicked, or its process died.",
    )


@strawberry.type(description="A change in a place.")
class PlaceEvent:
    place_id: ID = strawberry.field(description="The place.")
    kind: PlaceEventKind = strawberry.field(description="What happened.")
    user_id: ID = strawberry.field(description="Whose session.")
    session_id: ID = strawberry.field(description="Which session.")
    at: datetime = strawberry.field(description="When it happened, on the one clock.")
    state: JSONObject | None = strawberry.field(
        description="The state after this event; null for LEFT or when none."
    )
    cursor: str = strawberry.field(
        description="Where this event stands in the feed: pass it as `after` to resume just after it. Opaque."
    )
    version: int = strawberry.field(
        default=0,
        description="The place's version after this event: 1 for the place's first event, then one more for each (the opening JOINED events of placeChanged carry the version of the read they come from).",
    )

    @classmethod
    def of(cls, event: PublishedPlaceEvent, cursor: str) -> PlaceEvent:
        return cls(
            place_id=ID(event.place_id),
            kind=PlaceEventKind(PlaceKind(event.kind).value),
            user_id=ID(event.user_id),
            session_id=ID(event.session_id),
            at=from_ms(int(event.at_ms)),
            state=_state(event.state if isinstance(event.state, str) else None),
            cursor=cursor,
            version=int(event.version),
        )


@strawberry.type(description="The state of a session held in a place (placeSession).")
class PlaceSessionState:
    place_id: ID = strawberry.field(description="The place.")
    user_id: ID = strawberry.field(description="Whose session this is.")
    session_id: ID = strawberry.field(description="The session in the place.")
    live: bool = strawberry.field(description="True while in the place; false in the last message.")
    at: datetime = strawberry.field(description="When this state began, on the one clock.")
    end_reason: SessionEndReason | None = strawberry.field(
        description="Why the service ended it (KICKED, REPLACED); null while live."
    )

    @classmethod
    def of(cls, hold: SessionHold) -> PlaceSessionState:
        """The state of a held place session: in the place, or how the service ended it."""
        held, ended = hold.held, hold.outcome
        if not isinstance(held, models.HeldPlaceSession):
            raise TypeError("a presence session's hold has no place")
        if not isinstance(ended, Ended):  # live (a lost session ends with an error instead)
            return cls(
                place_id=ID(held.place_id),
                user_id=ID(held.user_id),
                session_id=ID(held.session_id),
                live=True,
                at=hold.opened_at,
                end_reason=None,
            )
        return cls(
            place_id=ID(held.place_id),
            user_id=ID(held.user_id),
            session_id=ID(held.session_id),
            live=False,
            at=ended.at,
            end_reason=SessionEndReason(ended.reason.value),
        )


@strawberry.enum(description="Every kind of change the feed keeps.")
class ChangeKind(Enum):
    ONLINE = "ONLINE"
    OFFLINE = "OFFLINE"
    KICKED = "KICKED"
    STATUS = "STATUS"
    JOINED = "JOINED"
    UPDATED = "UPDATED"
    LEFT = "LEFT"


Change = Annotated[
    PresenceEvent | PlaceEvent,
    strawberry.union(
        "Change",
        description="A change kept in the feed: a user's presence event or a place's event (their `kind` fields are different enums: select them under aliases or in separate fragments).",
    ),
]


@strawberry.type(description="A page of the feed's changes.")
class ChangePage:
    nodes: list[Change] = strawberry.field(
        description="The changes after the cursor given, oldest first."
    )
    end_cursor: str = strawberry.field(
        description="Pass as `after` for the next page (the present, when nothing came)."
    )
    has_more: bool = strawberry.field(
        description="Whether more retained changes follow endCursor now: ask again at once if so."
    )

    @classmethod
    def of(cls, page: ChangesRead, cursors: EventCursors) -> ChangePage:
        nodes: list[PresenceEvent | PlaceEvent] = [
            PlaceEvent.of(change, cursors.of_change(change, change.feed_id))
            if isinstance(change, PublishedPlaceEvent)
            else PresenceEvent.of(
                PresenceChange.of(change), cursors.of_change(change, change.feed_id)
            )
            for change in page.nodes
        ]
        return cls(nodes=nodes, end_cursor=page.end_cursor, has_more=page.has_more)
