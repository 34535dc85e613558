"""What the application and each request hold, typed: set at start-up, read by the view, the
probes and the sweeper."""

from __future__ import annotations

import weakref

from aiohttp import web

from gql_presence.auth import Authenticator
from gql_presence.connection import Connection
from gql_presence.errors import UnauthenticatedError
from gql_presence.events import EventHub
from gql_presence.limits import RateLimiter
from gql_presence.metrics import Metrics
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore

SETTINGS = web.AppKey("settings", Settings)
# The Redis clients of this process (commands, and the one pub/sub connection).
REDIS = web.AppKey("redis", Connection)
STORE = web.AppKey("store", PresenceStore)
EVENTS = web.AppKey("events", EventHub)
METRICS = web.AppKey("metrics", Metrics)
SOCKETS = web.AppKey("sockets", weakref.WeakSet[web.WebSocketResponse])
AUTHENTICATOR = web.AppKey("authenticator", Authenticator)
LIMITER = web.AppKey("limiter", RateLimiter)
# Credentials a request sent but that are not valid: refused when its operation is admitted.
BAD_CREDENTIALS = web.RequestKey("bad_credentials", UnauthenticatedError)
SOCKET = web.RequestKey("socket", web.WebSocketResponse)
