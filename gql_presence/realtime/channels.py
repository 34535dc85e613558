"""The Redis side of presence events: which channels this process is subscribed to.

One pub/sub connection, or with sharded pub/sub one per shard (a *route*, to the master of
the shard's slot, which alone hears the shard's channels); everything below holds for each
route on its own. The channels wanted change as subscribers come and go (realtime/interests.py
says which); the changes of one event-loop turn go in one command per route, subscriptions
before unsubscriptions. A channel's messages are handed on once Redis has confirmed its
subscription, until it is left; a user's channel is left unread while the channel of every
user of its route is live (its copies of events replace those of the users' channels then).
The switch from one to the other falls between two scripts' messages (a confirmation on a
connection comes between two commands' output), so no event is handed on twice or missed.
The messages already arrived are read in one batch, so that the events of one script reach
a socket in one write.
When a connection is lost (an error, silence longer than the limit, or Redis leaving a
shard's channels because its slot moved), its route's subscriptions are lost with it, the
receiver is told, and the route connects and subscribes again. This module knows channel
names, not who follows them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, Protocol

from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from gql_presence.realtime.interests import Changes
from gql_presence.store import PresenceStore
from gql_presence.store.errors import StoreUnavailableError

log = logging.getLogger("gql_presence.events")

_RECONNECT_DELAYS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
_STOP_WAIT_S = 5.0
# How long a subscriber waits for Redis to confirm its channels before it is refused.
_CONFIRM_WAIT_S = 10.0
# Channels per SUBSCRIBE or UNSUBSCRIBE command.
_CHANNELS_PER_COMMAND = 1000
# Messages read before the receiver is told the batch ended: those already arrived are read
# first, so that the events of one script (one message per user) reach a socket in one write.
_MESSAGES_PER_BATCH = 1000
_CONFIRMATIONS = frozenset({"subscribe", "unsubscribe", "ssubscribe", "sunsubscribe"})


class ShardSubscriber(Protocol):
    """Opens the pub/sub connections of sharded pub/sub (running/connection.py)."""

    async def pubsub_for(self, channel: str, *, again: bool) -> PubSub:
        """A connection to the master that serves the channel's slot, as far as known: after
        a loss (`again`), as the cluster says now."""
        ...


class Receiver(Protocol):
    """Who takes the messages of the channels (realtime/dispatch.py)."""

    def every_user_message(self, data: bytes, *, settled: bool) -> None:
        """A message of the channel of every user, while it is live; `settled`: no command of
        the channel is waiting for its confirmation (it is not about to be left)."""

    def channel_message(self, channel: bytes, data: bytes, *, every_user_live: bool) -> None:
        """A message of another channel, while it is live; `every_user_live`: the channel of
        every user of its route is live too, and brings the users' events."""

    def batch_read(self) -> None:
        """The messages that had arrived have been read."""

    def route_lost(self, route: int, why: str) -> None:
        """The route's connection was lost: events of its channels may have been missed."""


def again(why: str) -> str:
    return f"{why}; re-read presence and subscribe again"


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


