"""Held sessions ended through another process than the one holding them: a replacement of a
presenceSession or a placeSession opened on a second `gql-presence serve`, a kick sent through
it, a storm of replacements from both, and a holder that stood still past the TTL. Whatever
ends a session, its subscription is told why and completes, and its socket stays open for its
other operations."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from gql_presence.running.redis_server import RedisServer
from tests.helpers import (
    BACKEND_TOKEN,
    HoldingSocket,
    Running,
    end_services,
    eventually,
    holding_socket,
    post,
    received,
    start_services,
    subscribed,
    until_following,
)

# Every test runs processes of its own.
pytestmark = pytest.mark.slow

TTL_S = 1
BACKEND = f"Bearer {BACKEND_TOKEN}"
REPLACED = {"live": False, "endReason": "REPLACED"}
KICKED = {"live": False, "endReason": "KICKED"}
EVERYONE = "subscription { presenceChanged(all: true) { userId kind sessionId } }"


@pytest.fixture
async def services(
    flushed_redis: Redis, redis_server: RedisServer, tmp_path: Path
) -> AsyncIterator[list[Running]]:
    """Two processes on one emptied Redis with two shards and a lease TTL of TTL_S."""
    started = await start_services(
        2,
        tmp_path,
        REDIS_URL=redis_server.url,
        PRESENCE_SHARDS="2",
        PRESENCE_CONNECTION_TTL_SECONDS=str(TTL_S),
        PRESENCE_BACKEND_TOKENS=f"chat:{BACKEND_TOKEN}",
        PRESENCE_LOG_LEVEL="warning",
    )
    try:
        yield started
    finally:
        await asyncio.to_thread(end_services, started)


def sessions_of(port: int, user: str) -> tuple[bool, list[str]]:
    """Whether the user is online, and their live sessions, read through the service."""
    body = post(
        port, f'{{ presence(userId: "{user}") {{ online sessions {{ sessionId }} }} }}', BACKEND
    )
    assert "errors" not in body, body
    presence = body["data"]["presence"]
    return presence["online"], [s["sessionId"] for s in presence["sessions"]]


def members_of(port: int, place: str) -> list[tuple[str, str]]:
    body = post(
        port, f'{{ placeMembers(placeId: "{place}") {{ nodes {{ userId sessionId }} }} }}', BACKEND
    )
    assert "errors" not in body, body
    return [(n["userId"], n["sessionId"]) for n in body["data"]["placeMembers"]["nodes"]]


async def told(holder: HoldingSocket, operation: str, *, within_s: float = 3) -> list[Any]:
    """What the service told the operation of its session's end, once it has completed."""
    await eventually(
        lambda: holder.completed(operation) or holder.closed.is_set(),
        within_s=within_s,
        what=f"{operation} to complete",
    )
    assert not holder.closed.is_set(), f"the socket closed: {holder.socket.close_code}"
    return holder.ends(operation)


async def still_serves(holder: HoldingSocket, bystander: str) -> None:
    """The socket's other operation was left alone, and the socket takes new ones."""
    assert len(holder.received[bystander]) == 1, holder.received[bystander]
    await holder.hold("bystander", f"again-{time.monotonic_ns()}")
    assert not holder.closed.is_set()


async def test_a_place_session_replaced_through_another_process_is_told_so(
    services: list[Running],
) -> None:
    first, second = services
    async with (
        holding_socket(first.port, BACKEND) as on_first,
        holding_socket(second.port, BACKEND) as on_second,
    ):
        bystander = await on_first.hold("bystander", "tab")
        replaced = await on_first.hold_place("doc:1", "ada", "tab", {"cursor": 1})
        taking = await on_second.hold_place("doc:1", "ada", "tab", {"cursor": 2})

        assert await told(on_first, replaced) == [REPLACED]
        await still_serves(on_first, bystander)
        assert not on_second.completed(taking)
        members = await asyncio.to_thread(members_of, second.port, "doc:1")
        assert members == [("ada", "tab")]


async def test_a_presence_session_replaced_through_another_process_is_told_so(
    services: list[Running],
) -> None:
    first, second = services
    async with (
        holding_socket(first.port, BACKEND) as on_first,
        holding_socket(second.port, BACKEND) as on_second,
    ):
        bystander = await on_first.hold("bystander", "tab")
        replaced = await on_first.hold("ada", "tab")
        taking = await on_second.hold("ada", "tab")

        assert await told(on_first, replaced) == [REPLACED]
        await still_serves(on_first, bystander)
        assert not on_second.completed(taking)
        assert await asyncio.to_thread(sessions_of, second.port, "ada") == (True, ["tab"])


