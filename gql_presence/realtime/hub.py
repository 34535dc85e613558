"""Presence events: one Redis subscription per process, fanned out to its subscribers.

The scripts publish every change as they make it (lua/includes/events.lua) on the channel of
its user, and on the channel of every user. Each API process holds one pub/sub connection, on
which it subscribes to the channels of the users its subscribers follow (their friendsOf
owners, and the users whose sessions it holds), and to the channel of every user only while
one of its subscribers follows everyone: a process receives and decodes only the events it
hands on. With sharded pub/sub (on a Redis Cluster that has it: PresenceStore.choose_publish)
it holds one such connection per shard instead, a *route*, to the master of the shard's slot,
which alone hears the shard's channels (each shard has its own channel of every user then);
everything below holds for each route on its own, and a user's events all take one route.
It hands each event to the followers of its user: feeds, which queue events for a task to
read, and deliveries, which write the event's message to their socket at once
(realtime/delivery.py).
A user's channel is subscribed when the user gets their first follower here and unsubscribed
when the last one leaves, the changes of one event-loop turn in one command. A subscriber's
events begin once Redis has confirmed the subscription to its channels, and a subscribe is
answered only then: from that moment it gets every event of the users it follows, once each,
in the order Redis published them. A friend added to a friendsOf set is followed from the
confirmation of their channel, a moment after the FRIENDS event that announced the change.
While the channel of every user is subscribed, every event is taken from it and the users'
channels' copies are left unread; the switch from one to the other falls between two scripts'
messages (a confirmation on a connection comes between two commands' output), so no event is
handed on twice or missed.
A subscriber may fall at most `capacity` events behind: a feed holds that many undelivered
events; a delivery takes that many messages in one batch of events, and its connection holds
at most that many unsent (counted as the bytes waiting there over the mean size of the batch
just written). One that falls further behind is dropped (its socket closed with a reason)
instead of slowing the others or growing memory.
When the Redis subscription is lost, every subscriber is dropped too, since events were
missed; clients re-read presence and subscribe again. Events are never replayed. With one
connection per shard, the loss of one (the shard's master failed over, its slot moved, which
Redis says with an SUNSUBSCRIBE of every channel of the slot, or the connection broke) drops
the subscribers that follow a user or place of that shard, or everyone, and the others go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from gql_presence.realtime.delivery import (
    Delivery,
    Feed,
    FeedDroppedError,
    Follower,
    Frames,
    OnDrop,
    PlaceDelivery,
    PlaceRender,
    PlaceRendered,
    PresenceChange,
    Render,
    Rendered,
    WriteFrames,
    Writer,
)
from gql_presence.realtime.held import PLACE_KEY, Announced, place_key
from gql_presence.store import (
    MAX_IDS_PER_CALL,
    EventKind,
    PlaceKind,
    PresenceStore,
    PublishedEvent,
    PublishedPlaceEvent,
    read_events,
    read_place_events,
)
from gql_presence.store.errors import BadInputError, PresenceError, StoreUnavailableError

log = logging.getLogger("gql_presence.events")

_RECONNECT_DELAYS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
_STOP_WAIT_S = 5.0
# How long a subscriber waits for Redis to confirm its channels before it is refused.
_CONFIRM_WAIT_S = 10.0
# Channels per SUBSCRIBE or UNSUBSCRIBE command.
_CHANNELS_PER_COMMAND = 1000
# Messages read before the deliveries written to are flushed: those already arrived are read
# first, so that the events of one script (one message per user) reach a socket in one write.
_MESSAGES_PER_BATCH = 1000
_CONFIRMATIONS = frozenset({"subscribe", "unsubscribe", "ssubscribe", "sunsubscribe"})


class ShardSubscriber(Protocol):
    """Opens the pub/sub connections of sharded pub/sub (running/connection.py)."""

    async def pubsub_for(self, channel: str, *, again: bool) -> PubSub:
        """A connection to the master that serves the channel's slot, as far as known: after
        a loss (`again`), as the cluster says now."""
        ...


class _Route:
    """One pub/sub connection and what is known of it: the only one with classic PUBLISH, one
    per shard with sharded pub/sub."""

    __slots__ = (
        "every_user",
        "index",
        "listener",
        "pubsub",
        "quiet",
        "send_failed",
        "sending",
        "sharded",
        "subscribed",
    )

    def __init__(self, index: int, every_user: bytes, quiet: bytes, *, sharded: bool) -> None:
        self.index = index
        self.sharded = sharded
        # Channels as bytes, as the subscriber's replies name them.
        self.every_user = every_user
        self.quiet = quiet
        # None while there is no connection.
        self.pubsub: PubSub | None = None
        self.subscribed = asyncio.Event()
        self.sending = asyncio.Lock()
        self.send_failed: Exception | None = None
        self.listener: asyncio.Task[None] | None = None

    def name(self) -> str:
        return f"presence events of shard {self.index}" if self.sharded else "presence events"


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
        self._redis = redis
        # A connection that stops answering (a network partition leaves no error behind) is
        # found by PINGs: silence longer than silence_limit_s counts as a lost connection.
        self._ping_every_s = ping_every_s
        self._silence_limit_s = silence_limit_s
        self._capacity = capacity
        # Made at the start, once the store knows how events are published.
        self._routes: list[_Route] = []
        self._every_user: frozenset[bytes] = frozenset()
        self._store = store
        self._followers: set[Follower] = set()
        # Followers whose channels are not confirmed yet: their subscribe is not answered.
        self._joining: set[Follower] = set()
        self._by_user: dict[str, set[Follower]] = {}
        self._by_friends_of: dict[str, set[Follower]] = {}
        self._everyone: set[Follower] = set()
        self._session_watchers: list[Callable[[Announced], None]] = []
        # The places followed here (placeChanged), per place.
        self._place_followers: dict[str, set[PlaceFollower]] = {}
        # The channel of each place watched or followed here, to the place's id.
        self._place_of: dict[bytes, str] = {}
        self._gap_watchers: list[Callable[[], None]] = []
        # Users whose held sessions are watched here: how many holds watch each.
        self._watched: dict[str, int] = {}
        # The subscription's channels, of every route: the channels whose last command sent
        # was SUBSCRIBE, how many commands of each channel Redis has not confirmed yet, and
        # the channels whose events are handed on.
        # A user's channel is live once its last command, a SUBSCRIBE, is confirmed, and no
        # longer as soon as it is unsubscribed (nobody here follows the user then). The channel
        # of every user is live from the confirmation of a SUBSCRIBE to that of an
        # UNSUBSCRIBE: its copies of events replace those of the users' channels (of its
        # route) then.
        # The channel of each user wanted here, named once.
        self._channel_of: dict[str, bytes] = {}
        self._asked: set[bytes] = set()
        self._unconfirmed: dict[bytes, int] = {}
        self._live: set[bytes] = set()
        # Per channel awaited, one future for all who wait: True once confirmed, False when
        # the connection was lost first.
        self._confirmed: dict[bytes, asyncio.Future[bool]] = {}
        # With sharded pub/sub, a change of a user's friend set is announced in the shard of
        # each friend it adds or takes out (the links live with the friend): per user followed
        # here by end users, how many of those followers each shard holds the readers of, so
        # that the user's channel in those shards is followed too.
        self._reader_shards: dict[str, Counter[int]] = {}
        # Users whose interest changed in this event-loop turn, and whether everyone's did.
        self._changed: set[str] = set()
        self._everyone_changed = False
        self._update_planned = False
        # Messages received, and events decoded from them: what this process pays for.
        self.messages_received = 0
        self.events_decoded = 0
        # Deliveries with messages of the batch being read, written once it has been read.
        self.to_flush: list[Writer] = []
        self._tasks: set[asyncio.Task[None]] = set()
        # redis-py may turn a cancellation into a ConnectionError; this flag is what ends the
        # listener's loop for certain.
        self._stopping = False

    @property
    def subscriber_count(self) -> int:
        """Subscriptions, multiplexed or not, whose events have begun."""
        return len(self._followers) - len(self._joining)

    @property
    def delivery_count(self) -> int:
        """Subscriptions whose events the hub writes to their sockets (multiplexed)."""
        return sum(isinstance(f, Writer) for f in self._followers)

    def follows(self, user_id: str) -> bool:
        """Whether a subscriber of this process follows the user now (friendsOf: once the
        friend set read last is applied), its channel's subscription confirmed."""
        route = self._routes[self._store.route_of(user_id)]
        if self._everyone and self._settled(route.every_user):
            return True
        return user_id in self._by_user and self._settled(self._user_channel(user_id))

    @property
    def channel_count(self) -> int:
        """Channels this process asked Redis to send it (the quiet ones included)."""
        return len(self._asked)

    def _route_of(self, channel: bytes) -> _Route:
        return self._routes[self._store.route_of_channel(channel)]

    def _wants_friend_set_channel(self, user_id: str, channel: bytes) -> bool:
        """Whether one of the user's friend-set channels (_friend_set_channels) is needed
        here: all of them for a friendsOf owner, those of the shards of end users who follow
        the user."""
        if user_id in self._by_friends_of:
            return True
        return self._route_of(channel).index in self._reader_shards.get(user_id, ())

    def _friend_set_channels(self, user_id: str) -> list[bytes]:
        """The channels that announce changes of the user's friend set besides their own
        (with sharded pub/sub: their channel in each other shard)."""
        if not self._store.sharded_events or user_id.startswith(PLACE_KEY):
            return []
        own = self._user_channel(user_id)
        return [
            channel
            for channel in map(str.encode, self._store.friend_set_channels(user_id))
            if channel != own
        ]

    def _user_channel(self, user_id: str) -> bytes:
        """The channel of a user, or of a place by its `place_key`."""
        channel = self._channel_of.get(user_id)
        if channel is None:
            if user_id.startswith(PLACE_KEY):
                place_id = user_id[len(PLACE_KEY) :]
                channel = self._store.place_events_channel(place_id).encode()
                self._place_of[channel] = place_id
            else:
                channel = self._store.user_events_channel(user_id).encode()
            if self._wanted(user_id):
                self._channel_of[user_id] = channel
        return channel

    @property
    def subscribed(self) -> bool:
        """Whether this process receives events now (over every route)."""
        return all(route.subscribed.is_set() for route in self._routes)

    async def start(self) -> None:
        await self._store.choose_publish()
        sharded = self._store.sharded_events
        if sharded == isinstance(self._redis, Redis):
            raise TypeError("sharded pub/sub takes a ShardSubscriber, classic a Redis client")
        self._routes = [
            _Route(
                i,
                self._store.every_user_channel(i).encode(),
                self._store.quiet_channel(i).encode(),
                sharded=sharded,
            )
            for i in range(self._store.event_routes)
        ]
        self._every_user = frozenset(route.every_user for route in self._routes)
        for route in self._routes:
            name = f"presence-events-{route.index}" if route.sharded else "presence-events"
            route.listener = asyncio.create_task(self._listen(route), name=name)
        async with asyncio.timeout(10):
            for route in self._routes:
                await route.subscribed.wait()

    async def stop(self) -> None:
        """Ends the subscription and the hub's tasks; bounded, so that a shutdown never waits
        on a connection that stopped answering."""
        self._stopping = True
        listeners = [route.listener for route in self._routes if route.listener is not None]
        tasks = [*self._tasks, *listeners]
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=_STOP_WAIT_S)
            if pending:
                log.warning(
                    "presence events: %d tasks did not end in %g s", len(pending), _STOP_WAIT_S
                )

    def watch_sessions(
        self, watcher: Callable[[Announced], None], on_gap: Callable[[], None]
    ) -> None:
        """Hands every KICKED, REPLACED and REVOKED event of the users (and places) `watch` is
        asked for to `watcher` as well: the holder of this process's connection-bound
        sessions ends those they concern. `on_gap` is called when the stream was
        interrupted, as events may have been missed then."""
        self._session_watchers.append(watcher)
        self._gap_watchers.append(on_gap)

    async def watch(self, user_id: str) -> None:
        """From when this returns until `unwatch(user_id)`, the user's events (or, for a
        `place_key`, the place's) reach the session watchers: once their channel's
        subscription is confirmed. Raising, it leaves nothing to undo."""
        self._watched[user_id] = self._watched.get(user_id, 0) + 1
        self._interest_changed((user_id,))
        try:
            await self._until_live([self._user_channel(user_id)])
        except BaseException:
            self.unwatch(user_id)
            raise

    def unwatch(self, user_id: str) -> None:
        left = self._watched[user_id] - 1
        if left:
            self._watched[user_id] = left
        else:
            del self._watched[user_id]
        self._interest_changed((user_id,))

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
        taker = _PlaceCallback(follower, lost)
        await self._follow_place(place_id, taker)
        try:
            yield
        finally:
            self._forget_place_follower(place_id, taker)

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
        self._place_followers.setdefault(place_id, set()).add(follower)
        try:
            await self.watch(place_key(place_id))
        except BaseException:
            self._place_followers[place_id].discard(follower)
            if not self._place_followers[place_id]:
                del self._place_followers[place_id]
            raise

    def _forget_place_follower(self, place_id: str, follower: PlaceFollower) -> None:
        followers = self._place_followers.get(place_id)
        if followers is None or follower not in followers:
            return
        followers.discard(follower)
        if not followers:
            del self._place_followers[place_id]
        self.unwatch(place_key(place_id))

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
    ) -> Delivery:
        """As feed(), but each event's message is written at once with `write`: `head`, the
        payload that `render` makes of the event (once for every delivery that shares it),
        and a closing brace. It lasts until `forget(delivery)`, or until the hub drops it."""
        self._check_subscribed()
        delivery = Delivery(self, self._capacity, on_drop, write, head, render)
        delivery.reader = reader
        await self._follow_first(delivery, user_ids, friends_of, everyone=everyone)
        return delivery

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
        self._followers.add(follower)
        self._joining.add(follower)
        try:
            if everyone:
                self._everyone.add(follower)
                self._everyone_changed = True
                self._plan_update()
                await self._until_live(route.every_user for route in self._routes)
                return
            if friends_of is not None:
                follower.friends_of = friends_of
                self._by_friends_of.setdefault(friends_of, set()).add(follower)
                self._interest_changed((friends_of,))
                # The owner's channels first: a change of the friend set made after it is read
                # is announced there.
                await self._until_live(
                    [self._user_channel(friends_of), *self._friend_set_channels(friends_of)]
                )
                await self._reload_friends(follower)
            else:
                self._follow(follower, frozenset(user_ids))
            await self._until_live(map(self._user_channel, follower.user_ids))
            if friends_of is None and follower.reader is not None:
                # Which of them hold the end user in their friend set: read once the channels
                # that announce a change of it are live (with sharded pub/sub, the users'
                # channels in the reader's shard), so that a change after it is heard there.
                others = follower.user_ids - {follower.reader}
                reader_route = self._store.route_of(follower.reader)
                await self._until_live(
                    channel
                    for user_id in others
                    for channel in self._friend_set_channels(user_id)
                    if self._route_of(channel).index == reader_route
                )
                follower.in_friend_sets_of = await self._store.in_friend_sets_of(
                    follower.reader, others
                )
        except BaseException:
            self.forget(follower)
            raise
        finally:
            self._joining.discard(follower)

    def forget(self, feed: Follower) -> None:
        if isinstance(feed, PlaceDelivery):
            self._forget_place_follower(feed.place_id, feed)
        self._followers.discard(feed)
        self._joining.discard(feed)
        if feed in self._everyone:
            self._everyone.discard(feed)
            self._everyone_changed = True
            self._plan_update()
        self._follow(feed, frozenset())
        if feed.friends_of is not None:
            _discard(self._by_friends_of, feed.friends_of, feed)
            self._interest_changed((feed.friends_of,))

    def spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("presence events: %s failed", task.get_coro(), exc_info=error)

    def _follow(self, feed: Follower, user_ids: frozenset[str]) -> None:
        # Only a user's first follower and their last change what is subscribed.
        changed = []
        reader_shard = None
        if feed.reader is not None and self._store.sharded_events:
            reader_shard = self._store.route_of(feed.reader)
        for user_id in feed.user_ids - user_ids:
            _discard(self._by_user, user_id, feed)
            shards_changed = self._count_reader(user_id, reader_shard, -1)
            if user_id not in self._by_user or shards_changed:
                changed.append(user_id)
        for user_id in user_ids - feed.user_ids:
            feeds = self._by_user.setdefault(user_id, set())
            first = not feeds
            feeds.add(feed)
            shards_changed = self._count_reader(user_id, reader_shard, 1)
            if first or shards_changed:
                changed.append(user_id)
        feed.user_ids = user_ids
        self._interest_changed(changed)

    def _count_reader(self, user_id: str, shard: int | None, step: int) -> bool:
        """Counts an end user's follower of user_id in `shard` (the reader's), in or out;
        whether the shards with such followers changed."""
        if shard is None:
            return False
        counts = self._reader_shards.setdefault(user_id, Counter())
        counts[shard] += step
        if counts[shard] > 0:
            return step > 0 and counts[shard] == 1
        del counts[shard]
        if not counts:
            del self._reader_shards[user_id]
        return True

    # --- which channels are subscribed ---------------------------------------------------

    def _wanted(self, user_id: str) -> bool:
        return (
            user_id in self._by_user or user_id in self._by_friends_of or user_id in self._watched
        )

    def _interest_changed(self, user_ids: Iterable[str]) -> None:
        self._changed.update(user_ids)
        if self._changed:
            self._plan_update()

    def _plan_update(self) -> None:
        """Sends the subscription's changes at the end of this event-loop turn, in one
        command for all of them."""
        if not self._update_planned:
            self._update_planned = True
            asyncio.get_running_loop().call_soon(self._update_subscription)

    def _update_subscription(self) -> None:
        self._update_planned = False
        # Per route, the channels to subscribe to and those to leave.
        plans: dict[int, tuple[list[bytes], list[bytes]]] = {}
        for user_id in self._changed:
            wanted = self._wanted(user_id)
            channel = self._user_channel(user_id)
            self._ask(channel, wanted, plans)
            for other in self._friend_set_channels(user_id):
                self._ask(other, self._wants_friend_set_channel(user_id, other), plans)
            if not wanted:
                self._channel_of.pop(user_id, None)
                self._place_of.pop(channel, None)
        self._changed.clear()
        if self._everyone_changed:
            self._everyone_changed = False
            for route in self._routes:
                self._ask(route.every_user, bool(self._everyone), plans)
        for index, (subscribe, unsubscribe) in plans.items():
            route = self._routes[index]
            self.spawn(self._send(route, route.pubsub, subscribe, unsubscribe))

    def _ask(
        self, channel: bytes, wanted: bool, plans: dict[int, tuple[list[bytes], list[bytes]]]
    ) -> None:
        route = self._route_of(channel)
        if route.pubsub is None:
            return  # the route's next connection subscribes to what is wanted then
        if wanted == (channel in self._asked):
            return
        subscribe, unsubscribe = plans.setdefault(route.index, ([], []))
        self._unconfirmed[channel] = self._unconfirmed.get(channel, 0) + 1
        if wanted:
            self._asked.add(channel)
            subscribe.append(channel)
        else:
            self._asked.discard(channel)
            unsubscribe.append(channel)
            if channel not in self._every_user:
                self._live.discard(channel)  # nobody here follows its user any more

    async def _send(
        self,
        route: _Route,
        pubsub: PubSub | None,
        subscribe: Sequence[bytes],
        unsubscribe: Sequence[bytes],
    ) -> None:
        # In order, and subscriptions before unsubscriptions: a user's channel is confirmed
        # before the channel of every user that brought its events meanwhile is left.
        async with route.sending:
            if pubsub is None or pubsub is not route.pubsub:
                return  # that connection was lost; the next one subscribes to what is wanted
            try:
                for command, channels in (
                    (pubsub.ssubscribe if route.sharded else pubsub.subscribe, subscribe),
                    (pubsub.sunsubscribe if route.sharded else pubsub.unsubscribe, unsubscribe),
                ):
                    for first in range(0, len(channels), _CHANNELS_PER_COMMAND):
                        await command(*channels[first : first + _CHANNELS_PER_COMMAND])
            except Exception as error:
                # Its confirmations would never come: the listener starts again (unless that
                # connection is already given up).
                if pubsub is route.pubsub:
                    route.send_failed = error

    def _confirm(self, route: _Route, kind: str, channel: bytes) -> None:
        """Takes Redis's confirmation of one channel's SUBSCRIBE or UNSUBSCRIBE (or their
        sharded kin)."""
        left = self._unconfirmed.get(channel, 0) - 1
        if channel == route.every_user:
            # Where the copies of events come from changes at this point of the stream.
            if kind in {"subscribe", "ssubscribe"}:
                self._live.add(channel)
            else:
                self._live.discard(channel)
        if left > 0:
            self._unconfirmed[channel] = left
            return
        self._unconfirmed.pop(channel, None)
        if channel in self._asked:
            self._live.add(channel)
            confirmed = self._confirmed.pop(channel, None)
            if confirmed is not None and not confirmed.done():
                confirmed.set_result(True)

    def _settled(self, channel: bytes) -> bool:
        return channel in self._live and channel not in self._unconfirmed

    async def _until_live(self, channels: Iterable[bytes]) -> None:
        """Waits until Redis has confirmed the subscription to every channel."""
        waiting = [channel for channel in channels if not self._settled(channel)]
        if not waiting:
            return
        try:
            async with asyncio.timeout(_CONFIRM_WAIT_S):
                for channel in waiting:
                    if self._settled(channel):
                        continue
                    confirmed = self._confirmed.get(channel)
                    if confirmed is None:
                        confirmed = asyncio.get_running_loop().create_future()
                        self._confirmed[channel] = confirmed
                    # Shielded: one waiter's cancellation is not the others'.
                    if not await asyncio.shield(confirmed):
                        raise StoreUnavailableError(_again("event stream interrupted"))
        except TimeoutError:
            raise StoreUnavailableError(
                "The store did not confirm the event subscription in time; subscribe again."
            ) from None

    async def _subscribe_anew(self, route: _Route, pubsub: PubSub) -> None:
        """Subscribes a new connection of the route to every channel of it wanted now."""
        self._channel_of = {u: c for u, c in self._channel_of.items() if self._wanted(u)}
        interests = self._by_user.keys() | self._by_friends_of.keys() | self._watched.keys()
        channels = [*map(self._user_channel, interests), route.quiet]
        for user_id in interests:
            channels += [
                other
                for other in self._friend_set_channels(user_id)
                if self._wants_friend_set_channel(user_id, other)
            ]
        if self._everyone:
            channels.append(route.every_user)
        mine = {channel for channel in channels if self._route_of(channel) is route}
        self._asked = {c for c in self._asked if self._route_of(c) is not route} | mine
        # The route's channels had none unconfirmed or live since its last connection was lost.
        self._unconfirmed.update(dict.fromkeys(mine, 1))
        asked = sorted(mine)
        subscribe = pubsub.ssubscribe if route.sharded else pubsub.subscribe
        for first in range(0, len(asked), _CHANNELS_PER_COMMAND):
            await subscribe(*asked[first : first + _CHANNELS_PER_COMMAND])
        route.pubsub = pubsub
        # What changed while the commands were sent.
        self._changed.update(
            self._by_user.keys() | self._by_friends_of.keys() | self._watched.keys()
        )
        self._everyone_changed = True
        self._plan_update()

    def _lost(self, route: _Route) -> None:
        """The route's connection is gone: so is every subscription of it, and the waits for
        one."""
        route.pubsub = None
        route.send_failed = None
        self._live = {c for c in self._live if self._route_of(c) is not route}
        for channel in [c for c in self._unconfirmed if self._route_of(c) is route]:
            del self._unconfirmed[channel]
        for channel in [c for c in self._confirmed if self._route_of(c) is route]:
            confirmed = self._confirmed.pop(channel)
            if not confirmed.done():
                confirmed.set_result(False)

    async def _reload_friends(self, feed: Follower) -> None:
        """Reads the friend set again; raises when the subscription cannot follow it."""
        assert feed.friends_of is not None
        feed.friends_read += 1
        this_read = feed.friends_read
        friends = frozenset(await self._store.friends(feed.friends_of))
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
            self._follow(feed, friends)

    async def _check_friend_set(self, feed: Follower, owner: str) -> None:
        """After `owner`'s friend set changed: whether it still holds the feed's reader."""
        assert feed.reader is not None
        try:
            holds = await self._store.in_friend_sets_of(feed.reader, [owner])
        except PresenceError as error:
            feed.drop(FeedDroppedError(_again(error.message), violation=False))
            return
        if holds:
            feed.in_friend_sets_of |= {owner}
        else:
            feed.in_friend_sets_of -= {owner}

    async def _follow_friend_change(self, feed: Follower) -> None:
        """After a friend-set change: follow the new set, or end the feed if that fails, as
        following the old set would miss events without saying so."""
        try:
            await self._reload_friends(feed)
        except BadInputError as error:
            feed.drop(FeedDroppedError(error.message, violation=True))
        except PresenceError as error:
            feed.drop(FeedDroppedError(_again(error.message), violation=False))

    async def _open(self, route: _Route, *, again: bool) -> PubSub:
        if isinstance(self._redis, Redis):
            return self._redis.pubsub()
        return await self._redis.pubsub_for(route.quiet.decode(), again=again)

    async def _listen(self, route: _Route) -> None:
        attempt = 0
        while not self._stopping:
            pubsub: PubSub | None = None
            try:
                # After a loss, the cluster is asked again where the route's slot is.
                pubsub = await self._open(route, again=attempt > 0)
                await self._subscribe_anew(route, pubsub)
                await self._receive(route, pubsub)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if self._stopping:
                    return
                # Whatever ended the subscription, events may have been missed: every
                # subscriber whose events take this route is told, and this process
                # subscribes again.
                route.subscribed.clear()
                why = f"event stream interrupted ({type(error).__name__})"
                self._lost(route)
                self._drop_followers_of(route, why)
                for on_gap in self._gap_watchers:
                    on_gap()
                delay = _RECONNECT_DELAYS_S[min(attempt, len(_RECONNECT_DELAYS_S) - 1)]
                attempt += 1
                log.warning("%s lost (%s); subscribing again in %g s", route.name(), error, delay)
                await asyncio.sleep(delay)
            else:
                attempt = 0
            finally:
                if pubsub is not None:
                    # Bounded: closing must not hang on a connection that stopped answering.
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(pubsub.aclose(), 2)  # type: ignore[no-untyped-call]

    async def _receive(self, route: _Route, pubsub: PubSub) -> None:
        loop = asyncio.get_running_loop()
        heard = pinged = loop.time()
        while not self._stopping:
            message = await pubsub.get_message(timeout=min(1.0, self._ping_every_s))
            now = loop.time()
            if message is not None:
                heard = now
                try:
                    self._take(route, message)
                    for _ in range(_MESSAGES_PER_BATCH - 1):
                        # Those already here: a read that finds none returns at once.
                        message = await pubsub.get_message(timeout=0)
                        if message is None:
                            break
                        self._take(route, message)
                finally:
                    to_flush, self.to_flush = self.to_flush, []
                    frames: Frames = {}  # each message framed once, for this flush
                    for delivery in to_flush:
                        delivery.flush(frames)
            if route.send_failed is not None:
                raise redis_errors.ConnectionError(f"subscribing failed: {route.send_failed}")
            if now - heard > self._silence_limit_s:
                raise redis_errors.ConnectionError(
                    f"no answer from Redis for {self._silence_limit_s:g} s"
                )
            if now - pinged >= self._ping_every_s or not route.subscribed.is_set():
                await pubsub.ping()
                pinged = now

    def _drop_followers_of(self, route: _Route, why: str) -> None:
        """Drops the subscribers some of whose events take the route."""
        for feed in list(self._followers):
            if self._takes_route(feed, route):
                feed.drop(FeedDroppedError(_again(why), violation=False))
        for place_id, followers in list(self._place_followers.items()):
            if self._store.route_of(place_id) == route.index:
                for follower in list(followers):
                    if isinstance(follower, _PlaceCallback):
                        follower.lost(_again(why))

    def _takes_route(self, follower: Follower, route: _Route) -> bool:
        if len(self._routes) == 1 or follower in self._everyone or follower.friends_of:
            return True  # a friend set's changes come by every route
        if isinstance(follower, PlaceDelivery):
            return self._store.route_of(follower.place_id) == route.index
        return any(self._store.route_of(user_id) == route.index for user_id in follower.user_ids)

    def _take(self, route: _Route, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind in {"message", "smessage"}:
            self.messages_received += 1
            channel = message["channel"]
            if channel in self._place_of:
                if channel in self._live:
                    self._dispatch_place(message["data"])
            elif channel == route.every_user:
                if channel in self._live:
                    # Those who follow everyone get events once the channel is settled: not
                    # those of a subscription about to be left, which a gap would follow.
                    self._dispatch(message["data"], everyone=channel not in self._unconfirmed)
            elif channel in self._live and route.every_user not in self._live:
                self._dispatch(message["data"], everyone=False)
        elif kind in _CONFIRMATIONS:
            channel = message["channel"]
            if kind == "sunsubscribe" and (
                channel == route.quiet or channel not in self._unconfirmed
            ):
                # Not asked for: the slot is no longer this node's (a failover, or the slot
                # moved), and events published on its new master do not come here.
                raise redis_errors.ConnectionError("the shard's slot moved to another node")
            self._confirm(route, kind, channel)
        elif kind == "pong" and not route.subscribed.is_set():
            route.subscribed.set()  # the first answer: subscribed and heard

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
            for follower in list(self._place_followers.get(one.place_id, ())):
                follower.offer_place(one, rendered)

    def _friends_changed(self, owner: str) -> None:
        """The owner's friend set changed: their friendsOf subscribers follow the new set,
        and end users who follow them learn whether they are still in it."""
        for feed in list(self._by_friends_of.get(owner, ())):
            self.spawn(self._follow_friend_change(feed))
        for feed in list(self._by_user.get(owner, ())):
            if feed.reader is not None:
                self.spawn(self._check_friend_set(feed, owner))

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
        feeds = self._by_user.get(user_id)
        all_users = self._everyone if everyone else ()
        if not feeds and not all_users:
            return  # a user whose only watchers are the session holders
        try:
            event = PresenceChange.of(announced)
        except (ValueError, TypeError):
            log.exception("unreadable presence event %r", list(announced))
            return
        rendered: Rendered = {}
        # Other end users see the event as its user lets them (includes/status.lua): made
        # and rendered once, when the first of them is met.
        # Those in the user's friend set may see more of it: a view, and renderings, of theirs.
        views: dict[bool, tuple[PresenceChange | None, Rendered]] = {}
        for feed in [*(feeds or ()), *all_users]:
            if feed.reader is None or feed.reader == user_id:
                if own_sees:
                    feed.offer(event, rendered)
                continue
            in_set = user_id in feed.in_friend_sets_of
            if in_set not in views:
                views[in_set] = (event.seen_by_others(announced, in_friend_set=in_set), {})
            others, others_rendered = views[in_set]
            if others is not None:
                feed.offer(others, others_rendered)


class PlaceFollower(Protocol):
    """Who takes a place's JOINED, UPDATED and LEFT events."""

    def offer_place(self, event: PublishedPlaceEvent, rendered: PlaceRendered) -> None: ...


class _PlaceCallback:
    """A follower of a place that hands each event to a function, and its loss to another."""

    __slots__ = ("_take", "lost")

    def __init__(
        self, take: Callable[[PublishedPlaceEvent], None], lost: Callable[[str], None]
    ) -> None:
        self._take = take
        self.lost = lost

    def offer_place(self, event: PublishedPlaceEvent, rendered: PlaceRendered) -> None:
        self._take(event)


def _again(why: str) -> str:
    return f"{why}; re-read presence and subscribe again"


def _discard(index: dict[str, set[Follower]], key: str, feed: Follower) -> None:
    feeds = index.get(key)
    if feeds is not None:
        feeds.discard(feed)
        if not feeds:
            del index[key]