class Channels:
    """The channels this process is subscribed to, over each route."""

    def __init__(
        self,
        redis: Redis | ShardSubscriber,
        store: PresenceStore,
        receiver: Receiver,
        *,
        ping_every_s: float = 5.0,
        silence_limit_s: float = 15.0,
    ) -> None:
        self._redis = redis
        self._store = store
        self._receiver = receiver
        # A connection that stops answering (a network partition leaves no error behind) is
        # found by PINGs: silence longer than silence_limit_s counts as a lost connection.
        self._ping_every_s = ping_every_s
        self._silence_limit_s = silence_limit_s
        # Made at the start, once the store knows how events are published.
        self._routes: list[_Route] = []
        self._every_user: frozenset[bytes] = frozenset()
        # The channels wanted now, and those whose wish changed in this event-loop turn.
        self._wanted: set[bytes] = set()
        self._changed: set[bytes] = set()
        self._update_planned = False
        # The subscription's channels, of every route: the channels whose last command sent
        # was SUBSCRIBE, how many commands of each channel Redis has not confirmed yet, and
        # the channels whose messages are handed on.
        # A user's channel is live once its last command, a SUBSCRIBE, is confirmed, and no
        # longer as soon as it is unsubscribed (nobody here follows the user then). The channel
        # of every user is live from the confirmation of a SUBSCRIBE to that of an
        # UNSUBSCRIBE: its copies of events replace those of the users' channels (of its
        # route) then.
        self._asked: set[bytes] = set()
        self._unconfirmed: dict[bytes, int] = {}
        self._live: set[bytes] = set()
        # Per channel awaited, one future for all who wait: True once confirmed, False when
        # the connection was lost first.
        self._confirmed: dict[bytes, asyncio.Future[bool]] = {}
        # Messages received: what this process pays for.
        self.messages_received = 0
        self._tasks: set[asyncio.Task[None]] = set()
        # redis-py may turn a cancellation into a ConnectionError; this flag is what ends the
        # listener's loop for certain.
        self._stopping = False

    @property
    def subscribed(self) -> bool:
        """Whether this process receives events now (over every route)."""
        return all(route.subscribed.is_set() for route in self._routes)

    @property
    def count(self) -> int:
        """Channels this process asked Redis to send it (the quiet ones included)."""
        return len(self._asked)

    def every_user(self, route: int) -> bytes:
        """The channel of every user's events of the route."""
        return self._routes[route].every_user

    def settled(self, channel: bytes) -> bool:
        """Whether the channel's messages are handed on, no command of it unconfirmed."""
        return channel in self._live and channel not in self._unconfirmed

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
        """Ends the subscription and the tasks spawned; bounded, so that a shutdown never
        waits on a connection that stopped answering."""
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

    def spawn(self, work: Awaitable[None]) -> None:
        """Runs `work` in a task of its own, ended by `stop`; its failure is logged."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("presence events: %s failed", task.get_coro(), exc_info=error)

    # --- which channels are subscribed -----------------------------------------------------

    def want(self, changes: Changes) -> None:
        """Subscribes to the channels added and leaves those dropped, at the end of this
        event-loop turn, in one command for all of the turn's changes."""
        if not changes:
            return
        self._wanted.update(changes.add)
        self._wanted.difference_update(changes.drop)
        self._changed.update(changes.add)
        self._changed.update(changes.drop)
        self._plan_update()

    def _plan_update(self) -> None:
        if not self._update_planned:
            self._update_planned = True
            asyncio.get_running_loop().call_soon(self._update_subscription)

    def _update_subscription(self) -> None:
        self._update_planned = False
        if self._stopping:
            return  # a task started now would outlive stop(), which waits for those before it
        # Per route, the channels to subscribe to and those to leave.
        plans: dict[int, tuple[list[bytes], list[bytes]]] = {}
        for channel in self._changed:
            self._ask(channel, channel in self._wanted, plans)
        self._changed.clear()
        for index, (subscribe, unsubscribe) in plans.items():
            route = self._routes[index]
            self.spawn(self._send(route, route.pubsub, subscribe, unsubscribe))

    def _route_of(self, channel: bytes) -> _Route:
        return self._routes[self._store.route_of_channel(channel)]

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
            if pubsub is None:
                return  # no connection yet; the first one subscribes to what is wanted
            steps = (
                (pubsub.ssubscribe if route.sharded else pubsub.subscribe, subscribe),
                (pubsub.sunsubscribe if route.sharded else pubsub.unsubscribe, unsubscribe),
            )
            try:
                for command, channels in steps:
                    for first in range(0, len(channels), _CHANNELS_PER_COMMAND):
                        # Checked before each command: redis-py opens a closed PubSub's
                        # connection again at its next command, and nothing would close that.
                        if pubsub is not route.pubsub:
                            return  # lost; the next connection subscribes to what is wanted
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

    async def until_live(self, channels: Iterable[bytes]) -> None:
        """Waits until Redis has confirmed the subscription to every channel."""
        waiting = [channel for channel in channels if not self.settled(channel)]
        if not waiting:
            return
        try:
            async with asyncio.timeout(_CONFIRM_WAIT_S):
                for channel in waiting:
                    if self.settled(channel):
                        continue
                    confirmed = self._confirmed.get(channel)
                    if confirmed is None:
                        confirmed = asyncio.get_running_loop().create_future()
                        self._confirmed[channel] = confirmed
                    # Shielded: one waiter's cancellation is not the others'.
                    if not await asyncio.shield(confirmed):
                        raise StoreUnavailableError(again("event stream interrupted"))
        except TimeoutError:
            raise StoreUnavailableError(
                "The store did not confirm the event subscription in time; subscribe again."
            ) from None

    # --- connections -------------------------------------------------------------------------

    async def _subscribe_anew(self, route: _Route, pubsub: PubSub) -> None:
        """Subscribes a new connection of the route to every channel of it wanted now."""
        mine = {channel for channel in self._wanted if self._route_of(channel) is route}
        mine.add(route.quiet)
        self._asked = {c for c in self._asked if self._route_of(c) is not route} | mine
        # The route's channels had none unconfirmed or live since its last connection was lost.
        self._unconfirmed.update(dict.fromkeys(mine, 1))
        asked = sorted(mine)
        subscribe = pubsub.ssubscribe if route.sharded else pubsub.subscribe
        for first in range(0, len(asked), _CHANNELS_PER_COMMAND):
            await subscribe(*asked[first : first + _CHANNELS_PER_COMMAND])
        route.pubsub = pubsub
        # What changed while the commands were sent.
        self._changed.update(self._wanted, mine - {route.quiet})
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
                # Whatever ended the subscription, events may have been missed: the receiver
                # is told, and this process subscribes again.
                route.subscribed.clear()
                self._lost(route)
                self._receiver.route_lost(
                    route.index, f"event stream interrupted ({type(error).__name__})"
                )
                delay = _RECONNECT_DELAYS_S[min(attempt, len(_RECONNECT_DELAYS_S) - 1)]
                attempt += 1
                log.warning("%s lost (%s); subscribing again in %g s", route.name(), error, delay)
                await asyncio.sleep(delay)
            else:
                attempt = 0
            finally:
                if pubsub is not None:
                    if route.pubsub is pubsub:
                        route.pubsub = None  # no command may go on it (_send) once it closes
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
                    self._receiver.batch_read()
            if route.send_failed is not None:
                raise redis_errors.ConnectionError(f"subscribing failed: {route.send_failed}")
            if now - heard > self._silence_limit_s:
                raise redis_errors.ConnectionError(
                    f"no answer from Redis for {self._silence_limit_s:g} s"
                )
            if now - pinged >= self._ping_every_s or not route.subscribed.is_set():
                await pubsub.ping()
                pinged = now

    def _take(self, route: _Route, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind in {"message", "smessage"}:
            self.messages_received += 1
            channel = message["channel"]
            if channel not in self._live:
                return
            if channel == route.every_user:
                # Those who follow everyone get events once the channel is settled: not
                # those of a subscription about to be left, which a gap would follow.
                self._receiver.every_user_message(
                    message["data"], settled=channel not in self._unconfirmed
                )
            else:
                self._receiver.channel_message(
                    channel, message["data"], every_user_live=route.every_user in self._live
                )
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
