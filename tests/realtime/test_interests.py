"""Who follows what, and the channels it takes (realtime/interests.py): plain data, tested
without Redis or an event loop."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from gql_presence.realtime.interests import Changes, Interests


class Names:
    """Channel names for `routes` routes: a user's or place's route is its id's last digit,
    modulo the routes; with more than one route, a user's friend set is also announced on
    their channel in every other route (as with sharded pub/sub)."""

    def __init__(self, routes: int = 1) -> None:
        self.routes = routes

    def user(self, user_id: str) -> bytes:
        return f"{self.route_of(user_id)}:ev:{user_id}".encode()

    def friend_set(self, user_id: str, route: int) -> bytes | None:
        if self.routes == 1 or route == self.route_of(user_id):
            return None
        return f"{route}:ev:{user_id}".encode()

    def friend_sets(self, user_id: str) -> Sequence[bytes]:
        channels = (self.friend_set(user_id, route) for route in range(self.routes))
        return [channel for channel in channels if channel is not None]

    def place(self, place_id: str) -> bytes:
        return f"{self.route_of(place_id)}:pev:{place_id}".encode()

    def every_user(self) -> Sequence[bytes]:
        return [f"{route}:all".encode() for route in range(self.routes)]

    def route_of(self, user_or_place_id: str) -> int:
        return int(user_or_place_id[-1]) % self.routes


class Sub:
    """A subscription: hashable by identity, as the hub's are."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def interests(routes: int = 1) -> Interests[Sub, Sub]:
    return Interests(Names(routes))


def added(*channels: str) -> Changes:
    return Changes(add=tuple(c.encode() for c in channels))


def dropped(*channels: str) -> Changes:
    return Changes(drop=tuple(c.encode() for c in channels))


def test_a_users_first_follower_adds_their_channel_and_their_last_drops_it() -> None:
    hub, one, two = interests(), Sub("one"), Sub("two")
    assert hub.follow_users(one, ["u1"]) == added("0:ev:u1")
    assert hub.follow_users(two, ["u1"]) == Changes()
    assert hub.followers_of("u1") == {one, two}
    assert hub.forget(one) == Changes()
    assert hub.followers_of("u1") == {two}
    assert hub.forget(two) == dropped("0:ev:u1")
    assert hub.followers_of("u1") is None
    assert hub.channels() == set()


def test_following_other_users_returns_the_channels_to_add_and_to_drop() -> None:
    hub, sub = interests(), Sub("sub")
    assert set(hub.follow_users(sub, ["u1", "u2"]).add) == {b"0:ev:u1", b"0:ev:u2"}
    changes = hub.follow_users(sub, ["u2", "u3"])
    assert changes == Changes(add=(b"0:ev:u3",), drop=(b"0:ev:u1",))
    assert hub.users_of(sub) == {"u2", "u3"}
    assert set(hub.forget(sub).drop) == {b"0:ev:u2", b"0:ev:u3"}
    assert hub.forget(sub) == Changes()  # forgetting twice changes nothing


def test_a_channel_needed_by_several_kinds_of_interest_stays_until_the_last_leaves() -> None:
    hub, by_id, by_friends = interests(), Sub("by id"), Sub("friends")
    assert hub.follow_users(by_id, ["u1"]) == added("0:ev:u1")
    # u1 is also a friendsOf owner, and a held session's user.
    assert hub.follow_friends_of(by_friends, "u1") == Changes()
    assert hub.friends_of_followers("u1") == [by_friends]
    assert hub.watch_user("u1") == Changes()
    assert hub.watch_user("u1") == Changes()
    assert hub.forget(by_id) == Changes()
    assert hub.forget(by_friends) == Changes()
    assert hub.friends_of_followers("u1") == []
    assert hub.unwatch_user("u1") == Changes()
    assert hub.wants(b"0:ev:u1")
    assert hub.unwatch_user("u1") == dropped("0:ev:u1")
    assert not hub.wants(b"0:ev:u1")


