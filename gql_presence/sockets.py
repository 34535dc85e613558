"""WebSockets whose close ends in bounded time, whatever the client does."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import WSCloseCode, web
from aiohttp.abc import AbstractStreamWriter

# How long a close may wait for the client: to take what is queued for it and the close
# frame, and to answer with its own. A client that reads answers within milliseconds.
CLOSE_WAIT_S = 1.0


class BoundedWebSocketResponse(web.WebSocketResponse):
    """A WebSocket whose close() ends within CLOSE_WAIT_S and then releases the connection.

    aiohttp's close() first waits, without a time limit, until the client has taken what
    is queued for it, and only then waits `timeout` seconds for its close frame. A client
    that stops reading would hold the connection, and everything queued for it, for ever.
    Past the limit, or when anything is still unsent after the close, the connection is
    aborted: what is queued is discarded and the socket released at once. Every close goes
    through here: the service's own (a subscriber dropped, credentials refused, shutdown)
    and those Strawberry and aiohttp make.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(timeout=CLOSE_WAIT_S, **kwargs)
        self._transport: asyncio.Transport | None = None

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter:
        self._transport = request.transport
        return await super().prepare(request)

    async def close(
        self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True
    ) -> bool:
        if self.closed:  # another close is under way, and bounded itself
            return False
        try:
            async with asyncio.timeout(CLOSE_WAIT_S):
                return await super().close(code=code, message=message, drain=drain)
        except TimeoutError:
            return True
        finally:
            transport = self._transport
            if transport is not None and transport.get_write_buffer_size():
                transport.abort()
