"""Where webhooks may send: the rules on a URL when it is given, and on the address of every
connection actually made.

A webhook's URL is chosen by a backend, but the request is made from inside the deployment:
without these rules a URL could reach the service's own Redis, a cloud metadata address or
anything else on the private network. So a URL is checked when it is given (check_url), and
again on each connection: the resolver keeps only the addresses the rules allow (so a name
that answers a public address first and a private one later never gets a request to the
private one), and the socket factory refuses any address that reached it otherwise (an address
written in the URL, which aiohttp does not resolve), just before connecting to it.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from gql_presence.store.errors import BadInputError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Networks = tuple[Network, ...]

MAX_URL_LENGTH = 2048

URL_RULES = (
    "A webhook's url is https (http only for hosts in PRESENCE_WEBHOOK_ALLOWED_NETWORKS), at "
    f"most {MAX_URL_LENGTH:,} characters, with a host and no user name or password, and "
    "addresses no loopback, private, link-local, multicast, unspecified or reserved address "
    "(unless in PRESENCE_WEBHOOK_ALLOWED_NETWORKS)"
)

# An IPv4 address as inet_aton reads it: one to four parts, each decimal, octal (a leading 0)
# or hexadecimal (0x), as "2130706433", "0177.0.0.1" or "0x7f.1" all spell 127.0.0.1.
_LOOSE_IPV4 = re.compile(r"(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+)){0,3}\.?", re.IGNORECASE)


_SURROGATE = re.compile("[\ud800-\udfff]")

# A host name as DNS has it, once IDNA-encoded: labels of 1 to 63 letters, digits, hyphens
# (and underscores, which some names use), at most 253 characters, perhaps ending in a dot.
_HOST_NAME = re.compile(r"(?=.{1,253}\.?$)[a-z0-9_-]{1,63}(\.[a-z0-9_-]{1,63})*\.?", re.IGNORECASE)


class RefusedAddressError(OSError):
    """A connection the rules do not allow: no request is made. Its message names the address
    (never a URL's path or query, which may carry a receiver's token)."""


def address_of(host: str) -> Address | None:
    """The address a host written as one stands for, in any spelling a resolver takes (IPv6
    in brackets or not, IPv4 in dotted, decimal, octal or hexadecimal parts); None for a name."""
    literal = host.strip("[]")
    try:
        return ipaddress.ip_address(literal.split("%")[0])
    except ValueError:
        pass
    if _LOOSE_IPV4.fullmatch(literal):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(literal.rstrip(".")))
        except OSError:
            return None
    return None


def _embedded(address: Address) -> Address:
    """The IPv4 address an IPv6 address stands for (IPv4-mapped ::ffff:a.b.c.d, or the
    6to4 2002::/16 form), which a connection to it reaches; else the address itself."""
    if isinstance(address, ipaddress.IPv6Address):
        return address.ipv4_mapped or address.sixtofour or address
    return address


def is_allowed(address: Address, allowed: Networks, *, plain_http: bool = False) -> bool:
    """Whether a connection to the address may be made: it lies in an allowed network, or
    (not for plain http) it is a public unicast address."""
    seen = _embedded(address)
    if any(seen in network or address in network for network in allowed):
        return True
    if plain_http:
        return False
    # is_global leaves out loopback, RFC 1918 and RFC 4193, link-local (so cloud metadata
    # addresses), unspecified, reserved, documentation and shared (100.64/10) ranges;
    # multicast is left out on its own, some of it being global.
    return seen.is_global and not seen.is_multicast and not seen.is_reserved


def check_url(url: str, allowed: Networks) -> str:
    """The URL, once it keeps the rules that can be checked without resolving its host;
    BadInputError saying what is allowed otherwise."""
    if len(url) > MAX_URL_LENGTH:
        raise BadInputError(f"{URL_RULES}; this one has {len(url):,} characters.")
    if not url.isprintable() or _SURROGATE.search(url):
        raise BadInputError(f"{URL_RULES}; this one holds control characters or invalid text.")
    try:
        parts = urlsplit(url)
        port = parts.port
        # The host as aiohttp connects to it: IDNA-encoded, which turns some characters into
        # digits and dots (fullwidth digits, the ideographic full stop).
        host = URL(url).raw_host or ""
    except (ValueError, UnicodeError):
        raise BadInputError(f"{URL_RULES}; this one is not a valid URL.") from None
    if port == 0:  # urlsplit takes it, and every connection to it would fail
        raise BadInputError(f"{URL_RULES}; this one's port is 0 (a port is 1 to 65535).")
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise BadInputError(f"{URL_RULES}; this one is not an https URL.")
    if parts.username is not None or parts.password is not None:
        raise BadInputError(f"{URL_RULES}; this one has a user name or password.")
    if not parts.hostname or not host:
        raise BadInputError(f"{URL_RULES}; this one has no host.")
    _check_host(host, scheme == "http", allowed)
    return url


def _check_host(host: str, plain_http: bool, allowed: Networks) -> None:
    address = address_of(host)
    if plain_http and not allowed:
        raise BadInputError(f"{URL_RULES}; this one is http, and no network is allowed it.")
    if address is None:
        if not _HOST_NAME.fullmatch(host):
            raise BadInputError(f"{URL_RULES}; this one's host is not a valid host name.")
        return  # a name: its addresses are checked on every connection
    if not is_allowed(address, allowed, plain_http=plain_http):
        raise BadInputError(f"{URL_RULES}; this one addresses {address}.")


def check_sockaddr(sockaddr: Sequence[Any], allowed: Networks, *, plain_http: bool) -> None:
    """Raises RefusedAddressError unless a connection to this socket address may be made."""
    address = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
    if not is_allowed(address, allowed, plain_http=plain_http):
        raise RefusedAddressError(f"connections to {address} are not allowed")


class SafeResolver(AbstractResolver):
    """Resolves a host as usual, and keeps only the addresses a connection may be made to; a
    name with none left is refused. `plain_http`: for an http URL, which may reach only the
    allowed networks."""

    def __init__(
        self,
        allowed: Networks,
        *,
        plain_http: bool = False,
        source: AbstractResolver | None = None,
    ) -> None:
        self._allowed = allowed
        self._plain_http = plain_http
        # Where answers come from: the system's resolver unless another is given.
        self._resolver = source or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._resolver.resolve(host, port, family)
        kept = [
            result
            for result in found
            if is_allowed(
                ipaddress.ip_address(result["host"].split("%")[0]),
                self._allowed,
                plain_http=self._plain_http,
            )
        ]
        if not kept:
            shown = ", ".join(sorted({result["host"] for result in found}))
            raise RefusedAddressError(
                f"the host resolves only to addresses that are not allowed ({shown})"
            )
        return kept

    async def close(self) -> None:
        await self._resolver.close()
