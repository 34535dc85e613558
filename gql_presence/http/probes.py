"""The pages beside the API: Kubernetes-style probes, Prometheus metrics, the live dashboard
for people, and a place whose visitors see each other's cursors."""

from __future__ import annotations

from pathlib import Path

from aiohttp import hdrs, web
from redis.exceptions import RedisError

from gql_presence.http.app_keys import AUTHENTICATOR, METRICS, SETTINGS, STORE
from gql_presence.observability.metrics import CONTENT_TYPE
from gql_presence.policy.auth import ANONYMOUS_CALLER, CallerKind
from gql_presence.store.errors import PresenceError, UnauthenticatedError

DASHBOARD = (Path(__file__).parent / "dashboard.html").read_bytes()
# The dashboard's charts, a script of its own beside the page.
DASHBOARD_SCRIPT = (Path(__file__).parent / "dashboard.js").read_bytes()
PLACES = (Path(__file__).parent / "places.html").read_bytes()
# A green dot: online.
FAVICON = (Path(__file__).parent / "favicon.ico").read_bytes()
# The browser client (clients/js, built and copied by scripts/vendor_client.py), served at
# /client/: the places page imports it, and so may any page of a listed origin.
CLIENT_ASSETS = Path(__file__).parent / "client"


async def to_dashboard(request: web.Request) -> web.Response:
    """The service's own address leads a person to its page."""
    raise web.HTTPFound("/dashboard")


async def dashboard(request: web.Request) -> web.Response:
    return web.Response(body=DASHBOARD, content_type="text/html", charset="utf-8")


async def dashboard_script(request: web.Request) -> web.Response:
    return web.Response(body=DASHBOARD_SCRIPT, content_type="text/javascript", charset="utf-8")


async def places_page(request: web.Request) -> web.Response:
    return web.Response(body=PLACES, content_type="text/html", charset="utf-8")


async def favicon(request: web.Request) -> web.Response:
    return web.Response(
        body=FAVICON,
        content_type="image/vnd.microsoft.icon",
        headers={"Cache-Control": "public, max-age=86400"},
    )


async def metrics_page(request: web.Request) -> web.Response:
    """Prometheus metrics of the service. With credentials configured, a backend token's
    only: they count the users online, invisible ones included, and every operation's
    traffic, which an end user, or anyone who reaches the port, is not to see."""
    try:
        caller = request.app[AUTHENTICATOR].caller(request.headers.get(hdrs.AUTHORIZATION))
    except UnauthenticatedError:
        caller = ANONYMOUS_CALLER
    if caller.kind not in {CallerKind.OPEN, CallerKind.BACKEND}:
        return web.Response(
            text=_METRICS_FOR_BACKENDS, status=401, headers={hdrs.WWW_AUTHENTICATE: "Bearer"}
        )
    return web.Response(body=request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE})


_METRICS_FOR_BACKENDS = (
    "/metrics answers backend tokens only: send Authorization: Bearer <a token of "
    "PRESENCE_BACKEND_TOKENS> (Prometheus: authorization: credentials_file: in the scrape "
    "config).\n"
)


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
