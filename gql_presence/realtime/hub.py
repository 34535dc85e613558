"""Presence events: one Redis subscription per process, fanned out to its subscribers.

The scripts publish every change as they make it (lua/includes/events.lua) on the channel of
its user, and on the channel of every user. Each API process subscribes to the channels of
the users its subscribers follow (their friendsOf owners, and the users whose sessions it
holds), and to the channel of every user only while one of its subscribers follows
everyone: a process receives and decodes only the events it hands on. The hub wires three
parts, each with one job:

- realtime/interests.py: who follows what, and so which channels are wanted (plain data);
- realtime/channels.py: the Redis side: subscribing to those channels (one connection, or
  one per shard with sharded pub/sub: a *route*), batching, confirmations, reconnects;
- realtime/dispatch.py: each message received, decoded and handed to the followers of its
  events as each may see them, through realtime/delivery.py (feeds, and deliveries that
  write to their socket at once).

A subscriber's events begin once Redis has confirmed the subscription to its channels, and a
subscribe is answered only then: from that moment it gets every event of the users it
follows, once each, in the order Redis published them. A friend added to a friendsOf set is
followed from the confirmation of their channel, a moment after the FRIENDS event that
announced the change.
A subscriber may fall at most `capacity` events behind: a feed holds that many undelivered
events; a delivery takes that many messages in one batch of events, and its connection holds
at most that many unsent (counted as the bytes waiting there over the mean size of the batch
just written). One that falls further behind is dropped (its socket closed with a reason)
instead of slowing the others or growing memory.
When the Redis subscription is lost, every subscriber is dropped too, since events were
missed; clients subscribe again with the cursor of the last event they took (`after`), and
the feed replays what they missed (`replay`), or re-read presence when it is too old. With one
connection per shard, the loss of one (the shard's master failed over, its slot moved, or the
connection broke) drops the subscribers that follow a user or place of that shard, or
everyone, and the others go on.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence

from redis.asyncio import Redis

from gql_presence.realtime.channels import Channels, ShardSubscriber, again
from gql_presence.realtime.delivery import (
    Delivery,
    Feed,
    FeedDroppedError,
    Follower,
    OnDrop,
    PlaceDelivery,
    PlaceRender,
    PresenceChange,
    Render,
    WriteFrames,
    Writer,
)
from gql_presence.realtime.dispatch import (
    Dispatch,
    PlaceCallback,
    PlaceFollower,
    dropped_by_loss,
    reader_view,
)
from gql_presence.realtime.held import Announced
from gql_presence.realtime.interests import Changes, Interests
from gql_presence.store import (
    MAX_IDS_PER_CALL,
    PresenceStore,
    PublishedEvent,
    PublishedPlaceEvent,
)
from gql_presence.store.errors import (
    BadInputError,
    CursorExpiredError,
    PresenceError,
    StoreUnavailableError,
)
from gql_presence.store.feed import Replay
from gql_presence.store.models import PayFor

__all__ = ["EventHub", "PlaceFollower", "ShardSubscriber"]


class _StoreChannelNames:
    """The store's channel names, as interests.ChannelNames."""

    __slots__ = ("_store",)

    def __init__(self, store: PresenceStore) -> None:
        self._store = store

    def user(self, user_id: str) -> bytes:
        return self._store.user_events_channel(user_id).encode()

    def friend_sets(self, user_id: str) -> Sequence[bytes]:
        if not self._store.sharded_events:
            return ()  # the user's own channel announces them
        own = self._store.user_events_channel(user_id)
        return [
            channel.encode()
            for channel in self._store.friend_set_channels(user_id)
            if channel != own
        ]

    def friend_set(self, user_id: str, route: int) -> bytes | None:
        for channel in self.friend_sets(user_id):
            if self._store.route_of_channel(channel) == route:
                return channel
        return None

    def place(self, place_id: str) -> bytes:
        return self._store.place_events_channel(place_id).encode()

    def every_user(self) -> Sequence[bytes]:
        return [
            self._store.every_user_channel(route).encode()
            for route in range(self._store.event_routes)
        ]

    def route_of(self, user_or_place_id: str) -> int:
        return self._store.route_of(user_or_place_id)


