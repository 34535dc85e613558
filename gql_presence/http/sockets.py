"""WebSockets whose close ends in bounded time, whatever the client does, that take a text
message written at once, and whose pings start when the caller says; one heartbeat pings the
sockets of a process."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from typing import Any

from aiohttp import WSCloseCode, web
from aiohttp.abc import AbstractStreamWriter

from gql_presence.realtime.delivery import text_frame

# How long a close may wait for the client: to take what is queued for it and the close
# frame, and to answer with its own. A client that reads answers within milliseconds.
CLOSE_WAIT_S = 1.0

# A control frame's payload is at most 125 bytes, two of them the close code (RFC 6455, 5.5).
_MAX_REASON_BYTES = 123

# The heartbeat looks at every socket this many times a `heartbeat`: a socket silent for
# PING_AFTER_TICKS looks is pinged (after 3/4 to 1 heartbeat of silence), and one still
# silent DROP_AFTER_TICKS looks on (half a heartbeat after its ping, as aiohttp waits for a
# pong) is dropped: within 1.5 heartbeats of its last frame, aiohttp's own bound.
TICKS_PER_HEARTBEAT = 4
PING_AFTER_TICKS = 4
DROP_AFTER_TICKS = 6
# An unmasked PING frame with no payload (RFC 6455, 5.5.2): control frames are never compressed.
_PING_FRAME = b"\x89\x00"


class BoundedWebSocketResponse(web.WebSocketResponse):
    """A WebSocket whose close() ends within CLOSE_WAIT_S and then releases the connection.

    aiohttp's close() first waits, without a time limit, until the client has taken what
    is queued for it, and only then waits `timeout` seconds for its close frame. A client
    that stops reading would hold the connection, and everything queued for it, for ever.
    Past the limit, or when anything is still unsent after the close, the connection is
    aborted: what is queued is discarded and the socket released at once. Every close goes
    through here: the service's own (a subscriber dropped, credentials refused, shutdown)
    and those Strawberry and aiohttp make.

    Its overrides of aiohttp's heartbeat, write_eof and close follow aiohttp's own code, of
    the version recorded in graphql/internals.COPIED.
    """

    # Slots for what this class adds: aiohttp's own attributes fill the instance dictionary
    # so far that more keys there would make CPython give up its shared-key (split) form
    # for a whole table of its own, about 1.2 KiB more per socket.
    __slots__ = ("_ends", "_serve", "_silent_ticks", "_transport")

    def __init__(
        self, *, heartbeat: float | None = None, max_msg_size: int = 4 * 1024 * 1024, **kwargs: Any
    ) -> None:
        # aiohttp would ping from the handshake on with a timer of each socket's own; here
        # `heartbeat` only makes prepare() report each frame read (_on_data_received), and
        # ping_forever(), one task for every socket of the process, pings and drops a client
        # that misses a pong with no close frame (the client sees 1006), as aiohttp does,
        # from start_heartbeat() on: until then the one timer that may end the socket is the
        # one whose close says why (graphql-transport-ws's 4408).
        super().__init__(
            timeout=CLOSE_WAIT_S, max_msg_size=max_msg_size, heartbeat=heartbeat, **kwargs
        )
        self._transport: asyncio.Transport | None = None
        self._serve: Callable[[], Awaitable[None]] | None = None
        self._ends: list[Callable[[bool], None]] = []
        # The heartbeat's looks since the client last sent anything; -1 until start_heartbeat().
        self._silent_ticks = -1

    def serve_after_handshake(
        self, serve: Callable[[], Awaitable[None]], ends: list[Callable[[bool], None]]
    ) -> None:
        """Serves the socket once the request's handler and middlewares have returned it:
        aiohttp then awaits write_eof(), which here awaits `serve` to the socket's end, then
        calls each of `ends` (with whether `serve` failed), then closes the socket.

        What an idle socket keeps alive is then `serve`'s frames, not those of the
        middlewares and of the view that answered the handshake as well."""
        self._serve, self._ends = serve, ends

    async def write_eof(self) -> None:  # type: ignore[override]  # as aiohttp's own
        serve, self._serve = self._serve, None
        if serve is not None:
            failed = True
            try:
                await serve()
                failed = False
            finally:
                for end in self._ends:
                    end(failed)
                self._ends = []
        await super().write_eof()

    def _close_reason(self, code: int) -> str:
        """Why aiohttp closes with `code`, which it says with no reason of its own: made only
        when a socket closes so, not kept by every socket."""
        if code == WSCloseCode.MESSAGE_TOO_BIG:
            return f"A message must be shorter than {self._max_msg_size:,} bytes."
        return _REASONS.get(code, "")

    def start_heartbeat(self) -> None:
        """From now on, ping_forever() pings the client after about `heartbeat` seconds of
        silence and drops it when nothing (a pong) is back within half of that: aiohttp's
        own heartbeat, started late, on one timer for all sockets."""
        if self._silent_ticks < 0 and not self.closed:
            self._silent_ticks = 0

    def _reset_heartbeat(self) -> None:
        pass  # aiohttp's per-socket timer: ping_forever() does its work for every socket

    def _on_data_received(self) -> None:
        # aiohttp's: anything the client sends (a pong, too) counts, not before it started.
        self._silent_ticks = min(self._silent_ticks, 0)

    def heartbeat_tick(self) -> None:
        """One look of ping_forever(): a ping after PING_AFTER_TICKS looks of silence, and
        aiohttp's drop for a missed pong (code 1006, the handler told) after DROP_AFTER_TICKS."""
        silent = self._silent_ticks
        if silent < 0 or self.closed:
            return
        silent += 1
        self._silent_ticks = silent
        if silent == PING_AFTER_TICKS:
            transport = self._transport
            if transport is not None and not transport.is_closing():
                transport.write(_PING_FRAME)  # whole, as aiohttp writes its frames (send_now)
        elif silent >= DROP_AFTER_TICKS:
            self._pong_not_received()

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter:
        self._transport = request.transport
        return await super().prepare(request)

    def send_now(self, messages: list[bytes]) -> int | None:
        """Writes each of `messages` (UTF-8 JSON) as one uncompressed text frame, now, after
        every frame written before them; returns the bytes waiting to be sent on this
        connection, or None when the socket is closing and nothing was written.

        aiohttp writes each of its frames with whole, synchronous transport writes (a
        compressed one after compressing it, under its own lock), so a frame written here
        never splits another; a large compressed message another operation sends may
        follow a frame written here later, which is fine, since order is kept within an
        operation only. A server's frames are not masked (RFC 6455, 5.1)."""
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            return None
        transport.write(b"".join([text_frame(m) for m in messages]))
        return transport.get_write_buffer_size()

    def send_frames(self, frames: bytes) -> int | None:
        """Writes `frames` (text_frame's, of UTF-8 JSON messages) as they are, as send_now
        writes the frames it makes; returns as send_now."""
        transport = self._transport
        if self.closed or transport is None or transport.is_closing():
            return None
        transport.write(frames)
        return transport.get_write_buffer_size()

    async def close(
        self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True
    ) -> bool:
        if self.closed:  # another close is under way, and bounded itself
            return False
        # aiohttp closes for a bad frame without a reason; a reason of more than 123 bytes
        # (Strawberry's may quote what the client sent) would make the close frame itself
        # one the client must refuse.
        message = _bounded(message or self._close_reason(code).encode())
        try:
            async with asyncio.timeout(CLOSE_WAIT_S):
                return await super().close(code=code, message=message, drain=drain)
        except TimeoutError:
            return True
        finally:
            transport = self._transport
            if transport is not None and transport.get_write_buffer_size():
                transport.abort()


_REASONS: dict[int, str] = {
    WSCloseCode.INVALID_TEXT: "A text message must be UTF-8.",
    WSCloseCode.PROTOCOL_ERROR: "The frames sent break the WebSocket protocol (RFC 6455).",
}


def _bounded(reason: bytes) -> bytes:
    """`reason` cut to the 123 bytes a close frame holds, at a character's boundary."""
    if len(reason) <= _MAX_REASON_BYTES:
        return reason
    return reason[: _MAX_REASON_BYTES - 3].decode(errors="ignore").encode() + "…".encode()


async def ping_forever(sockets: Collection[BoundedWebSocketResponse], heartbeat_s: float) -> None:
    """The heartbeat of every socket in `sockets` (those whose start_heartbeat() was called):
    one task and one timer for the process instead of a timer per socket, looking at each
    socket TICKS_PER_HEARTBEAT times a `heartbeat_s`."""
    while True:
        await asyncio.sleep(heartbeat_s / TICKS_PER_HEARTBEAT)
        for socket in tuple(sockets):  # a drop may end a socket's handler, which leaves the set
            socket.heartbeat_tick()
