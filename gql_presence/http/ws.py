"""The graphql-transport-ws handler: a WebSocket's authentication, the shape of its messages,
and its operations, each run by the one operation pipeline (graphql/operation.py).

A presenceChanged subscription that the pipeline hands to the event hub keeps no task here:
the socket holds its id and its place in the hub until the client completes it or the
socket ends."""

from __future__ import annotations

import asyncio
import time
from contextlib import aclosing, suppress
from json import JSONDecodeError
from typing import Any, NoReturn, Protocol, cast

from aiohttp import WSMsgType, web
from strawberry.aiohttp.views import AiohttpWebSocketAdapter
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http.exceptions import WebSocketDisconnected
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    Operation,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import (
    CompleteMessage,
    ConnectionInitMessage,
    Message,
    SubscribeMessage,
)

from gql_presence.graphql.context import Context
from gql_presence.graphql.error_codes import refusal
from gql_presence.graphql.event_rendering import SocketOperation
from gql_presence.graphql.internals import OperationStreamClosed, send_result_stream
from gql_presence.graphql.operation import OperationPipeline, request_data
from gql_presence.graphql.session_rendering import LiveSession
from gql_presence.http.app_keys import AUTHENTICATOR, SOCKET
from gql_presence.http.sockets import BoundedWebSocketResponse
from gql_presence.observability.request_log import CALLER
from gql_presence.policy.auth import EXPIRED, CallerKind
from gql_presence.policy.limits import MAX_OPERATION_ID_BYTES
from gql_presence.realtime.delivery import Writer
from gql_presence.store.errors import BadInputError, UnauthenticatedError

# graphql-transport-ws's own code for a socket whose credentials are not (or no longer) valid.
CREDENTIALS_EXPIRED = 4401
# Closes a WebSocket when its caller's credentials expire.
EXPIRY_TIMER = web.RequestKey("expiry_timer", asyncio.Task[None])
# What aiohttp's receive() gives once the socket is closing or closed: the end of its messages.
_ENDED = frozenset({WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED})


class PipelineOwner(Protocol):
    """The view that makes the handler: it holds the pipeline every operation runs through."""

    pipeline: OperationPipeline


