"""Who follows what on this process, and the channels that takes: plain data, no I/O.

Four kinds of interest, each with its own index: a subscription follows users (by id, or the
friends of a friendsOf owner), or everyone, or a place; and the holder of this process's
sessions watches users and places for their kicks and replacements. Each interest counts
once on each channel it needs; every change returns the channels whose count left or reached
zero, for the pub/sub side (realtime/channels.py) to subscribe to or leave. The channels a
user or place needs:

- a user followed or watched, or a friendsOf owner: the user's channel;
- a friendsOf owner, with sharded pub/sub: also the user's channel in every other shard, as a
  change of a friend set is announced in the shard of each friend it adds or takes out;
- a user followed by an end user (a `reader`), with sharded pub/sub: also the user's channel
  in the reader's shard, which announces whether the reader joins or leaves their friend set;
- a place followed or watched: the place's channel;
- everyone: the channel of every user, of every route.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

F = TypeVar("F")  # a subscription that follows users or everyone
P = TypeVar("P")  # a subscription that follows a place


class ChannelNames(Protocol):
    """Names the channels of users and places (the store's, in the service)."""

    def user(self, user_id: str) -> bytes:
        """The channel of the user's events."""
        ...

    def friend_set(self, user_id: str, route: int) -> bytes | None:
        """The channel of the route that announces changes of the user's friend set, when it
        is not the user's own channel (with sharded pub/sub only)."""
        ...

    def friend_sets(self, user_id: str) -> Sequence[bytes]:
        """Every channel that announces changes of the user's friend set besides their own."""
        ...

    def place(self, place_id: str) -> bytes:
        """The channel of the place's events."""
        ...

    def every_user(self) -> Sequence[bytes]:
        """The channel of every user's events, one per route, in the order of the routes."""
        ...

    def route_of(self, user_or_place_id: str) -> int:
        """The route of a user's (or a place's) events."""
        ...


@dataclass(frozen=True)
class Changes:
    """Channels that became wanted (`add`) and channels that no longer are (`drop`)."""

    add: tuple[bytes, ...] = ()
    drop: tuple[bytes, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.add or self.drop)


NO_CHANGE = Changes()


@dataclass(slots=True)
class _Follow:
    """What one subscription follows."""

    reader_route: int | None  # the route of its end user, when it matters (sharded)
    users: frozenset[str] = frozenset()
    friends_of: str | None = None
    everyone: bool = False


@dataclass
class _Counts:
    """How many interests need each channel; the channels that went to or from none."""

    of: dict[bytes, int] = field(default_factory=dict)
    added: list[bytes] = field(default_factory=list)
    dropped: list[bytes] = field(default_factory=list)

    def up(self, channel: bytes) -> None:
        count = self.of.get(channel, 0)
        self.of[channel] = count + 1
        if not count:
            self.added.append(channel)

    def down(self, channel: bytes) -> None:
        count = self.of[channel] - 1
        if count:
            self.of[channel] = count
        else:
            del self.of[channel]
            self.dropped.append(channel)

    def changes(self) -> Changes:
        if not self.added and not self.dropped:
            return NO_CHANGE
        # A channel dropped and added again in one change stays as it was.
        added, dropped = set(self.added), set(self.dropped)
        both = added & dropped
        changes = Changes(
            tuple(c for c in self.added if c not in both),
            tuple(c for c in self.dropped if c not in both),
        )
        self.added.clear()
        self.dropped.clear()
        return changes


class Interests(Generic[F, P]):
    """The interests of this process's subscribers and session holders."""

    def __init__(self, names: ChannelNames) -> None:
        self._names = names
        self._counts = _Counts()
        self._follows: dict[F, _Follow] = {}
        # The subscriptions that follow each user, each friendsOf owner, and everyone.
        self._by_user: dict[str, set[F]] = {}
        self._by_friends_of: dict[str, set[F]] = {}
        self._everyone: set[F] = set()
        # The subscriptions that follow each place, and the place each follows.
        self._by_place: dict[str, set[P]] = {}
        self._place_of_follower: dict[P, str] = {}
        # How many holds watch each user and each place.
        self._watched_users: dict[str, int] = {}
        self._watched_places: dict[str, int] = {}
        # The channel of each place followed or watched, to the place.
        self._place_of_channel: dict[bytes, str] = {}

    # --- what is followed ------------------------------------------------------------------

    def followers_of(self, user_id: str) -> set[F] | None:
        """The subscriptions that follow the user by id (friendsOf included), if any."""
        return self._by_user.get(user_id)

    def friends_of_followers(self, owner: str) -> list[F]:
        """The friendsOf subscriptions of the owner's friends."""
        return list(self._by_friends_of.get(owner, ()))

    @property
    def everyone(self) -> set[F]:
        """The subscriptions that follow every user."""
        return self._everyone

    def place_followers(self, place_id: str) -> list[P]:
        return list(self._by_place.get(place_id, ()))

    def place_of_channel(self, channel: bytes) -> str | None:
        """The place whose channel it is, while the place is followed or watched."""
        return self._place_of_channel.get(channel)

    def wants(self, channel: bytes) -> bool:
        return channel in self._counts.of

    def channels(self) -> set[bytes]:
        """Every channel wanted now."""
        return set(self._counts.of)

    def users_of(self, follower: F) -> frozenset[str]:
        """The users the subscription follows by id (a friendsOf owner's friends included)."""
        follow = self._follows.get(follower)
        return frozenset() if follow is None else follow.users

    def friends_of(self, follower: F) -> str | None:
        """The owner of the friend set the subscription follows, if it does."""
        follow = self._follows.get(follower)
        return None if follow is None else follow.friends_of

    def takes_route(self, follower: F, route: int) -> bool:
        """Whether some of the events of a subscription to users or everyone come by the
        route."""
        if len(self._names.every_user()) == 1:
            return True
        follow = self._follows.get(follower)
        if follow is None:
            return False
        if follow.everyone or follow.friends_of is not None:
            return True  # a friend set's changes come by every route
        return any(self._names.route_of(user_id) == route for user_id in follow.users)

    def places_on_route(self, route: int) -> list[tuple[str, list[P]]]:
        """The places whose events come by the route, with their followers."""
        return [
            (place_id, list(followers))
            for place_id, followers in self._by_place.items()
            if self._names.route_of(place_id) == route
        ]

    # --- subscriptions ----------------------------------------------------------------------

    def follow_users(
        self, follower: F, user_ids: Iterable[str], reader: str | None = None
    ) -> Changes:
        """The subscription follows these users from now (and no longer those it followed by
        id before); `reader`, its end user, is taken at its first interest."""
        follow = self._follow_of(follower, reader)
        users = frozenset(user_ids)
        for user_id in follow.users - users:
            self._leave_user(follower, follow, user_id)
        for user_id in users - follow.users:
            self._join_user(follower, follow, user_id)
        follow.users = users
        return self._counts.changes()

    def follow_friends_of(self, follower: F, owner: str, reader: str | None = None) -> Changes:
        """The subscription follows the friend set of `owner` (its friends by follow_users)."""
        follow = self._follow_of(follower, reader)
        assert follow.friends_of is None, "one friend set per subscription"
        follow.friends_of = owner
        self._by_friends_of.setdefault(owner, set()).add(follower)
        self._counts.up(self._names.user(owner))
        for channel in self._names.friend_sets(owner):
            self._counts.up(channel)
        return self._counts.changes()

    def follow_everyone(self, follower: F) -> Changes:
        follow = self._follow_of(follower, None)
        if not follow.everyone:
            follow.everyone = True
            self._everyone.add(follower)
            for channel in self._names.every_user():
                self._counts.up(channel)
        return self._counts.changes()

    def forget(self, follower: F) -> Changes:
        """The subscription follows nothing any more."""
        follow = self._follows.pop(follower, None)
        if follow is None:
            return NO_CHANGE
        for user_id in follow.users:
            self._leave_user(follower, follow, user_id)
        if follow.friends_of is not None:
            owner = follow.friends_of
            _discard(self._by_friends_of, owner, follower)
            self._counts.down(self._names.user(owner))
            for channel in self._names.friend_sets(owner):
                self._counts.down(channel)
        if follow.everyone:
            self._everyone.discard(follower)
            for channel in self._names.every_user():
                self._counts.down(channel)
        return self._counts.changes()

    def _follow_of(self, follower: F, reader: str | None) -> _Follow:
        follow = self._follows.get(follower)
        if follow is None:
            route = None if reader is None else self._names.route_of(reader)
            follow = self._follows[follower] = _Follow(route)
        return follow

    def _join_user(self, follower: F, follow: _Follow, user_id: str) -> None:
        self._by_user.setdefault(user_id, set()).add(follower)
        self._counts.up(self._names.user(user_id))
        if follow.reader_route is not None:
            channel = self._names.friend_set(user_id, follow.reader_route)
            if channel is not None:
                self._counts.up(channel)

    def _leave_user(self, follower: F, follow: _Follow, user_id: str) -> None:
        _discard(self._by_user, user_id, follower)
        self._counts.down(self._names.user(user_id))
        if follow.reader_route is not None:
            channel = self._names.friend_set(user_id, follow.reader_route)
            if channel is not None:
                self._counts.down(channel)

    # --- places -----------------------------------------------------------------------------

    def follow_place(self, place_id: str, follower: P) -> Changes:
        if follower in self._place_of_follower:
            return NO_CHANGE
        self._place_of_follower[follower] = place_id
        self._by_place.setdefault(place_id, set()).add(follower)
        self._up_place(place_id)
        return self._counts.changes()

    def forget_place_follower(self, follower: P) -> Changes:
        place_id = self._place_of_follower.pop(follower, None)
        if place_id is None:
            return NO_CHANGE
        _discard(self._by_place, place_id, follower)
        self._down_place(place_id)
        return self._counts.changes()

    def _up_place(self, place_id: str) -> None:
        channel = self._names.place(place_id)
        self._place_of_channel[channel] = place_id
        self._counts.up(channel)

    def _down_place(self, place_id: str) -> None:
        channel = self._names.place(place_id)
        self._counts.down(channel)
        if channel not in self._counts.of:
            del self._place_of_channel[channel]

    # --- sessions held here -----------------------------------------------------------------

    def watch_user(self, user_id: str) -> Changes:
        """A hold watches the user's kicks and replacements (once per call)."""
        self._watched_users[user_id] = self._watched_users.get(user_id, 0) + 1
        self._counts.up(self._names.user(user_id))
        return self._counts.changes()

    def unwatch_user(self, user_id: str) -> Changes:
        _count_down(self._watched_users, user_id)
        self._counts.down(self._names.user(user_id))
        return self._counts.changes()

    def watch_place(self, place_id: str) -> Changes:
        """A hold watches the place's replacements (once per call)."""
        self._watched_places[place_id] = self._watched_places.get(place_id, 0) + 1
        self._up_place(place_id)
        return self._counts.changes()

    def unwatch_place(self, place_id: str) -> Changes:
        _count_down(self._watched_places, place_id)
        self._down_place(place_id)
        return self._counts.changes()


def _discard(index: dict[str, set[F]], key: str, member: F) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(member)
        if not members:
            del index[key]


def _count_down(counts: dict[str, int], key: str) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
