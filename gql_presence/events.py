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
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from redis import exceptions as redis_errors
from redis.asyncio import Redis

from gql_presence.errors import BadInputError
from gql_presence.store import PresenceStore
from gql_presence.timeline import from_ms
from gql_presence.validation import MAX_IDS_PER_CALL

log = logging.getLogger("gql_presence.events")

FRIENDS_CHANGED = "FRIENDS"
_RECONNECT_DELAYS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


@dataclass(frozen=True)
class PresenceEvent:
    user_id: str
    kind: str  # ONLINE, OFFLINE or KICKED
    at: datetime
    session_id: str | None
    online: bool


class FeedDroppedError(Exception):
    """The feed was ended by the service; the reason says why, for the client."""

    def __init__(self, reason: str, *, too_slow: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.too_slow = too_slow


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
        self.friends_read = 0  # reads of the friend set started; only the latest one counts
        self.dropped: FeedDroppedError | None = None

    def offer(self, event: PresenceEvent) -> None:
        if self.dropped is not None:
            return
        if self._queue.qsize() >= self._capacity:
            self.drop(
                FeedDroppedError(
                    f"subscriber too slow: more than {self._capacity} events were waiting; "
                    "re-read presence and subscribe again",
                    too_slow=True,
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
    def __init__(self, redis: Redis, store: PresenceStore, capacity: int) -> None:
        self._redis = redis
        self._capacity = capacity
        self._channel = store.events_channel
        self._store = store
        self._feeds: set[Feed] = set()
        self._by_user: dict[str, set[Feed]] = {}
        self._by_friends_of: dict[str, set[Feed]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()

    @property
    def feed_count(self) -> int:
        return len(self._feeds)

    async def start(self) -> None:
        self._listener = asyncio.create_task(self._listen(), name="presence-events")
        await asyncio.wait_for(self._subscribed.wait(), timeout=10)

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        for task in list(self._tasks):
            task.cancel()

    @contextlib.asynccontextmanager
    async def feed(
        self,
        on_drop: OnDrop,
        *,
        user_ids: Iterable[str] = (),
        friends_of: str | None = None,
    ) -> AsyncIterator[Feed]:
        """A feed of the events of user_ids, or of friends_of's friends as that set changes."""
        feed = Feed(self, self._capacity, on_drop)
        self._feeds.add(feed)
        try:
            if friends_of is None:
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
        assert feed.friends_of is not None
        feed.friends_read += 1
        this_read = feed.friends_read
        friends = frozenset(await self._store.friends(feed.friends_of))
        if len(friends) > MAX_IDS_PER_CALL:
            raise BadInputError(
                f"friendsOf has {len(friends):,} friends; a subscription follows at most "
                f"{MAX_IDS_PER_CALL:,} users."
            )
        if feed.dropped is None and this_read == feed.friends_read:
            self._follow(feed, friends)

    async def _listen(self) -> None:
        attempt = 0
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._channel)
                self._subscribed.set()
                attempt = 0
                while True:
                    # A bounded wait, so that the health check (a PING now and then) runs and
                    # a dead connection is noticed even when no event comes.
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None:
                        self._dispatch(message["data"])
            except (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError) as error:
                self._drop_all(f"event stream interrupted ({type(error).__name__})")
                delay = _RECONNECT_DELAYS_S[min(attempt, len(_RECONNECT_DELAYS_S) - 1)]
                attempt += 1
                log.warning("presence events lost (%s); subscribing again in %g s", error, delay)
                await asyncio.sleep(delay)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it untyped

    def _drop_all(self, why: str) -> None:
        for feed in list(self._feeds):
            feed.drop(
                FeedDroppedError(f"{why}; re-read presence and subscribe again", too_slow=False)
            )

    def _dispatch(self, data: str) -> None:
        try:
            kind, user_id, at_ms, session_id, online = json.loads(data)
        except (ValueError, TypeError):
            log.exception("unreadable presence event %r", data)
            return
        if kind == FRIENDS_CHANGED:
            for feed in list(self._by_friends_of.get(user_id, ())):
                self.spawn(self._reload_friends(feed))
            return
        event = PresenceEvent(user_id, kind, from_ms(int(at_ms)), session_id or None, bool(online))
        for feed in list(self._by_user.get(user_id, ())):
            feed.offer(event)


def _discard(index: dict[str, set[Feed]], key: str, feed: Feed) -> None:
    feeds = index.get(key)
    if feeds is not None:
        feeds.discard(feed)
        if not feeds:
            del index[key]
