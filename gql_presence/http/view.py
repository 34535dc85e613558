"""The GraphQL endpoint: queries and mutations over HTTP, subscriptions over WebSocket
(http/ws.py), and GraphiQL, at one address. What is HTTP's is here: reading the body,
authenticating the caller from its header, the answer's status and body; each operation
runs through the one pipeline (graphql/operation.py), as a WebSocket's do."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from http import HTTPStatus
from json.encoder import (  # type: ignore[attr-defined]  # typeshed leaves them out
    c_make_encoder,
    encode_basestring_ascii,
)
from typing import TYPE_CHECKING, Any, TypeGuard, cast

from aiohttp import hdrs, web
from aiohttp.web_ws import WebSocketReady
from cross_web import (
    AiohttpHTTPRequestAdapter,
    HTTPException,  # what Strawberry answers as an HTTP error
    parse_content_type,
)
from strawberry.aiohttp.views import GraphQLView
from strawberry.exceptions import MissingQueryError
from strawberry.http import GraphQLHTTPResponse, GraphQLRequestData
from strawberry.http.base import BaseRequestProtocol
from strawberry.http.types import QueryParams
from strawberry.schema.exceptions import InvalidOperationTypeError
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
)
from strawberry.types import ExecutionResult
from strawberry.types.graphql import OperationType
from strawberry.types.unset import UnsetType

from gql_presence.graphql.context import Context
from gql_presence.graphql.error_codes import outcomes, retry_after
from gql_presence.graphql.literal_shapes import LiteralShapes
from gql_presence.graphql.operation import OperationPipeline, request_data
from gql_presence.graphql.persisted import PersistedDocuments, lift_document_id, names_a_document
from gql_presence.graphql.planned import Plans
from gql_presence.graphql.schema import build_schema
from gql_presence.http.app_keys import (
    AUTHENTICATOR,
    CREDENTIALS_REFUSED,
    EVENTS,
    HELD_SESSIONS,
    LIMITER,
    SETTINGS,
    SOCKET,
    SOCKETS,
    STORE,
)
from gql_presence.http.ide import graphiql_page
from gql_presence.http.sockets import BoundedWebSocketResponse
from gql_presence.http.ws import (
    PresenceWebSocket,
    TransportWSHandler,
    authenticate_socket,
    stop_watching_credentials,
)
from gql_presence.observability.request_log import CALLER, OUTCOMES, SERVED_LATER
from gql_presence.policy.auth import ANONYMOUS_CALLER
from gql_presence.policy.limits import (
    MAX_BODY_BYTES,
    MAX_SOCKET_MESSAGE_BYTES,
    MAX_SUBSCRIPTIONS_PER_SOCKET,
)
from gql_presence.settings import Settings
from gql_presence.store.errors import (
    UnauthenticatedError,
)

if TYPE_CHECKING:
    from cross_web import AsyncHTTPRequestAdapter

# What aiohttp's handshake check said of a request, asked for once.
_HANDSHAKE = web.RequestKey("websocket_handshake", WebSocketReady)


class PresenceView(GraphQLView[Context, None]):
    graphql_transport_ws_handler_class: type[BaseGraphQLTransportWSHandler[Context, None]] = (
        TransportWSHandler
    )
    websocket_adapter_class = PresenceWebSocket

    def __init__(self, settings: Settings, documents: PersistedDocuments, *, traced: bool) -> None:
        # Tracing's spans come from Strawberry's extension around graphql-core's execution:
        # with tracing on, every request takes that path.
        plans = Plans() if settings.planned_execution and not traced else None
        # Documents that differ from one planned only in argument literals share its plan.
        shapes = LiteralShapes() if plans is not None else None
        schema = build_schema(
            introspection=settings.introspection,
            federation=settings.federation,
            plans=plans,
            shapes=shapes,
            traced=traced,
            documents=documents,
        )
        super().__init__(
            schema=schema,
            graphql_ide="graphiql" if settings.graphiql else None,
            allow_queries_via_get=settings.queries_over_get,
            # The one protocol the README documents, with authentication in connection_init.
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
            connection_init_wait_timeout=timedelta(milliseconds=settings.connection_init_wait_ms),
            max_subscriptions_per_connection=MAX_SUBSCRIPTIONS_PER_SOCKET,
            # Pages on other origins may open a WebSocket only from PRESENCE_CORS_ORIGINS.
            allowed_origins=settings.cors_origins,
        )
        self.pipeline = OperationPipeline(
            schema,
            documents,
            settings.request_timeout_ms / 1000,
            plans,
            shapes=shapes,
            on_socket=not traced,
        )
        # Tracing's span of a socket's request lasts while its handler runs, and the spans of
        # its operations go under it: a traced socket is served before its handler returns.
        self._traced = traced
        self._heartbeat_s = heartbeat_s(settings)

    async def get_context(
        self, request: web.Request, response: web.Response | web.WebSocketResponse
    ) -> Context:
        store = request.app[STORE]
        authenticator = request.app[AUTHENTICATOR]
        if isinstance(response, web.WebSocketResponse):
            request[SOCKET] = response
            caller = authenticator.caller(None)  # until connection_init says who it is
        else:
            try:
                caller = authenticator.caller(request.headers.get("Authorization"))
                caller.require_credentials()
            except UnauthenticatedError as error:
                request[CREDENTIALS_REFUSED] = error
                caller = ANONYMOUS_CALLER
            request[CALLER] = caller.label

        return Context(
            request=request,
            store=store,
            events=request.app[EVENTS],
            caller=caller,
            limiter=request.app[LIMITER],
            held_sessions=request.app[HELD_SESSIONS],
            credentials_refused=request.get(CREDENTIALS_REFUSED),
            socket=response if isinstance(response, BoundedWebSocketResponse) else None,
            webhook_networks=request.app[SETTINGS].webhook_allowed_networks,
        )

    async def on_ws_connect(self, context: Context) -> UnsetType | dict[str, object] | None:
        """Authenticates a WebSocket: connection_init's payload carries `Authorization`."""
        await authenticate_socket(context)
        return await super().on_ws_connect(context)

    async def render_graphql_ide(self, request: web.Request) -> web.Response:
        return graphiql_page()  # its scripts from this service, not from a CDN

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if self.is_websocket_request(request):
            return await self._open_socket(request)
        try:
            if (
                self.pipeline.plans is not None
                and request.method == "POST"
                and request.content_type == "application/json"
            ):
                return await self._answer_json_post(request)
            return await self.run(request)
        except HTTPException as error:  # answered as Strawberry's GraphQLView answers it
            return web.Response(
                text=self._explained(error, request.method),
                status=error.status_code,
                headers={hdrs.ALLOW: "GET, POST"} if error.status_code == 405 else None,
            )
        except web.HTTPRequestEntityTooLarge as error:
            return web.Response(text=_TOO_LARGE, status=error.status)

    def _explained(self, error: HTTPException, method: str) -> str:
        """Strawberry's refusal, said with what is allowed instead."""
        refused = error.__cause__
        if error.status_code == 405:
            return _ONLY_GET_AND_POST.format(method[:20])
        if isinstance(refused, InvalidOperationTypeError):
            if refused.operation_type is OperationType.SUBSCRIPTION:
                return _SUBSCRIPTIONS_OVER_WEBSOCKET
            if refused.operation_type is OperationType.MUTATION:
                return _MUTATIONS_BY_POST
            return _QUERIES_OVER_GET_OFF
        if isinstance(refused, MissingQueryError):
            return _NO_QUERY
        # Strawberry's (0.341) refusal of a JSON array of operations names no cause.
        return _ONE_OPERATION if error.reason == "Batching is not enabled" else error.reason

    # A copy of Strawberry's run(), recorded with its version in graphql/internals.COPIED.
    async def _open_socket(self, request: web.Request) -> web.StreamResponse:
        """Strawberry's run() for a WebSocket, with the same checks and hooks in the same
        order, except that the socket is served after this returns (sockets.py): what an idle
        socket keeps is its handler's loop, not this view's frames and the middlewares'. With
        tracing on, it is served before, under the request's span."""
        if not self._check_websocket_origin(request):
            return await self.reject_websocket(request)
        subprotocol = await self.pick_websocket_subprotocol(request)
        socket = await self.create_websocket_response(request, subprotocol)
        # Strawberry's adapter is typed for a view of no context type; it reads none.
        websocket = PresenceWebSocket(cast("Any", self), request, socket)
        context = await self.get_context(request, response=socket)
        if subprotocol != GRAPHQL_TRANSPORT_WS_PROTOCOL:  # the one protocol offered
            await websocket.close(4406, "Subprotocol not acceptable")
            return socket
        handler = self.graphql_transport_ws_handler_class(
            view=self,
            websocket=websocket,
            context=context,
            root_value=None,
            schema=self.schema,
            connection_init_wait_timeout=self.connection_init_wait_timeout,
            max_subscriptions_per_connection=self.max_subscriptions_per_connection,
        )
        assert isinstance(socket, BoundedWebSocketResponse)  # create_websocket_response's
        request.app[SOCKETS].add(socket)
        if self._traced:
            try:
                await handler.handle()
            finally:
                _socket_ended(request, socket, False)
            return socket
        # The request's line and metrics are made at the socket's end (request_log.py),
        # once its credentials need watching no more and a shutdown need not close it.
        ends: list[Callable[[bool], None]] = [partial(_socket_ended, request, socket)]
        request[SERVED_LATER] = ends
        socket.serve_after_handshake(handler.handle, ends)
        return socket

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
            raise HTTPException(400, _NOT_JSON) from error

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
        content_type = request.content_type or ""
        if request.method == "POST" and parse_content_type(content_type)[0] != "application/json":
            raise HTTPException(415, _JSON_ONLY.format(content_type[:100]))
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
        async def run_fully(data: GraphQLRequestData) -> ExecutionResult:
            return await super(PresenceView, self).execute_single(
                request, request_adapter, sub_response, context, root_value, data
            )

        result = await self.pipeline.execute(
            context,
            request_data,
            plannable=request_adapter.method == "POST",
            run_fully=run_fully,
        )
        retry_after_s = retry_after(result)
        if retry_after_s is not None:
            sub_response.set_status(HTTPStatus.TOO_MANY_REQUESTS)
            sub_response.headers["Retry-After"] = str(retry_after_s)
        return result

    # A copy of Strawberry's run(), recorded with its version in graphql/internals.COPIED.
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
            data = request_data(self.parse_json(await request.read()))
            if data is not None:
                adapter = AiohttpHTTPRequestAdapter(request)
                result = await self.execute_single(
                    request, adapter, sub_response, context, None, data
                )
                return self.create_response(
                    await self.process_result(request, result), sub_response
                )
        return await self.run(request, context=context)

    def encode_json(self, data: object) -> str:
        return _encode_compact(data)

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
        request[OUTCOMES] = outcomes(result.errors)
        return await super().process_result(request, result)


