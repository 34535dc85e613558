"""Presence events: one Redis subscription per process, fanned out to its subscribers.

The scripts publish every change on one channel as they make it (lua/includes/events.lua).
Each API process subscribes once, and hands each event to the followers of its user: feeds,
which queue events for a task to read, and deliveries, which write the event's message to
their socket at once (realtime/delivery.py).
A subscriber may fall at most `capacity` events behind: a feed holds that many undelivered
events; a delivery takes that many messages in one batch of events, and its connection holds
at most that many unsent (counted as the bytes waiting there over the mean size of the batch
just written). One that falls further behind is dropped (its socket closed with a reason)
instead of slowing the others or growing memory.
When the Redis subscription is lost, every subscriber is dropped too, since events were
missed; clients re-read presence and subscribe again. Events are never replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from gql_presence.realtime.delivery import (
    Delivery,
    Feed,
    FeedDroppedError,
    Follower,
    OnDrop,
    PresenceChange,
    Render,
    Rendered,
    WriteNow,
)
from gql_presence.store import (
    MAX_IDS_PER_CALL,
    EventKind,
    PresenceStore,
    PublishedEvent,
    read_events,
)
from gql_presence.store.days import from_ms
from gql_presence.store.errors import BadInputError, PresenceError, StoreUnavailableError

log = logging.getLogger("gql_presence.events")

_RECONNECT_DELAYS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
_STOP_WAIT_S = 5.0


class EventHub:
    def __init__(
        self,
        redis: Redis,
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
        self._channel = store.events_channel
        self._store = store
        self._followers: set[Follower] = set()
        self._by_user: dict[str, set[Follower]] = {}
        self._by_friends_of: dict[str, set[Follower]] = {}
        self._everyone: set[Follower] = set()
        self._session_watchers: list[Callable[[PublishedEvent], None]] = []
        # Deliveries with messages of the batch being read, written once it has been read.
        self.to_flush: list[Delivery] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        # redis-py may turn a cancellation into a ConnectionError; this flag is what ends the
        # listener's loop for certain.
        self._stopping = False

    @property
    def subscriber_count(self) -> int:
        """Subscriptions, multiplexed or not."""
        return len(self._followers)

    @property
    def delivery_count(self) -> int:
        """Subscriptions whose events the hub writes to their sockets (multiplexed)."""
        return sum(isinstance(f, Delivery) for f in self._followers)

    def follows(self, user_id: str) -> bool:
        """Whether a subscriber of this process follows the user now (friendsOf: once the
        friend set read last is applied)."""
        return user_id in self._by_user or bool(self._everyone)

    @property
    def subscribed(self) -> bool:
        """Whether this process receives events now."""
        return self._subscribed.is_set()

    async def start(self) -> None:
        self._listener = asyncio.create_task(self._listen(), name="presence-events")
        await asyncio.wait_for(self._subscribed.wait(), timeout=10)

    async def stop(self) -> None:
        """Ends the subscription and the hub's tasks; bounded, so that a shutdown never waits
        on a connection that stopped answering."""
        self._stopping = True
        tasks = [*self._tasks, *([self._listener] if self._listener else [])]
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=_STOP_WAIT_S)
            if pending:
                log.warning(
                    "presence events: %d tasks did not end in %g s", len(pending), _STOP_WAIT_S
                )

    def watch_sessions(self, watcher: Callable[[PublishedEvent], None]) -> None:
        """Hands every KICKED and REPLACED event to `watcher` as well: the holder of this
        process's connection-bound sessions ends those they concern."""
        self._session_watchers.append(watcher)

    @contextlib.asynccontextmanager
    async def feed(
        self,
        on_drop: OnDrop,
        *,
        user_ids: Iterable[str] = (),
        friends_of: str | None = None,
        everyone: bool = False,
    ) -> AsyncIterator[Feed]:
        """A feed of the events of user_ids, of friends_of's friends as that set changes, or
        of every user."""
        self._check_subscribed()
        feed = Feed(self, self._capacity, on_drop)
        await self._follow_first(feed, user_ids, friends_of, everyone=everyone)
        try:
            yield feed
        finally:
            self.forget(feed)

    async def deliver(
        self,
        on_drop: OnDrop,
        write: WriteNow,
        head: bytes,
        render: Render,
        *,
        user_ids: Iterable[str] = (),
        friends_of: str | None = None,
        everyone: bool = False,
    ) -> Delivery:
        """As feed(), but each event's message is written at once with `write`: `head`, the
        payload that `render` makes of the event (once for every delivery that shares it),
        and a closing brace. It lasts until `forget(delivery)`, or until the hub drops it."""
        self._check_subscribed()
        delivery = Delivery(self, self._capacity, on_drop, write, head, render)
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
        try:
            if everyone:
                self._everyone.add(follower)
            elif friends_of is None:
                self._follow(follower, frozenset(user_ids))
            else:
                follower.friends_of = friends_of
                self._by_friends_of.setdefault(friends_of, set()).add(follower)
                await self._reload_friends(follower)
        except BaseException:
            self.forget(follower)
            raise

    def forget(self, feed: Follower) -> None:
        self._followers.discard(feed)
        self._everyone.discard(feed)
        self._follow(feed, frozenset())
        if feed.friends_of is not None:
            _discard(self._by_friends_of, feed.friends_of, feed)

    def spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("presence events: %s failed", task.get_coro(), exc_info=error)

    def _follow(self, feed: Follower, user_ids: frozenset[str]) -> None:
        for user_id in feed.user_ids - user_ids:
            _discard(self._by_user, user_id, feed)
        for user_id in user_ids - feed.user_ids:
            self._by_user.setdefault(user_id, set()).add(feed)
        feed.user_ids = user_ids

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
        # The subscriber may have left, or a later read been applied, while this one waited.
        if feed in self._followers and this_read > feed.friends_applied:
            feed.friends_applied = this_read
            self._follow(feed, friends)

    async def _follow_friend_change(self, feed: Follower) -> None:
        """After a friend-set change: follow the new set, or end the feed if that fails, as
        following the old set would miss events without saying so."""
        try:
            await self._reload_friends(feed)
        except BadInputError as error:
            feed.drop(FeedDroppedError(error.message, violation=True))
        except PresenceError as error:
            feed.drop(FeedDroppedError(_again(error.message), violation=False))

    async def _listen(self) -> None:
        attempt = 0
        while not self._stopping:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
                await self._receive(pubsub)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if self._stopping:
                    return
                # Whatever ended the subscription, events may have been missed: every
                # subscriber is told, and this process subscribes again.
                self._subscribed.clear()
                self._drop_all(f"event stream interrupted ({type(error).__name__})")
                delay = _RECONNECT_DELAYS_S[min(attempt, len(_RECONNECT_DELAYS_S) - 1)]
                attempt += 1
                log.warning("presence events lost (%s); subscribing again in %g s", error, delay)
                await asyncio.sleep(delay)
            else:
                attempt = 0
            finally:
                # Bounded: closing must not hang on a connection that stopped answering.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(pubsub.aclose(), 2)  # type: ignore[no-untyped-call]

    async def _receive(self, pubsub: PubSub) -> None:
        loop = asyncio.get_running_loop()
        heard = pinged = loop.time()
        while not self._stopping:
            message = await pubsub.get_message(timeout=min(1.0, self._ping_every_s))
            now = loop.time()
            if message is not None:
                heard = now
                if message["type"] == "message":
                    self._dispatch(message["data"])
                elif message["type"] == "pong" and not self._subscribed.is_set():
                    self._subscribed.set()  # the first answer: subscribed and heard
            if now - heard > self._silence_limit_s:
                raise redis_errors.ConnectionError(
                    f"no answer from Redis for {self._silence_limit_s:g} s"
                )
            if now - pinged >= self._ping_every_s or not self._subscribed.is_set():
                await pubsub.ping()
                pinged = now

    def _drop_all(self, why: str) -> None:
        for feed in list(self._followers):
            feed.drop(FeedDroppedError(_again(why), violation=False))

    def _dispatch(self, data: bytes) -> None:
        try:
            announced = read_events(data)
        except ValueError:
            log.exception("unreadable presence events %r", data[:200])
            return
        try:
            for one in announced:
                self._dispatch_one(one)
        finally:
            to_flush, self.to_flush = self.to_flush, []
            for delivery in to_flush:
                delivery.flush()

    def _dispatch_one(self, announced: PublishedEvent) -> None:
        kind, user_id, at_ms, session_id, online = announced
        if kind == EventKind.FRIENDS:
            for feed in list(self._by_friends_of.get(user_id, ())):
                self.spawn(self._follow_friend_change(feed))
            return
        if kind in {EventKind.KICKED, EventKind.REPLACED}:
            for watcher in self._session_watchers:
                watcher(announced)
        if kind == EventKind.REPLACED:
            return  # the holders' business only
        feeds = self._by_user.get(user_id)
        if not feeds and not self._everyone:
            return  # most events concern users nobody here follows
        try:
            event = PresenceChange(
                user_id, EventKind(kind), from_ms(int(at_ms)), session_id or None, bool(online)
            )
        except (ValueError, TypeError):
            log.exception("unreadable presence event %r", list(announced))
            return
        rendered: Rendered = {}
        for feed in [*(feeds or ()), *self._everyone]:
            feed.offer(event, rendered)


def _again(why: str) -> str:
    return f"{why}; re-read presence and subscribe again"


def _discard(index: dict[str, set[Follower]], key: str, feed: Follower) -> None:
    feeds = index.get(key)
    if feeds is not None:
        feeds.discard(feed)
        if not feeds:
            del index[key]
