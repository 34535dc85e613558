"""Real-time benchmark: `python -m bench.realtime [--subscribers N] [--baseline REF]`.

One API process (`gql-presence serve`) on a private Redis, N WebSocket subscribers (default
1,000) speaking graphql-transport-ws, all subscribed to the same document following the same
ten users. It measures, for this checkout and, with --baseline, for a git commit of it
(extracted into a temporary folder and run from there), one after the other in one run:
- connects and subscribes per second: N clients connect, send connection_init, subscribe,
  and receive their first event (events are published until each has one), by the wall
  clock and by the service's CPU time (without that of those events' deliveries);
- process memory per idle subscription: the service's RSS before the subscribers and after,
  over N (one subscription per socket), and in a second process over N/20 sockets of 20;
- the service's CPU per delivered event: a burst of events published straight into the
  events channels (so that no HTTP request is counted), the process's CPU time from
  /proc/<pid>/stat over the burst, divided by the deliveries;
- delay: changes (`touch`/`kick` mutations) at a steady rate, and the time from sending each
  to its event arriving, at every subscriber (p50, p99); and the service's CPU over those
  changes per delivery, as measured from outside (one change at a time, its mutation's cost
  included), beside a floor: the bare handler writing one prebuilt frame to each of N sockets
  per event.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gc
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from redis.asyncio import Redis

from gql_presence.running.redis_server import free_port, start_redis_server
from gql_presence.store.channels import Channels

USERS = [f"bench-{i}" for i in range(10)]
SUBSCRIBE = (
    "subscription($ids: [ID!]) { presenceChanged(userIds: $ids) "
    "{ userId kind at sessionId online } }"
)
TEXT, PING, PONG = 0x1, 0x9, 0xA  # WebSocket opcodes
PER_SOCKET_MANY = 20  # the most subscriptions a socket may carry
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


class Subscriber(asyncio.Protocol):
    """One graphql-transport-ws client on a raw connection: it records each message's arrival
    time and bytes, and leaves JSON for later, so that the 1,000 clients in this process take
    as little of the shared cores as they can while the service is measured."""

    def __init__(self) -> None:
        self.received: list[tuple[float, bytes]] = []  # (arrival, message)
        self.errors: list[bytes] = []  # error messages: a subscribe the service refused
        self.first = asyncio.Event()
        self._buffer = b""
        self._upgraded = False
        self.disconnected = False
        self._handshake: asyncio.Future[None] | None = None
        self._transport: asyncio.Transport | None = None

    async def connect(self, host: str, port: int, subscriptions: int) -> None:
        loop = asyncio.get_running_loop()
        self._handshake = loop.create_future()
        await loop.create_connection(lambda: self, host, port)
        assert self._transport is not None
        key = base64.b64encode(os.urandom(16)).decode()
        self._transport.write(
            f"GET /graphql HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n".encode()
            + client_frame({"type": "connection_init"})
        )
        await self._handshake
        payload = {"query": SUBSCRIBE, "variables": {"ids": USERS}}
        self._transport.write(
            b"".join(
                client_frame({"id": str(i), "type": "subscribe", "payload": payload})
                for i in range(subscriptions)
            )
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        buffer = self._buffer + data
        if not self._upgraded:  # the HTTP response's headers come first
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                self._buffer = buffer
                return
            buffer = buffer[end + 4 :]
            self._upgraded = True
        while len(buffer) >= 2:
            size, start = buffer[1] & 0x7F, 2
            if size == 126:
                size, start = int.from_bytes(buffer[2:4], "big"), 4
            elif size == 127:
                size, start = int.from_bytes(buffer[2:10], "big"), 10
            if len(buffer) < start + size:
                break
            opcode, message = buffer[0] & 0x0F, buffer[start : start + size]
            buffer = buffer[start + size :]
            if opcode == PING and self._transport is not None:  # the service's heartbeat
                self._transport.write(client_frame(message, PONG))
            elif b'"connection_ack"' in message and self._handshake is not None:
                self._handshake.set_result(None)
            elif b'"next"' in message:
                self.received.append((now, message))
                self.first.set()
            elif b'"error"' in message:
                self.errors.append(message)
        self._buffer = buffer

    def connection_lost(self, exc: Exception | None) -> None:
        self.disconnected = True

    def events(self) -> list[tuple[float, str, str]]:
        """(arrival, user, kind) of each event received."""
        found = []
        for arrival, message in self.received:
            event = json.loads(message)["payload"]["data"]["presenceChanged"]
            found.append((arrival, event["userId"], event["kind"]))
        return found

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def client_frame(message: dict[str, object] | bytes, opcode: int = TEXT) -> bytes:
    """A frame as a client sends it (JSON text by default): masked, here with a zero mask,
    which leaves the bytes as they are."""
    data = message if isinstance(message, bytes) else json.dumps(message).encode()
    size = len(data)
    if size < 126:
        header = bytes([0x80 | opcode, 0x80 | size])
    elif size < 1 << 16:
        header = bytes([0x80 | opcode, 0x80 | 126]) + size.to_bytes(2, "big")
    else:
        header = bytes([0x80 | opcode, 0x80 | 127]) + size.to_bytes(8, "big")
    return header + bytes(4) + data


def change(user: str, i: int) -> tuple[str, str]:
    """A user's i-th change, which makes exactly one event: online (even i), or kicked."""
    if i % 2 == 0:
        return "ONLINE", f'mutation {{ touch(userId: "{user}", sessionId: "s{i}") {{ online }} }}'
    return "KICKED", f'mutation {{ kick(userId: "{user}") {{ online }} }}'