class EventHub:
    def __init__(
        self,
        redis: Redis | ShardSubscriber,
        store: PresenceStore,
        capacity: int,
        *,
        ping_every_s: float = 5.0,
        silence_limit_s: float = 15.0,
    ) -> None:
        self._store = store
        self._capacity = capacity
        self._names = _StoreChannelNames(store)
        self._interests: Interests[Follower, PlaceFollower] = Interests(self._names)
        self._dispatch = Dispatch(self._interests, self._friends_changed, self._route_lost)
        self._channels = Channels(
            redis,
            store,
            self._dispatch,
            ping_every_s=ping_every_s,
            silence_limit_s=silence_limit_s,
        )
        # Every subscription here, and those whose channels are not confirmed yet (their
        # subscribe is not answered).
        self._followers: set[Follower] = set()
        self._joining: set[Follower] = set()

    def spawn(self, work: Awaitable[None]) -> None:
        """Runs `work` in a task of its own, ended by `stop`; its failure is logged."""
        self._channels.spawn(work)

    def watch_sessions(
        self, watcher: Callable[[Announced], None], on_gap: Callable[[], None]
    ) -> None:
        """Hands every KICKED, REPLACED and REVOKED event of the users `watch` is asked for
        (and of the places `watch_place` is) to `watcher` as well: the holder of this
        process's connection-bound sessions ends those they concern. `on_gap` is called when
        the stream was interrupted, as events may have been missed then."""
        self._dispatch.watch_sessions(watcher, on_gap)

    # --- what is known of it -----------------------------------------------------------------

    @property
    def subscriber_count(self) -> int:
        """Subscriptions, multiplexed or not, whose events have begun."""
        return len(self._followers) - len(self._joining)

    @property
    def delivery_count(self) -> int:
        """Subscriptions whose events the hub writes to their sockets (multiplexed)."""
        return sum(isinstance(f, Writer) for f in self._followers)

    @property
    def channel_count(self) -> int:
        """Channels this process asked Redis to send it (the quiet ones included)."""
        return self._channels.count

    @property
    def messages_received(self) -> int:
        return self._channels.messages_received

    @property
    def events_decoded(self) -> int:
        return self._dispatch.events_decoded

    @property
    def subscribed(self) -> bool:
        """Whether this process receives events now (over every route)."""
        return self._channels.subscribed

    def follows(self, user_id: str) -> bool:
        """Whether a subscriber of this process follows the user now (friendsOf: once the
        friend set read last is applied), its channel's subscription confirmed."""
        every_user = self._channels.every_user(self._store.route_of(user_id))
        if self._interests.everyone and self._channels.settled(every_user):
            return True
        followed = self._interests.followers_of(user_id) is not None
        return followed and self._channels.settled(self._names.user(user_id))

    def users_of(self, follower: Follower) -> frozenset[str]:
        """The users the subscription follows by id now (friendsOf: the friends read last)."""
        return self._interests.users_of(follower)

    async def start(self) -> None:
        await self._channels.start()

    async def stop(self) -> None:
        """Ends the subscription and the hub's tasks; bounded, so that a shutdown never waits
        on a connection that stopped answering."""
        await self._channels.stop()

    def _want(self, changes: Changes) -> None:
        self._channels.want(changes)

    # --- sessions held here ------------------------------------------------------------------

    async def watch(self, user_id: str) -> None:
        """From when this returns until `unwatch(user_id)`, the user's events reach the
        session watchers: once their channel's subscription is confirmed. Raising, it leaves
        nothing to undo."""
        self._want(self._interests.watch_user(user_id))
        try:
            await self._channels.until_live([self._names.user(user_id)])
        except BaseException:
            self.unwatch(user_id)
            raise

    def unwatch(self, user_id: str) -> None:
        self._want(self._interests.unwatch_user(user_id))

    async def watch_place(self, place_id: str) -> None:
        """As `watch`, for the place's REPLACED events, until `unwatch_place(place_id)`."""
        self._want(self._interests.watch_place(place_id))
        try:
            await self._channels.until_live([self._names.place(place_id)])
        except BaseException:
            self.unwatch_place(place_id)
            raise

    def unwatch_place(self, place_id: str) -> None:
        self._want(self._interests.unwatch_place(place_id))

    # --- places ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def follow_place(
        self,
        place_id: str,
        follower: Callable[[PublishedPlaceEvent], None],
        lost: Callable[[str], None],
    ) -> AsyncIterator[None]:
        """Hands every JOINED, UPDATED and LEFT of the place to `follower` from when the block
        begins (the place's channel confirmed) until it ends; `lost`, with the reason, when
        the event stream was interrupted (events may have been missed)."""
        taker = PlaceCallback(follower, lost)
        await self._follow_place(place_id, taker)
        try:
            yield
        finally:
            self._want(self._interests.forget_place_follower(taker))

    async def deliver_place(
        self, on_drop: OnDrop, write: WriteFrames, head: bytes, render: PlaceRender, place_id: str
    ) -> PlaceDelivery:
        """A placeChanged subscription written at once with `write`, as deliver() makes one
        of presenceChanged: its events are kept from now (the place's channel confirmed)
        until its `start`. It lasts until `forget(delivery)`, or until the hub drops it."""
        self._check_subscribed()
        delivery = PlaceDelivery(self, self._capacity, on_drop, write, head, render, place_id)
        await self._follow_place(place_id, delivery)
        self._followers.add(delivery)
        return delivery

    async def _follow_place(self, place_id: str, follower: PlaceFollower) -> None:
        self._want(self._interests.follow_place(place_id, follower))
        try:
            await self._channels.until_live([self._names.place(place_id)])
        except BaseException:
            self._want(self._interests.forget_place_follower(follower))
            raise

    # --- users -------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def feed(
        self,
        on_drop: OnDrop,
        *,
        user_ids: Iterable[str] = (),
        friends_of: str | None = None,
        everyone: bool = False,
        reader: str | None = None,
    ) -> AsyncIterator[Feed]:
        """A feed of the events of user_ids, of friends_of's friends as that set changes, or
        of every user, as `reader` (an end user; None for a backend) may see them."""
        self._check_subscribed()
        feed = Feed(self, self._capacity, on_drop)
        feed.reader = reader
        await self._follow_first(feed, user_ids, friends_of, everyone=everyone)
        try:
            yield feed
        finally:
            self.forget(feed)

    async def deliver(
        self,
        on_drop: OnDrop,
        write: WriteFrames,
        head: bytes,
        render: Render,
        *,
        user_ids: Iterable[str] = (),
        friends_of: str | None = None,
        everyone: bool = False,
        reader: str | None = None,
        after: str | None = None,
        reading_on: PayFor | None = None,
    ) -> Delivery:
        """As feed(), but each event's message is written at once with `write`: `head`, the
        payload that `render` makes of the event (once for every delivery that shares it),
        and a closing brace. It lasts until `forget(delivery)`, or until the hub drops it.
        With `after`, a feed cursor, it first writes the retained changes after it that it
        follows (`replay`, its caller paying with `reading_on` for each page of the feed it
        reads after a shard's first), then the events heard meanwhile that those did not
        pass: none lost or repeated."""
        self._check_subscribed()
        delivery = Delivery(self, self._capacity, on_drop, write, head, render)
        delivery.reader = reader
        if after is not None:
            delivery.hold()
        await self._follow_first(delivery, user_ids, friends_of, everyone=everyone)
        if after is not None:
            try:
                replayed, replay = await self.replay(delivery, after, reading_on)
            except BaseException:
                self.forget(delivery)
                raise
            delivery.resume(replayed, replay.passed)
        return delivery

    async def replay(
        self, follower: Follower, after: str, reading_on: PayFor | None = None
    ) -> tuple[list[PresenceChange], Replay]:
        """For a subscription that resumes, once its channels are live: the changes after
        `after` of the users it follows (every user's, for everyone), each as its reader may
        see it, exactly as its live events are shown (dispatch.reader_view); and the Replay,
        which says which of the events heard meanwhile it passed."""
        everyone = follower in self._interests.everyone
        users = None if everyone else self._interests.users_of(follower)
        replay = await self._store.feed_replay(after, users=users, reading_on=reading_on)
        replayed = [
            view
            for change in replay.changes
            if isinstance(change, PublishedEvent)
            and (view := reader_view(follower, change)) is not None
        ]
        self._check_behind(len(replayed))
        return replayed, replay

    async def replay_place(
        self, place_id: str, after: str, reading_on: PayFor | None = None
    ) -> tuple[list[PublishedPlaceEvent], Replay]:
        """As `replay`, for a placeChanged subscription that resumes."""
        replay = await self._store.feed_replay(after, place_id=place_id, reading_on=reading_on)
        replayed = [c for c in replay.changes if isinstance(c, PublishedPlaceEvent)]
        self._check_behind(len(replayed))
        return replayed, replay

    def _check_behind(self, replayed: int) -> None:
        """A subscriber may be at most `capacity` events behind, and a replay of more is
        refused before any is written: reading afresh costs less."""
        if replayed > self._capacity:
            raise CursorExpiredError(
                f"More than {self._capacity:,} changes to replay follow this cursor (a "
                "subscriber may be that many behind): read the state afresh and subscribe "
                "without after."
            )

    def _check_subscribed(self) -> None:
        if not self.subscribed:
            raise StoreUnavailableError(
                "The event stream is reconnecting to the store; subscribe again shortly."
            )

    async def _follow_first(
        self,
        follower: Follower,
        user_ids: Iterable[str],
        friends_of: str | None,
        *,
        everyone: bool,
    ) -> None:
        interests, until_live, reader = self._interests, self._channels.until_live, follower.reader
        self._followers.add(follower)
        self._joining.add(follower)
        try:
            if everyone:
                self._want(interests.follow_everyone(follower))
                await until_live(self._names.every_user())
                return
            if friends_of is not None:
                self._want(interests.follow_friends_of(follower, friends_of, reader))
                # The owner's channels first: a change of the friend set made after it is read
                # is announced there.
                await until_live(
                    [self._names.user(friends_of), *self._names.friend_sets(friends_of)]
                )
                await self._reload_friends(follower, friends_of)
            else:
                self._want(interests.follow_users(follower, user_ids, reader))
            users = interests.users_of(follower)
            await until_live(map(self._names.user, users))
            if friends_of is None and reader is not None:
                # Which of them hold the end user in their friend set: read once the channels
                # that announce a change of it are live (with sharded pub/sub, the users'
                # channels in the reader's shard), so that a change after it is heard there.
                others = users - {reader}
                reader_route = self._store.route_of(reader)
                await until_live(
                    channel
                    for user_id in others
                    if (channel := self._names.friend_set(user_id, reader_route)) is not None
                )
                follower.in_friend_sets_of = await self._store.in_friend_sets_of(reader, others)
        except BaseException:
            self.forget(follower)
            raise
        finally:
            self._joining.discard(follower)

    def forget(self, feed: Follower) -> None:
        """The subscription ends: it follows nothing any more."""
        if isinstance(feed, PlaceDelivery):
            self._want(self._interests.forget_place_follower(feed))
        self._followers.discard(feed)
        self._joining.discard(feed)
        self._want(self._interests.forget(feed))

    # --- friend sets -------------------------------------------------------------------------

    async def _reload_friends(self, feed: Follower, owner: str) -> None:
        """Reads the owner's friend set again; raises when the subscription cannot follow
        it."""
        feed.friends_read += 1
        this_read = feed.friends_read
        friends = frozenset(await self._store.friends(owner))
        if len(friends) > MAX_IDS_PER_CALL:
            raise BadInputError(
                f"friendsOf has {len(friends):,} friends; a subscription follows at most "
                f"{MAX_IDS_PER_CALL:,} users."
            )
        in_sets: frozenset[str] = frozenset()
        if feed.reader is not None:
            in_sets = await self._store.in_friend_sets_of(feed.reader, friends)
        # The subscriber may have left, or a later read been applied, while this one waited.
        if feed in self._followers and this_read > feed.friends_applied:
            feed.friends_applied = this_read
            feed.in_friend_sets_of = in_sets
            self._want(self._interests.follow_users(feed, friends))

    def _friends_changed(self, owner: str) -> None:
        """The owner's friend set changed: their friendsOf subscribers follow the new set,
        and end users who follow them learn whether they are still in it."""
        for feed in self._interests.friends_of_followers(owner):
            self.spawn(self._follow_friend_change(feed, owner))
        for feed in list(self._interests.followers_of(owner) or ()):
            if feed.reader is not None:
                self.spawn(self._check_friend_set(feed, owner))

    async def _check_friend_set(self, feed: Follower, owner: str) -> None:
        """After `owner`'s friend set changed: whether it still holds the feed's reader."""
        assert feed.reader is not None
        try:
            holds = await self._store.in_friend_sets_of(feed.reader, [owner])
        except PresenceError as error:
            feed.drop(FeedDroppedError(again(error.message), violation=False))
            return
        if holds:
            feed.in_friend_sets_of |= {owner}
        else:
            feed.in_friend_sets_of -= {owner}

    async def _follow_friend_change(self, feed: Follower, owner: str) -> None:
        """After a friend-set change: follow the new set, or end the feed if that fails, as
        following the old set would miss events without saying so."""
        try:
            await self._reload_friends(feed, owner)
        except BadInputError as error:
            feed.drop(FeedDroppedError(error.message, violation=True))
        except PresenceError as error:
            feed.drop(FeedDroppedError(again(error.message), violation=False))

    # --- losses ------------------------------------------------------------------------------

    def _route_lost(self, route: int, why: str) -> None:
        """Drops the subscribers some of whose events take the route."""
        for feed in list(self._followers):
            if isinstance(feed, PlaceDelivery):
                takes = len(self._names.every_user()) == 1 or (
                    self._store.route_of(feed.place_id) == route
                )
            else:
                takes = self._interests.takes_route(feed, route)
            if takes:
                feed.drop(dropped_by_loss(why))
        for _, followers in self._interests.places_on_route(route):
            for follower in followers:
                if isinstance(follower, PlaceCallback):
                    follower.lost(again(why))
