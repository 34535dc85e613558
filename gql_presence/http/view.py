"""The GraphQL endpoint: queries and mutations over HTTP, subscriptions over WebSocket, and
GraphiQL, at one address. Every operation passes the one admission step of admission.py,
over HTTP here and over WebSocket in PresenceSchema.stream; an HTTP request also has a time
budget. Refusals become GraphQL errors with a code."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, NoReturn, TypeGuard

from aiohttp import hdrs, web
from aiohttp.web_ws import WebSocketReady
from cross_web import (
    AiohttpHTTPRequestAdapter,
    HTTPException,  # what Strawberry answers as an HTTP error
)
from graphql import GraphQLError
from strawberry.aiohttp.views import GraphQLView
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLHTTPResponse, GraphQLRequestData
from strawberry.http.base import BaseRequestProtocol
from strawberry.http.types import QueryParams
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
    Operation,
)
from strawberry.subscriptions.protocols.graphql_transport_ws.types import (
    ConnectionInitMessage,
    Message,
)
from strawberry.types import ExecutionResult
from strawberry.types.unset import UnsetType

from gql_presence.graphql.context import Context
from gql_presence.graphql.error_codes import log_unexpected, outcomes, refusal, with_codes
from gql_presence.graphql.operation import admit, is_subscription, over_budget
from gql_presence.graphql.persisted import PersistedDocuments, lift_document_id, names_a_document
from gql_presence.graphql.planned import Plans
from gql_presence.graphql.schema import build_schema
from gql_presence.http.app_keys import (
    AUTHENTICATOR,
    CREDENTIALS_REFUSED,
    EVENTS,
    EXPIRY_TIMER,
    HELD_SESSIONS,
    LIMITER,
    SOCKET,
    SOCKETS,
    STORE,
)
from gql_presence.http.ide import graphiql_page
from gql_presence.http.sockets import BoundedWebSocketResponse
from gql_presence.observability import tracing
from gql_presence.observability.request_log import CALLER, OPERATION, OUTCOMES
from gql_presence.policy.auth import EXPIRED, Caller, CallerKind
from gql_presence.policy.limits import (
    CONNECTION_INIT_WAIT_S,
    MAX_SOCKET_MESSAGE_BYTES,
    MAX_SUBSCRIPTIONS_PER_SOCKET,
)
from gql_presence.realtime.delivery import (
    SOCKET_OPERATION,
    HandedOverError,
    Selections,
    SocketOperation,
)
from gql_presence.realtime.hub import Delivery
from gql_presence.settings import Settings
from gql_presence.store.errors import (
    PresenceError,
    RateLimitedError,
    UnauthenticatedError,
)

if TYPE_CHECKING:
    from cross_web import AsyncHTTPRequestAdapter

# What aiohttp's handshake check said of a request, asked for once.
_HANDSHAKE = web.RequestKey("websocket_handshake", WebSocketReady)


class TransportWSHandler(BaseGraphQLTransportWSHandler[Context, None]):
    """Strawberry's graphql-transport-ws handler, which tells each operation's resolvers
    which operation of the socket they serve, and holds the subscriptions that the event hub
    delivers (fanout.py): their operations have no task, only their place in the hub, until
    the client completes them or the socket ends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deliveries: dict[str, Delivery] = {}
        self._init_timer: asyncio.TimerHandle | None = None

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

    async def handle_connection_init(self, message: ConnectionInitMessage) -> None:
        self._stop_init_timer()
        await super().handle_connection_init(message)

    async def shutdown(self) -> None:
        self._stop_init_timer()
        await super().shutdown()

    def _stop_init_timer(self) -> None:
        if self._init_timer is not None:
            self._init_timer.cancel()
            self._init_timer = None  # not kept for the socket's life

    async def run_operation(self, operation: Operation[Context, None]) -> None:
        # The operation's own task: the value is seen by its resolvers only.
        SOCKET_OPERATION.set(
            SocketOperation(
                operation.id, operation.query, operation.operation_name, operation.variables
            )
        )
        try:
            await super().run_operation(operation)
        except HandedOverError as handed:
            if self.operations.get(operation.id) is operation:
                self._deliveries[operation.id] = handed.delivery
                # What the socket keeps of it is its id and its place in the hub: its task
                # ends now, and its document and variables are its Selection's business.
                operation.task = None
                operation.query, operation.variables = "", None
            else:  # completed, or its socket ended, meanwhile
                self.context.events.forget(handed.delivery)

    async def cleanup_operation(self, operation_id: str) -> None:
        delivery = self._deliveries.pop(operation_id, None)
        if delivery is None:
            await super().cleanup_operation(operation_id)
            return
        self.context.events.forget(delivery)
        self.operations.pop(operation_id, None)  # its task has ended already


