"""What every resolver of one request can use."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from aiohttp import WSCloseCode, web
from strawberry.dataloader import DataLoader

from gql_presence.http.sockets import BoundedWebSocketResponse
from gql_presence.policy.auth import Caller, Need
from gql_presence.policy.limits import RateLimiter
from gql_presence.realtime.delivery import Selections
from gql_presence.realtime.held import HeldSessions
from gql_presence.realtime.hub import EventHub, FeedDroppedError
from gql_presence.store import PresenceStore, Session

if TYPE_CHECKING:
    from gql_presence.graphql.persisted import PersistedDocuments


@dataclass
class Context:
    request: web.Request
    store: PresenceStore
    events: EventHub
    # Who is calling: from the Authorization header, or a WebSocket's connection_init.
    caller: Caller
    limiter: RateLimiter
    # Documents known by their hash, and the trusted ones (PRESENCE_TRUSTED_DOCUMENTS).
    documents: PersistedDocuments
    # The connection-bound sessions (presenceSession) of this process.
    held_sessions: HeldSessions
    # A WebSocket's connection_init payload, as the client sent it.
    connection_params: dict[str, object] = field(default_factory=dict)
    # The SHA-256 of the request's document once checked against its text (persisted.py).
    document_hash: str | None = None
    # A WebSocket's connection, which multiplexed subscriptions write their events to.
    socket: BoundedWebSocketResponse | None = None
    # The subscription documents that this process renders once per event (fanout.py).
    selections: Selections = field(default_factory=Selections)

    async def close_socket(self, reason: FeedDroppedError) -> None:
        """Ends the WebSocket connection of a subscription whose feed was dropped."""
        socket = self.socket
        if socket is not None and not socket.closed:
            code = WSCloseCode.POLICY_VIOLATION if reason.violation else WSCloseCode.SERVICE_RESTART
            await socket.close(code=code, message=reason.reason.encode()[:123])

    @cached_property
    def sessions(self) -> DataLoader[str, tuple[Session, ...]]:
        """The sessions of users, read in batches: made anew for each request (most never
        use it), so that no request reads another's cached sessions."""
        return sessions_loader(self.store)

    def store_for(self, need: Need, operation: str, user_id: str | None = None) -> PresenceStore:
        """The store, once the caller is known to be allowed this operation."""
        self.caller.authorize(need, operation, user_id)
        return self.store


def sessions_loader(store: PresenceStore) -> DataLoader[str, tuple[Session, ...]]:
    """Reads the sessions of every user on a page in one script call per shard."""

    async def load(user_ids: list[str]) -> list[tuple[Session, ...]]:
        return [p.sessions for p in await store.presence_many(user_ids)]

    return DataLoader(load_fn=load)