async def post(http: aiohttp.ClientSession, url: str, query: str) -> None:
    async with http.post(url, json={"query": query}) as response:
        body = await response.json()
        assert "errors" not in body, body


async def all_arrived(subscribers: list[Subscriber], count: int, limit_s: float) -> None:
    """Waits until every subscriber has `count` events or was disconnected by the service
    (a process that cannot keep up drops its subscribers), for at most limit_s."""
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        if all(len(s.received) >= count or s.disconnected for s in subscribers):
            return
        await asyncio.sleep(0.005)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """This process's garbage collector off while it times deliveries: a full collection of
    the 100,000 messages its clients receive in a steady phase stopped it reading for 90-230
    ms, counted as the service's delay. What it makes meanwhile holds no cycles."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextlib.contextmanager
def checkout(ref: str | None) -> Iterator[Path | None]:
    """The code of `ref` of this repository in a temporary folder (None: this checkout)."""
    if ref is None:
        yield None
        return
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="gqlp-baseline-") as folder:
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", "--format=tar", ref],  # noqa: S607 - git on PATH
            check=True,
            capture_output=True,
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(folder, filter="data")
        yield Path(folder)


@dataclass
class Service:
    url: str
    pid: int
    redis_url: str

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime

    def host_port(self) -> tuple[str, int]:
        host, port = self.url.split("/", 1)[0].split(":")
        return host, int(port)

    def rss_bytes(self) -> int:
        return int(Path(f"/proc/{self.pid}/statm").read_text().split()[1]) * PAGE_BYTES


@asynccontextmanager
async def service(code: Path | None, buffer: int) -> AsyncIterator[Service]:
    """A private Redis and one API process on it, of `code` (None: this checkout)."""
    server = start_redis_server()
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": server.url,
        "PRESENCE_WORKERS": "1",
        "PRESENCE_REVOKE_SECONDS": "0",  # kicked sessions may come back at once
        "PRESENCE_SUBSCRIBER_BUFFER": str(buffer),
    }
    if code is not None:  # before whatever path the caller gives (a profiler's hook, say)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code), env.get("PYTHONPATH")]))
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, before any measurement
        [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)],
        env=env,
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"127.0.0.1:{port}/graphql"
        async with aiohttp.ClientSession() as http:
            for _ in range(400):
                try:
                    await post(http, f"http://{url}", "{ __typename }")
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
        yield Service(url, process.pid, server.url)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        server.stop()


async def publish(redis: Redis, count: int, first: int) -> None:
    """`count` events as the scripts announce them, each in a message of its own: on the
    channel of its user (the service's one shard) and on that of every user, one of which a
    process subscribes to (a commit before the users' channels, the second). In the format of
    statuses (eleven fields), which a commit before them does not read."""
    channel, shard = Channels().events, Channels.of_shard(0)
    at_ms = int(time.time() * 1000)
    for i in range(first, first + count):
        user = USERS[i % len(USERS)]
        online = i % 2 == 0
        kind = "ONLINE" if online else "OFFLINE"
        # As lua/includes/events.lua writes it for a user with no status of their own.
        message = json.dumps(
            [kind, user, at_ms, "", int(online), kind, False, kind, "EVERYONE", 0, at_ms]
        )
        async with redis.pipeline(transaction=False) as both:
            both.publish(shard.user_events(user), message)
            both.publish(channel, message)
            await both.execute()


async def subscribe_all(svc: Service, sockets: int, per_socket: int) -> list[Subscriber]:
    subscribers = [Subscriber() for _ in range(sockets)]
    host, port = svc.host_port()
    for start in range(0, sockets, 50):
        batch = subscribers[start : start + 50]
        await asyncio.gather(*(s.connect(host, port, per_socket) for s in batch))
    return subscribers


async def quiet(clients: list[Subscriber]) -> None:
    """Waits until no event has arrived for a second."""
    while True:
        before = sum(len(s.received) for s in clients)
        await asyncio.sleep(1)
        if sum(len(s.received) for s in clients) == before:
            return


async def first_events(redis: Redis, clients: list[Subscriber], limit_s: float = 60) -> None:
    """Publishes events until every client has had one: each is subscribed then. Raises if
    some have not within limit_s, or were refused or disconnected, rather than wait forever."""
    deadline = time.perf_counter() + limit_s
    while not all(s.first.is_set() or s.errors or s.disconnected for s in clients):
        if time.perf_counter() > deadline:
            break
        await publish(redis, 1, 0)
        await asyncio.sleep(0.05)
    unheard = [s for s in clients if not s.first.is_set()]
    if unheard:
        said = next((s.errors[0] for s in unheard if s.errors), b"nothing")
        raise RuntimeError(
            f"{len(unheard)} of {len(clients)} subscribers had no event: "
            f"{sum(s.disconnected for s in unheard)} disconnected; the service said {said[:300]!r}"
        )


async def measure(
    code: Path | None, subscribers: int, burst: int, steady_s: float
) -> dict[str, float]:
    figures: dict[str, float] = {}
    connector = aiohttp.TCPConnector(limit=0)
    async with (
        service(code, max(1000, burst)) as svc,
        aiohttp.ClientSession(connector=connector) as session,
        Redis.from_url(svc.redis_url) as redis,
    ):
        http_url = f"http://{svc.url}"
        await asyncio.sleep(1)
        rss_before = svc.rss_bytes()
        cpu_before = svc.cpu_s()
        started = time.perf_counter()
        clients = await subscribe_all(svc, subscribers, 1)
        await first_events(redis, clients)
        figures["connects"] = subscribers / (time.perf_counter() - started)
        await quiet(clients)  # a slow service may still be delivering the first events
        connect_cpu_s = svc.cpu_s() - cpu_before
        first_deliveries = sum(len(s.received) for s in clients)
        figures["rss_one"] = (svc.rss_bytes() - rss_before) / subscribers

        for s in clients:
            s.received.clear()
        cpu_before = svc.cpu_s()
        await publish(redis, burst, 1)
        await all_arrived(clients, burst, 300)
        delivered = sum(len(s.received) for s in clients)
        figures["cpu_us"] = (svc.cpu_s() - cpu_before) / delivered * 1e6
        # The CPU of connecting, without that of the events that told the clients apart.
        connect_cpu_s -= first_deliveries * figures["cpu_us"] / 1e6
        figures["connect_cpu_us"] = connect_cpu_s / subscribers * 1e6
        figures["connects_cpu"] = subscribers / connect_cpu_s

        rate = 10_000 / subscribers  # changes/s for 10,000 deliveries/s
        changes = int(steady_s * rate) // 2 * 2
        cpu_before = svc.cpu_s()
        delays = await steady_phase(session, http_url, clients, changes, rate)
        # Measured from outside: each change's mutation, its script and its event's fan-out.
        figures["steady_cpu_us"] = (svc.cpu_s() - cpu_before) / max(1, len(delays)) * 1e6
        figures["p50"] = delays[len(delays) // 2] if delays else float("nan")
        figures["p99"] = delays[int(len(delays) * 0.99)] if delays else float("nan")
        figures["dropped"] = sum(s.disconnected for s in clients)
        for client in clients:
            client.close()

    async with (
        service(code, 1000) as svc,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
        Redis.from_url(svc.redis_url) as redis,
    ):
        await asyncio.sleep(1)
        rss_before = svc.rss_bytes()
        sockets = max(1, subscribers // PER_SOCKET_MANY)
        clients = await subscribe_all(svc, sockets, PER_SOCKET_MANY)
        await first_events(redis, clients)
        await asyncio.sleep(1)
        figures["rss_many"] = (svc.rss_bytes() - rss_before) / (sockets * PER_SOCKET_MANY)
        for client in clients:
            client.close()
    return figures


async def steady_phase(
    session: aiohttp.ClientSession, url: str, subscribers: list[Subscriber], count: int, rate: float
) -> list[float]:
    """Delays in ms from each change's request to its event, at every subscriber, sorted
    (those of subscribers the service disconnected left out)."""
    for s in subscribers:
        s.received.clear()
    sent_at: dict[tuple[str, str], list[float]] = defaultdict(list)
    with collector_paused():
        started = time.perf_counter()
        for i in range(count):
            # On schedule, whatever the time each request took.
            await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
            kind, mutation = change(USERS[0], i)
            sent_at[(USERS[0], kind)].append(time.perf_counter())
            await post(session, url, mutation)
        await all_arrived(subscribers, count, 120)
    delays = []
    for s in subscribers:
        seen: dict[tuple[str, str], int] = defaultdict(int)
        for arrival, user, kind in s.events():
            if user == USERS[0]:  # the burst's events, should any still arrive, are others'
                delays.append((arrival - sent_at[(user, kind)][seen[(user, kind)]]) * 1000)
                seen[(user, kind)] += 1
    return sorted(delays)


ROWS = [
    (
        "connects",
        "connects and subscribes per second (connect, init, subscribe, first event), wall clock",
        "{:,.0f}/s",
    ),
    ("connect_cpu_us", "service CPU per connect and subscribe", "{:,.0f} µs"),
    ("connects_cpu", "connects and subscribes per second of the service's CPU", "{:,.0f}/s"),
    ("rss_one", "process memory per idle subscription, one per socket", "{:,.1f} KiB"),
    ("rss_many", f"same, {PER_SOCKET_MANY} per socket", "{:,.1f} KiB"),
    ("cpu_us", "service CPU per delivered event (burst published into Redis)", "{:,.1f} µs"),
    (
        "steady_cpu_us",
        "service CPU per delivery, changes one at a time (touch and kick alternating, 10/s, "
        "each mutation's own cost included)",
        "{:,.1f} µs",
    ),
    ("p50", "steady 10,000 deliveries/s: change (request) to event, p50", "{:,.1f} ms"),
    ("p99", "same, p99", "{:,.1f} ms"),
    ("dropped", "subscribers the service disconnected (could not keep up)", "{:,.0f}"),
]


# The floor of this stack for a connect and subscribe: an aiohttp WebSocket handler that
# answers connection_init and reads the subscribe message, and nothing else.
BARE_SERVER = """
import json, sys
from aiohttp import web

async def graphql(request):
    socket = web.WebSocketResponse(protocols=["graphql-transport-ws"])
    await socket.prepare(request)
    async for message in socket:
        if json.loads(message.data)["type"] == "connection_init":
            await socket.send_str(json.dumps({"type": "connection_ack"}))
    return socket

app = web.Application()
app.router.add_get("/graphql", graphql)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


# The floor of this stack for a fan-out: the bare handler above, which also writes one
# prebuilt frame (header and `next` message) straight to every socket's transport for each
# POST to /fanout, one write per socket per event, and nothing else.
BARE_FANOUT = BARE_SERVER.replace(
    "app = web.Application()",
    """sockets = []
FRAME = bytes([0x81, 126]) + (150).to_bytes(2, "big") + b'{"id":"0","type":"next","payload":'
FRAME += b'{"data":{"presenceChanged":{"userId":"bench-0"}}}' + b" " * (150 - 85) + b"}"

async def connected(request):
    socket = web.WebSocketResponse(protocols=["graphql-transport-ws"])
    await socket.prepare(request)
    sockets.append(request.transport)
    async for message in socket:
        if json.loads(message.data)["type"] == "connection_init":
            await socket.send_str(json.dumps({"type": "connection_ack"}))
    return socket

async def fanout(request):
    for transport in sockets:
        transport.write(FRAME)
    return web.Response(text="{}", content_type="application/json")

app = web.Application()
app.router.add_post("/fanout", fanout)
graphql = connected""",
)


async def bare_fanout_cpu_us(subscribers: int, steady_s: float) -> float:
    """The bare fan-out's CPU per delivery: `subscribers` sockets, events one at a time at
    the steady phase's rate, each a POST and one write per socket."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", BARE_FANOUT, str(port)])  # noqa: ASYNC220
    try:
        bare = Service(f"127.0.0.1:{port}/graphql", process.pid, "")
        url = f"http://127.0.0.1:{port}/fanout"
        async with aiohttp.ClientSession() as session:
            for _ in range(400):  # until it listens
                try:
                    async with session.post(url) as response:
                        await response.read()
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
            clients = await subscribe_all(bare, subscribers, 1)
            await asyncio.sleep(1)
            rate = 10_000 / subscribers
            count = int(steady_s * rate) // 2 * 2
            for s in clients:
                s.received.clear()
            cpu_before = bare.cpu_s()
            with collector_paused():
                started = time.perf_counter()
                for i in range(count):
                    await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
                    async with session.post(url) as response:
                        await response.read()
                await all_arrived(clients, count, 120)
            used_s = bare.cpu_s() - cpu_before
            delivered = sum(len(s.received) for s in clients)
            for client in clients:
                client.close()
        return used_s / max(1, delivered) * 1e6
    finally:
        process.kill()  # nothing of it to keep
        process.wait(10)


async def bare_connect_cpu_us(connections: int) -> float:
    """The bare handler's CPU per connect, connection_init, ack and subscribe message."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(port)])  # noqa: ASYNC220
    try:
        bare = Service(f"127.0.0.1:{port}/graphql", process.pid, "")
        for _ in range(400):  # until it listens
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        cpu_before = bare.cpu_s()
        clients = await subscribe_all(bare, connections, 1)
        await asyncio.sleep(1)  # the subscribe messages read
        used_s = bare.cpu_s() - cpu_before
        for client in clients:
            client.close()
        return used_s / connections * 1e6
    finally:
        process.kill()  # nothing of it to keep
        process.wait(10)


async def run(options: argparse.Namespace) -> None:
    targets: list[tuple[str, str | None]] = [("this checkout", None)]
    if options.baseline:
        targets.insert(0, (options.baseline, options.baseline))
    results: dict[str, dict[str, float]] = {}
    for name, ref in targets:
        with checkout(ref) as code:
            results[name] = await measure(
                code, options.subscribers, options.burst, options.steady_seconds
            )
    bare_us = await bare_connect_cpu_us(options.subscribers)
    fanout_us = await bare_fanout_cpu_us(options.subscribers, options.steady_seconds)
    load = os.getloadavg()
    print(
        f"real-time: {options.subscribers:,} subscribers of one document, one API process, "
        f"{os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )
    names = list(results)
    print(
        "| what | "
        + " | ".join(names)
        + (f" | {names[0]} ÷ {names[1]} |" if len(names) == 2 else " |")
    )
    print("|---" * (len(names) + 1 + (len(names) == 2)) + "|")
    for key, what, shape in ROWS:
        cells = [shape.format(results[n][key] / (1024 if "rss" in key else 1)) for n in names]
        ratio = " - |" if len(names) == 2 else ""
        if len(names) == 2 and results[names[1]][key]:
            ratio = f" {results[names[0]][key] / results[names[1]][key]:,.2f} |"
        print(f"| {what} | " + " | ".join(cells) + " |" + ratio)
    print(
        f"\nThe floor, a bare aiohttp WebSocket handler (connect, connection_init, ack, the "
        f"subscribe message read): {bare_us:,.0f} µs of its CPU each, "
        f"{1e6 / bare_us:,.0f}/s.\nThe floor of a fan-out, the same handler writing one "
        f"prebuilt frame to each socket's transport per POST, at the steady phase's rate: "
        f"{fanout_us:,.1f} µs of its CPU per delivery."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.realtime", description=__doc__)
    parser.add_argument("--subscribers", type=int, default=1000)
    # Small enough that the baseline's burst (150 µs a delivery) stays within the 5 s a
    # heartbeat's pong may take: longer, and the service drops subscribers it cannot answer.
    parser.add_argument("--burst", type=int, default=25, help="events in the CPU burst")
    parser.add_argument("--steady-seconds", type=float, default=10)
    parser.add_argument("--baseline", default=None, help="a git commit to measure first, e.g. main")
    asyncio.run(run(parser.parse_args()))