def _shape_fault(message: object) -> str | None:
    """What is wrong with the shape of a graphql-transport-ws message, or None."""
    if not isinstance(message, dict):
        return 'A message must be a JSON object with a "type", e.g. {"type": "ping"}.'
    if message.get("type") != "subscribe":
        return None
    payload = message.get("payload")
    if not isinstance(message.get("id"), str) or not isinstance(payload, dict):
        return (
            'A subscribe message must be {"id": "<string>", "type": "subscribe", "payload": {...}}.'
        )
    if not (
        isinstance(payload.get("query"), str)
        and isinstance(payload.get("operationName"), str | None)
        and all(isinstance(payload.get(k), dict | None) for k in ("variables", "extensions"))
    ):
        # A close reason holds at most 123 bytes.
        return (
            'A subscribe payload must be {"query": "<document>"}: variables and extensions '
            "objects, operationName a string."
        )
    return None


class PresenceView(GraphQLView[Context, None]):
    graphql_transport_ws_handler_class: type[BaseGraphQLTransportWSHandler[Context, None]] = (
        TransportWSHandler
    )

    def __init__(self, settings: Settings) -> None:
        # Tracing's spans come from Strawberry's extension around graphql-core's execution:
        # with tracing on, every request takes that path.
        planned = settings.planned_execution and not tracing.enabled()
        self.plans = Plans() if planned else None
        super().__init__(
            schema=build_schema(
                introspection=settings.introspection,
                federation=settings.federation,
                plans=self.plans,
            ),
            graphql_ide="graphiql" if settings.graphiql else None,
            allow_queries_via_get=settings.queries_over_get,
            # The one protocol the README documents, with authentication in connection_init.
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
            connection_init_wait_timeout=timedelta(seconds=CONNECTION_INIT_WAIT_S),
            max_subscriptions_per_connection=MAX_SUBSCRIPTIONS_PER_SOCKET,
            # Pages on other origins may open a WebSocket only from PRESENCE_CORS_ORIGINS.
            allowed_origins=settings.cors_origins,
        )
        self._budget_s = settings.request_timeout_ms / 1000
        self._persisted = PersistedDocuments(settings.trusted_documents)
        # aiohttp pings every heartbeat and closes a socket whose pong is not back within
        # half of it: a client gone silent is found within half the TTL of its sessions.
        self._heartbeat_s = settings.connection_ttl_ms / 1000 / 3
        self._selections = Selections()

    async def get_context(
        self, request: web.Request, response: web.Response | web.WebSocketResponse
    ) -> Context:
        store = request.app[STORE]
        authenticator = request.app[AUTHENTICATOR]
        if isinstance(response, web.WebSocketResponse):
            request.app[SOCKETS].add(response)
            request[SOCKET] = response
            caller = authenticator.caller(None)  # until connection_init says who it is
        else:
            try:
                caller = authenticator.caller(request.headers.get("Authorization"))
                caller.require_credentials()
            except UnauthenticatedError as error:
                request[CREDENTIALS_REFUSED] = error
                caller = Caller(CallerKind.ANONYMOUS)
            request[CALLER] = caller.label

        return Context(
            request=request,
            store=store,
            events=request.app[EVENTS],
            caller=caller,
            limiter=request.app[LIMITER],
            documents=self._persisted,
            held_sessions=request.app[HELD_SESSIONS],
            socket=response if isinstance(response, BoundedWebSocketResponse) else None,
            selections=self._selections,
        )

    async def on_ws_connect(self, context: Context) -> UnsetType | dict[str, object] | None:
        """Authenticates a WebSocket: connection_init's payload carries `Authorization`."""
        params = context.connection_params
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
            context.request[EXPIRY_TIMER] = asyncio.create_task(
                _close_at(socket, caller.expires_at_s)
            )
        return await super().on_ws_connect(context)

    async def render_graphql_ide(self, request: web.Request) -> web.Response:
        return graphiql_page()  # its scripts from this service, not from a CDN

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if (
            self.plans is not None
            and request.method == "POST"
            and request.content_type == "application/json"
        ):
            try:
                return await self._answer_json_post(request)
            except HTTPException as error:  # answered as Strawberry's GraphQLView answers it
                return web.Response(body=error.reason, status=error.status_code)
        try:
            return await super().__call__(request)
        finally:
            # A WebSocket's: it has ended, and its credentials need watching no more.
            timer = request.get(EXPIRY_TIMER)
            if timer is not None:
                timer.cancel()

    async def create_websocket_response(
        self, request: web.Request, subprotocol: str | None
    ) -> web.WebSocketResponse:
        # As Strawberry's, with the size of a message bounded as a request body is, and every
        # close of it ending in bounded time (sockets.py).
        socket = BoundedWebSocketResponse(
            protocols=[subprotocol] if subprotocol else [],
            max_msg_size=MAX_SOCKET_MESSAGE_BYTES,
            heartbeat=self._heartbeat_s,
        )
        await socket.prepare(request)
        return socket

    def is_websocket_request(self, request: web.Request) -> TypeGuard[web.Request]:
        # Strawberry tries a whole WebSocket handshake on every request, and for a WebSocket
        # three times (twice to ask, once to pick the subprotocol): only a GET that asks for
        # an upgrade can be one, and its handshake's answer is kept for the other times.
        if request.method != "GET" or "Upgrade" not in request.headers:
            return False
        return self._handshake(request).ok

    async def pick_websocket_subprotocol(self, request: web.Request) -> str | None:
        return self._handshake(request).protocol

    def _handshake(self, request: web.Request) -> WebSocketReady:
        ready = request.get(_HANDSHAKE)
        if ready is None:
            socket = web.WebSocketResponse(protocols=self.websocket_subprotocols)
            ready = request[_HANDSHAKE] = socket.can_prepare(request)
        return ready

    def parse_json(self, data: str | bytes) -> Any:
        try:
            return lift_document_id(self.decode_json(data))
        # Strawberry expects only JSONDecodeError; json.loads also raises ValueError for an
        # integer of more than 4,300 digits and RecursionError for nesting too deep.
        except (ValueError, RecursionError) as error:
            raise HTTPException(400, "Unable to parse request body as JSON") from error

    def should_render_graphql_ide(self, request: BaseRequestProtocol) -> bool:
        # A GET naming a persisted document by hash has no `query` either.
        return super().should_render_graphql_ide(request) and not names_a_document(
            request.query_params
        )

    def parse_query_params(self, params: QueryParams) -> dict[str, Any]:
        return lift_document_id(super().parse_query_params(params))  # type: ignore[no-any-return]

    async def parse_http_body(
        self, request: AsyncHTTPRequestAdapter
    ) -> GraphQLRequestData | list[GraphQLRequestData]:
        # A caller whose credentials are refused gets its body left unread, however large:
        # admission refuses the operation as it would any other of this caller's.
        if (
            isinstance(request, AiohttpHTTPRequestAdapter)
            and CREDENTIALS_REFUSED in request.request
        ):
            return _UNREAD
        try:
            return await super().parse_http_body(request)
        except AttributeError as error:
            # Strawberry reads the body with .get(), which a JSON string, number, boolean or
            # null lacks.
            if error.name != "get" or isinstance(error.obj, dict):
                raise
            raise HTTPException(400, _NOT_AN_OBJECT) from error

    async def execute_single(  # noqa: PLR0917 - Strawberry's signature
        self,
        request: web.Request,
        request_adapter: AsyncHTTPRequestAdapter,
        sub_response: web.Response,
        context: Context,
        root_value: None,
        request_data: GraphQLRequestData,
    ) -> ExecutionResult:
        try:
            async with asyncio.timeout(self._budget_s):
                await admit(context, request_data.query, request_data.variables)
                request_data = await context.documents.resolve(request_data, context)
                # Over plain HTTP a subscription cannot be answered; say where it can be.
                if is_subscription(request_data.query, request_data.operation_name):
                    error = GraphQLError(_SUBSCRIBE_OVER_WEBSOCKET)
                    return ExecutionResult(data=None, errors=[error])
                if request_adapter.method == "POST":
                    planned = await self._run_planned(request, context, request_data)
                    if planned is not None:
                        return planned
                return await super().execute_single(
                    request, request_adapter, sub_response, context, root_value, request_data
                )
        except RateLimitedError as error:
            sub_response.set_status(HTTPStatus.TOO_MANY_REQUESTS)
            sub_response.headers["Retry-After"] = str(error.retry_after_s)
            return ExecutionResult(data=None, errors=[refusal(error)])
        except PresenceError as error:
            return ExecutionResult(data=None, errors=[refusal(error)])
        except TimeoutError:
            return ExecutionResult(data=None, errors=[refusal(over_budget(self._budget_s))])

    async def _answer_json_post(self, request: web.Request) -> web.StreamResponse:
        """Strawberry's run() cut down to a JSON POST of one operation, with the same steps,
        hooks and answer: its body is read and its caller authenticated once, and a document
        planned before runs from its plan (execute_single). Anything else, a caller refused
        before its body is read or a body that is not one plain request, goes on to run()
        with the context made here. Only graphql-transport-ws is offered, so no POST asks
        for a streamed answer."""
        sub_response = web.Response()
        context = await self.get_context(request, sub_response)
        if CREDENTIALS_REFUSED not in request:  # refused with the body left unread
            request_data = _single_request(self.parse_json(await request.read()))
            if request_data is not None:
                adapter = AiohttpHTTPRequestAdapter(request)
                result = await self.execute_single(
                    request, adapter, sub_response, context, None, request_data
                )
                return self.create_response(
                    await self.process_result(request, result), sub_response
                )
        return await self.run(request, context=context)

    async def _run_planned(
        self, request: web.Request, context: Context, data: GraphQLRequestData
    ) -> ExecutionResult | None:
        """The result of a document planned before (planned.py), with what the full path's
        extensions add: the log's operation label, unexpected errors logged. None when
        there is no plan for it, or the plan does not cover this request."""
        plan = self.plans.get(data.query, data.operation_name) if self.plans else None
        if plan is None:
            return None
        result = await plan.run(context, data.variables, data.extensions)
        if result is None:
            return None
        request[OPERATION] = plan.label
        if result.errors:
            log_unexpected(result.errors, plan.operation_name)
        return result

    def create_response(
        self,
        response_data: GraphQLHTTPResponse | list[GraphQLHTTPResponse],
        sub_response: web.Response,
    ) -> web.Response:
        # As Strawberry's, which sets the text and then the content type, each setter
        # parsing and writing the Content-Type header again.
        encoded = self.encode_json(response_data)
        sub_response.body = encoded.encode() if isinstance(encoded, str) else encoded
        sub_response.headers[hdrs.CONTENT_TYPE] = "application/json; charset=utf-8"
        return sub_response

    async def process_result(
        self, request: web.Request, result: ExecutionResult
    ) -> GraphQLHTTPResponse:
        if result.errors:
            result.errors = with_codes(result.errors)
        request[OUTCOMES] = outcomes(result.errors)
        return await super().process_result(request, result)


def _single_request(body: object) -> GraphQLRequestData | None:
    """A body as Strawberry takes one request, when every member has the type Strawberry
    accepts; None for anything else (Strawberry answers those itself)."""
    if not isinstance(body, dict):
        return None
    query, operation_name = body.get("query"), body.get("operationName")
    variables, extensions = body.get("variables"), body.get("extensions")
    if not (
        isinstance(query, str | None)
        and isinstance(operation_name, str | None)
        and isinstance(variables, dict | None)
        and isinstance(extensions, dict | None)
    ):
        return None
    return GraphQLRequestData(
        query=query, variables=variables, operation_name=operation_name, extensions=extensions
    )


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


# graphql-transport-ws's own code for a socket whose credentials are not (or no longer) valid.
CREDENTIALS_EXPIRED = 4401
# Stands in for the body of a request refused for its credentials.
_UNREAD = GraphQLRequestData(query=None, variables=None, operation_name=None, extensions=None)
_NOT_AN_OBJECT = 'The request body must be a JSON object: {"query": ..., "variables": {...}}.'
_SUBSCRIBE_OVER_WEBSOCKET = (
    "Subscriptions are served over WebSocket (graphql-transport-ws) at this same address, "
    "not over plain HTTP."
)
