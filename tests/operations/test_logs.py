"""What a client can cause is logged at WARNING or below, once, without a stack trace; a fault
of ours is logged at ERROR with its stack trace."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from typing import Any

import pytest
from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.test_utils import TestClient, make_mocked_request
from strawberry.http.exceptions import WebSocketDisconnected

from gql_presence.app import create_app
from gql_presence.http.app_keys import EVENTS, STORE
from gql_presence.observability.logs import (
    CLIENT_FACING_LOGGERS,
    LIBRARIES,
    MAX_LOGGED_CHARS,
    MAX_MESSAGE_CHARS,
    REPEATS_LOGGED,
    ClientFaults,
)
from gql_presence.observability.metrics import Metrics
from gql_presence.observability.request_log import request_telemetry
from gql_presence.running.redis_server import RedisServer
from tests.conftest import TEST_SETTINGS, ClientFactory, graphql
from tests.helpers import (
    SECURED,
    eventually,
    flood_until_dropped,
    pile_up_events,
    released,
    stalled_subscriber,
)

Service = TestClient[Any, Any]


def nothing_above_warning_nor_traces(caplog: pytest.LogCaptureFixture) -> None:
    loud = [r for r in caplog.records if r.levelno > logging.WARNING or r.exc_info]
    assert not loud, [(r.name, r.levelname, r.getMessage(), r.exc_info) for r in loud]


async def status_of(service: Service, request: bytes) -> bytes:
    """The status of the answer to `request`; the connection is closed at once after."""
    reader, writer = await asyncio.open_connection(service.host, service.port)
    writer.write(request)
    first_line = await asyncio.wait_for(reader.readline(), 5)
    writer.close()
    return first_line.split(b" ")[1]


async def raw_request(service: Service, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(service.host, service.port)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return answer


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Long: " + b"a" * 10_000 + b"\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n"
        + b"".join(b"X-%d: 1\r\n" % i for i in range(200))
        + b"\r\n",
        b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Bad\x01: 1\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Length: x\r\n\r\n",
    ],
    ids=["long header", "many headers", "long path", "bad header name", "bad length"],
)
async def test_a_malformed_request_is_logged_once_as_a_warning_without_a_trace(
    api: Service, caplog: pytest.LogCaptureFixture, request_bytes: bytes
) -> None:
    with caplog.at_level(logging.DEBUG):
        answer = await raw_request(api, request_bytes)
    assert answer.startswith(b"HTTP/1.0 400 Bad Request"), answer[:100]
    nothing_above_warning_nor_traces(caplog)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) <= 1, [r.getMessage() for r in warnings]


async def test_a_dropped_slow_subscriber_logs_no_trace(
    aiohttp_client: ClientFactory,
    redis_server: RedisServer,
    http_redis: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = dataclasses.replace(TEST_SETTINGS, redis_url=redis_server.url, subscriber_buffer=100)
    service = await aiohttp_client(create_app(settings))
    with caplog.at_level(logging.DEBUG):
        async with stalled_subscriber(service) as connection:
            await flood_until_dropped(service)
            await released(service, connection)
        await asyncio.sleep(0.2)  # whatever the end of its tasks logs
    nothing_above_warning_nor_traces(caplog)


async def test_a_subscriber_that_vanishes_while_events_are_sent_logs_no_trace(
    aiohttp_client: ClientFactory,
    redis_server: RedisServer,
    http_redis: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = dataclasses.replace(
        TEST_SETTINGS, redis_url=redis_server.url, subscriber_buffer=100_000
    )
    service = await aiohttp_client(create_app(settings))
    with caplog.at_level(logging.DEBUG):
        async with stalled_subscriber(service) as connection:
            await pile_up_events(service, connection)
        # The client is gone (its socket closed with events unread: a reset).
        await released(service, connection)
        await eventually(lambda: service.app[EVENTS].subscriber_count == 0, what="the feed to end")
        await asyncio.sleep(0.2)  # whatever the end of its tasks logs
    nothing_above_warning_nor_traces(caplog)


async def test_a_fault_of_ours_is_logged_as_an_error_with_its_trace(
    api: Service, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(user_id: str, reader: str | None) -> None:
        raise RuntimeError("a script replied with something unexpected")

    monkeypatch.setattr(api.app[STORE], "presence", broken)
    with caplog.at_level(logging.INFO):
        await graphql(api, '{ presence(userId: "a") { online } }')
    [error] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert error.exc_info is not None
    assert isinstance(error.exc_info[1], RuntimeError)


def log_with_trace(logger: str, error: BaseException, level: int = logging.ERROR) -> None:
    """Logs `error` as the libraries do: a message, and the exception for its trace."""
    logging.getLogger(logger).log(level, "Exception in worker task", exc_info=error)


@pytest.mark.parametrize("logger", CLIENT_FACING_LOGGERS)
@pytest.mark.parametrize(
    ("error", "level"),
    [
        (WebSocketDisconnected(), logging.INFO),
        (ConnectionResetError("Connection lost"), logging.INFO),
        (LineTooLong("a" * 9000, "8190"), logging.WARNING),
    ],
    ids=["websocket gone", "connection reset", "line too long"],
)
async def test_client_faults_are_one_line_without_a_trace_on_every_logger_that_reports_them(
    api: Service, caplog: pytest.LogCaptureFixture, logger: str, error: Exception, level: int
) -> None:
    with caplog.at_level(logging.DEBUG):
        log_with_trace(logger, error)
    [record] = caplog.records
    assert (record.levelno, record.exc_info) == (level, None)
    assert type(error).__name__ in record.getMessage()
    assert "aaaa" not in record.getMessage(), "what the client sent is not logged"


@pytest.mark.parametrize("logger", CLIENT_FACING_LOGGERS)
async def test_faults_of_ours_keep_error_and_trace_on_those_loggers(
    api: Service, caplog: pytest.LogCaptureFixture, logger: str
) -> None:
    with caplog.at_level(logging.DEBUG):
        log_with_trace(logger, RuntimeError("a fault of ours"))
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None


async def test_a_client_fault_logged_at_debug_stays_at_debug(
    api: Service, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        log_with_trace("aiohttp.server", LineTooLong("x", "1"), logging.DEBUG)
    [record] = caplog.records
    assert record.levelno == logging.DEBUG


async def test_an_unretrieved_task_exception_of_a_client_fault_logs_no_trace(
    api: Service, caplog: pytest.LogCaptureFixture
) -> None:
    loop = asyncio.get_running_loop()
    with caplog.at_level(logging.DEBUG):
        loop.call_exception_handler(
            {"message": "Task exception was never retrieved", "exception": ConnectionResetError()}
        )
    nothing_above_warning_nor_traces(caplog)


# What a client writes into a header, as much as one header line of 8 KiB holds: text
# aiohttp's parser lets through (non-ASCII, a bidirectional override that would show the line
# reversed) and, for the parser to refuse, control characters that would colour the
# operator's terminal or start a forged line.
CLIENT_TEXT = "https://evil.example/\u202e\u00e9" + "A" * 8_000
CONTROLS = "https://evil.example/\x1b[31m\r\nFAKE 200 OK\n" + "A" * 8_000
LISTED = "https://app.example"
HANDSHAKE = {
    "Host": "localhost",
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Protocol": "graphql-transport-ws",
    "Origin": LISTED,
}


def handshake(**headers: str) -> bytes:
    fields = HANDSHAKE | {name.replace("_", "-"): value for name, value in headers.items()}
    lines = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    return f"GET /graphql HTTP/1.1\r\n{lines}\r\n".encode()


def client_text_is_bounded_and_escaped(caplog: pytest.LogCaptureFixture) -> None:
    for record in caplog.records:
        message = record.getMessage()
        longest = max(map(len, re.findall("A+", message)), default=0)
        assert longest <= MAX_LOGGED_CHARS, (record.name, message[:300])
        assert message.isprintable(), (record.name, message[:300])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Origin": CLIENT_TEXT}, b"403"),
        ({"Origin": "https://evil.example", "Host": "x" + CLIENT_TEXT[8:]}, b"403"),
        ({"Sec-WebSocket-Protocol": CLIENT_TEXT}, b"101"),
        ({"Origin": CONTROLS}, b"400"),
    ],
    ids=["origin", "host", "subprotocols", "control characters"],
)
async def test_a_handshake_s_headers_reach_the_log_bounded_escaped_and_rarely(
    aiohttp_client: ClientFactory,
    redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
    headers: dict[str, str],
    status: bytes,
) -> None:
    """A refused handshake comes before any credentials: anyone may send a thousand."""
    settings = dataclasses.replace(SECURED, redis_url=redis_server.url, cors_origins=(LISTED,))
    service = await aiohttp_client(create_app(settings))
    request = handshake(**headers)
    with caplog.at_level(logging.DEBUG):
        for _ in range(1000):
            assert (await status_of(service, request)) == status
    client_text_is_bounded_and_escaped(caplog)
    nothing_above_warning_nor_traces(caplog)
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert 1 <= len(warnings) <= REPEATS_LOGGED, [r.getMessage()[:100] for r in warnings]
    assert "left out" in warnings[-1].getMessage()


def every_library_logger() -> list[str]:
    return sorted(
        name
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and name.split(".")[0] in LIBRARIES
    )


async def test_every_logger_of_the_libraries_that_serve_clients_takes_their_text_with_care(
    api: Service,
) -> None:
    """aiohttp, Strawberry, graphql-core, redis-py, asyncio: a filter on a logger sees only
    the records logged on that very logger, not its children's, so each is fitted."""
    names = every_library_logger()
    assert {"aiohttp.websocket", "strawberry.ws", "redis.asyncio.connection"} <= set(names)
    unfitted = [
        n
        for n in names
        if not any(isinstance(f, ClientFaults) for f in logging.getLogger(n).filters)
    ]
    assert not unfitted


