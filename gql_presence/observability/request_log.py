"""One log line and a few metrics per GraphQL request: which operation, how it ended, how long.

The operation is named by its type and root fields (`mutation:touch`, graphql/labels.py),
which the schema bounds, rather than by the client's operation name, which it does not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware

from gql_presence.observability.logs import (
    RequestArgs,
    json_stream_of,
    request_fields,
    request_line,
)
from gql_presence.observability.metrics import Metrics

log = logging.getLogger("gql_presence.requests")

OPERATION = web.RequestKey("operation", str)
OUTCOMES = web.RequestKey("outcomes", list[str])
# Who called: a backend's configured name, or the kind of caller; never a user id.
CALLER = web.RequestKey("caller", str)


# Set by a handler that returns a WebSocket whose serving goes on after the middlewares have
# returned (http/sockets.py): what each must do at the socket's end, called with whether its
# serving failed. The request's line and metrics are made then, as they were when the
# handler returned at the socket's end.
SERVED_LATER = web.RequestKey("served_later", list[Callable[[bool], None]])

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _outcome_of_status(status: int) -> str:
    """For requests refused before GraphQL ran: a request GraphQL cannot start on (a batch,
    no query, an unknown operation) is BAD_USER_INPUT; another refusal of HTTP's is named by
    its status (METHOD_NOT_ALLOWED, REQUEST_ENTITY_TOO_LARGE, UNSUPPORTED_MEDIA_TYPE,
    MISDIRECTED_REQUEST...), a client's doing that no operator need be paged for. Only a
    fault of ours is INTERNAL."""
    if status < 400:
        return "ok"
    if status == HTTPStatus.BAD_REQUEST:
        return "BAD_USER_INPUT"
    if status < 500:
        try:
            return HTTPStatus(status).name
        except ValueError:  # a status no handler of ours answers
            return "CLIENT_ERROR"
    return "INTERNAL"


def request_telemetry(metrics: Metrics) -> Middleware:
    """aiohttp middleware: logs and measures each request to /graphql."""

    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path != "/graphql":
            return await handler(request)
        started = time.perf_counter()
        try:
            response = await handler(request)
        except web.HTTPException as refusal:  # a refusal raised as aiohttp's (421, 413...)
            _record(metrics, request, started, refusal.status)
            raise
        except BaseException:
            _record(metrics, request, started, 500)
            raise
        ends = request.get(SERVED_LATER)
        if ends is None:
            _record(metrics, request, started, response.status)
        else:  # a WebSocket served after its handshake: its line is made at its end
            status = response.status
            ends.append(
                lambda failed: _record(metrics, request, started, 500 if failed else status)
            )
        return response

    return observe


def _record_later(
    metrics: Metrics, request: web.Request, started: float, status: int, failed: bool
) -> None:
    """_record at the end of a WebSocket served after its handshake (a partial of this costs
    an idle socket less than a closure)."""
    _record(metrics, request, started, 500 if failed else status)


def _record(metrics: Metrics, request: web.Request, started: float, status: int) -> None:
    """The metrics and the log line of a request to /graphql that has ended."""
    seconds = time.perf_counter() - started
    websocket = request.headers.get("Upgrade", "").lower() == "websocket"
    operation = request.get(OPERATION, "websocket" if websocket else "none")
    ended = request.get(OUTCOMES, [_outcome_of_status(status)])
    caller = request.get(CALLER, "unknown")
    for outcome in ended:
        metrics.request_counter(operation, outcome).inc()
    if not websocket:  # a WebSocket's "request" lasts as long as its connection
        metrics.request_timer(operation).observe(seconds)
    # Made only when written: the line costs more than the metrics.
    if not log.isEnabledFor(logging.INFO):
        return
    outcome = ",".join(ended)
    # aiohttp's Python parser takes any token as a method, up to 8 KiB of it.
    method = request.method if request.method in hdrs.METH_ALL else "OTHER"
    args = (method, request.path, operation, outcome, caller, status, seconds * 1000)
    handler = json_stream_of(log)
    if handler is None:
        log.info(_LINE, *args, extra=request_fields(args))
        return
    # The line StreamHandler.emit would write, without a LogRecord made and handled for it:
    # about half of the line's cost.
    _LINES_OF_THE_TURN.add(handler, request_line(time.time(), log.name, _LINE % args, args), args)


_LINE = "%s %s %s %s %s %d %.1f ms"


class _LinesOfATurn:
    """The request lines made in one turn of the event loop, written to their handler's
    stream together at the turn's end: one write, a system call, for all of them rather
    than one each (about 4% of a `presence` request's CPU under load, bench/RESULTS.md,
    2026-11-29). A line of another logger written meanwhile may come before them."""

    __slots__ = ("_handler", "_lines", "_loop")

    def __init__(self) -> None:
        # Each line, and its message's arguments, should logging write it instead.
        self._lines: list[tuple[str, RequestArgs]] = []
        self._handler: logging.StreamHandler[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(
        self,
        handler: logging.StreamHandler[Any],
        line: str,
        args: RequestArgs,
    ) -> None:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self._lines and (handler is not self._handler or loop is not self._loop):
            self.write()  # another stream's lines, or another loop's (tests run one each)
        self._handler, self._loop = handler, loop
        self._lines.append((line, args))
        if loop is None:
            self.write()
        elif len(self._lines) == 1:
            loop.call_soon(self.write)

    def write(self) -> None:
        """Writes the lines waiting as `handler`'s emit would; should its stream fail,
        logging writes each line again, and reports the failure, as usual."""
        lines, self._lines = self._lines, []
        handler = self._handler
        if not lines or handler is None:
            return
        handler.acquire()
        try:
            handler.stream.write("".join([line + handler.terminator for line, _ in lines]))
            handler.flush()
        except Exception:  # handed to logging, which reports it
            failed = True
        else:
            failed = False
        finally:
            handler.release()
        if failed:
            for _, args in lines:
                log.info(_LINE, *args, extra=request_fields(args))


_LINES_OF_THE_TURN = _LinesOfATurn()
