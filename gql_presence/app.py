"""The aiohttp application: GraphQL at /graphql, the Redis connection, and the sweeper."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator
from datetime import timedelta
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeGuard

from aiohttp import WSCloseCode, web
from cross_web import HTTPException  # Strawberry's own dependency
from graphql import GraphQLError, OperationType, parse
from redis.asyncio import Redis
from redis.exceptions import RedisError
from strawberry.aiohttp.views import GraphQLView
from strawberry.exceptions import ConnectionRejectionError
from strawberry.http import GraphQLHTTPResponse, GraphQLRequestData
from strawberry.subscriptions import GRAPHQL_TRANSPORT_WS_PROTOCOL
from strawberry.types import ExecutionResult
from strawberry.types.unset import UnsetType

from gql_presence.auth import Authenticator, Caller, CallerKind
from gql_presence.connection import (
    MAX_CONNECTIONS,
    AnyRedis,
    cluster_client,
    cluster_subscriber,
    redis_client,
    subscriber_client,
)
from gql_presence.context import Context
from gql_presence.errors import (
    BadInputError,
    PresenceError,
    RateLimitedError,
    StoreUnavailableError,
    UnauthenticatedError,
)
from gql_presence.events import EventHub, FeedDroppedError
from gql_presence.graphql_errors import outcomes, refusal, with_codes
from gql_presence.limits import (
    CONNECTION_INIT_WAIT_S,
    MAX_BODY_BYTES,
    MAX_DOCUMENT_CHARS,
    MAX_SUBSCRIPTIONS_PER_SOCKET,
    RateLimiter,
)
from gql_presence.metrics import CONTENT_TYPE, Metrics
from gql_presence.redis_server import start_embedded_redis
from gql_presence.schema import build_schema, sessions_loader
from gql_presence.settings import Settings
from gql_presence.store import SWEEP_BATCH, PresenceStore
from gql_presence.telemetry import CALLER, OUTCOMES, chosen_operation, request_telemetry

if TYPE_CHECKING:
    from cross_web import AsyncHTTPRequestAdapter  # Strawberry's own dependency

log = logging.getLogger("gql_presence")

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", PresenceStore)
EVENTS = web.AppKey("events", EventHub)
# The client of the process's one pub/sub connection (it connects when the hub subscribes).
SUBSCRIBER = web.AppKey("subscriber", Redis)
METRICS = web.AppKey("metrics", Metrics)
SOCKETS = web.AppKey("sockets", weakref.WeakSet[web.WebSocketResponse])
AUTHENTICATOR = web.AppKey("authenticator", Authenticator)
LIMITER = web.AppKey("limiter", RateLimiter)
BAD_CREDENTIALS = web.RequestKey("bad_credentials", UnauthenticatedError)
SOCKET = web.RequestKey("socket", web.WebSocketResponse)


class PresenceView(GraphQLView[Context, None]):
    def __init__(self, settings: Settings) -> None:
        super().__init__(
            schema=build_schema(introspection=settings.introspection),
            graphql_ide="graphiql" if settings.graphiql else None,
            allow_queries_via_get=settings.queries_over_get,
            # The one protocol the README documents, with authentication in connection_init.
            subscription_protocols=(GRAPHQL_TRANSPORT_WS_PROTOCOL,),
            connection_init_wait_timeout=timedelta(seconds=CONNECTION_INIT_WAIT_S),
            max_subscriptions_per_connection=MAX_SUBSCRIPTIONS_PER_SOCKET,
        )
        self._budget_s = settings.request_timeout_ms / 1000

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
            except UnauthenticatedError as error:
                request[BAD_CREDENTIALS] = error
                caller = Caller(CallerKind.ANONYMOUS)
            request[CALLER] = caller.label

        async def close_socket(reason: FeedDroppedError) -> None:
            if isinstance(response, web.WebSocketResponse) and not response.closed:
                code = (
                    WSCloseCode.POLICY_VIOLATION
                    if reason.violation
                    else WSCloseCode.SERVICE_RESTART
                )
                await response.close(code=code, message=reason.reason.encode()[:123])

        return Context(
            request=request,
            store=store,
            sessions=sessions_loader(store),
            events=request.app[EVENTS],
            close_socket=close_socket,
            caller=caller,
            limiter=request.app[LIMITER],
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
        return await super().on_ws_connect(context)

    def is_websocket_request(self, request: web.Request) -> TypeGuard[web.Request]:
        # Strawberry tries a whole WebSocket handshake on every request; only a GET that
        # asks for an upgrade can be one.
        if request.method != "GET" or "Upgrade" not in request.headers:
            return False
        return super().is_websocket_request(request)

    def parse_json(self, data: str | bytes) -> Any:
        try:
            return self.decode_json(data)
        # Strawberry expects only JSONDecodeError; json.loads also raises ValueError for an
        # integer of more than 4,300 digits and RecursionError for nesting too deep.
        except (ValueError, RecursionError) as error:
            raise HTTPException(400, "Unable to parse request body as JSON") from error

    async def parse_http_body(
        self, request: AsyncHTTPRequestAdapter
    ) -> GraphQLRequestData | list[GraphQLRequestData]:
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
        # Over plain HTTP a subscription cannot be answered; say where it can be.
        if is_subscription(request_data.query, request_data.operation_name):
            return ExecutionResult(data=None, errors=[GraphQLError(_SUBSCRIBE_OVER_WEBSOCKET)])
        try:
            async with asyncio.timeout(self._budget_s):
                await self._admit(request, context, request_data)
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
            late = StoreUnavailableError(
                f"The request took longer than {self._budget_s:g} s and was stopped; "
                "try again shortly."
            )
            return ExecutionResult(data=None, errors=[refusal(late)])

    @staticmethod
    async def _admit(
        request: web.Request, context: Context, request_data: GraphQLRequestData
    ) -> None:
        """Refuses bad credentials, an oversized document, and a caller over its rate."""
        bad_credentials = request.get(BAD_CREDENTIALS)
        if bad_credentials is not None:
            raise bad_credentials
        size = len(request_data.query or "")
        if size > MAX_DOCUMENT_CHARS:
            raise BadInputError(
                f"The document is {size:,} characters long; at most {MAX_DOCUMENT_CHARS:,} "
                "are allowed. Pass long lists of ids as variables."
            )
        await context.limiter.admit(context.caller)

    async def process_result(
        self, request: web.Request, result: ExecutionResult
    ) -> GraphQLHTTPResponse:
        if result.errors:
            result.errors = with_codes(result.errors)
        request[OUTCOMES] = outcomes(result.errors)
        return await super().process_result(request, result)


async def _reject_socket(request: web.Request, reason: str) -> NoReturn:
    """Closes a WebSocket that did not authenticate, saying why (the protocol's own close
    says only "Forbidden")."""
    socket = request.get(SOCKET)
    if socket is not None:
        await socket.close(code=4403, message=reason.encode()[:123])
    raise ConnectionRejectionError


_NOT_AN_OBJECT = 'The request body must be a JSON object: {"query": ..., "variables": {...}}.'
_SUBSCRIBE_OVER_WEBSOCKET = (
    "Subscriptions are served over WebSocket (graphql-transport-ws) at this same address, "
    "not over plain HTTP."
)


def is_subscription(query: str | None, operation_name: str | None) -> bool:
    if not query or "subscription" not in query:  # cheap: most documents are not
        return False
    try:
        document = parse(query)
    except GraphQLError:
        return False  # refused as a syntax error where it is executed
    operation = chosen_operation(document, operation_name)
    return operation is not None and operation.operation == OperationType.SUBSCRIPTION


def create_app(settings: Settings) -> web.Application:
    metrics = Metrics()
    app = web.Application(
        middlewares=[request_telemetry(metrics)],
        client_max_size=MAX_BODY_BYTES,  # larger bodies get 413 before they are read
    )
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[AUTHENTICATOR] = Authenticator(settings)
    app[SOCKETS] = weakref.WeakSet()
    # Open WebSockets would hold up a shutdown: close them first, saying why.
    app.on_shutdown.append(close_sockets)
    # Redis first (the embedded one when REDIS_URL is unset), then the sweeper that uses it.
    app.cleanup_ctx.append(redis_store)
    app.cleanup_ctx.append(sweeper)
    # The one Redis subscription of this process, fanned out to its WebSocket subscribers.
    app.cleanup_ctx.append(event_hub)
    # GraphQL over POST and GET, subscriptions over WebSocket, and GraphiQL, at one address.
    app.router.add_route("*", "/graphql", PresenceView(settings))
    # Probes in the shape Kubernetes uses: alive, and able to serve.
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_page)
    # A live page for people: who is online, and the week's active users.
    app.router.add_get("/dashboard", dashboard)
    return app


DASHBOARD = (Path(__file__).parent / "dashboard.html").read_bytes()


async def dashboard(request: web.Request) -> web.Response:
    return web.Response(body=DASHBOARD, content_type="text/html", charset="utf-8")


async def metrics_page(request: web.Request) -> web.Response:
    """Prometheus metrics of this process."""
    return web.Response(body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE})


async def healthz(request: web.Request) -> web.Response:
    """The process is up and answering."""
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Redis answers, holds every script and takes changes: requests can be served."""
    store = request.app[STORE]
    try:
        await store.load_scripts()
        if not await store.takes_changes():
            reason = (
                "the Redis Cluster does not serve every slot (a node failed)"
                if request.app[SETTINGS].redis_cluster_nodes
                else "Redis is a read-only replica (a failover in progress, or REDIS_URL)"
            )
            return web.json_response({"status": "not ready", "reason": reason}, status=503)
    except PresenceError as error:
        return web.json_response({"status": "not ready", "reason": error.message}, status=503)
    except RedisError as error:  # answers, but refuses (read-only replica, ACL, out of memory)
        return web.json_response({"status": "not ready", "reason": str(error)}, status=503)
    return web.json_response({"status": "ready"})