@pytest.mark.parametrize("logger", [*CLIENT_FACING_LOGGERS, "redis.asyncio.connection"])
async def test_a_library_s_line_holds_a_client_s_text_bounded_and_escaped(
    api: Service, caplog: pytest.LogCaptureFixture, logger: str
) -> None:
    with caplog.at_level(logging.DEBUG):
        logging.getLogger(logger).warning("from %s to %r, %d", CONTROLS, CLIENT_TEXT, 7)
        logging.getLogger(logger).warning(f"formatted already: {CONTROLS}")
        logging.getLogger(logger).warning("a value of its own: %s", ["a", CONTROLS])
    first, formatted, listed = (r.getMessage() for r in caplog.records)
    assert all(m.isprintable() for m in (first, formatted, listed))
    assert max(map(len, re.findall("A+", first + listed))) <= MAX_LOGGED_CHARS
    assert max(map(len, re.findall("A+", formatted))) <= MAX_MESSAGE_CHARS
    assert first.startswith("from https://evil.example/\\x1b[31m\\r\\nFAKE 200 OK\\nAAA")
    assert " to 'https://evil.example/\\u202eéAAA" in first  # %r: quoted, as it was
    assert first.endswith(f"{len(CLIENT_TEXT):,} characters in all], 7")
    assert formatted.startswith("formatted already: https://evil.example/\\x1b")
    assert listed.startswith("a value of its own: ['a', 'https://evil.example/\\x1b")