async def test_a_kick_through_another_process_ends_the_held_sessions(
    services: list[Running],
) -> None:
    holding, other = services
    async with holding_socket(holding.port, BACKEND) as holder:
        bystander = await holder.hold("bystander", "tab")
        in_presence = await holder.hold("ada", "tab")
        in_place = await holder.hold_place("doc:1", "ada", "tab")

        kick = 'mutation { kick(userId: "ada", sessionId: "tab") { kickedSessions } }'
        body = await asyncio.to_thread(post, other.port, kick, BACKEND)
        assert body == {"data": {"kick": {"kickedSessions": 1}}}, body

        assert await told(holder, in_presence, within_s=1.5) == [KICKED]
        assert await told(holder, in_place, within_s=1.5) == [KICKED]
        await still_serves(holder, bystander)
        assert await asyncio.to_thread(sessions_of, other.port, "ada") == (False, [])
        assert await asyncio.to_thread(members_of, other.port, "doc:1") == []


async def test_a_storm_of_replacements_from_two_processes_tells_each_replaced_one(
    services: list[Running],
) -> None:
    openings = 15
    async with (
        subscribed(services[1].ws_url, EVERYONE, authorization=BACKEND) as changes,
        holding_socket(services[0].port, BACKEND) as on_first,
        holding_socket(services[1].port, BACKEND) as on_second,
    ):
        await until_following(changes, services[1].port, BACKEND)
        query = (
            'subscription { presenceSession(userId: "ada", sessionId: "tab") { live endReason } }'
        )
        holders = [(on_first, "first"), (on_second, "second")]
        operations = [(h, f"{name}-{i}") for i in range(openings) for h, name in holders]
        # Every subscribe sent at once, from both sockets.
        await asyncio.gather(
            *(
                h.socket.send_json({"id": o, "type": "subscribe", "payload": {"query": query}})
                for h, o in operations
            )
        )

        def settled() -> bool:
            done = sum(h.completed(o) for h, o in operations)
            live = [o for h, o in operations if h.received.get(o) and not h.completed(o)]
            return done == len(operations) - 1 and len(live) == 1

        await eventually(settled, within_s=5, what="all but one opening to be replaced")
        for holder, operation in operations:
            messages = holder.received[operation]
            assert messages[0]["payload"].get("data"), messages
            assert messages[0]["payload"]["data"]["presenceSession"]["live"] is True, messages
            if holder.completed(operation):
                assert holder.ends(operation) == [REPLACED], (operation, messages)
        assert not on_first.closed.is_set()
        assert not on_second.closed.is_set()
        assert await asyncio.to_thread(sessions_of, services[0].port, "ada") == (True, ["tab"])
        await asyncio.sleep(0.5)  # for an OFFLINE or a second ONLINE on its way
        # Online once, and never offline in between.
        assert [e["kind"] for e in received(changes) if e["userId"] == "ada"] == ["ONLINE"]


async def test_a_process_stood_still_past_the_ttl_tells_its_holders_their_sessions_ended(
    services: list[Running],
) -> None:
    failing, other = services
    place_changes = 'subscription { placeChanged(placeId: "doc:1") { kind userId sessionId } }'
    async with (
        subscribed(other.ws_url, EVERYONE, authorization=BACKEND) as changes,
        subscribed(other.ws_url, place_changes, authorization=BACKEND) as in_place,
        holding_socket(failing.port, BACKEND) as holder,
    ):
        await until_following(changes, other.port, BACKEND)
        in_presence = await holder.hold("ada", "tab")
        in_doc = await holder.hold_place("doc:1", "ada", "tab")
        assert [e["kind"] for e in [await changes.next()]] == ["ONLINE"]
        # The place's first JOINED may be the initial member list's or the live one's.
        assert (await in_place.next())["kind"] == "JOINED"
        received(in_place)

        os.kill(failing.process.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            assert (await changes.next(within_s=TTL_S + 3))["kind"] == "OFFLINE"
            assert (await in_place.next(within_s=TTL_S + 3))["kind"] == "LEFT"
            assert await asyncio.to_thread(sessions_of, other.port, "ada") == (False, [])
            assert await asyncio.to_thread(members_of, other.port, "doc:1") == []
            await asyncio.sleep(max(0, stopped + TTL_S + 0.2 - time.monotonic()))
        finally:
            os.kill(failing.process.pid, signal.SIGCONT)

        # Back, it tells each holder the session ended, and brings none back to life.
        unavailable = [["UNAVAILABLE"]]
        assert await told(holder, in_presence) == unavailable
        assert await told(holder, in_doc) == unavailable
        await changes.nothing_more(1.2)
        await in_place.nothing_more(0.1)
        assert await asyncio.to_thread(sessions_of, other.port, "ada") == (False, [])
        assert await asyncio.to_thread(members_of, other.port, "doc:1") == []
