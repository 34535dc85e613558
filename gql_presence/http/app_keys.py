"""What the application and each request hold, typed: set at start-up by app.py, read by the
view, the WebSocket handler and the probes."""

from __future__ import annotations

from aiohttp import web

from gql_presence.http.sockets import BoundedWebSocketResponse
from gql_presence.observability.metrics import Metrics
from gql_presence.policy.auth import Authenticator
from gql_presence.policy.limits import RateLimiter
from gql_presence.realtime.held import HeldSessions
from gql_presence.realtime.hub import EventHub
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.errors import UnauthenticatedError

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", PresenceStore)
EVENTS = web.AppKey("events", EventHub)
# The connection-bound sessions (presenceSession) this process holds under its leases.
HELD_SESSIONS = web.AppKey("held_sessions", HeldSessions)
METRICS = web.AppKey("metrics", Metrics)
# The open WebSockets, which the heartbeat pings and a shutdown closes: each leaves at its
# end (a weak set's reference cost each about 300 bytes more).
SOCKETS = web.AppKey("sockets", set[BoundedWebSocketResponse])
AUTHENTICATOR = web.AppKey("authenticator", Authenticator)
LIMITER = web.AppKey("limiter", RateLimiter)
# Why an HTTP request's credentials (its Authorization header) are refused: bad, or missing
# where credentials are configured. Its body is then never read, and admission refuses it.
CREDENTIALS_REFUSED = web.RequestKey("credentials_refused", UnauthenticatedError)
SOCKET = web.RequestKey("socket", web.WebSocketResponse)
