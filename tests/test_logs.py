"""What a client can cause is logged at WARNING or below, once, without a stack trace; a fault
of ours is logged at ERROR with its stack trace."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import pytest
from aiohttp.http_exceptions import LineTooLong
from aiohttp.test_utils import TestClient
from strawberry.http.exceptions import WebSocketDisconnected

from gql_presence.app import create_app
from gql_presence.http.app_keys import EVENTS, STORE
from gql_presence.observability.logs import CLIENT_FACING_LOGGERS
from gql_presence.running.redis_server import RedisServer
from tests.conftest import TEST_SETTINGS, ClientFactory, graphql
from tests.helpers import (
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
    async def broken(user_id: str) -> None:
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
