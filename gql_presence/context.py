"""What every resolver of one request can use."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web
from strawberry.dataloader import DataLoader

from gql_presence.events import EventHub, OnDrop
from gql_presence.store import PresenceStore, Session


@dataclass(frozen=True)
class Context:
    request: web.Request
    store: PresenceStore
    # Made anew for each request, so that no request reads another's cached sessions.
    sessions: DataLoader[str, tuple[Session, ...]]
    events: EventHub
    # Ends the WebSocket connection of a subscription whose feed was dropped.
    close_socket: OnDrop
