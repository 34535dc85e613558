"""Browser pages on other origins (CORS): the headers `fetch` with `Authorization` and a JSON
body needs, for the origins PRESENCE_CORS_ORIGINS lists, and none for any other. Public files
(the browser client's modules) are shared with every origin: they are the same code for anyone,
and carry no credentials.

Written here rather than taken from aiohttp-cors: that library refuses a route registered for
every method ("*") unless its handler is an aiohttp `web.View`, and the GraphQL endpoint is a
Strawberry view routed that way. What is needed is a few headers, below.

WebSocket handshakes do not use CORS; PresenceView checks their Origin against the same list.
"""

from __future__ import annotations

from collections.abc import Collection

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from gql_presence.settings import ANY

# Tokens travel in Authorization, never in cookies: no Access-Control-Allow-Credentials.
_PREFLIGHT_HEADERS = {
    hdrs.ACCESS_CONTROL_ALLOW_METHODS: "GET, POST, OPTIONS",
    hdrs.ACCESS_CONTROL_ALLOW_HEADERS: "Authorization, Content-Type",
    # A browser asks again after 10 minutes at most (Chromium caps it at 2 hours anyway).
    hdrs.ACCESS_CONTROL_MAX_AGE: "600",
}


def cors(origins: Collection[str], public: tuple[str, ...] = ()) -> Middleware:
    """Adds CORS headers to answers to the listed origins (all of them for "*") and answers
    their preflights; requests from other origins are left as they are. Answers under the
    `public` path prefixes may be read by any page."""
    any_origin = ANY in origins

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if public and request.path.startswith(public) and request.method == hdrs.METH_GET:
            # A module script is fetched in CORS mode, without credentials: "*" suffices.
            response = await handler(request)
            response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = "*"
            return response
        origin = request.headers.get(hdrs.ORIGIN)
        listed = origin is not None and (any_origin or origin in origins)
        preflight = (
            request.method == hdrs.METH_OPTIONS
            and hdrs.ACCESS_CONTROL_REQUEST_METHOD in request.headers
        )
        if preflight:
            if not listed:
                return web.Response(
                    status=403,
                    text=f"Origin {origin} may not call this service: "
                    "it is not in PRESENCE_CORS_ORIGINS.",
                    headers={hdrs.VARY: hdrs.ORIGIN},
                )
            assert origin is not None  # listed
            allowing = _allowing(origin) | {hdrs.VARY: hdrs.ORIGIN} | _PREFLIGHT_HEADERS
            return web.Response(status=204, headers=allowing)
        allowed = origin if listed else None
        try:
            response = await handler(request)
        except web.HTTPException as error:
            _mark(error, allowed)
            raise
        if not response.prepared:  # a WebSocket's handshake has been answered already
            _mark(response, allowed)
        return response

    return middleware


def _mark(response: web.StreamResponse, allowed_origin: str | None) -> None:
    # Every answer depends on the Origin asked from, so caches must keep them apart.
    if hdrs.ORIGIN not in response.headers.getall(hdrs.VARY, ()):
        response.headers.add(hdrs.VARY, hdrs.ORIGIN)
    if allowed_origin is not None:
        response.headers.update(_allowing(allowed_origin))


def _allowing(origin: str) -> dict[str, str]:
    # The request's own origin, even for "*": Vary keeps the answers of each apart.
    return {hdrs.ACCESS_CONTROL_ALLOW_ORIGIN: origin}