class TransportWSHandler(BaseGraphQLTransportWSHandler[Context, None]):
    """Strawberry's graphql-transport-ws handler, whose operations run through the pipeline."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deliveries: dict[str, Writer] = {}
        self._held: dict[str, LiveSession] = {}
        # Made once: each held session keeps it until the service ends the session.
        self._held_ended = self._end_held
        self._init_timer: asyncio.TimerHandle | None = None

    # A copy of Strawberry's, recorded with its version in graphql/internals.COPIED.
    async def handle(self) -> None:
        """Strawberry's loop over the socket's messages, with the same answers, without its
        adapter's async generator: an idle socket keeps this frame and aiohttp's read."""
        self.on_request_accepted()
        socket = cast("PresenceWebSocket", self.websocket).ws
        try:
            while True:
                received = await socket.receive()
                if received.type is WSMsgType.TEXT:
                    try:
                        message = self.view.decode_json(received.data)
                    except JSONDecodeError:
                        await self.handle_invalid_message("WebSocket message must be valid JSON")
                        return
                    await self.handle_message(cast("Message", message))
                elif received.type is WSMsgType.BINARY:
                    await self.handle_invalid_message("WebSocket message type must be text")
                    return
                elif received.type in _ENDED:
                    return
        except WebSocketDisconnected:
            pass
        finally:
            await self.shutdown()

    def on_request_accepted(self) -> None:
        # A timer where Strawberry starts a task that sleeps: the task cost more to make and
        # to cancel than the rest of a connect, and, cancelled, was kept as long as the socket.
        self._init_timer = asyncio.get_running_loop().call_later(
            self.connection_init_wait_timeout.total_seconds(), self._init_timed_out
        )

    def _init_timed_out(self) -> None:
        if self.connection_init_received:
            return
        self.connection_timed_out = True
        # Strawberry's shutdown awaits it, as it would its own task.
        self.connection_init_timeout_task = asyncio.create_task(self._close_uninitialised())

    async def _close_uninitialised(self) -> None:
        try:
            await self.websocket.close(code=4408, reason="Connection initialisation timeout")
        except Exception as error:  # logged as Strawberry logs a failure of its own task
            await self.handle_task_exception(error)

    async def handle_message(self, message: Message) -> None:
        # Strawberry reads the message's members without checking their types: a JSON array,
        # or a subscribe whose payload is not an object, would end the connection with no
        # close code and log a server error.
        fault = _shape_fault(message)
        if fault is not None:
            await self.handle_invalid_message(fault)
            return
        await super().handle_message(message)
        parsed: object = message  # whatever JSON the client sent, a dict if it was handled
        # Strawberry's loop holds the last message until the next one comes: for a socket
        # that waits, its subscribe message, document and variables. What it needed of it,
        # it took.
        if isinstance(parsed, dict):
            parsed.clear()

    async def handle_subscribe(self, message: SubscribeMessage) -> None:
        # Strawberry refuses one over the limit with a bare "Subscription limit reached".
        most = self.max_subscriptions_per_connection
        if (
            most is not None
            and self.connection_acknowledged
            and message["id"] not in self.operations
            and len(self.operations) >= most
        ):
            over = refusal(
                BadInputError(
                    f"This socket runs {most} operations already, the most one socket may run "
                    "at once: complete one of them first."
                )
            )
            await self.send_message(
                {"id": message["id"], "type": "error", "payload": [over.formatted]}
            )
            return
        await super().handle_subscribe(message)

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        self._stop_init_timer()
        await super().handle_connection_init(message)
        socket = self.context.request.get(SOCKET)
        if self.connection_acknowledged and isinstance(socket, BoundedWebSocketResponse):
            # Pings keep a presenceSession's socket honest; before the ack there is none,
            # and the wait for connection_init is the socket's only deadline.
            socket.start_heartbeat()

    async def shutdown(self) -> None:
        self._stop_init_timer()
        await super().shutdown()

    def _stop_init_timer(self) -> None:
        if self._init_timer is not None:
            self._init_timer.cancel()
            self._init_timer = None  # not kept for the socket's life

    # A copy of Strawberry's, recorded with its version in graphql/internals.COPIED.
    async def run_operation(self, operation: Operation[Context, None]) -> None:
        """The operation's own task: the pipeline's results sent as Strawberry sends them,
        or its delivery kept until the operation or the socket ends."""
        view = cast("PipelineOwner", self.view)
        started = await view.pipeline.run_on_socket(
            self.context,
            SocketOperation(
                operation.id, operation.query, operation.operation_name, operation.variables
            ),
        )
        if isinstance(started, LiveSession):
            if self.operations.get(operation.id) is not operation:
                started.close()  # completed, or its socket ended, meanwhile
                return
            self._held[operation.id] = started
            operation.task = None
            operation.query, operation.variables = "", None
            started.start(self._held_ended)
            return
        if isinstance(started, Writer):
            if self.operations.get(operation.id) is operation:
                self._deliveries[operation.id] = started
                # What the socket keeps of it is its id and its place in the hub: its task
                # ends now, and its document and variables are its rendering's business.
                operation.task = None
                operation.query, operation.variables = "", None
            else:  # completed, or its socket ended, meanwhile
                self.context.events.forget(started)
            return
        try:
            async with aclosing(started):
                await send_result_stream(self, operation, started)
            await operation.send_operation_message(
                CompleteMessage(id=operation.id, type="complete")
            )
        except OperationStreamClosed:
            return
        except Exception as error:  # as Strawberry's own run_operation ends on a fault
            await self.handle_task_exception(error)
            with suppress(Exception):
                await operation.send_operation_message({"id": operation.id, "type": "complete"})
            self.operations.pop(operation.id, None)
            raise

    def _end_held(self, operation_id: str) -> None:
        """A held session the service ended: its last messages are written, its id free."""
        if self._held.pop(operation_id, None) is not None:
            self.operations.pop(operation_id, None)

    async def cleanup_operation(self, operation_id: str) -> None:
        held = self._held.pop(operation_id, None)
        if held is not None:
            held.close()
            self.operations.pop(operation_id, None)  # its task has ended already
            return
        delivery = self._deliveries.pop(operation_id, None)
        if delivery is None:
            await super().cleanup_operation(operation_id)
            return
        self.context.events.forget(delivery)
        self.operations.pop(operation_id, None)  # its task has ended already


class PresenceWebSocket(AiohttpWebSocketAdapter):
    """Strawberry's adapter of an aiohttp WebSocket, whose closes say what to do where
    Strawberry's reason does not."""

    async def close(self, code: int, reason: str) -> None:
        clearer = _CLEARER_REASONS.get(code) or _CLEARER_REASONS.get(reason, reason)
        await super().close(code, clearer)


