"""A subscription's place in the event hub, and how its events reach it.

A Feed queues events for a task to read; a Delivery writes each event's message to its
socket at once (multiplexed delivery: one rendering per distinct document, shared by every
delivery of it; graphql/event_rendering.py makes the renderings). Either may fall at most
`capacity` events behind; one that falls further behind is dropped, its socket closed with
the reason, instead of slowing the others or growing memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from gql_presence.store import EventKind


@dataclass(frozen=True)
class PresenceChange:
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
# Renders an event as the `payload` of a subscription's `next` message, JSON-encoded.
Render = Callable[[PresenceChange], bytes]
# Writes messages to a socket at once; returns the bytes waiting to be sent there, or None
# when the socket is closing.
WriteNow = Callable[[list[bytes]], int | None]
# One event's payloads, each rendered once, by the renderer that made it.
Rendered = dict[Render, bytes]


class Follower:
    """One subscription's place in the hub: the users it follows, and whether it was dropped."""

    __slots__ = (
        "_capacity",
        "_hub",
        "_on_drop",
        "dropped",
        "friends_applied",
        "friends_of",
        "friends_read",
        "user_ids",
    )

    def __init__(self, hub: Hub, capacity: int, on_drop: OnDrop) -> None:
        self._hub = hub
        self._capacity = capacity
        self._on_drop = on_drop
        self.user_ids: frozenset[str] = frozenset()
        self.friends_of: str | None = None
        # Reads of the friend set started, and the latest one applied: a read that finishes
        # after a later one was applied is stale and dropped.
        self.friends_read = 0
        self.friends_applied = 0
        self.dropped: FeedDroppedError | None = None

    def offer(self, event: PresenceChange, rendered: Rendered) -> None:
        raise NotImplementedError

    def drop(self, reason: FeedDroppedError) -> None:
        if self.dropped is not None:
            return
        self.dropped = reason
        self._hub.forget(self)
        self._dropped(reason)
        # The subscriber may be stuck writing to a client that does not read: tell it now.
        self._hub.spawn(self._on_drop(reason))

    def _dropped(self, reason: FeedDroppedError) -> None:
        """Hands the reason to whatever waits on this subscription."""

    def _too_slow(self) -> None:
        self.drop(
            FeedDroppedError(
                f"subscriber too slow: more than {self._capacity} events were waiting; "
                "re-read presence and subscribe again",
                violation=True,
            )
        )


class Feed(Follower):
    """One subscription's events, in the order Redis published them, for a task to read."""

    __slots__ = ("_queue",)

    def __init__(self, hub: Hub, capacity: int, on_drop: OnDrop) -> None:
        super().__init__(hub, capacity, on_drop)
        self._queue: asyncio.Queue[PresenceChange | FeedDroppedError] = asyncio.Queue(capacity + 1)

    def offer(self, event: PresenceChange, rendered: Rendered) -> None:
        if self.dropped is not None:
            return
        if self._queue.qsize() >= self._capacity:
            self._too_slow()
            return
        self._queue.put_nowait(event)

    @property
    def pending(self) -> int:
        """Events (or the drop) queued and not read yet."""
        return self._queue.qsize()

    def _dropped(self, reason: FeedDroppedError) -> None:
        self._queue.put_nowait(reason)  # the one place kept free for it

    async def __aiter__(self) -> AsyncIterator[PresenceChange]:
        while True:
            item = await self._queue.get()
            if isinstance(item, FeedDroppedError):
                raise item
            yield item


class Delivery(Follower):
    """A subscription whose events are written to its socket as the hub receives them: no
    task, queue or execution of its own. Its messages are `head + payload + b"}"`, the
    payload rendered once per event for every delivery that shares `render`. The messages
    of one batch of events (those the store published at once) are written together when
    the batch has been read. The socket's end, or its operation's, ends it (`forget`)."""

    __slots__ = ("_batch", "_head", "_render", "_write")

    def __init__(  # noqa: PLR0917 - each part is distinct
        self,
        hub: Hub,
        capacity: int,
        on_drop: OnDrop,
        write: WriteNow,
        head: bytes,
        render: Render,
    ) -> None:
        super().__init__(hub, capacity, on_drop)
        self._write = write
        self._head = head
        self._render = render
        self._batch: list[bytes] = []

    def offer(self, event: PresenceChange, rendered: Rendered) -> None:
        if self.dropped is not None:
            return
        if len(self._batch) >= self._capacity:
            self._batch.clear()
            self._too_slow()
            return
        payload = rendered.get(self._render)
        if payload is None:
            payload = rendered[self._render] = self._render(event)
        if not self._batch:
            self._hub.to_flush.append(self)
        self._batch.append(b"".join((self._head, payload, b"}")))

    def flush(self) -> None:
        batch, self._batch = self._batch, []
        if self.dropped is not None or not batch:
            return
        waiting = self._write(batch)
        # None: the socket is closing, and this subscription ends with it. Otherwise the
        # bytes unsent, counted in messages of this batch's size.
        if waiting is not None and waiting * len(batch) > self._capacity * sum(map(len, batch)):
            self._too_slow()


class Hub(Protocol):
    """What a follower needs of the hub that holds it (realtime/hub.py's EventHub)."""

    to_flush: list[Delivery]

    def forget(self, follower: Follower) -> None: ...

    def spawn(self, work: Awaitable[None]) -> None: ...