def test_a_friend_set_that_changes_changes_the_channels_of_its_friends_only() -> None:
    hub, sub = interests(), Sub("sub")
    assert hub.follow_friends_of(sub, "u1") == added("0:ev:u1")
    assert hub.friends_of(sub) == "u1"
    assert set(hub.follow_users(sub, ["u2", "u3"]).add) == {b"0:ev:u2", b"0:ev:u3"}
    # u3 leaves the set, u4 joins it; the owner's channel stays.
    assert hub.follow_users(sub, ["u2", "u4"]) == Changes(add=(b"0:ev:u4",), drop=(b"0:ev:u3",))
    assert hub.followers_of("u3") is None
    assert hub.followers_of("u4") == {sub}
    assert set(hub.forget(sub).drop) == {b"0:ev:u1", b"0:ev:u2", b"0:ev:u4"}


def test_everyone_takes_the_channel_of_every_user_of_every_route() -> None:
    hub, one, two = interests(routes=2), Sub("one"), Sub("two")
    assert hub.follow_everyone(one) == added("0:all", "1:all")
    assert hub.follow_everyone(two) == Changes()
    assert hub.everyone == {one, two}
    assert hub.forget(one) == Changes()
    assert hub.forget(two) == dropped("0:all", "1:all")
    assert hub.everyone == set()


def test_a_place_followed_and_watched_has_one_channel_and_its_own_index() -> None:
    hub, sub = interests(), Sub("sub")
    assert hub.follow_place("p1", sub) == added("0:pev:p1")
    assert hub.watch_place("p1") == Changes()
    assert hub.place_of_channel(b"0:pev:p1") == "p1"
    assert hub.place_followers("p1") == [sub]
    # A user of the same id is another interest, on another channel.
    assert hub.watch_user("p1") == added("0:ev:p1")
    assert hub.followers_of("p1") is None
    assert hub.place_of_channel(b"0:ev:p1") is None
    assert hub.forget_place_follower(sub) == Changes()
    assert hub.place_followers("p1") == []
    assert hub.unwatch_place("p1") == dropped("0:pev:p1")
    assert hub.place_of_channel(b"0:pev:p1") is None
    assert hub.unwatch_user("p1") == dropped("0:ev:p1")


def test_with_routes_an_end_user_follows_the_friend_set_channel_of_their_own_route() -> None:
    hub, reader_1, reader_2 = interests(routes=2), Sub("reader 1"), Sub("reader 2")
    # u2 is on route 0; an end user on route 1 hears of changes of u2's friend set there.
    changes = hub.follow_users(reader_1, ["u2"], reader="r1")
    assert set(changes.add) == {b"0:ev:u2", b"1:ev:u2"}
    assert hub.follow_users(reader_2, ["u2"], reader="r3") == Changes()
    # An end user on u2's own route needs only u2's channel, and a backend no more.
    assert hub.follow_users(Sub("reader 0"), ["u2"], reader="r0") == Changes()
    assert hub.follow_users(Sub("backend"), ["u2"]) == Changes()
    assert hub.forget(reader_1) == Changes()
    assert hub.forget(reader_2) == dropped("1:ev:u2")


def test_with_routes_a_friends_of_owner_takes_their_channel_on_every_route() -> None:
    hub, sub = interests(routes=3), Sub("sub")
    assert set(hub.follow_friends_of(sub, "u1").add) == {b"1:ev:u1", b"0:ev:u1", b"2:ev:u1"}
    assert set(hub.forget(sub).drop) == {b"1:ev:u1", b"0:ev:u1", b"2:ev:u1"}


def test_a_subscription_takes_the_routes_of_what_it_follows() -> None:
    hub, by_id, friends, everyone = interests(routes=2), Sub("ids"), Sub("friends"), Sub("all")
    hub.follow_users(by_id, ["u2", "u4"])
    hub.follow_friends_of(friends, "u2")
    hub.follow_everyone(everyone)
    assert hub.takes_route(by_id, 0)
    assert not hub.takes_route(by_id, 1)
    assert hub.takes_route(friends, 1)  # a friend set's changes come by every route
    assert hub.takes_route(everyone, 1)
    assert not hub.takes_route(Sub("nothing yet"), 0)
    assert [(place, len(followers)) for place, followers in hub.places_on_route(0)] == []
    hub.follow_place("p3", Sub("place"))
    assert [place for place, _ in hub.places_on_route(1)] == ["p3"]
    assert hub.places_on_route(0) == []
    assert interests().takes_route(Sub("anything"), 0)  # one route carries everything


