"""A message of presence events in: decoded, its events handed to whoever follows them.

Each event goes to the subscriptions that follow its user (realtime/interests.py says which),
as each may see it: backends and the user themselves see the event as it is; other end users
see it as its user lets them (includes/status.lua), those in the user's friend set perhaps
more. Each view is made, and each rendering of it made, once per event, for every
subscription that shares it (realtime/delivery.py). The deliveries given messages are written
once the batch of messages that had arrived has been read, each message framed once for every
socket that takes the same bytes. Kicks and replacements also go to the holder of this
process's sessions (realtime/held.py); a place's events to the place's followers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from gql_presence.realtime.channels import again
from gql_presence.realtime.delivery import (
    FeedDroppedError,
    Follower,
    Frames,
    PlaceRendered,
    PresenceChange,
    Rendered,
    Writer,
)
from gql_presence.realtime.held import Announced
from gql_presence.realtime.interests import Interests
from gql_presence.store import (
    EventKind,
    PlaceKind,
    PublishedEvent,
    PublishedPlaceEvent,
    read_events,
    read_place_events,
)

log = logging.getLogger("gql_presence.events")


class PlaceFollower(Protocol):
    """Who takes a place's JOINED, UPDATED and LEFT events."""

    def offer_place(self, event: PublishedPlaceEvent, rendered: PlaceRendered) -> Writer | None:
        """Takes the event in; returns the follower when it has messages to write once the
        batch of events being read has been read."""


class PlaceCallback:
    """A follower of a place that hands each event to a function, and its loss to another."""

    __slots__ = ("_take", "lost")

    def __init__(
        self, take: Callable[[PublishedPlaceEvent], None], lost: Callable[[str], None]
    ) -> None:
        self._take = take
        self.lost = lost

    def offer_place(self, event: PublishedPlaceEvent, rendered: PlaceRendered) -> None:
        self._take(event)


