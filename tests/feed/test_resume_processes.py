"""A resume across two `gql-presence serve` processes on one Redis with three shards: a
cursor of one process resumes on the other, with changes made through both during the
hand-over, and nothing is lost or repeated."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from redis.asyncio import Redis

from gql_presence.running.redis_server import RedisServer
from tests.helpers import Running, end_services, eventually, start_services, subscriptions_begun

pytestmark = pytest.mark.slow

USERS = [f"user{i}" for i in range(6)]
PRESENCE = """subscription($u: [ID!], $after: String) {
  presenceChanged(userIds: $u, after: $after) { userId kind version cursor } }"""
TOUCH = "mutation($u: ID!, $s: ID!) { touch(userId: $u, sessionId: $s) { online } }"
KICK = "mutation($u: ID!, $s: ID!) { kick(userId: $u, sessionId: $s) { online } }"
VERSIONS = "query($u: [ID!]!) { presences(userIds: $u) { userId version } }"


@pytest.fixture
async def services(
    flushed_redis: Redis, redis_server: RedisServer, tmp_path: Path
) -> AsyncIterator[list[Running]]:
    """Two processes on one emptied Redis with three shards."""
    started = await start_services(
        2, tmp_path, REDIS_URL=redis_server.url, PRESENCE_SHARDS="3", PRESENCE_LOG_LEVEL="warning"
    )
    try:
        yield started
    finally:
        await asyncio.to_thread(end_services, started)


async def post(http: aiohttp.ClientSession, service: Running, query: str, **variables: Any) -> Any:
    url = f"http://127.0.0.1:{service.port}/graphql"
    async with http.post(url, json={"query": query, "variables": variables}) as response:
        body = await response.json()
    assert "errors" not in body, body
    return body["data"]


async def subscribe(
    http: aiohttp.ClientSession, service: Running, after: str | None = None
) -> aiohttp.ClientWebSocketResponse:
    socket = await http.ws_connect(service.ws_url, protocols=["graphql-transport-ws"])
    await socket.send_json({"type": "connection_init", "payload": {}})
    assert (await socket.receive_json(timeout=3))["type"] == "connection_ack"
    payload = {"query": PRESENCE, "variables": {"u": USERS, "after": after}}
    await socket.send_json({"id": "1", "type": "subscribe", "payload": payload})
    return socket


async def next_event(socket: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    message = await socket.receive_json(timeout=5)
    assert message["type"] == "next", message
    event: dict[str, Any] = message["payload"]["data"]["presenceChanged"]
    return event


async def test_a_resume_on_another_process_loses_and_repeats_nothing(
    services: list[Running],
) -> None:
    async with aiohttp.ClientSession() as http:

        async def burst(rounds: int, phase: str) -> None:
            # Each round, each user ONLINE then KICKED, through either process in turn.
            for number in range(rounds):
                for index, user in enumerate(USERS):
                    service = services[index % 2]
                    for document in [TOUCH, KICK]:
                        await post(http, service, document, u=user, s=f"{phase}{number}")

        socket = await subscribe(http, services[0])
        await eventually(
            lambda: subscriptions_begun(services[0].port) == 1, what="the subscription"
        )
        await post(http, services[1], TOUCH, u=USERS[0], s="first")
        cursor = (await next_event(socket))["cursor"]
        await socket.close()
        await burst(2, "away")
        changes = asyncio.create_task(burst(6, "hand-over"))
        try:
            socket = await subscribe(http, services[1], after=cursor)
            await changes
            read = await post(http, services[0], VERSIONS, u=USERS)
            final = {p["userId"]: p["version"] for p in read["presences"]}
            received = [await next_event(socket) for _ in range(sum(final.values()) - 1)]
            with pytest.raises(TimeoutError):
                await socket.receive_json(timeout=0.5)
            await socket.close()
        finally:
            changes.cancel()
    for user in USERS:
        versions = [e["version"] for e in received if e["userId"] == user]
        first = 2 if user == USERS[0] else 1
        assert versions == list(range(first, final[user] + 1)), user
