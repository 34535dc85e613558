"""One admission step for every operation, whatever its transport: credentials (checked
before a body is read, and again when a WebSocket's JWT expires), document size, list
variables, and rate; and the size of a WebSocket's messages."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from gql_presence.app import create_app
from gql_presence.policy.auth import Caller, CallerKind
from gql_presence.policy.limits import MAX_BODY_BYTES, MAX_DOCUMENT_BYTES
from gql_presence.running.redis_server import RedisServer
from gql_presence.store import MAX_ID_LENGTH, MAX_IDS_PER_CALL
from gql_presence.store.errors import UnauthenticatedError
from tests.conftest import ClientFactory, error_codes, graphql
from tests.helpers import (
    BACKEND_TOKEN,
    SECURED,
    close_code_of,
    graphql_socket,
    over_socket,
    raw_socket,
    socket_errors,
    user_token,
)

Client = TestClient[Any, Any]
BACKEND = f"Bearer {BACKEND_TOKEN}"
TOUCH = 'mutation { touch(userId: "alice") { online } }'
TOUCH_MANY = "mutation($ids: [ID!]!) { touchMany(userIds: $ids) }"
FOLLOW = 'subscription { presenceChanged(userIds: ["alice"]) { userId } }'


@pytest.fixture
async def secured(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> Client:
    """The service with credentials configured, and a backend rate of 2 at once, then one
    every 2 s."""
    settings = dataclasses.replace(
        SECURED, redis_url=redis_server.url, backend_rate=0.5, backend_burst=2
    )
    return await aiohttp_client(create_app(settings))


def codes(messages: list[dict[str, Any]]) -> list[str]:
    return [e["extensions"]["code"] for e in socket_errors(messages)]


# --- the same admission over WebSocket as over HTTP -------------------------------------------


async def test_a_socket_shares_the_callers_rate_with_http(secured: Client) -> None:
    async with graphql_socket(secured, BACKEND) as socket:
        assert codes(await over_socket(socket, TOUCH, operation_id="a")) == []
        assert codes(await over_socket(socket, TOUCH, operation_id="b")) == []
        # Over the rate: the operation's `error` message, and the socket stays open.
        refused = await over_socket(socket, TOUCH, operation_id="c")
        assert [m["type"] for m in refused] == ["error"]
        (error,) = refused[0]["payload"]
        assert error["extensions"] == {"code": "RATE_LIMITED", "retryAfterSeconds": 2}
        # Subscriptions are admitted the same way.
        assert codes(await over_socket(socket, FOLLOW, operation_id="d")) == ["RATE_LIMITED"]
        # The bucket is the caller's, whatever the transport.
        headers = {"Authorization": BACKEND}
        response = await secured.post("/graphql", json={"query": TOUCH}, headers=headers)
        assert response.status == 429
        assert not socket.closed


async def test_a_socket_refuses_an_oversized_document_and_an_oversized_list(
    secured: Client,
) -> None:
    long_document = '{ presence(userId: "' + "x" * MAX_DOCUMENT_BYTES + '") { online } }'
    too_many = [str(i) for i in range(MAX_IDS_PER_CALL + 1)]
    async with graphql_socket(secured, BACKEND) as socket:
        refused = await over_socket(socket, long_document)
        assert codes(refused) == ["BAD_USER_INPUT"]
        assert "32,768" in socket_errors(refused)[0]["message"]
        refused = await over_socket(socket, TOUCH_MANY, {"ids": too_many})
        assert codes(refused) == ["BAD_USER_INPUT"]
        assert "$ids" in socket_errors(refused)[0]["message"]


@pytest.mark.slow
async def test_a_socket_takes_the_largest_valid_request_and_closes_on_a_larger_message(
    secured: Client,
) -> None:
    # The same request as the largest valid HTTP body: 10,000 ids of 128 characters, each of
    # them 4 bytes of UTF-8.
    ids = [f"{i:05}" + "😀" * (MAX_ID_LENGTH - 5) for i in range(MAX_IDS_PER_CALL)]
    async with graphql_socket(secured, BACKEND) as socket:
        messages = await over_socket(socket, TOUCH_MANY, {"ids": ids})
        assert messages[0]["payload"] == {"data": {"touchMany": MAX_IDS_PER_CALL}}
    # A larger message is refused by its length, as soon as its frame's header arrives: the
    # client sends that and a first part only, so that the service's close cannot cross the
    # rest of it on its way (which would reset the connection before the close is read).
    client = await raw_socket(secured, BACKEND)
    try:
        size, mask = MAX_BODY_BYTES + 1, b"\x00" * 4
        header = bytes([0x81, 0x80 | 127]) + size.to_bytes(8, "big") + mask
        await asyncio.get_running_loop().sock_sendall(client, header + b" " * 16_384)
        assert await close_code_of(client) == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
    finally:
        client.close()


# --- credentials before the body --------------------------------------------------------------


async def test_a_caller_without_credentials_is_refused_before_its_body_is_read(
    secured: Client,
) -> None:
    """The body's start is sent, and the rest is held back until the answer has come: only a
    service that answers without reading the body can answer at all."""
    answered = asyncio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield b'{"query": "' + TOUCH_MANY.encode() + b'", "variables": {"ids": ["a"'
        await answered.wait()
        yield b"]}}"

    for headers in ({}, {"Authorization": "Bearer not-a-token-at-all"}):
        response = await asyncio.wait_for(
            secured.post(
                "/graphql", data=body(), headers={"Content-Type": "application/json", **headers}
            ),
            timeout=3,
        )
        answered.set()
        assert response.status == 200
        assert error_codes(await response.json()) == ["UNAUTHENTICATED"]
        answered.clear()


async def test_a_list_variable_over_the_cap_is_refused_before_the_document_is_read(
    secured: Client,
) -> None:
    too_many = [str(i) for i in range(MAX_IDS_PER_CALL + 1)]
    # The document would also fail validation: the list is refused first.
    document = "mutation($ids: [ID!]!) { touchMany(userIds: $ids) noSuchField }"
    headers = {"Authorization": BACKEND}
    response = await secured.post(
        "/graphql", json={"query": document, "variables": {"ids": too_many}}, headers=headers
    )
    body = await response.json()
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert body["errors"][0]["message"] == (
        "$ids holds 10,001 values; a list argument takes at most 10,000."
    )


# --- a socket ends with its JWT ---------------------------------------------------------------


async def test_a_socket_is_closed_when_its_jwt_expires(secured: Client) -> None:
    # The service allows 30 s of clock skew: this token stops being valid in 1 to 2 s.
    token = user_token("alice", exp=int(time.time()) - 30 + 2)
    async with graphql_socket(secured, f"Bearer {token}") as socket:
        own = '{ presence(userId: "alice") { online } }'
        assert codes(await over_socket(socket, own)) == []
        subscribed = 'subscription { presenceChanged(friendsOf: "alice") { userId } }'
        payload = {"query": subscribed}
        await socket.send_json({"id": "follow", "type": "subscribe", "payload": payload})
        closing = await socket.receive(timeout=3)
        assert closing.type is aiohttp.WSMsgType.CLOSE
        assert closing.data == 4401
        assert "expired" in str(closing.extra)


def test_a_caller_whose_credentials_expired_is_refused() -> None:
    """Operations after the expiry are refused even if they arrive before the close."""
    live = Caller(CallerKind.USER, "alice", expires_at_s=time.time() + 60)
    live.require_credentials()
    expired = dataclasses.replace(live, expires_at_s=time.time() - 0.001)
    with pytest.raises(UnauthenticatedError, match="expired"):
        expired.require_credentials()
    Caller(CallerKind.BACKEND, "chat").require_credentials()  # a backend token never expires


async def test_each_operation_of_a_socket_reads_afresh(api: Client) -> None:
    """A socket's operations are separate requests: a query does not answer from what an
    earlier one on the same socket read (the sessions of a user, read in batches)."""
    sessions = "query { onlineUsers { nodes { sessions { sessionId } } } }"
    await graphql(api, 'mutation { touch(userId: "ann", sessionId: "phone") { online } }')
    async with graphql_socket(api) as socket:
        first = await over_socket(socket, sessions, operation_id="a")
        await graphql(api, 'mutation { touch(userId: "ann", sessionId: "laptop") { online } }')
        second = await over_socket(socket, sessions, operation_id="b")
    read = [
        sorted(
            s["sessionId"] for s in m[0]["payload"]["data"]["onlineUsers"]["nodes"][0]["sessions"]
        )
        for m in (first, second)
    ]
    assert read == [["phone"], ["laptop", "phone"]]
