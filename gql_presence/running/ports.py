"""Whether the service may listen at an address: only its own workers share its port."""

from __future__ import annotations

import errno
import socket


def refusal_to_listen(host: str, port: int) -> str | None:
    """Why the service cannot listen at host:port (another process serves that port, or the
    address is not this machine's), or None when it can.

    The workers of one service bind with SO_REUSEPORT, so that the kernel spreads connections
    over them; a second service would be let in the same way and take half the traffic. So the
    address is tried first as a listener without SO_REUSEPORT: any other listener refuses it."""
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        return f"{host!r} is not an address of this machine ({error.strerror})."
    for family, kind, protocol, _, address in addresses:
        with socket.socket(family, kind, protocol) as probe:
            # As the server's own socket: connections of an earlier run (TIME_WAIT) do not count.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    return (
                        f"port {port} of {host} is in use by another process; stop it, or "
                        "choose another --port."
                    )
                return f"{host}:{port} cannot be listened at ({error.strerror})."
    return None