_USERS = st.sampled_from(["u0", "u1", "u2", "u3"])
_SUBS = st.integers(0, 3)
_READERS = st.none() | _USERS


class ChannelsFollowInterests(RuleBasedStateMachine):
    """Applying every change returned, in order, to a set of channels gives exactly the
    channels that the interests held then need, computed from scratch."""

    def __init__(self) -> None:
        super().__init__()
        self.routes = 1
        self.subs = [Sub(f"s{i}") for i in range(4)]
        # The model: per subscription, its users, friendsOf owner, everyone, end user.
        self.follows: dict[int, tuple[frozenset[str], str | None, bool, str | None]] = {}
        self.places: dict[int, str] = {}
        self.watched: list[str] = []
        self.subscribed: set[bytes] = set()

    @initialize(routes=st.integers(1, 3))
    def make(self, routes: int) -> None:
        self.routes = routes
        self.names = Names(routes)
        self.hub = interests(routes)

    def apply(self, changes: Changes) -> None:
        assert not set(changes.add) & self.subscribed, "added twice"
        assert set(changes.drop) <= self.subscribed, "dropped what was not added"
        self.subscribed = (self.subscribed | set(changes.add)) - set(changes.drop)

    @rule(i=_SUBS, users=st.frozensets(_USERS, max_size=3), reader=_READERS)
    def follow_users(self, i: int, users: frozenset[str], reader: str | None) -> None:
        # Users by id, or a friendsOf owner's friends; the end user is the first one given.
        _, owner, everyone, first = self.follows.get(i, (frozenset(), None, False, reader))
        if not everyone:
            self.apply(self.hub.follow_users(self.subs[i], users, reader))
            self.follows[i] = (users, owner, False, first)

    @rule(i=_SUBS, owner=_USERS, reader=_READERS)
    def follow_friends_of(self, i: int, owner: str, reader: str | None) -> None:
        if i not in self.follows:
            self.apply(self.hub.follow_friends_of(self.subs[i], owner, reader))
            self.follows[i] = (frozenset(), owner, False, reader)

    @rule(i=_SUBS)
    def follow_everyone(self, i: int) -> None:
        if i not in self.follows:
            self.apply(self.hub.follow_everyone(self.subs[i]))
            self.follows[i] = (frozenset(), None, True, None)

    @rule(i=_SUBS)
    def forget(self, i: int) -> None:
        self.apply(self.hub.forget(self.subs[i]))
        self.follows.pop(i, None)

    @rule(user=_USERS)
    def watch(self, user: str) -> None:
        self.apply(self.hub.watch_user(user))
        self.watched.append(user)

    @rule(user=_USERS)
    def unwatch(self, user: str) -> None:
        if user in self.watched:
            self.apply(self.hub.unwatch_user(user))
            self.watched.remove(user)

    @rule(i=_SUBS, place=_USERS)
    def follow_place(self, i: int, place: str) -> None:
        if i not in self.places:  # a place id may be a user id too: another channel
            self.apply(self.hub.follow_place(place, self.subs[i]))
            self.places[i] = place

    @rule(i=_SUBS)
    def forget_place_follower(self, i: int) -> None:
        self.apply(self.hub.forget_place_follower(self.subs[i]))
        self.places.pop(i, None)

    @invariant()
    def subscribed_is_what_is_needed(self) -> None:
        names = self.names
        needed = {names.user(user) for user in self.watched}
        needed |= {names.place(place) for place in self.places.values()}
        for users, owner, everyone, reader in self.follows.values():
            needed |= {names.user(user) for user in users}
            if reader is not None:
                route = names.route_of(reader)
                needed |= {c for u in users if (c := names.friend_set(u, route)) is not None}
            if owner is not None:
                needed |= {names.user(owner), *names.friend_sets(owner)}
            if everyone:
                needed |= set(names.every_user())
        assert self.subscribed == needed == self.hub.channels()


test_the_changes_returned_keep_the_subscription_equal_to_what_interests_need = (
    ChannelsFollowInterests.TestCase
)
