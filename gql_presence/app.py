"""The aiohttp application: what it is made of, and in which order it starts and stops."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import WSCloseCode, web

from gql_presence.graphql.persisted import PersistedDocuments
from gql_presence.http.app_keys import (
    AUTHENTICATOR,
    EVENTS,
    HELD_SESSIONS,
    LIMITER,
    METRICS,
    SETTINGS,
    SOCKETS,
    STORE,
)
from gql_presence.http.cors import cors
from gql_presence.http.hosts import host_check
from gql_presence.http.ide import GRAPHIQL_ASSETS
from gql_presence.http.probes import (
    CLIENT_ASSETS,
    dashboard,
    dashboard_script,
    favicon,
    healthz,
    metrics_page,
    places_page,
    readyz,
    to_dashboard,
)
from gql_presence.http.sockets import ping_forever
from gql_presence.http.view import PresenceView, heartbeat_s
from gql_presence.observability import tracing
from gql_presence.observability.logs import log_client_faults_quietly
from gql_presence.observability.metrics import Metrics
from gql_presence.observability.request_log import request_telemetry
from gql_presence.observability.webhooks import WebhookTelemetry
from gql_presence.policy.auth import Authenticator
from gql_presence.policy.limits import MAX_BODY_BYTES, RateLimiter
from gql_presence.realtime.held import HeldSessions
from gql_presence.realtime.hub import EventHub
from gql_presence.running.connection import MAX_CONNECTIONS, Connection, connect
from gql_presence.running.sweeper import sweep_forever
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.tasks import stop
from gql_presence.webhooks.delivery import Deliveries, DeliverySettings
from gql_presence.webhooks.sender import Sender

# The Redis clients of this process (commands, and the one pub/sub connection).
REDIS = web.AppKey("redis", Connection)
# Documents known by their hash (automatic persisted queries) and the trusted ones.
DOCUMENTS = web.AppKey("documents", PersistedDocuments)
# This process's share of the webhooks' deliveries.
DELIVERIES = web.AppKey("deliveries", Deliveries)


def create_app(settings: Settings) -> web.Application:
    tracing.start()  # traces, when an OTLP endpoint is set: before the application is made
    # What a client causes is logged without a stack trace, whichever library logs it.
    log_client_faults_quietly()
    metrics = Metrics()
    # One log line and the metrics of every request; CORS headers for browser pages on the
    # origins PRESENCE_CORS_ORIGINS lists (the browser client's files for any page); then, in
    # open mode, only requests addressed to loopback names or PRESENCE_ALLOWED_HOSTS (against
    # DNS rebinding).
    middlewares = [request_telemetry(metrics), cors(settings.cors_origins, public=("/client/",))]
    if (checks_host := host_check(settings)) is not None:
        middlewares.append(checks_host)
    # Bodies over the limit get 413 unread.
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    # What every part reads: the settings, the metrics, who may call.
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[AUTHENTICATOR] = Authenticator(settings)
    app[SOCKETS] = set()
    # Open WebSockets would hold up a shutdown: close them first, saying why.
    app.on_shutdown.append(close_sockets)
    # One heartbeat for all of them: pings, and the drop of a client gone silent.
    app.cleanup_ctx.append(heartbeat)
    # Redis first (the embedded one when neither REDIS_URL nor a cluster is set), the store on it.
    app.cleanup_ctx.append(redis_store)
    # The bounded sweep of expired presence, on that store.
    app.cleanup_ctx.append(sweeper)
    # The Redis subscription of this process (one per shard with sharded pub/sub), fanned out
    # to its WebSocket subscribers.
    app.cleanup_ctx.append(event_hub)
    # The connection-bound sessions of this process, renewed in batches, ended by the hub's kicks.
    app.cleanup_ctx.append(held_sessions)
    # This process's share of the webhooks' deliveries, on the feed.
    app.cleanup_ctx.append(webhook_deliveries)
    # Persisted and trusted documents; the uses of this process's own copies told to Redis.
    app[DOCUMENTS] = documents = PersistedDocuments(settings.trusted_documents)
    app.cleanup_ctx.append(document_uses)
    # GraphQL over POST and GET, subscriptions over WebSocket, and GraphiQL, at one address.
    view = PresenceView(settings, documents, traced=tracing.enabled())
    app.router.add_route("*", "/graphql", view)
    if settings.graphiql:  # GraphiQL's scripts and styles, for the page at /graphql
        app.router.add_static("/graphiql", GRAPHIQL_ASSETS)
    # Probes in the shape Kubernetes uses: alive, and able to serve.
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    # Prometheus metrics of this process.
    app.router.add_get("/metrics", metrics_page)
    # A live page for people: who is online, and charts of who was active when.
    app.router.add_get("/", to_dashboard)
    app.router.add_get("/dashboard", dashboard)
    app.router.add_get("/dashboard.js", dashboard_script)
    # A place where the tabs that open it see each other's cursors.
    app.router.add_get("/places", places_page)
    # The browser client, as ES modules (the places page uses it, and so may any page).
    app.router.add_static("/client", CLIENT_ASSETS)
    # The pages' icon, which browsers ask for on every page.
    app.router.add_get("/favicon.ico", favicon)
    return app


async def close_sockets(app: web.Application) -> None:
    closing = [s.close(code=WSCloseCode.GOING_AWAY, message=b"shutting down") for s in app[SOCKETS]]
    await asyncio.gather(*closing, return_exceptions=True)


async def heartbeat(app: web.Application) -> AsyncIterator[None]:
    sockets = app[SOCKETS]
    pings = asyncio.create_task(ping_forever(sockets, heartbeat_s(app[SETTINGS])), name="heartbeat")
    yield
    await stop(pings)


async def redis_store(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    async with connect(settings) as redis:
        observe = tracing.observing(app[METRICS].observe_script)  # a span per call, when on
        store = PresenceStore(redis.client, settings, observe_script=observe)
        await store.load_scripts()  # a script that does not load fails the start, not a request
        await store.choose_publish()  # sharded pub/sub on a cluster that has it, as recorded
        await store.make_cursor_secret()  # every process, and any replica, reads the same
        app[REDIS] = redis
        app[STORE] = store
        # Admissions taken together, but each request's own while tracing shows it.
        app[LIMITER] = RateLimiter(store, settings, together=not tracing.enabled())
        yield
        # Place states this process left waiting, announced now rather than by another's sweep.
        await store.flush_planned()


async def sweeper(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(
        sweep_forever(app[STORE], app[SETTINGS].sweep_interval_ms / 1000, app[METRICS]),
        name="sweeper",
    )
    yield
    await stop(task)


async def event_hub(app: web.Application) -> AsyncIterator[None]:
    subscriber = app[REDIS].subscriber_for(sharded=app[STORE].sharded_events)
    hub = EventHub(subscriber, app[STORE], app[SETTINGS].subscriber_buffer)
    await hub.start()
    app[EVENTS] = hub
    app[METRICS].follow(
        subscribers=lambda: hub.subscriber_count,
        in_use=app[STORE].connections_in_use,
        size=MAX_CONNECTIONS,
    )
    yield
    await hub.stop()


async def document_uses(app: web.Application) -> AsyncIterator[None]:
    refreshes = asyncio.create_task(
        app[DOCUMENTS].refresh_forever(app[STORE]), name="refresh-persisted-documents"
    )
    yield
    await stop(refreshes)


async def held_sessions(app: web.Application) -> AsyncIterator[None]:
    sessions = HeldSessions(app[STORE], app[SETTINGS].connection_ttl_ms, app[EVENTS])
    app[HELD_SESSIONS] = sessions
    app[EVENTS].watch_sessions(sessions.on_event, sessions.missed_events)
    renewals = asyncio.create_task(sessions.renew_forever(), name="renew-sessions")
    yield
    await stop(renewals)
    # The closes of the sessions whose sockets the shutdown closed, while the store is there.
    await sessions.settle()
    await sessions.release_leases()


async def webhook_deliveries(app: web.Application) -> AsyncIterator[None]:
    settings, store = app[SETTINGS], app[STORE]
    sender = Sender(
        store.webhooks, settings.webhook_allowed_networks, settings.webhook_timeout_ms / 1000
    )
    deliveries = Deliveries(
        store.webhooks,
        store.feed,
        sender,
        DeliverySettings(
            lease_ms=settings.webhook_lease_ms,
            poll_ms=settings.webhook_poll_ms,
            retry_ms=settings.webhook_retry_ms,
            disable_after_ms=settings.webhook_disable_after_ms,
            batch_wait_ms=settings.webhook_batch_wait_ms,
        ),
        observe=WebhookTelemetry(app[METRICS], traced=tracing.enabled()),
    )
    app[DELIVERIES] = deliveries
    shares = asyncio.create_task(deliveries.run_forever(), name="webhook-deliveries")
    yield
    await stop(shares)
    await deliveries.close()  # its leases given up: the other processes take them at once
    await sender.close()