async def close_sockets(app: web.Application) -> None:
    sockets: weakref.WeakSet[web.WebSocketResponse] = app[SOCKETS]
    closing = [s.close(code=WSCloseCode.GOING_AWAY, message=b"shutting down") for s in sockets]
    await asyncio.gather(*closing, return_exceptions=True)


async def redis_store(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    async with contextlib.AsyncExitStack() as stack:
        client: AnyRedis
        if settings.redis_cluster_nodes:
            client = cluster_client(settings)
            subscriber = cluster_subscriber(client, settings.redis_cluster_nodes)
        else:
            url = settings.redis_url
            if url is None:
                server = start_embedded_redis(settings.data_dir)
                stack.callback(server.stop)
                url = server.url
                log.info("embedded Redis at %s, data in %s", url, settings.data_dir)
            client = redis_client(url)
            subscriber = subscriber_client(url)
        stack.push_async_callback(client.aclose)
        store = PresenceStore(client, settings, observe_script=app[METRICS].observe_script)
        await store.load_scripts()
        app[STORE] = store
        app[LIMITER] = RateLimiter(store, settings)
        app[SUBSCRIBER] = subscriber
        yield


async def event_hub(app: web.Application) -> AsyncIterator[None]:
    client = app[SUBSCRIBER]
    hub = EventHub(client, app[STORE], app[SETTINGS].subscriber_buffer)
    await hub.start()
    app[EVENTS] = hub
    app[METRICS].follow(
        subscribers=lambda: hub.feed_count,
        in_use=app[STORE].connections_in_use,
        size=MAX_CONNECTIONS,
    )
    yield
    await hub.stop()
    try:
        await asyncio.wait_for(client.aclose(), 5)
    except TimeoutError:
        log.warning("the event subscription's connection did not close in 5 s")


async def sweeper(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(
        sweep_forever(app[STORE], app[SETTINGS].sweep_interval_ms / 1000, app[METRICS]),
        name="sweeper",
    )
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def sweep_forever(store: PresenceStore, interval_s: float, metrics: Metrics) -> None:
    """Runs the bounded sweep every interval, and at once again while a batch came back full.

    Every API process runs one; they need no coordination, as each sweep is one script."""
    while True:
        try:
            result = await store.sweep()
        except PresenceError as error:
            log.warning("sweep skipped: %s", error.message)
        except Exception:
            # The sweeper must outlive any one failed sweep; the next one tries again.
            log.exception("sweep failed")
        else:
            metrics.users_online.set(result.online)
            if max(result.offline, result.purged) >= SWEEP_BATCH:
                await asyncio.sleep(0)
                continue
        await asyncio.sleep(interval_s)
