"""Presence events: one Redis subscription per process, fanned out to its subscribers.

The scripts publish every change on one channel as they make it (lua/includes/events.lua).
Each API process subscribes once, and hands each event to the feeds that follow its user.
A feed holds at most `capacity` undelivered events: a subscriber that falls that far behind
is dropped (its socket closed with a reason) instead of slowing the others or growing memory.
When the Redis subscription is lost, every feed is dropped too, since events were missed;
clients re-read presence and subscribe again. Events are never replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from gql_presence.errors import BadInputError, PresenceError, StoreUnavailableError
from gql_presence.store import MAX_IDS_PER_CALL, Announced, EventKind, PresenceStore, read_events
from gql_presence.store.days import from_ms

log = logging.getLogger("gql_presence.events")

_RECONNECT_DELAYS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
_STOP_WAIT_S = 5.0


@dataclass(frozen=True)
class PresenceEvent:
    user_id: str
    kind: EventKind  # ONLINE, OFFLINE or KICKED
    at: datetime
    session_id: str | None
    online: bool


class FeedDroppedError(Exception):
    """The feed was ended by the service; the reason says why, for the client."""

    def __init__(self, reason: str, *, violation: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        # True: the subscriber broke a limit (too slow, too many users); False: the service
        # could not go on (the event stream was interrupted).
        self.violation = violation


OnDrop = Callable[[FeedDroppedError], Awaitable[None]]


class Feed:
    """One subscription's events, in the order Redis published them."""

    def __init__(self, hub: EventHub, capacity: int, on_drop: OnDrop) -> None:
        self._hub = hub
        self._queue: asyncio.Queue[PresenceEvent | FeedDroppedError] = asyncio.Queue(capacity + 1)
        self._capacity = capacity
        self._on_drop = on_drop
        self.user_ids: frozenset[str] = frozenset()
        self.friends_of: str | None = None
        # Reads of the friend set started, and the latest one applied: a read that finishes
        # after a later one was applied is stale and dropped.
        self.friends_read = 0
        self.friends_applied = 0
        self.dropped: FeedDroppedError | None = None

    def offer(self, event: PresenceEvent) -> None:
        if self.dropped is not None:
            return
        if self._queue.qsize() >= self._capacity:
            self.drop(
                FeedDroppedError(
                    f"subscriber too slow: more than {self._capacity} events were waiting; "
                    "re-read presence and subscribe again",
                    violation=True,
                )
            )
            return
        self._queue.put_nowait(event)

    def drop(self, reason: FeedDroppedError) -> None:
        if self.dropped is not None:
            return
        self.dropped = reason
        self._hub.forget(self)
        self._queue.put_nowait(reason)  # the one place kept free for it
        # The subscriber may be stuck writing to a client that does not read: tell it now.
        self._hub.spawn(self._on_drop(reason))

    async def __aiter__(self) -> AsyncIterator[PresenceEvent]:
        while True:
            item = await self._queue.get()
            if isinstance(item, FeedDroppedError):
                raise item
            yield item


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
        self._feeds: set[Feed] = set()
        self._by_user: dict[str, set[Feed]] = {}
        self._by_friends_of: dict[str, set[Feed]] = {}
        self._everyone: set[Feed] = set()
        self._session_watchers: list[Callable[[Announced], None]] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        # redis-py may turn a cancellation into a ConnectionError; this flag is what ends the
        # listener's loop for certain.
        self._stopping = False

    @property
    def feed_count(self) -> int:
        return len(self._feeds)

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

    def watch_sessions(self, watcher: Callable[[Announced], None]) -> None:
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
        if not self.subscribed:
            raise StoreUnavailableError(
                "The event stream is reconnecting to the store; subscribe again shortly."
            )
        feed = Feed(self, self._capacity, on_drop)
        self._feeds.add(feed)
        try:
            if everyone:
                self._everyone.add(feed)
            elif friends_of is None:
                self._follow(feed, frozenset(user_ids))
            else:
                feed.friends_of = friends_of
                self._by_friends_of.setdefault(friends_of, set()).add(feed)
                await self._reload_friends(feed)
            yield feed
        finally:
            self.forget(feed)

    def forget(self, feed: Feed) -> None:
        self._feeds.discard(feed)
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

    def _follow(self, feed: Feed, user_ids: frozenset[str]) -> None:
        for user_id in feed.user_ids - user_ids:
            _discard(self._by_user, user_id, feed)
        for user_id in user_ids - feed.user_ids:
            self._by_user.setdefault(user_id, set()).add(feed)
        feed.user_ids = user_ids

    async def _reload_friends(self, feed: Feed) -> None:
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
        if feed in self._feeds and this_read > feed.friends_applied:
            feed.friends_applied = this_read
            self._follow(feed, friends)

    async def _follow_friend_change(self, feed: Feed) -> None:
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
        for feed in list(self._feeds):
            feed.drop(FeedDroppedError(_again(why), violation=False))

    def _dispatch(self, data: bytes) -> None:
        try:
            announced = read_events(data)
        except ValueError:
            log.exception("unreadable presence events %r", data[:200])
            return
        for one in announced:
            self._dispatch_one(one)

    def _dispatch_one(self, announced: Announced) -> None:
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
            event = PresenceEvent(
                user_id, EventKind(kind), from_ms(int(at_ms)), session_id or None, bool(online)
            )
        except (ValueError, TypeError):
            log.exception("unreadable presence event %r", list(announced))
            return
        for feed in [*(feeds or ()), *self._everyone]:
            feed.offer(event)


def _again(why: str) -> str:
    return f"{why}; re-read presence and subscribe again"


def _discard(index: dict[str, set[Feed]], key: str, feed: Feed) -> None:
    feeds = index.get(key)
    if feeds is not None:
        feeds.discard(feed)
        if not feeds:
            del index[key]