class Dispatch:
    """Hands each event received to its followers (a channels.Receiver)."""

    def __init__(
        self,
        interests: Interests[Follower, PlaceFollower],
        friends_changed: Callable[[str], None],
        route_lost: Callable[[int, str], None],
    ) -> None:
        self._interests = interests
        # Called with the owner of a friend set that changed, and with a lost route.
        self._friends_changed = friends_changed
        self._route_lost = route_lost
        self._session_watchers: list[Callable[[Announced], None]] = []
        self._gap_watchers: list[Callable[[], None]] = []
        # Deliveries given messages of the batch being read, written once it has been read.
        self._to_flush: list[Writer] = []
        # Events decoded from messages: what this process pays for.
        self.events_decoded = 0

    def watch_sessions(
        self, watcher: Callable[[Announced], None], on_gap: Callable[[], None]
    ) -> None:
        """Hands every KICKED, REPLACED and REVOKED event received to `watcher` as well;
        `on_gap` is called when the stream was interrupted."""
        self._session_watchers.append(watcher)
        self._gap_watchers.append(on_gap)

    # --- channels.Receiver ---------------------------------------------------------------

    def every_user_message(self, data: bytes, *, settled: bool) -> None:
        self._dispatch(data, everyone=settled)

    def channel_message(self, channel: bytes, data: bytes, *, every_user_live: bool) -> None:
        interests = self._interests
        if interests.place_of_channel(channel) is not None:
            self._dispatch_place(data)
        elif not every_user_live and interests.wants(channel):
            # A channel nobody here follows any more (being left) brings nothing for anyone.
            self._dispatch(data, everyone=False)

    def batch_read(self) -> None:
        to_flush, self._to_flush = self._to_flush, []
        frames: Frames = {}  # each message framed once, for this flush
        for delivery in to_flush:
            delivery.flush(frames)

    def route_lost(self, route: int, why: str) -> None:
        self._route_lost(route, why)
        for on_gap in self._gap_watchers:
            on_gap()

    # --- events ----------------------------------------------------------------------------

    def _dispatch(self, data: bytes, *, everyone: bool) -> None:
        try:
            announced = read_events(data)
        except ValueError:
            log.exception("unreadable presence events %r", data[:200])
            return
        self.events_decoded += len(announced)
        for one in announced:
            self._dispatch_one(one, everyone)

    def _dispatch_place(self, data: bytes) -> None:
        try:
            announced = read_place_events(data)
        except ValueError:
            log.exception("unreadable place events %r", data[:200])
            return
        self.events_decoded += len(announced)
        for one in announced:
            if one.kind == PlaceKind.REPLACED:
                for watcher in self._session_watchers:
                    watcher(one)
                continue
            rendered: PlaceRendered = {}
            for follower in self._interests.place_followers(one.place_id):
                if (writer := follower.offer_place(one, rendered)) is not None:
                    self._to_flush.append(writer)

    def _dispatch_one(self, announced: PublishedEvent, everyone: bool) -> None:
        kind, user_id = announced.kind, announced.user_id
        own_sees = not PresenceChange.for_others_only(announced)
        if kind == EventKind.FRIENDS:
            self._friends_changed(user_id)
            return
        if kind in {EventKind.KICKED, EventKind.REPLACED, EventKind.REVOKED}:
            for watcher in self._session_watchers:
                watcher(announced)
        if kind in {EventKind.REPLACED, EventKind.REVOKED}:
            return  # the holders' business only
        feeds = self._interests.followers_of(user_id)
        all_users = self._interests.everyone if everyone else ()
        if not feeds and not all_users:
            return  # a user whose only watchers are the session holders
        try:
            event = PresenceChange.of(announced)
        except (ValueError, TypeError):
            log.exception("unreadable presence event %r", list(announced))
            return
        # Each view (reader_view) made and rendered once, when the first follower of it is
        # met: the one of backends and the user, and the ones of other end users, out of
        # the user's friend set or in it.
        # Backends' view, the commonest, is looked up without a call; the list is a copy, as
        # an offer may drop its follower, which leaves the sets.
        views: dict[bool | None, tuple[PresenceChange | None, Rendered]] = {}
        as_is: tuple[PresenceChange | None, Rendered] | None = None
        append = self._to_flush.append
        for feed in [*(feeds or ()), *all_users]:
            if feed.reader is None and as_is is not None:
                view, rendered = as_is
            else:
                seen_as = _seen_as(feed, user_id)
                seen = views.get(seen_as)
                if seen is None:
                    seen = views[seen_as] = (
                        _view(announced, event, seen_as, own_sees=own_sees),
                        {},
                    )
                    if seen_as is None:
                        as_is = seen
                view, rendered = seen
            if view is not None and (writer := feed.offer(view, rendered)) is not None:
                append(writer)


def _seen_as(follower: Follower, user_id: str) -> bool | None:
    """Which view of a user's event a follower takes: None, the event as it is (backends and
    the user); else whether the user's friend set holds the reader."""
    if follower.reader is None or follower.reader == user_id:
        return None
    return user_id in follower.in_friend_sets_of


def _view(
    announced: PublishedEvent, event: PresenceChange, seen_as: bool | None, *, own_sees: bool
) -> PresenceChange | None:
    if seen_as is None:
        return event if own_sees else None
    return event.seen_by_others(announced, in_friend_set=seen_as)


def reader_view(follower: Follower, announced: PublishedEvent) -> PresenceChange | None:
    """The event as the follower's reader may see it (as a live event reaches it), or None
    when it sees nothing of it: what a replay of the feed shows (realtime/hub.py)."""
    own_sees = not PresenceChange.for_others_only(announced)
    event = PresenceChange.of(announced)
    return _view(announced, event, _seen_as(follower, announced.user_id), own_sees=own_sees)


def dropped_by_loss(why: str) -> FeedDroppedError:
    """Why a subscription ends when the event stream was interrupted."""
    return FeedDroppedError(again(why), violation=False)
