"""The limits every request meets, each sized by what a valid request needs.

README's "Running in production" gives the reason for each figure.
"""

from __future__ import annotations

import math

from gql_presence.auth import Caller, CallerKind
from gql_presence.errors import RateLimitedError
from gql_presence.settings import Settings
from gql_presence.store import MAX_ID_LENGTH, MAX_IDS_PER_CALL, PresenceStore

# The largest valid request: 10,000 ids of 128 characters (each up to 4 bytes of UTF-8, and
# quotes and a comma), plus the document and the JSON around it.
MAX_BODY_BYTES = MAX_IDS_PER_CALL * (MAX_ID_LENGTH * 4 + 3) + 64 * 1024
# A WebSocket's `subscribe` message carries what a request body does (a document and its
# variables): its messages are bounded alike (aiohttp closes the socket with 1009 above).
MAX_SOCKET_MESSAGE_BYTES = MAX_BODY_BYTES
# Documents are short; long lists belong in variables, which neither limit counts.
MAX_DOCUMENT_CHARS = 32 * 1024
MAX_TOKENS = 2000
# The deepest useful selection is 4 levels (onlineUsers > nodes > sessions > lastSeen).
MAX_DEPTH = 10
# Each alias of a root field is one more script call in the same request.
MAX_ALIASES = 15
# Fragments let a short document stand for a huge one (each spreading the one before it
# twice doubles it): the selections it stands for, every spread expanded, are bounded. The
# largest document a client sends is GraphiQL's introspection query, 487 selections once
# expanded; an operation using every alias and every field is about 200.
MAX_SELECTIONS = 1000
# Fields of one response name at one place are compared in pairs to check that they can be
# merged. Fragments that overlap make a few pairs (a page spreading three fragments that
# each select userId under every alias: 136); 300 pairs cost about as much to validate as
# the largest valid operation.
MAX_SAME_FIELD_PAIRS = 300
MAX_SUBSCRIPTIONS_PER_SOCKET = 20
# A WebSocket that has not authenticated (connection_init) by then is closed.
CONNECTION_INIT_WAIT_S = 10


class RateLimiter:
    """A token bucket per caller, kept in Redis so that every API process shares it."""

    def __init__(self, store: PresenceStore, settings: Settings) -> None:
        self._store = store
        self._buckets = {
            CallerKind.USER: (settings.user_rate, settings.user_burst),
            CallerKind.BACKEND: (settings.backend_rate, settings.backend_burst),
        }

    async def admit(self, caller: Caller) -> None:
        """Raises RateLimitedError when the caller has no token left."""
        # Open and anonymous callers have no bucket: they name no one to count against.
        rate, burst = self._buckets.get(caller.kind, (0.0, 0))
        if not rate:
            return
        wait_ms = await self._store.take_token(f"{caller.kind.value}:{caller.name}", rate, burst)
        if wait_ms:
            raise RateLimitedError(math.ceil(wait_ms / 1000))
