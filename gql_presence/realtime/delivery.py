"""A subscription's place in the event hub, and how its events reach it.

A Feed queues events for a task to read; a Delivery writes each event's message to its
socket at once (multiplexed delivery: one rendering per distinct document, shared by every
delivery of it; graphql/event_rendering.py makes the renderings). Either may fall at most
`capacity` events behind; one that falls further behind is dropped, its socket closed with
the reason, instead of slowing the others or growing memory.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol, TypeVar

from gql_presence.store import (
    CustomStatus,
    EventKind,
    PublishedEvent,
    PublishedPlaceEvent,
    Status,
    Visibility,
    custom_status_of,
)
from gql_presence.store.days import from_ms

E = TypeVar("E")


@dataclass(frozen=True)
class PresenceChange:
    user_id: str
    kind: EventKind  # ONLINE, OFFLINE, KICKED or STATUS
    at: datetime
    session_id: str | None
    online: bool
    status: Status = Status.OFFLINE
    custom: CustomStatus | None = None
    # The user's version after the event (None for other end users), and its entry in the
    # feed ("" for none).
    version: int | None = None
    feed_id: str = ""

    @classmethod
    def of(cls, announced: PublishedEvent) -> PresenceChange:
        """The event as backends and its user see it (of kind `others_kind` for an event
        they see nothing of: `for_others_only`)."""
        return cls(
            announced.user_id,
            EventKind(announced.kind or announced.others_kind),
            from_ms(int(announced.at_ms)),
            announced.session_id or None,
            bool(announced.online_or_generation),
            Status(announced.status),
            custom_status_of(announced.custom),
            int(announced.version),
            announced.feed_id,
        )

    @staticmethod
    def for_others_only(announced: PublishedEvent) -> bool:
        """Whether backends and the user see nothing of the event."""
        return not announced.kind

    def seen_by_others(
        self, announced: PublishedEvent, *, in_friend_set: bool = False
    ) -> PresenceChange | None:
        """The event as other end users see it (`in_friend_set`: those in its user's friend
        set), or None when they see nothing of it (SEMANTICS, "Status": an invisible user is
        offline to them; a lastSeen they may not see leaves the event's `at` at its
        announcement, and names no session, as their reads list none)."""
        if not announced.others_kind:
            return None
        shown = self
        may_see = announced.visible_to == Visibility.EVERYONE or (
            announced.visible_to == Visibility.FRIENDS and in_friend_set
        )
        if not may_see:
            shown = replace(shown, at=from_ms(int(announced.announced_ms)), session_id=None)
        if announced.invisible:
            shown = replace(shown, status=Status.OFFLINE, custom=None, online=False)
        return replace(shown, kind=EventKind(announced.others_kind), version=None)


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
# Writes WebSocket frames (text_frame's) to a socket at once, as they are; returns as WriteNow.
WriteFrames = Callable[[bytes], int | None]
# One flush's frames of single messages, by the message's head and payload: the same bytes
# for every socket whose subscription shares the rendering and the operation id.
Frames = dict[tuple[bytes, bytes], bytes]
# One event's payloads, each rendered once, by the renderer that made it.
Rendered = dict[Render, bytes]


class Follower:
    """One subscription's place in the hub: whom its events are shown to, and whether it was
    dropped (what it follows is the hub's: realtime/interests.py)."""

    __slots__ = (
        "_capacity",
        "_hub",
        "_on_drop",
        "dropped",
        "friends_applied",
        "friends_read",
        "in_friend_sets_of",
        "reader",
    )

    def __init__(self, hub: Hub, capacity: int, on_drop: OnDrop) -> None:
        self._hub = hub
        self._capacity = capacity
        self._on_drop = on_drop
        # Reads of the friend set started, and the latest one applied: a read that finishes
        # after a later one was applied is stale and dropped.
        self.friends_read = 0
        self.friends_applied = 0
        self.dropped: FeedDroppedError | None = None
        # Whom events are shown to: an end user's id, or None for a backend (see all); and
        # the users followed whose friend set holds that end user (who may then see the
        # lastSeen of those who let FRIENDS see it).
        self.reader: str | None = None
        self.in_friend_sets_of: frozenset[str] = frozenset()

    def offer(self, event: PresenceChange, rendered: Rendered) -> Writer | None:
        """Takes the event in; returns the follower when it has messages to write once the
        batch of events being read has been read (a Writer's first of the batch)."""
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


class Writer(Follower):
    """A subscription whose messages are written to its socket as the hub receives events:
    no task, queue or execution of its own. Its messages are `head + payload + b"}"`, each
    one uncompressed text frame. The messages of one batch of events (those the store
    published at once) are written together when the batch has been read. The socket's end,
    or its operation's, ends it (`forget`)."""

    __slots__ = ("_batch", "_head", "_write")

    def __init__(
        self, hub: Hub, capacity: int, on_drop: OnDrop, write: WriteFrames, head: bytes
    ) -> None:
        super().__init__(hub, capacity, on_drop)
        self._write = write
        self._head = head
        self._batch: list[bytes] = []  # the payloads

    def _add(self, payload: bytes) -> Writer | None:
        """Adds a message to the batch; returns itself when it is the batch's first."""
        batch = self._batch
        if len(batch) >= self._capacity:
            batch.clear()
            self._too_slow()
            return None
        batch.append(payload)
        return self if len(batch) == 1 else None

    def _keep(self, held: list[E], event: E) -> None:
        """Keeps an event heard before the subscription's first messages are written; a
        subscriber that would keep more than its capacity is too slow."""
        if len(held) >= self._capacity:
            self._too_slow()
        else:
            held.append(event)

    def _write_first(self, payloads: Iterable[bytes]) -> None:
        """Writes a subscription's first messages, _START_BATCH at a time, so that no batch
        is taken for a subscriber that falls behind."""
        for number, payload in enumerate(payloads, 1):
            if self.dropped is not None:
                return
            self._add(payload)
            if number % _START_BATCH == 0:
                self.flush()
        self.flush()

    def flush(self, frames: Frames | None = None) -> None:
        """Writes the batch. A batch of one message (as when changes come one at a time) is
        framed once in `frames` for every writer of the same head and payload, then written
        as those same bytes to each socket."""
        # The batch's list is emptied, not replaced: no list is made per socket per event.
        batch = self._batch
        if not batch:
            return
        if self.dropped is not None:
            batch.clear()
            return
        head = self._head
        count = len(batch)
        if count == 1 and frames is not None:
            key = (head, batch[0])
            framed = frames.get(key)
            if framed is None:
                framed = frames[key] = text_frame(b"".join((head, batch[0], b"}")))
        else:
            framed = b"".join([text_frame(b"".join((head, p, b"}"))) for p in batch])
        waiting = self._write(framed)
        # None: the socket is closing, and this subscription ends with it. Otherwise the
        # bytes unsent, counted in messages of this batch's size.
        too_slow = waiting and waiting * count > self._capacity * (
            sum(map(len, batch)) + count * (len(head) + 1)
        )
        batch.clear()
        if too_slow:
            self._too_slow()


# The first byte of a frame that is a whole text message: FIN and opcode 1, no RSV bits (so
# never compressed, which permessage-deflate allows message by message).
_TEXT_FIN = 0x81
_SHORT, _MEDIUM, _LONG = struct.Struct("!BB"), struct.Struct("!BBH"), struct.Struct("!BBQ")


def text_frame(message: bytes) -> bytes:
    """`message` (UTF-8 JSON) as one uncompressed, unmasked text frame, as a server sends it
    (RFC 6455, 5.1)."""
    size = len(message)
    if size < 126:
        return _SHORT.pack(_TEXT_FIN, size) + message
    if size < 1 << 16:
        return _MEDIUM.pack(_TEXT_FIN, 126, size) + message
    return _LONG.pack(_TEXT_FIN, 127, size) + message


class Delivery(Writer):
    """A presenceChanged subscription written to its socket (multiplexed delivery): each
    event's payload rendered once for every delivery that shares `render`. One that resumes
    keeps the events heard until its replay is written (`resume`), and drops those the
    replay passed then."""

    __slots__ = ("_held", "_passed", "_render")

    def __init__(  # noqa: PLR0917 - each part is distinct
        self,
        hub: Hub,
        capacity: int,
        on_drop: OnDrop,
        write: WriteFrames,
        head: bytes,
        render: Render,
    ) -> None:
        super().__init__(hub, capacity, on_drop, write, head)
        self._render = render
        self._held: list[PresenceChange] | None = None
        self._passed: Passed | None = None

    def hold(self) -> None:
        """Keeps the events heard from now until `resume`."""
        self._held = []

    def offer(self, event: PresenceChange, rendered: Rendered) -> Writer | None:
        if self.dropped is not None:
            return None
        if self._held is not None:
            self._keep(self._held, event)
            return None
        if self._passed is not None and self._passed(event.user_id, event.feed_id):
            return None
        # rendered_once and _add, written out: this runs for every delivery of a fan-out.
        payload = rendered.get(self._render)
        if payload is None:
            payload = rendered[self._render] = self._render(event)
        batch = self._batch
        if not batch:
            batch.append(payload)
            return self
        return self._add(payload)

    def resume(self, replayed: Iterable[PresenceChange], passed: Passed) -> None:
        """Writes the replayed events, then those heard since `hold` that the replay did not
        pass (`passed(user_id, feed_id)`), and every later one as it comes. An event the
        replay passed that is heard later still (a message published before the channel's
        subscription was confirmed can arrive after it, over a cluster's bus) is dropped
        too."""
        held, self._held = self._held or [], None
        self._passed = passed
        later = (event for event in held if not passed(event.user_id, event.feed_id))
        self._write_first(map(self._render, itertools.chain(replayed, later)))


# Renders a place's event as the `payload` of a placeChanged `next` message, JSON-encoded.
PlaceRender = Callable[[PublishedPlaceEvent], bytes]
PlaceRendered = dict[PlaceRender, bytes]
# Whether a resume's replay passed an event of this user or place, by its entry in the feed
# (store/feed.py Replay.passed).
Passed = Callable[[str, str], bool]


class PlaceDelivery(Writer):
    """A placeChanged subscription written to its socket, as a Delivery is: first a JOINED
    for each member the place held when it was read (`start`), then each event after that
    read, each payload rendered once for every delivery that shares `render`. Events heard
    before the read are kept until it is done, and those the read reflects dropped then."""

    __slots__ = ("_after", "_passed", "_render", "_waiting", "place_id")

    def __init__(  # noqa: PLR0917 - each part is distinct
        self,
        hub: Hub,
        capacity: int,
        on_drop: OnDrop,
        write: WriteFrames,
        head: bytes,
        render: PlaceRender,
        place_id: str,
    ) -> None:
        super().__init__(hub, capacity, on_drop, write, head)
        self._render = render
        self.place_id = place_id
        self._waiting: list[PublishedPlaceEvent] | None = []
        self._after = 0  # the number of the last event the read reflects
        self._passed: Passed | None = None  # what a resume's replay passed

    def offer_place(self, event: PublishedPlaceEvent, rendered: PlaceRendered) -> Writer | None:
        """As `offer`, for the place's events."""
        if self.dropped is not None:
            return None
        if self._waiting is not None:
            self._keep(self._waiting, event)
            return None
        if event.sequence <= self._after or (
            self._passed is not None and self._passed(event.place_id, event.feed_id)
        ):
            return None
        return self._add(rendered_once(self._render, event, rendered))

    def start(self, members: Iterable[PublishedPlaceEvent], sequence: int) -> None:
        """Writes the members read (as JOINED events), then the events heard since the read
        that it does not reflect, and delivers every later event as it comes."""
        waiting, self._waiting = self._waiting or [], None
        self._after = sequence
        later = [event for event in waiting if event.sequence > sequence]
        self._write_first(map(self._render, [*members, *later]))

    def resume(self, replayed: Iterable[PublishedPlaceEvent], passed: Passed) -> None:
        """As `start` for a subscription that resumes: the replayed events, then those heard
        meanwhile that the replay did not pass (`passed(place_id, feed_id)`), as a
        Delivery's `resume` does."""
        waiting, self._waiting = self._waiting or [], None
        self._passed = passed
        later = (event for event in waiting if not passed(event.place_id, event.feed_id))
        self._write_first(map(self._render, itertools.chain(replayed, later)))


def rendered_once(
    render: Callable[[E], bytes], event: E, rendered: dict[Callable[[E], bytes], bytes]
) -> bytes:
    """The payload `render` makes of the event: made by the first delivery that shares
    `render`, taken from `rendered` (this event's payloads) by the others."""
    payload = rendered.get(render)
    if payload is None:
        payload = rendered[render] = render(event)
    return payload


# The first messages of a placeChanged delivery (up to 1,000 members), or of a resume, are
# written this many at a time, so that no batch is taken for a subscriber that falls behind.
_START_BATCH = 50


class Hub(Protocol):
    """What a follower needs of the hub that holds it (realtime/hub.py's EventHub)."""

    def forget(self, follower: Follower) -> None: ...

    def spawn(self, work: Awaitable[None]) -> None: ...
