"""The presence events the scripts publish, as they travel on the events channel.

lua/includes/events.lua writes them and this module reads them: a message is a JSON array of
one or more events in order, each the fields of `PublishedEvent`, in that order.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, NamedTuple

from gql_presence.store.days import from_ms
from gql_presence.store.models import ChangeKind, CustomStatus, PlaceMember


class EventKind(StrEnum):
    ONLINE = "ONLINE"  # the user's first live session began
    OFFLINE = "OFFLINE"  # the user's last live session expired
    KICKED = "KICKED"  # a session, or every session, of the user was kicked
    STATUS = "STATUS"  # the user's status or custom status changed
    FRIENDS = "FRIENDS"  # the user's friend set changed (for subscribers of friendsOf)
    # A connection-bound session was opened again, by the holder whose generation is in the
    # `online_or_generation` field: the process holding an older generation ends its
    # subscription.
    REPLACED = "REPLACED"
    # A kick that ended no presence session: the processes holding place sessions of the
    # ids it names (session_id, or "" for all of the user's) end them.
    REVOKED = "REVOKED"


# The kinds the feed keeps (lua/includes/feed.lua FEED_KINDS).
FEED_KINDS = frozenset(ChangeKind)


class PublishedEvent(NamedTuple):
    """One event as the scripts publish it: values straight from the JSON, checked only when
    read (the event hub decodes those it hands on into a PresenceChange)."""

    # An EventKind; "" for an event that backends and the user see nothing of (a change only
    # other end users see: a custom status hidden from them or shown again).
    kind: str
    user_id: str
    at_ms: int  # on the Redis server's clock; 0 for FRIENDS
    session_id: str  # "" unless one session was kicked
    # ONLINE, OFFLINE, KICKED, STATUS: 1 if the user is online after the event, else 0.
    # REPLACED: the generation of the holder that opened the session again.
    online_or_generation: int
    # The user after the event, as backends and the user see it: their status, and their
    # custom status ([text, emoji or null, expires_ms or null], or False for none).
    status: str
    custom: list[Any] | bool
    # The kind other end users see, "" for nothing (the user is invisible to them).
    others_kind: str
    visible_to: str  # who may see the user's lastSeen: EVERYONE, FRIENDS or NOBODY
    invisible: int  # 1 if the user chose INVISIBLE
    announced_ms: int  # the `at` of a reader who may not see lastSeen
    # The user's version after the event (lua/includes/feed.lua): for a kind the feed keeps,
    # how many of the user's changes were announced up to it; for "", unchanged; else 0.
    version: int
    # The id of the event's entry in its shard's feed, "" for an event the feed does not keep.
    feed_id: str


_FIELDS = len(PublishedEvent._fields)


def read_events(message: bytes | str) -> list[PublishedEvent]:
    """The events of one message, in order. Raises ValueError for a message not in this format."""
    values = json.loads(message)
    if not isinstance(values, list) or len(values) % _FIELDS:
        raise ValueError("not a list of events")
    return [PublishedEvent(*values[i : i + _FIELDS]) for i in range(0, len(values), _FIELDS)]


class PlaceKind(StrEnum):
    JOINED = "JOINED"
    UPDATED = "UPDATED"
    LEFT = "LEFT"
    # A place session was opened again, by the holder whose generation is in the `state`
    # field: the process holding an older generation ends its subscription.
    REPLACED = "REPLACED"


class PublishedPlaceEvent(NamedTuple):
    """One event as the place scripts publish it on a place's channel
    (lua/includes/places.lua)."""

    kind: str  # a PlaceKind
    place_id: str
    user_id: str
    session_id: str
    at_ms: int
    # JOINED, UPDATED: the state's JSON text, or False for none. REPLACED: the new holder's
    # generation, as text. LEFT: False.
    state: str | bool
    # The event's number in the place's sequence of events (a REPLACED carries the number
    # before it and counts for nothing), and the place's version after it: 1 for the first
    # event since its sequence began.
    sequence: int
    version: int
    feed_id: str  # the id of the event's entry in its shard's feed ("" for REPLACED)


_PLACE_FIELDS = len(PublishedPlaceEvent._fields)


def read_place_events(message: bytes | str) -> list[PublishedPlaceEvent]:
    """The events of one place message, in order. Raises ValueError for a message not in
    this format."""
    values = json.loads(message)
    if not isinstance(values, list) or len(values) % _PLACE_FIELDS:
        raise ValueError("not a list of place events")
    return [
        PublishedPlaceEvent(*values[i : i + _PLACE_FIELDS])
        for i in range(0, len(values), _PLACE_FIELDS)
    ]


def member_joined(
    member: PlaceMember, sequence: int = 0, version: int = 0, feed_id: str = ""
) -> PublishedPlaceEvent:
    """A member read from its place, as the JOINED event a placeChanged subscription starts
    with (its sequence is the read's, which the subscription keeps apart; its feed entry the
    shard's present before the read: resuming there passes nothing the read missed)."""
    return PublishedPlaceEvent(
        PlaceKind.JOINED,
        member.place_id,
        member.user_id,
        member.session_id,
        -member.position,
        member.state if member.state is not None else False,
        sequence,
        version,
        feed_id,
    )


def custom_status_of(value: Any) -> CustomStatus | None:
    """A custom status as the scripts give it ({text, emoji or false, expires_ms or false},
    or false/nil for none)."""
    if not value:
        return None
    text, emoji, expires_ms = value
    return CustomStatus(
        _text(text),
        _text(emoji) if emoji else None,
        from_ms(int(expires_ms)) if expires_ms else None,
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