# What Strawberry's closes (0.341) mean for the client where its reason does not say: by code
# where graphql-transport-ws gives the code one meaning, else by reason. 123 bytes at most.
_CLEARER_REASONS: dict[int | str, str] = {
    4401: "Send connection_init, and wait for connection_ack, before subscribe.",
    4406: (
        "Ask for the graphql-transport-ws subprotocol (Sec-WebSocket-Protocol), the one this "
        "service speaks."
    ),
    # Strawberry's quotes the id, which may be longer than a close reason holds.
    4409: (
        "An operation with this id is running already: each operation of a socket needs an id "
        "of its own."
    ),
    "Invalid connection init payload": (
        'The payload of connection_init must be a JSON object: {"Authorization": "Bearer ..."}.'
    ),
}


def _shape_fault(message: object) -> str | None:
    """What is wrong with the shape of a graphql-transport-ws message, or None."""
    if not isinstance(message, dict):
        return 'A message must be a JSON object with a "type", e.g. {"type": "ping"}.'
    if message.get("type") != "subscribe":
        return None
    payload = message.get("payload")
    operation_id = message.get("id")
    if not isinstance(operation_id, str) or not isinstance(payload, dict):
        return (
            'A subscribe message must be {"id": "<string>", "type": "subscribe", "payload": {...}}.'
        )
    if len(operation_id.encode("utf-8", "surrogatepass")) > MAX_OPERATION_ID_BYTES:
        return (
            f"A subscribe message's id must be at most {MAX_OPERATION_ID_BYTES} bytes of UTF-8: "
            "a counter or a UUID."
        )
    data = request_data(payload)
    if data is None or data.query is None:
        # A close reason holds at most 123 bytes.
        return (
            'A subscribe payload must be {"query": "<document>"}: variables and extensions '
            "objects, operationName a string."
        )
    return None


async def authenticate_socket(context: Context) -> None:
    """Who a WebSocket's caller is: connection_init's payload carries `Authorization`. A
    socket that does not authenticate is closed, saying why."""
    params, context.connection_params = context.connection_params or {}, None
    authorization = params.get("Authorization", params.get("authorization"))
    try:
        caller = context.request.app[AUTHENTICATOR].caller(authorization)
    except UnauthenticatedError as error:
        await _reject_socket(context.request, error.message)
    if caller.kind is CallerKind.ANONYMOUS:
        await _reject_socket(
            context.request,
            'Send {"Authorization": "Bearer <token>"} as the payload of connection_init.',
        )
    context.caller = caller
    context.request[CALLER] = caller.label
    socket = context.request.get(SOCKET)
    if caller.expires_at_s is not None and socket is not None:
        context.request[EXPIRY_TIMER] = asyncio.create_task(_close_at(socket, caller.expires_at_s))


def stop_watching_credentials(request: web.Request) -> None:
    """A WebSocket's, once it has ended: its credentials need watching no more."""
    timer = request.get(EXPIRY_TIMER)
    if timer is not None:
        timer.cancel()


async def _reject_socket(request: web.Request, reason: str) -> NoReturn:
    """Closes a WebSocket that did not authenticate, saying why (the protocol's own close
    says only "Forbidden")."""
    socket = request.get(SOCKET)
    if socket is not None:
        await socket.close(code=4403, message=reason.encode()[:123])
    raise ConnectionRejectionError


async def _close_at(socket: web.WebSocketResponse, expires_at_s: float) -> None:
    """Closes the socket when its credentials expire (admission refuses its operations from
    then on, should one arrive before the close)."""
    await asyncio.sleep(expires_at_s - time.time())
    await socket.close(code=CREDENTIALS_EXPIRED, message=EXPIRED.encode()[:123])