def test_repeated_warnings_are_left_out_and_counted() -> None:
    now = [1000.0]
    logger = logging.getLogger("tests.repeats")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = RecordingHandler()
    logger.addHandler(handler)
    counting = ClientFaults(clock=lambda: now[0])
    logger.addFilter(counting)
    try:
        for i in range(1000):
            logger.warning("origin %r refused", f"o{i}")
            logger.info("not counted: %s", i)
        warnings = [r.getMessage() for r in handler.records if r.levelno == logging.WARNING]
        assert len(warnings) == REPEATS_LOGGED
        assert warnings[0] == "origin 'o0' refused"
        assert "left out" in warnings[-1]
        assert len(handler.records) == REPEATS_LOGGED + 1000  # INFO lines are one a request
        logger.warning("another %s", "kind")
        now[0] += 61
        logger.warning("origin %r refused", "again")
        *_, other, again = [r.getMessage() for r in handler.records]
        assert other == "another kind"
        assert again.startswith("origin 'again' refused")
        assert f"{1000 - REPEATS_LOGGED:,} more like it" in again
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(counting)


def test_lines_logged_already_formatted_count_as_one_kind() -> None:
    """Such a line may hold anything a client sent: no two need be alike."""
    logger = logging.getLogger("tests.formatted")
    logger.propagate = False
    handler = RecordingHandler()
    logger.addHandler(handler)
    counting = ClientFaults()
    logger.addFilter(counting)
    try:
        for i in range(100):
            logger.warning(f"origin o{i} refused")  # as a library might
        assert len(handler.records) == REPEATS_LOGGED
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(counting)


class RecordingHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_the_request_line_names_a_method_it_does_not_know_as_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiohttp's C parser knows a fixed set of methods; its Python parser (PyPy, or
    AIOHTTP_NO_EXTENSIONS) takes any token up to the 8 KiB of a request line."""
    observe = request_telemetry(Metrics())

    async def refuse(request: web.Request) -> web.StreamResponse:
        return web.Response(status=405)

    with caplog.at_level(logging.INFO):
        await observe(make_mocked_request("A" * 8_000, "/graphql"), refuse)
    [line] = caplog.records
    assert line.getMessage().startswith("OTHER /graphql none METHOD_NOT_ALLOWED unknown 405")
    assert getattr(line, "method", None) == "OTHER"
