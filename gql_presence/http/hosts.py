"""Which Host names the service answers: the defence against DNS rebinding.

A web page on any site can point a DNS name of its own at 127.0.0.1 (or at an address of a
private network) and then call the service from the browser; the browser sends that name as
the Host. Without credentials (open mode), nothing else would stop it, so in open mode only
loopback names and the names listed in PRESENCE_ALLOWED_HOSTS are answered. With credentials
configured, any Host is answered unless that setting is given.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable
from functools import lru_cache
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.typedefs import Middleware

from gql_presence.settings import ANY, Settings, is_loopback_address

# Probes read nothing and change nothing, and a kubelet or load balancer sends its own Host
# (a pod's address): they are answered whatever the Host.
ANY_HOST_PATHS = frozenset({"/healthz", "/readyz"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def host_name(host_header: str) -> str | None:
    """The name a Host header names, lower-case, without port or brackets: `[::1]:8080` is
    `::1`. None for a header that names no host."""
    try:
        name = urlsplit(f"//{host_header}").hostname
    except ValueError:  # "[::1" and other malformed forms
        return None
    if not name:
        return None
    try:
        return str(ipaddress.ip_address(name))  # one spelling per address: [0::1] is ::1
    except ValueError:
        return name.rstrip(".")


def is_loopback_name(name: str) -> bool:
    """localhost, *.localhost, 127.0.0.0/8 and ::1: names that only this machine reaches."""
    return name.endswith(".localhost") or is_loopback_address(name)


def host_check(settings: Settings) -> Middleware | None:
    """aiohttp middleware that answers 421 to a request addressed to a Host not accepted;
    None when every Host is accepted."""
    if ANY in settings.allowed_hosts or (settings.secured and not settings.allowed_hosts):
        return None
    listed = frozenset(settings.allowed_hosts)
    refusal = _refusal(settings)

    # Clients send the same few Host headers again and again; the least recent of other ones
    # are forgotten.
    @lru_cache(maxsize=256)
    def accepted(host_header: str) -> bool:
        name = host_name(host_header)
        return name is not None and (is_loopback_name(name) or name in listed)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in ANY_HOST_PATHS and not accepted(request.headers.get("Host", "")):
            raise web.HTTPMisdirectedRequest(text=refusal)
        return await handler(request)

    return check


def _refusal(settings: Settings) -> str:
    accepted = "localhost, *.localhost and loopback addresses (127.0.0.1, [::1])"
    if settings.allowed_hosts:
        accepted += ", and " + ", ".join(settings.allowed_hosts)
    why = (
        "This service runs without credentials (open mode), so it answers only requests "
        "addressed to names that cannot be pointed at it from a web page elsewhere"
        if not settings.secured
        else "This service answers only requests addressed to the names it is configured for"
    )
    return (
        f"{why}: {accepted}. Address it by one of these names, or list the name you use in "
        "PRESENCE_ALLOWED_HOSTS (comma-separated; * for any).\n"
    )
