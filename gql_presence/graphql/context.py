"""What every resolver of one request can use."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from aiohttp import WSCloseCode, web
from strawberry.dataloader import DataLoader

from gql_presence.policy.auth import Caller, CallerKind, Need
from gql_presence.policy.limits import MAX_REPRESENTATIONS, RateLimiter
from gql_presence.realtime.delivery import FeedDroppedError
from gql_presence.realtime.held import HeldSessions
from gql_presence.realtime.hub import EventHub
from gql_presence.store import Presence, PresenceStore
from gql_presence.store.errors import ForbiddenError, UnauthenticatedError
from gql_presence.webhooks.safety import Networks

NOT_A_FRIEND = (
    "A user may read the presence of themselves and their friends (the users in their friend "
    "set); {} is not one."
)


class Socket(Protocol):
    """A WebSocket connection, as subscriptions write to it (http/sockets.py makes them)."""

    @property
    def closed(self) -> bool: ...

    async def close(self, *, code: int, message: bytes) -> bool: ...

    def send_now(self, messages: list[bytes]) -> int | None:
        """Writes the messages at once; the bytes left waiting to be sent, or None when the
        socket is closing."""

    def send_frames(self, frames: bytes) -> int | None:
        """Writes text frames made already (realtime/delivery.text_frame), as send_now."""


@dataclass(frozen=True)
class UncheckedDocument:
    """A document named by its hash that this process does not keep yet: kept once it has
    passed every check (persisted.py)."""

    sha256: str
    text: str
    # Sent with its hash (automatic persisted queries): registered in Redis too.
    register: bool


@dataclass
class Context:
    request: web.Request
    store: PresenceStore
    events: EventHub
    # Who is calling: from the Authorization header, or a WebSocket's connection_init.
    caller: Caller
    limiter: RateLimiter
    # The connection-bound sessions (presenceSession) of this process.
    held_sessions: HeldSessions
    # A WebSocket's connection_init payload, as the client sent it, until the socket's caller
    # has been read from it (then None: the socket does not keep its token).
    connection_params: dict[str, object] | None = None
    # The SHA-256 of the request's document once checked against its text (persisted.py).
    document_hash: str | None = None
    # A document named by its hash, to keep once it has passed every check (persisted.py).
    unchecked_document: UncheckedDocument | None = None
    # Why the request's credentials were refused (its body then left unread): admission
    # refuses its operation with this.
    credentials_refused: UnauthenticatedError | None = None
    # A WebSocket's connection, which multiplexed subscriptions write their events to.
    socket: Socket | None = None
    # The networks webhooks may reach besides public addresses (PRESENCE_WEBHOOK_ALLOWED_NETWORKS).
    webhook_networks: Networks = ()

    async def close_socket(self, reason: FeedDroppedError) -> None:
        """Ends the WebSocket connection of a subscription whose feed was dropped."""
        socket = self.socket
        if socket is not None and not socket.closed:
            code = WSCloseCode.POLICY_VIOLATION if reason.violation else WSCloseCode.SERVICE_RESTART
            await socket.close(code=code, message=reason.reason.encode()[:123])

    async def charge(self, items: int) -> None:
        """Counts `items` ids or representations a field was given against the caller's rate
        (RateLimiter.charge), before the field's Redis work."""
        await self.limiter.charge(self.caller, items)

    @cached_property
    def presences(self) -> DataLoader[str, Presence]:
        """Users' presence, read in batches: every load of one turn of the event loop (the
        users of one `_entities`) in one script call per shard. Nothing is kept between
        batches: a WebSocket's operations share this Context, and each must read afresh."""
        return presences_loader(self.store, self.reader)

    @cached_property
    def friend_checks(self) -> DataLoader[str, bool]:
        """Whether each user is in this end user's friend set, read in batches (the Users of
        one `_entities` list together)."""
        reader = self.caller.name

        async def load(user_ids: list[str]) -> list[bool]:
            friends = await self.store.friends_among(reader, user_ids)
            return [user_id in friends for user_id in user_ids]

        return DataLoader(load_fn=load, cache=False, max_batch_size=MAX_REPRESENTATIONS)

    @property
    def reader(self) -> str | None:
        """Whom what is read is shown to: an end user's id, or None for a backend (or an open
        deployment's caller), who sees everything as it is."""
        return self.caller.name if self.caller.kind is CallerKind.USER else None

    async def check_may_read(self, user_ids: Iterable[str]) -> None:
        """Raises unless the caller may read the presence of every user given: a backend
        anyone's, an end user their own and their friends' (the users in their friend set)."""
        self.caller.require_credentials()
        if self.caller.kind is not CallerKind.USER or self.caller.users_see_everyone:
            return
        others = {user_id for user_id in user_ids if user_id != self.caller.name}
        if others:
            strangers = others - await self.store.friends_among(self.caller.name, others)
            if strangers:
                raise ForbiddenError(NOT_A_FRIEND.format(json.dumps(min(strangers))))

    def store_for(self, need: Need, operation: str, user_id: str | None = None) -> PresenceStore:
        """The store, once the caller is known to be allowed this operation."""
        self.caller.authorize(need, operation, user_id)
        return self.store


def presences_loader(store: PresenceStore, reader: str | None) -> DataLoader[str, Presence]:
    """Reads the presence of many users (ids checked already) in one script call per shard,
    as `reader` may see them."""

    async def load(user_ids: list[str]) -> list[Presence]:
        return await store.presence_many(user_ids, reader)

    # A batch of more (the users of several `_entities` at once) is read in several calls,
    # none of which reads more users than one `_entities` may name.
    return DataLoader(load_fn=load, cache=False, max_batch_size=MAX_REPRESENTATIONS)