def heartbeat_s(settings: Settings) -> float:
    """A socket silent for a heartbeat is pinged, and closed when its pong is not back within
    half of it (sockets.ping_forever): a client gone silent is found within half the TTL of
    its sessions."""
    return settings.connection_ttl_ms / 1000 / 3


def _socket_ended(request: web.Request, socket: BoundedWebSocketResponse, _failed: bool) -> None:
    stop_watching_credentials(request)
    request.app[SOCKETS].discard(socket)


def _compact_encoder() -> Callable[[object], str]:
    """Strawberry's json.dumps(data, separators=(",", ":")), the same text: dumps makes a
    JSONEncoder and its C encoder for each answer (1.6 of its 2.9 µs for a `presence`). An
    answer is a tree made by the execution, never circular, so the encoder keeps no record
    of the containers it is in."""
    encoder = json.JSONEncoder(separators=(",", ":"))
    if c_make_encoder is None:  # an interpreter without json's C accelerator
        return encoder.encode
    encode = c_make_encoder(
        None, encoder.default, encode_basestring_ascii, None, ":", ",", False, False, True
    )

    def encoded(data: object) -> str:
        return "".join(encode(data, 0))

    return encoded


_encode_compact = _compact_encoder()

# Stands in for the body of a request refused for its credentials.
_UNREAD = GraphQLRequestData(query=None, variables=None, operation_name=None, extensions=None)
_NOT_JSON = (
    "The request's JSON could not be read: a POST's body, and a GET's variables and "
    'extensions, must be JSON in UTF-8 (the body an object: {"query": "<document>", '
    '"variables": {...}}), with numbers of at most 4,300 digits.\n'
)
_NO_QUERY = (
    'A GraphQL request names its document: {"query": "<document>", "variables": {...}} as a '
    "POST's JSON body (or a persisted document's hash in extensions.persistedQuery), or "
    "?query=<document> in a GET's address.\n"
)
_ONE_OPERATION = (
    "Batching is not enabled: send one operation per request, a JSON object "
    '{"query": "<document>", "variables": {...}}, not an array of them.\n'
)
_NOT_AN_OBJECT = 'The request body must be a JSON object: {"query": ..., "variables": {...}}.'
_ONLY_GET_AND_POST = (
    "/graphql takes POST (queries and mutations, with Content-Type: application/json), GET "
    "(GraphiQL in a browser; queries when PRESENCE_QUERIES_OVER_GET=true) and WebSocket "
    "upgrades (subscriptions); {} is not one of them.\n"
)
_JSON_ONLY = (
    "A GraphQL request over POST must be sent with Content-Type: application/json and a JSON "
    'body {{"query": ..., "variables": {{...}}}}; {!r} is not accepted.\n'
)
_QUERIES_OVER_GET_OFF = (
    "Queries over GET are turned off on this service: send the query by POST with "
    "Content-Type: application/json, or start the service with PRESENCE_QUERIES_OVER_GET=true.\n"
)
_MUTATIONS_BY_POST = (
    "A mutation must be sent by POST with Content-Type: application/json; GET takes queries only.\n"
)
_SUBSCRIPTIONS_OVER_WEBSOCKET = (
    "Subscriptions run over a WebSocket to /graphql (the graphql-transport-ws protocol), not "
    "over GET or POST.\n"
)
_TOO_LARGE = (
    f"The request body is too large: at most {MAX_BODY_BYTES:,} bytes are read "
    "(a fixed limit, not a setting: it fits the largest valid request, 10,000 ids of 128 "
    "characters, see docs/operations.md#limits). Send fewer ids per request.\n"
)
