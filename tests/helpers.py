"""Plain functions and values that several test modules use: waiting for a condition, running
`gql-presence serve` as a user does, subscribing as a frontend does, and real credentials.
Fixtures live in conftest.py."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import inspect
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.test_utils import TestClient
from aiohttp.web_protocol import RequestHandler
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from gql import Client, GraphQLRequest
from gql.transport.aiohttp_websockets import AIOHTTPWebsocketsTransport
from hypothesis import HealthCheck, settings
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio.client import PubSub
from standardwebhooks import Webhook as Verifier
from standardwebhooks.webhooks import WebhookVerificationError

from gql_presence.http.app_keys import EVENTS
from gql_presence.realtime.delivery import Feed, FeedDroppedError
from gql_presence.realtime.held import HeldSessions
from gql_presence.running.redis_server import free_port
from gql_presence.settings import Settings
from gql_presence.store import (
    ChosenStatus,
    EventKind,
    Granularity,
    HeldPlaceSession,
    HeldSession,
    OpenedSession,
    PresenceStore,
    PublishedEvent,
    Visibility,
    read_events,
)
from gql_presence.store.client import AnyRedis
from gql_presence.store.config import StoreSettings
from gql_presence.store.keys import Keys
from gql_presence.store.models import OnlineFilter
from tests.conftest import TEST_SETTINGS, graphql

Service = TestClient[Any, Any]


# --- waiting ---------------------------------------------------------------------------------

# How long something that an event ends may take to end in a test: far longer than it takes
# under any load, far shorter than the 30 s connection TTL that would end it otherwise. How
# fast it ends is measured in bench/, not here.
SOON_S = 10.0


async def eventually(
    condition: Callable[[], bool] | Callable[[], Awaitable[bool]],
    within_s: float = 5,
    what: str = "the condition",
) -> None:
    """Returns as soon as `condition()` (a plain or an async function) is true; fails the test
    when it is still false after `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        outcome = condition()
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"waited {within_s} s for {what} in vain")
        await asyncio.sleep(0.02)


# --- what the service tells operators ----------------------------------------------------------


async def script_calls(service: Service, script: str) -> float:
    """How many calls of lua/<script>.lua the service has made, by its own /metrics."""
    # A backend's token, for a service with credentials; an open one takes any.
    response = await service.get("/metrics", headers={"Authorization": f"Bearer {BACKEND_TOKEN}"})
    assert response.status == 200
    for family in text_string_to_metric_families(await response.text()):
        for sample in family.samples:
            if (
                sample.name == "gqlp_script_duration_seconds_count"
                and sample.labels.get("script") == script
            ):
                return sample.value
    return 0


def subscriptions_begun(port: int) -> float:
    """The subscriptions whose events have begun in the service on `port` (every worker's),
    by its /metrics."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "gqlp_websocket_subscribers"
    )


def loud_records(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, str]]:
    """What was logged above WARNING or with a stack trace: whatever a client causes must be
    logged at WARNING or below, without one."""
    return [
        (r.name, r.levelname, r.getMessage())
        for r in caplog.records
        if r.levelno > logging.WARNING or r.exc_info
    ]


# --- the snippets of README.md and docs/ ------------------------------------------------------

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
# README.md and the pages of docs/ that it links to: every example in them is run or checked.
DOCUMENTED = (README, *sorted((ROOT / "docs").glob("*.md")))
# `<!-- readme-test: skip (why) -->` or `<!-- readme-test: until-output (why) -->`, alone on
# the line right before a snippet's opening fence.
MARKER = re.compile(r"<!-- readme-test: (skip|until-output) \((.+)\) -->")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Snippet:
    language: str
    code: str
    line: int
    marker: str | None  # "skip", "until-output", or None: run as it is
    reason: str = ""
    page: Path = README

    @property
    def where(self) -> str:
        """Where a reader finds it: `docs/api.md:12`."""
        return f"{self.page.relative_to(ROOT).as_posix()}:{self.line}"


def snippets_of(page: Path) -> list[Snippet]:
    """Every fenced snippet of a page, with the marker on the line before it."""
    text = page.read_text(encoding="utf-8")
    found = []
    for fence in FENCE.finditer(text):
        line = text.count("\n", 0, fence.start()) + 1
        before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        marker = MARKER.fullmatch(before)
        assert marker or "readme-test" not in before, f"{page.name}:{line - 1}: a malformed marker"
        found.append(
            Snippet(
                fence[1],
                fence[2],
                line,
                marker[1] if marker else None,
                marker[2] if marker else "",
                page,
            )
        )
    return found


def readme_snippets() -> list[Snippet]:
    """Every fenced snippet of README.md."""
    return snippets_of(README)


def documented_snippets() -> list[Snippet]:
    """Every fenced snippet of README.md and of the pages of docs/."""
    return [snippet for page in DOCUMENTED for snippet in snippets_of(page)]


# --- events as the scripts publish them -------------------------------------------------------

Event = tuple[str, str, int, str, int]


async def published(pubsub: PubSub, wait_s: float = 0.2) -> list[Event]:
    """Every event published until none came for wait_s: its first five fields."""
    return [
        (e.kind, e.user_id, int(e.at_ms), e.session_id, int(e.online_or_generation))
        for e in await published_in_full(pubsub, wait_s)
    ]


async def published_in_full(pubsub: PubSub, wait_s: float = 0.2) -> list[PublishedEvent]:
    """Every event published until none came for wait_s."""
    events: list[PublishedEvent] = []
    while (message := await pubsub.get_message(timeout=wait_s)) is not None:
        events += read_events(message["data"])
    return events


def kinds(events: list[Event]) -> list[tuple[Any, ...]]:
    return [(kind, user, session, online) for kind, user, _, session, online in events]


# --- `gql-presence serve` in a process of its own ----------------------------------------------


def run_service(data_dir: Path, port: int, **env: str) -> subprocess.Popen[bytes]:
    """`gql-presence serve` on `port`, with only the given settings (none of this shell's)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "PRESENCE_"))}
    environment.update(PRESENCE_DATA_DIR=str(data_dir), **env)
    return subprocess.Popen(
        [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def post(port: int, query: str, authorization: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers=headers,
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - our own loopback
        body: dict[str, Any] = json.load(response)
        return body


def wait_until_serving(service: subprocess.Popen[bytes], port: int) -> None:
    """Blocks until the service answers a query (a process starts in a second or two)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert service.poll() is None, service.stdout.read().decode() if service.stdout else ""
        try:
            post(port, "{ __typename }")
        except OSError:
            time.sleep(0.1)
        else:
            return
    pytest.fail("the service did not start within 20 s")


def stop(service: subprocess.Popen[bytes]) -> str:
    service.send_signal(signal.SIGTERM)
    # The parent gives its workers 15 s to drain, then kills them: it is gone well within 30.
    output, _ = service.communicate(timeout=30)
    return output.decode()


@dataclasses.dataclass(frozen=True)
class Running:
    """A `gql-presence serve` process (one worker) and its port."""

    process: subprocess.Popen[bytes]
    port: int

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"


async def start_services(
    count: int, data_dir: Path, each: Sequence[dict[str, str]] = (), /, **env: str
) -> list[Running]:
    """`count` services on free ports with the same settings (and the i-th's own from
    `each[i]`, if given), started side by side; each serves in one process
    (PRESENCE_WORKERS=1), so that a signal reaches the process that holds its sessions."""
    started = []
    try:
        for i in range(count):
            port = free_port()
            own = each[i] if i < len(each) else {}
            process = run_service(data_dir / str(i), port, PRESENCE_WORKERS="1", **env | own)
            started.append(Running(process, port))
        await asyncio.gather(
            *(asyncio.to_thread(wait_until_serving, s.process, s.port) for s in started)
        )
    except BaseException:
        end_services(started)
        raise
    return started


def end_services(services: Sequence[Running]) -> None:
    """Stops every service still running (one stopped with SIGSTOP is continued first, one
    that does not stop in time is killed) and reads what each wrote, which closes its pipe."""
    for service in services:
        if service.process.poll() is None:
            service.process.send_signal(signal.SIGCONT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                stop(service.process)
        if service.process.poll() is None:
            service.process.kill()
        service.process.communicate(timeout=5)


# --- subscriptions, as a frontend makes them ----------------------------------------------------

FIELDS = "userId kind at sessionId online"


def counted_calls(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[Any]:
    """The positional arguments of each call of `owner.name` from now on (the test's end
    undoes it), the calls themselves made as before."""
    calls: list[Any] = []
    real = getattr(owner, name)

    def counted(*arguments: Any, **keywords: Any) -> Any:
        calls.append(arguments)
        return real(*arguments, **keywords)

    monkeypatch.setattr(owner, name, counted)
    return calls


def subscription(arguments: str) -> str:
    return f"subscription {{ presenceChanged({arguments}) {{ {FIELDS} }} }}"


def ids(*user_ids: str) -> str:
    return json.dumps(list(user_ids))


def ws_url(service: Service) -> str:
    return str(service.make_url("/graphql")).replace("http://", "ws://")


class Subscriber:
    """One `gql` client subscribed to one document, collecting what it receives; with
    `authorization` (say `Bearer <token>`) in its connection_init."""

    def __init__(
        self,
        url: str,
        document: str,
        variables: dict[str, Any] | None = None,
        authorization: str | None = None,
    ) -> None:
        self.url = url
        self.document = document
        self.variables = variables
        self.init_payload = {} if authorization is None else {"Authorization": authorization}
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.ended: BaseException | None = None
        self.done = asyncio.Event()

    async def run(self) -> None:
        transport = AIOHTTPWebsocketsTransport(
            url=self.url, subprotocols=["graphql-transport-ws"], init_payload=self.init_payload
        )
        try:
            async with Client(transport=transport) as session:
                request = GraphQLRequest(self.document, variable_values=self.variables)
                async for result in session.subscribe(request):
                    self.events.put_nowait(next(iter(result.values())))  # the one root field
        except Exception as error:  # recorded for the test to look at
            self.ended = error
        else:
            self.ended = StopAsyncIteration("the server completed the subscription")
        finally:
            self.done.set()

    async def next(self, within_s: float = 3.0) -> dict[str, Any]:
        return await asyncio.wait_for(self.events.get(), within_s)

    async def nothing_more(self, wait_s: float = 0.3) -> None:
        await asyncio.sleep(wait_s)
        assert self.events.empty(), self.events.get_nowait()


@contextlib.asynccontextmanager
async def subscribed(
    url: str,
    document: str,
    ready: Callable[[], bool] | None = None,
    authorization: str | None = None,
) -> AsyncIterator[Subscriber]:
    """A Subscriber running for the time of the block, once `ready()` says it is subscribed."""
    subscriber = Subscriber(url, document, authorization=authorization)
    task = asyncio.create_task(subscriber.run())
    if ready is not None:
        await eventually(
            lambda: ready() or subscriber.done.is_set(), what="the subscription to begin"
        )
        assert ready(), f"not subscribed: {subscriber.ended!r}"
    try:
        yield subscriber
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def graphql_socket(
    service: Service, authorization: str | None = None
) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    """A graphql-transport-ws connection to the service, acknowledged, with these credentials
    in connection_init."""
    socket = await service.ws_connect("/graphql", protocols=["graphql-transport-ws"])
    try:
        payload = {} if authorization is None else {"Authorization": authorization}
        await socket.send_json({"type": "connection_init", "payload": payload})
        assert (await socket.receive_json(timeout=3))["type"] == "connection_ack"
        yield socket
    finally:
        await socket.close()


async def over_socket(
    socket: aiohttp.ClientWebSocketResponse,
    document: str,
    variables: dict[str, Any] | None = None,
    operation_id: str = "1",
) -> list[dict[str, Any]]:
    """Runs one query or mutation over the socket: its messages, up to its `complete` or its
    `error`."""
    payload = {"query": document, "variables": variables}
    message = {"id": operation_id, "type": "subscribe", "payload": payload}
    # As a browser sends it (JSON.stringify): UTF-8, with \u escapes only for what UTF-8
    # cannot carry (lone surrogates).
    text = json.dumps(message, ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:
        text = json.dumps(message)
    await socket.send_str(text)
    messages: list[dict[str, Any]] = []
    while not messages or messages[-1]["type"] not in {"complete", "error"}:
        received = await socket.receive(timeout=5)
        assert received.type is aiohttp.WSMsgType.TEXT, f"the socket ended: {received}"
        message = json.loads(received.data)
        assert message.get("id") == operation_id, message
        messages.append(message)
    return messages


async def start_operation(
    socket: aiohttp.ClientWebSocketResponse, operation_id: str, document: str, **variables: Any
) -> None:
    """Starts an operation over a graphql-transport-ws socket, without waiting for a reply."""
    payload = {"query": document, "variables": variables}
    await socket.send_json({"id": operation_id, "type": "subscribe", "payload": payload})


async def receive_message(
    socket: aiohttp.ClientWebSocketResponse, within_s: float = 3
) -> dict[str, Any]:
    """The socket's next message, which must come within `within_s`."""
    message = await socket.receive(timeout=within_s)
    assert message.type is aiohttp.WSMsgType.TEXT, f"the socket ended: {message}"
    return dict(json.loads(message.data))


def model_runs(max_examples: int) -> settings:
    """max_examples runs of 20 steps each of a model-based test, however long a step on real
    Redis takes."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=20,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def socket_errors(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The errors an operation's messages carry: an `error` message's, or its results'."""
    errors: list[dict[str, Any]] = []
    for message in messages:
        if message["type"] == "error":
            errors += message["payload"]
        elif message["type"] == "next":
            errors += message["payload"].get("errors") or []
    return errors


def masked_frame(message: dict[str, Any]) -> bytes:
    """One WebSocket text frame of `message` as JSON, masked as a client must send it."""
    payload = json.dumps(message).encode()
    mask = os.urandom(4)
    size = len(payload)
    if size < 126:
        header = bytes([0x81, 0x80 | size])
    elif size < 1 << 16:
        header = bytes([0x81, 0x80 | 126]) + size.to_bytes(2, "big")
    else:
        header = bytes([0x81, 0x80 | 127]) + size.to_bytes(8, "big")
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def raw_socket(
    service: Service, authorization: str | None = None, receive_buffer: int | None = None
) -> socket.socket:
    """A raw WebSocket client, acknowledged (with these credentials, if any), for what a
    library's client cannot do: send part of a frame, or read nothing at all. Close it when
    done. `receive_buffer` (bytes) is set before it connects, where it bounds the window."""
    loop = asyncio.get_running_loop()
    client = socket.socket()
    if receive_buffer is not None:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    client.setblocking(False)
    host, port = service.host, service.port
    await loop.sock_connect(client, (host, port))
    key = base64.b64encode(os.urandom(16)).decode()
    handshake = (
        f"GET /graphql HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n"
    )
    await loop.sock_sendall(client, handshake.encode())
    init: dict[str, Any] = {"type": "connection_init"}
    if authorization is not None:
        init["payload"] = {"Authorization": authorization}
    await loop.sock_sendall(client, masked_frame(init))
    received = b""
    while b"connection_ack" not in received:
        chunk = await asyncio.wait_for(loop.sock_recv(client, 4096), 5)
        assert chunk, f"the service closed the connection: {received!r}"
        received += chunk
    return client


async def close_code_of(client: socket.socket, within_s: float = 5) -> int:
    """Reads the service's frames from a raw client until its close frame: the code it gives."""
    loop = asyncio.get_running_loop()
    buffered = b""

    async def take(size: int) -> bytes:
        nonlocal buffered
        while len(buffered) < size:
            chunk = await asyncio.wait_for(loop.sock_recv(client, 65536), within_s)
            assert chunk, "the connection ended without a close frame"
            buffered += chunk
        taken, buffered = buffered[:size], buffered[size:]
        return taken

    while True:
        first, second = await take(2)
        size = second & 0x7F
        if size == 126:
            size = int.from_bytes(await take(2), "big")
        elif size == 127:
            size = int.from_bytes(await take(8), "big")
        payload = await take(size)
        if first & 0x0F == 0x8:  # a close frame: its code, then its reason
            return int.from_bytes(payload[:2], "big")


async def subscriber_that_stops_reading(
    service: Service, document: str, variables: dict[str, Any]
) -> socket.socket:
    """A raw WebSocket client with a small receive buffer that subscribes to `document` and
    from then on reads nothing, as a client on a stalled link does. Close it when done."""
    client = await raw_socket(service, receive_buffer=4096)
    subscribe = {"query": document, "variables": variables}
    await asyncio.get_running_loop().sock_sendall(
        client, masked_frame({"id": "1", "type": "subscribe", "payload": subscribe})
    )
    return client


class HoldingSocket:
    """One graphql-transport-ws connection to a service, holding presenceSession
    subscriptions (each under the id "user/session"). It reads all the time, as a browser
    does, so that the service's pings are answered; what each operation received is kept."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.received: dict[str, list[dict[str, Any]]] = {}
        self.closed = asyncio.Event()  # the connection ended
        self._reading = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.socket:
                if message.type is aiohttp.WSMsgType.TEXT:
                    data = json.loads(message.data)
                    self.received.setdefault(data.get("id", ""), []).append(data)
        finally:
            self.closed.set()

    async def hold(self, user_id: str, session_id: str) -> str:
        """Subscribes to the session and waits until the service says it is live; returns
        the operation's id."""
        operation = f"{user_id}/{session_id}"
        query = (
            f"subscription {{ presenceSession(userId: {json.dumps(user_id)}, "
            f"sessionId: {json.dumps(session_id)}) {{ live endReason }} }}"
        )
        return await self._held(operation, query, "presenceSession")

    async def hold_place(
        self, place_id: str, user_id: str, session_id: str, state: object = None
    ) -> str:
        """As `hold`, for a placeSession (under the id "place/user/session"), joining with
        `state`."""
        operation = f"{place_id}/{user_id}/{session_id}"
        query = (
            "subscription($place: ID!, $user: ID, $session: ID!, $state: JSONObject) { "
            "placeSession(placeId: $place, userId: $user, sessionId: $session, state: $state) "
            "{ live endReason } }"
        )
        variables = {"place": place_id, "user": user_id, "session": session_id, "state": state}
        return await self._held(operation, query, "placeSession", variables)

    async def _held(
        self, operation: str, query: str, field: str, variables: dict[str, Any] | None = None
    ) -> str:
        payload = {"query": query, "variables": variables}
        await self.socket.send_json({"id": operation, "type": "subscribe", "payload": payload})
        await eventually(
            lambda: bool(self.received.get(operation)) or self.closed.is_set(),
            what=f"{operation} to be held",
        )
        assert self.received.get(operation), f"the socket closed: {self.socket.close_code}"
        [first] = self.received[operation]
        assert first["payload"] == {"data": {field: {"live": True, "endReason": None}}}, first
        return operation

    def completed(self, operation: str) -> bool:
        return any(m["type"] == "complete" for m in self.received.get(operation, ()))

    def ends(self, operation: str) -> list[Any]:
        """The last state each of the operation's results carried after its first, or its
        errors' codes: what the service told of the session's end."""
        told: list[Any] = []
        for message in self.received.get(operation, ())[1:]:
            if message["type"] != "next":
                continue
            payload = message["payload"]
            data = payload.get("data")
            if data:
                told.append(next(iter(data.values())))
            else:
                told.append([e["extensions"]["code"] for e in payload["errors"]])
        return told

    async def close(self) -> None:
        await self.socket.close()
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading


@contextlib.asynccontextmanager
async def holding_socket(port: int, authorization: str) -> AsyncIterator[HoldingSocket]:
    """A HoldingSocket to the service on `port`, acknowledged with these credentials."""
    async with aiohttp.ClientSession() as http:
        socket = await http.ws_connect(
            f"ws://127.0.0.1:{port}/graphql",
            protocols=["graphql-transport-ws"],
            timeout=aiohttp.ClientWSTimeout(ws_close=2),
        )
        init = {"type": "connection_init", "payload": {"Authorization": authorization}}
        await socket.send_json(init)
        assert (await socket.receive_json(timeout=3))["type"] == "connection_ack"
        holding = HoldingSocket(socket)
        try:
            yield holding
        finally:
            await holding.close()


async def until_following(changes: Subscriber, port: int, authorization: str) -> list[str]:
    """Touches new users through the service on `port` until the subscriber hears of one:
    then its subscription is surely in place. Returns the users touched, and takes what the
    subscriber received meanwhile off its queue."""
    touched: list[str] = []
    for attempt in range(50):
        touched.append(f"probe-{attempt}")
        touch = f'mutation {{ touch(userId: "{touched[-1]}") {{ online }} }}'
        assert "errors" not in await asyncio.to_thread(post, port, touch, authorization)
        with contextlib.suppress(TimeoutError):
            await changes.next(within_s=0.2)
            await asyncio.sleep(0.2)  # the other probes' events, if they are on their way
            received(changes)
            return touched
    pytest.fail(f"not subscribed: {changes.ended!r}")


def received(changes: Subscriber) -> list[dict[str, Any]]:
    """What the subscriber received and no one has taken yet."""
    events = []
    while not changes.events.empty():
        events.append(changes.events.get_nowait())
    return events


# Long ids make long events: the 10,000 users' come to a few megabytes.
STALLED_USERS = [f"{i:0>120}" for i in range(10_000)]
TOUCH_MANY = "mutation($ids: [ID!]!) { touchMany(userIds: $ids) }"


@contextlib.asynccontextmanager
async def stalled_subscriber(service: Service) -> AsyncIterator[RequestHandler]:
    """A subscriber to STALLED_USERS that reads nothing once subscribed; yields the server's
    connection to it, with small kernel buffers so that what is sent piles up in the
    service."""
    server = service.server.runner.server if service.server.runner else None
    assert server is not None
    document = f"subscription($ids: [ID!]) {{ presenceChanged(userIds: $ids) {{ {FIELDS} }} }}"
    stalled = await subscriber_that_stops_reading(service, document, {"ids": STALLED_USERS})
    try:
        await eventually(lambda: service.app[EVENTS].subscriber_count == 1, what="the subscription")
        port = stalled.getsockname()[1]
        [connection] = [
            c
            for c in server.connections
            if c.transport and c.transport.get_extra_info("peername")[1] == port
        ]
        assert connection.transport is not None
        connection.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF, 4096
        )
        yield connection
    finally:
        stalled.close()


async def pile_up_events(service: Service, connection: RequestHandler) -> None:
    """Events for a stalled subscriber with a large buffer, until they wait in the service."""
    for start in range(0, len(STALLED_USERS), 500):
        await graphql(service, TOUCH_MANY, ids=STALLED_USERS[start : start + 500])
    await eventually(
        lambda: (
            connection.transport is not None and connection.transport.get_write_buffer_size() > 0
        ),
        what="events to pile up in the service",
    )


async def flood_until_dropped(service: Service) -> None:
    """Events for a stalled subscriber in batches smaller than its feed's buffer, so that they
    pile up in its connection first, until the feed overflows and the subscriber is dropped."""
    hub = service.app[EVENTS]
    for start in range(0, len(STALLED_USERS), 50):
        await graphql(service, TOUCH_MANY, ids=STALLED_USERS[start : start + 50])
        if hub.subscriber_count == 0:
            return
    pytest.fail("the subscriber was not dropped")


async def released(service: Service, connection: RequestHandler) -> None:
    """Waits until the server has closed the connection and let go of it."""
    server = service.server.runner.server if service.server.runner else None
    assert server is not None
    await eventually(
        lambda: connection.transport is None and connection not in server.connections,
        within_s=3,
        what="the server to release the connection",
    )


def feeds_above(service: Service, count: int) -> Callable[[], bool]:
    hub = service.app[EVENTS]
    return lambda: hub.subscriber_count > count


async def ignore(_: FeedDroppedError) -> None:
    pass


async def first_event(feed: Feed) -> Any:
    async for event in feed:
        return event
    return None


# --- connection-bound sessions cancelled while they open --------------------------------------


class PausingStore(PresenceStore):
    """A real store on real Redis that can stop one call at a point for a test: `pause_at`
    "open" stops the next opening of a connection-bound session after its script ran and
    before its caller has the reply, "check" the next check of held sessions likewise. `paused` is set then,
    and the call goes on once `resume` is set. It counts the openings under way, and records
    every opening that returned and every close that ran."""

    def __init__(self, redis: AnyRedis, settings: StoreSettings) -> None:
        super().__init__(redis, settings)
        self.pause_at: str | None = None
        self.paused = asyncio.Event()
        self.resume = asyncio.Event()
        self.opening = 0  # openings under way
        self.opened: list[OpenedSession] = []
        self.closed: list[HeldSession] = []

    async def open_session(
        self, user_id: str, session_id: str, device: str | None = None
    ) -> OpenedSession:
        self.opening += 1
        try:
            opened = await super().open_session(user_id, session_id, device)
            self.opened.append(opened)
            await self._pause("open")
        finally:
            self.opening -= 1
        return opened

    async def check_sessions(
        self, held: Sequence[HeldSession | HeldPlaceSession]
    ) -> list[HeldSession | HeldPlaceSession]:
        lost = await super().check_sessions(held)
        await self._pause("check")
        return lost

    async def close_session(self, held: HeldSession) -> bool:
        closed = await super().close_session(held)
        self.closed.append(held)
        return closed

    async def _pause(self, point: str) -> None:
        if self.pause_at != point:
            return
        self.pause_at = None
        self.resume = resume = asyncio.Event()
        self.paused.set()
        await resume.wait()


# Where a holder can be cancelled while its session opens: its opening's script queued but
# not sent; run, its reply not read yet; a kick announced meanwhile being checked with the
# store; and the hold there, in the holder's block.
OPENING_POINTS = ("queued", "replied", "catching up", "held")


async def cancel_hold_at(
    sessions: HeldSessions, store: PausingStore, user_id: str, session_id: str, point: str
) -> None:
    """Holds the session through `sessions` (which runs on `store`), cancels the holder at
    `point` of the opening, lets any reply still due arrive, and then requires what was
    opened to be closed within a second. A refusal of the opening is raised."""
    in_block = asyncio.Event()

    async def holder() -> None:
        async with sessions.hold(user_id, session_id):
            in_block.set()
            await asyncio.Event().wait()

    before = len(store.opened)
    store.paused.clear()
    store.pause_at = "open" if point in {"replied", "catching up"} else None
    task = asyncio.create_task(holder())
    if point == "queued":
        await asyncio.sleep(0)  # the holder runs up to its first wait
    elif point == "held":
        await _until(in_block.wait(), task)
    else:
        await _until(store.paused.wait(), task)
        if point == "catching up":
            store.paused.clear()
            store.pause_at = "check"
            # A kick of every session of the user, made before this opening, announced only
            # now: the holder asks the store whether it ended this opening too.
            now_ms = int(time.time() * 1000)
            kicked = (EventKind.KICKED, user_id, now_ms, "", 0, "OFFLINE", False, "KICKED")
            sessions.on_event(PublishedEvent(*kicked, "EVERYONE", 0, now_ms, 0, ""))
            store.resume.set()
            await _until(store.paused.wait(), task)
    task.cancel()
    store.pause_at = None
    store.resume.set()  # the reply still due comes, late
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await eventually(lambda: not store.opening, within_s=1, what="the openings to return")
    opened = [one.held for one in store.opened[before:] if one.held is not None]
    await eventually(
        lambda: all(held in store.closed for held in opened),
        within_s=1,
        what=f"the opening of {user_id}/{session_id} cancelled at {point!r} to be closed",
    )


async def _until(event: Awaitable[Any], task: asyncio.Task[None]) -> None:
    """Waits for `event`; if the task ends first, raises what ended it."""
    waiting = asyncio.ensure_future(event)
    await asyncio.wait({waiting, task}, return_when=asyncio.FIRST_COMPLETED)
    if not waiting.done():
        waiting.cancel()
        task.result()
        raise AssertionError(f"the holder ended before the point: {task!r}")


# --- credentials ---------------------------------------------------------------------------------

ISSUER, AUDIENCE = "https://id.example.test", "gql-presence"
BACKEND_TOKEN = "b" * 40
HS_SECRET = "s" * 40
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())


def pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


# Every kind of credential: a backend token, HS256 JWTs and RS256 JWTs.
SECURED = dataclasses.replace(
    TEST_SETTINGS,
    backend_tokens=(("chat", BACKEND_TOKEN),),
    jwt_secret=HS_SECRET,
    jwt_public_key=pem(RSA_KEY),
    jwt_issuer=ISSUER,
    jwt_audience=AUDIENCE,
)


def user_token(
    sub: str = "alice", key: Any = HS_SECRET, algorithm: str = "HS256", **claims: Any
) -> str:
    # Valid for an hour unless told otherwise: some are made when their module is collected,
    # and must still hold when its tests run, late in a full run.
    payload = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "exp": time.time() + 3600, **claims}
    return jwt.encode(payload, key, algorithm=algorithm)


OTHER_BACKEND_TOKEN = "c" * 40


def rated(burst: int, redis_url: str | None, **changes: Any) -> Settings:
    """SECURED on this Redis with two backends, "chat" (BACKEND_TOKEN) and "billing"
    (OTHER_BACKEND_TOKEN), each with a bucket of `burst` tokens at once, refilled at one token
    every 2 s."""
    return dataclasses.replace(
        SECURED,
        redis_url=redis_url,
        backend_tokens=(("chat", BACKEND_TOKEN), ("billing", OTHER_BACKEND_TOKEN)),
        backend_rate=0.5,
        backend_burst=burst,
        **changes,
    )


async def as_user(service: Service, token: str, query: str, **variables: Any) -> dict[str, Any]:
    """Runs a query or mutation over HTTP with these credentials (a backend token or a JWT)."""
    response = await service.post(
        "/graphql",
        json={"query": query, "variables": variables},
        headers={"Authorization": f"Bearer {token}"},
    )
    body: dict[str, Any] = await response.json()
    return body


def text_messages(frames: bytes) -> list[bytes]:
    """The messages of unmasked text frames written one after the other, as a server writes
    them (realtime/delivery.text_frame)."""
    messages = []
    while frames:
        assert frames[0] == 0x81, frames[:2]  # FIN, text, never compressed
        size, start = frames[1], 2
        if size == 126:
            size, start = int.from_bytes(frames[2:4], "big"), 4
        elif size == 127:
            size, start = int.from_bytes(frames[2:10], "big"), 10
        messages.append(frames[start : start + size])
        frames = frames[start + size :]
    return messages


async def put_old_online_time(redis: AnyRedis) -> None:
    """A key of online time in the layout of earlier versions (lua/carry_online_time.lua), of
    shard 0 and the span of days holding today: index 0 online 2 seconds on its first day."""
    span = (datetime.now(UTC).date() - date(1970, 1, 1)).days // 32
    await redis.set(Keys.of_shard(0).old_online_time(span, 0), b"\0\1" + bytes(65534))


async def call_every_script(store: PresenceStore, redis: AnyRedis) -> None:
    """Every store operation, so that each of the store's scripts runs at least once (but
    choose_publish, which runs on a Redis Cluster only)."""
    users = [f"u{i}" for i in range(12)]
    await store.add_friends("a", users)
    await store.touch("a", "s")
    await store.touch_many(users)
    await store.kick("a", "s")
    await store.kick("u1")
    await store.presence_many(users)
    await store.set_status("u1", ChosenStatus.AWAY)
    await store.set_last_seen_visibility("u1", Visibility.FRIENDS)
    await store.presence_many(users, reader="a")
    await store.online_users()
    await store.online_users(by_online_since=True)
    await store.online_users(kept=OnlineFilter(user_id_prefix="u"))
    await store.online_friends("a")
    now = datetime.now(UTC)
    await store.active_in_range(now - timedelta(hours=1), now)
    await store.weekly_stats()
    await store.touch_many(users[:3], at=now - timedelta(days=2))
    await store.analytics.record_peak(3)
    await store.analytics.activity(now - timedelta(days=3), now, Granularity.HOUR)
    await store.analytics.activity(now - timedelta(days=3), now, Granularity.WEEK)
    await store.analytics.retention(now.date() - timedelta(days=3), 2, 2, Granularity.DAY)
    await store.analytics.retention(now.date(), 1, 1, Granularity.HOUR)
    await store.analytics.stickiness(None, 7)
    await store.analytics.compact_ended()
    await store.analytics.fold_ended()
    await store.online_time.online_time(["alice"], date(2026, 11, 1), date(2026, 11, 2))
    await put_old_online_time(redis)
    await store.online_time.carry_over()
    await store.online_time.fold_closed()
    await store.online_time.online_periods(
        datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC)
    )
    await store.remove_friends("a", users[:6])
    await store.take_token("backend:chat", 10, 10)
    await store.persist_document("0" * 64, "{ __typename }")
    await store.persisted_document("0" * 64)
    await store.refresh_documents(["0" * 64])
    held = [(await store.open_session(user, "tab")).held for user in users]
    assert await store.renew_leases() == []
    assert await store.check_sessions(held) == []
    await store.session_revoked(held[0])
    await store.close_session(held[0])
    places = [f"doc{i}" for i in range(12)]
    in_places = [(await store.open_place_session(p, "a", "tab")).held for p in places]
    assert await store.check_sessions(in_places) == []
    for x in range(2, 6):  # within 50 ms of the first: the last announced at the interval's end
        await store.set_place_state(places[0], "a", "tab", {"x": x})
    await store.flush_planned()
    await store.place_members(places[0])
    await store.place_counts(places)
    await store.close_place_session(in_places[0])
    await store.sweep()
    page = await store.changes(None, 5)
    await store.changes(page.end_cursor, 5)
    await store.feed_cursor()
    await store.feed.shard_look(0, await store.feed.shard_start(0), 10)
    await call_every_webhook_script(store)


async def call_every_webhook_script(store: PresenceStore) -> None:
    """Each of the webhooks' scripts once: create, update, rotate, an attempt, read, a lease
    of its delivery and a move of it, delete."""
    webhook, _ = await store.webhooks.create("https://example.com/", None, None, 0)
    await store.webhooks.update(webhook.id, debounce_seconds=1)
    await store.webhooks.rotate_secret(webhook.id)
    await store.webhooks.record_attempt(
        webhook.id,
        delivery_id="d",
        changes=1,
        status=200,
        error=None,
        duration_ms=1.0,
        acknowledged=True,
    )
    await store.webhooks.webhooks()
    _, [held], _ = await store.webhooks.take_leases("t", 1000, [(webhook.id, 0, True)])
    assert held
    assert await store.webhooks.advance(webhook.id, 0, "t", {"pending": "1-0"})
    [found] = await store.webhooks.for_deliveries(webhook.id)
    assert await store.webhooks.pass_over(0, "t", [(found, found.progress[0], "2-0")]) == [
        False  # a batch is pending
    ]
    await store.webhooks.delete(webhook.id)


# --- webhooks' receivers -----------------------------------------------------------------------


@dataclasses.dataclass
class Delivered:
    """One request a WebhookReceiver took: its `webhook-id` and its verified payload."""

    webhook_id: str
    payload: dict[str, Any]
    # How the receiver answered it: a status, or None while it hangs.
    status: int | None


class WebhookReceiver:
    """A webhook's receiver on 127.0.0.1, as a backend would run it: every request's signature
    checked with the `standardwebhooks` package. It answers `status` (set `hang` to answer
    nothing until released, `failures` to answer 500 that many times first), and may be
    stopped and started again on the same port (a receiver that is down)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.secret = ""
        self.requests: list[Delivered] = []
        self.unverified = 0
        self.status = 204
        self.failures = 0
        self.hang = False
        self.released = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self.delay_s = 0.0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hooks", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.text()
        try:
            payload = Verifier(self.secret).verify(body, dict(request.headers))
        except WebhookVerificationError:
            self.unverified += 1
            return web.Response(status=400)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            status: int | None = self.status
            if self.failures > 0:
                self.failures -= 1
                status = 500
            elif self.hang:
                status = None
            delivered = Delivered(request.headers["webhook-id"], payload, status)
            self.requests.append(delivered)
            if status is None:
                await self.released.wait()
                status = delivered.status = self.status
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            return web.Response(status=status)
        finally:
            self.in_flight -= 1

    def changes(self) -> list[dict[str, Any]]:
        """Every change acknowledged, once each (by cursor), in the order first received."""
        seen: dict[str, dict[str, Any]] = {}
        for delivered in self.requests:
            if delivered.status is not None and 200 <= delivered.status < 300:
                for change in delivered.payload["data"]["changes"]:
                    seen.setdefault(change["cursor"], change)
        return list(seen.values())

    def versions(self) -> dict[str, list[int]]:
        """Each user's (or place's) versions, in the order their changes were received."""
        found: dict[str, list[int]] = {}
        for change in self.changes():
            owner = change.get("userId") if change["type"] == "presence" else change["placeId"]
            found.setdefault(f"{change['type']}:{owner}", []).append(change["version"])
        return found


@contextlib.asynccontextmanager
async def webhook_receiver() -> AsyncIterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    await receiver.start()
    try:
        yield receiver
    finally:
        receiver.released.set()
        await receiver.stop()


class Answers(AbstractResolver):
    """A name server that answers as the test says: the resolver's source, not under test."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
                proto=0,
                flags=0,
            )
            for address in self.addresses
        ]

    async def close(self) -> None:
        pass
