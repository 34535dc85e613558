"""Subscriptions that resume (`after`): the retained changes after a cursor, then the live
ones, none lost or repeated, each as the reader sees it live; on one Redis, one Redis with
three shards, and the cluster, multiplexed and left to Strawberry."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from gql_presence.app import create_app
from gql_presence.http.app_keys import EVENTS
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.client import AnyRedis
from tests.conftest import BOTH_PATHS, EVERY_DEPLOYMENT, ClientFactory, error_codes, graphql
from tests.helpers import (
    BACKEND_TOKEN,
    SOON_S,
    as_user,
    eventually,
    graphql_socket,
    user_token,
)

pytestmark = EVERY_DEPLOYMENT

Client = TestClient[Any, Any]
Socket = aiohttp.ClientWebSocketResponse

FIELDS = "userId kind at online status customStatus { text } version cursor"
PRESENCE = f"""subscription($u: [ID!], $after: String) {{
  presenceChanged(userIds: $u, after: $after) {{ {FIELDS} }} }}"""
PLACE = """subscription($p: ID!, $after: String) {
  placeChanged(placeId: $p, after: $after) { userId sessionId kind state version cursor } }"""
TOUCH = "mutation($u: ID!) { touch(userId: $u) { online } }"
KICK = "mutation($u: ID!) { kick(userId: $u) { online } }"
SESSION_TOUCH = "mutation($u: ID!, $s: ID!) { touch(userId: $u, sessionId: $s) { online } }"
SESSION_KICK = "mutation($u: ID!, $s: ID!) { kick(userId: $u, sessionId: $s) { online } }"
VERSIONS = "query($u: [ID!]!) { presences(userIds: $u) { userId version } }"


async def subscribe(
    socket: Socket, document: str, operation_id: str = "1", **variables: Any
) -> None:
    payload = {"query": document, "variables": variables}
    await socket.send_json({"id": operation_id, "type": "subscribe", "payload": payload})


async def next_event(socket: Socket) -> dict[str, Any]:
    message = await socket.receive_json(timeout=SOON_S)
    assert message["type"] == "next", message
    assert "errors" not in message["payload"], message
    event: dict[str, Any] = next(iter(message["payload"]["data"].values()))
    return event


async def nothing_more(socket: Socket) -> None:
    try:
        message = await socket.receive_json(timeout=0.3)
    except TimeoutError:
        return
    pytest.fail(f"not expected: {message}")


async def refusal(socket: Socket) -> tuple[list[str], str]:
    """The codes and the first message of a subscribe refused before its first event (an
    `error` message when multiplexed, a `next` with errors from Strawberry)."""
    message = await socket.receive_json(timeout=SOON_S)
    assert message["type"] in {"error", "next"}, message
    errors = message["payload"] if message["type"] == "error" else message["payload"]["errors"]
    return [e["extensions"]["code"] for e in errors], errors[0]["message"]


async def subscribed(api: Client, count: int) -> None:
    await eventually(lambda: api.app[EVENTS].subscriber_count == count, what="the subscriptions")


async def collect(socket: Socket, count: int) -> list[dict[str, Any]]:
    return [await next_event(socket) for _ in range(count)]


@BOTH_PATHS
async def test_a_resume_gives_what_was_missed_as_live_then_live(
    api: Client, multiplexed: bool
) -> None:
    users = ["ann", "bob", "cy"]
    async with graphql_socket(api) as live:
        await subscribe(live, PRESENCE, u=users)
        async with graphql_socket(api) as socket:
            await subscribe(socket, PRESENCE, u=users)
            await subscribed(api, 2)
            await graphql(api, TOUCH, u="ann")
            first = await next_event(socket)
        assert (await next_event(live)) == first
        # Missed while away.
        await graphql(api, TOUCH, u="bob")
        await graphql(api, KICK, u="ann")
        await graphql(api, TOUCH, u="cy")
        await graphql(api, 'mutation { setStatus(userId: "bob", status: BUSY) { online } }')
        await graphql(api, TOUCH, u="dee")  # followed by neither
        missed = await collect(live, 4)
        async with graphql_socket(api) as socket:
            await subscribe(socket, PRESENCE, u=users, after=first["cursor"])
            replayed = await collect(socket, 4)
            await subscribed(api, 2)
            await graphql(api, KICK, u="bob")
            later = await next_event(socket)
            await nothing_more(socket)
    assert sorted(replayed, key=str) == sorted(missed, key=str)
    for user in users:  # per user in the order of their versions
        assert [e for e in replayed if e["userId"] == user] == [
            e for e in missed if e["userId"] == user
        ]
    assert (later["userId"], later["kind"], later["version"]) == ("bob", "KICKED", 3)


@BOTH_PATHS
async def test_a_resume_during_a_burst_loses_and_repeats_nothing(
    api: Client, multiplexed: bool
) -> None:
    users = [f"user{i}" for i in range(6)]
    async with graphql_socket(api) as socket:
        await subscribe(socket, PRESENCE, u=users)
        await subscribed(api, 1)
        await graphql(api, TOUCH, u=users[0])
        cursor = (await next_event(socket))["cursor"]

    async def burst(rounds: int) -> None:
        for number in range(rounds):
            for user in users:  # each change ONLINE, then KICKED
                for document in [SESSION_TOUCH, SESSION_KICK]:
                    body = await graphql(api, document, u=user, s=f"{phase}{number}")
                    assert "errors" not in body, body

    phase = "away"
    await burst(2)
    phase = "hand-over"
    changes = asyncio.create_task(burst(6))
    try:
        async with graphql_socket(api) as socket:
            await subscribe(socket, PRESENCE, u=users, after=cursor)
            await changes
            body = await graphql(api, VERSIONS, u=users)
            final = {p["userId"]: p["version"] for p in body["data"]["presences"]}
            received = await collect(socket, sum(final.values()) - 1)
            for user in users:
                versions = [e["version"] for e in received if e["userId"] == user]
                first = 2 if user == users[0] else 1
                assert versions == list(range(first, final[user] + 1)), user
            await nothing_more(socket)
    finally:
        changes.cancel()


@BOTH_PATHS
async def test_a_place_resumes_without_its_members_list(
    api: Client, store_of_api: PresenceStore, multiplexed: bool
) -> None:
    await store_of_api.renew_leases()
    await store_of_api.open_place_session("room", "ann", "tab")
    async with graphql_socket(api) as socket:
        await subscribe(socket, PLACE, p="room")
        opening = await next_event(socket)
    for user in ["bob", "cy"]:
        await store_of_api.open_place_session("room", user, "tab")
    await store_of_api.set_place_state("room", "ann", "tab", {"typing": True})
    async with graphql_socket(api) as socket:
        await subscribe(socket, PLACE, p="room", after=opening["cursor"])
        replayed = await collect(socket, 3)
        await store_of_api.open_place_session("room", "dee", "tab")
        later = await next_event(socket)
        await nothing_more(socket)
    assert [(e["kind"], e["userId"], e["version"]) for e in replayed] == [
        ("JOINED", "bob", 2),
        ("JOINED", "cy", 3),
        ("UPDATED", "ann", 4),
    ]
    assert (later["kind"], later["userId"], later["version"]) == ("JOINED", "dee", 5)


@BOTH_PATHS
async def test_a_cursor_not_of_this_deployment_is_bad_input(api: Client, multiplexed: bool) -> None:
    async with graphql_socket(api) as socket:
        await subscribe(socket, PRESENCE, u=["ann"], after="not a cursor")
        codes, message = await refusal(socket)
    assert codes == ["BAD_USER_INPUT"]
    assert "cursor of this service's feed" in message
    assert api.app[EVENTS].subscriber_count == 0


@pytest.fixture
async def short_feed(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: AnyRedis
) -> Client:
    """The service with a feed that keeps 300 ms and about 100 changes a shard."""
    settings = dataclasses.replace(deployment, feed_retention_ms=300, feed_max_changes=100)
    return await aiohttp_client(create_app(settings))


@BOTH_PATHS
async def test_a_cursor_past_the_retention_has_expired(
    short_feed: Client, multiplexed: bool
) -> None:
    await graphql(short_feed, TOUCH, u="ann")
    cursor = (await graphql(short_feed, "{ feedCursor }"))["data"]["feedCursor"]
    # Every shard's position in the cursor is older than the retention from then on (ann's
    # shard's, her change, first: `changes` reads every shard, the place's reads one).
    past_retention = time.monotonic() + 0.4

    async def expired() -> bool:
        await graphql(short_feed, KICK, u="ann")  # a change that trims the feed
        body = await graphql(
            short_feed, "query($a: String) { changes(after: $a) { hasMore } }", a=cursor
        )
        return error_codes(body) == ["CURSOR_EXPIRED"]

    await eventually(expired, what="the cursor to expire")
    await asyncio.sleep(max(0.0, past_retention - time.monotonic()))
    followed: list[tuple[str, dict[str, Any]]] = [
        (PLACE, {"p": "room"}),
        (PRESENCE, {"u": ["ann"]}),
    ]
    for document, variables in followed:
        async with graphql_socket(short_feed) as socket:
            await subscribe(socket, document, after=cursor, **variables)
            codes, message = await refusal(socket)
        assert codes == ["CURSOR_EXPIRED"]
        assert "older than what the feed keeps" in message
    assert short_feed.app[EVENTS].subscriber_count == 0


@BOTH_PATHS
async def test_a_cursor_trimmed_by_length_has_expired(
    short_feed: Client, multiplexed: bool
) -> None:
    cursor = (await graphql(short_feed, "{ feedCursor }"))["data"]["feedCursor"]
    users = [f"user{i}" for i in range(1000)]
    await graphql(short_feed, "mutation($u: [ID!]!) { touchMany(userIds: $u) }", u=users)
    async with graphql_socket(short_feed) as socket:
        await subscribe(socket, PRESENCE, u=["user1"], after=cursor)
        codes, message = await refusal(socket)
    assert codes == ["CURSOR_EXPIRED"]
    assert "older than what the feed keeps" in message


# --- what an end user may see -------------------------------------------------------------------


@pytest.fixture
async def friends(secured: Client) -> Client:
    """ann and bob, friends both ways."""
    body = await as_user(
        secured, BACKEND_TOKEN, 'mutation { addFriends(userId: "ann", friendIds: ["bob"]) }'
    )
    assert "errors" not in body, body
    return secured


async def for_ann(service: Client, document: str) -> None:
    """A change of ann's, made by a backend."""
    body = await as_user(service, BACKEND_TOKEN, document)
    assert "errors" not in body, body


@BOTH_PATHS
async def test_an_end_users_resume_shows_what_their_live_events_showed(
    friends: Client, multiplexed: bool
) -> None:
    bob = f"Bearer {user_token('bob')}"
    async with graphql_socket(friends, bob) as live:
        await subscribe(live, PRESENCE, u=["ann"])
        async with graphql_socket(friends, bob) as socket:
            await subscribe(socket, PRESENCE, u=["ann"])
            await subscribed(friends, 2)
            await for_ann(friends, 'mutation { touch(userId: "ann", sessionId: "web") { online } }')
            first = await next_event(socket)
        assert await next_event(live) == first
        # Hidden from bob: an invisible ann is offline to him, her custom status unseen, and
        # her lastSeen not his to see.
        await for_ann(
            friends,
            'mutation { setLastSeenVisibility(userId: "ann", visibleTo: NOBODY) { online } }',
        )
        await for_ann(
            friends, 'mutation { setStatus(userId: "ann", status: INVISIBLE) { online } }'
        )
        await for_ann(
            friends, 'mutation { setCustomStatus(userId: "ann", text: "away") { online } }'
        )
        await for_ann(friends, 'mutation { touch(userId: "ann", sessionId: "phone") { online } }')
        await for_ann(friends, 'mutation { kick(userId: "ann") { online } }')
        await for_ann(friends, 'mutation { touch(userId: "ann", sessionId: "tablet") { online } }')
        await for_ann(friends, 'mutation { setStatus(userId: "ann", status: AUTO) { online } }')
        # What bob saw live, up to the last change.
        missed = [await next_event(live)]
        while missed[-1]["status"] != "ONLINE":
            missed.append(await next_event(live))
        await nothing_more(live)
        async with graphql_socket(friends, bob) as socket:
            await subscribe(socket, PRESENCE, u=["ann"], after=first["cursor"])
            replayed = await collect(socket, len(missed))
            await nothing_more(socket)
    assert replayed == missed
    # Invisible, ann went offline to bob; nothing of what she did then showed; visible again,
    # she came online with her custom status. Her versions are not bob's to see.
    assert [(e["kind"], e["customStatus"], e["version"]) for e in replayed] == [
        ("OFFLINE", None, None),
        ("ONLINE", {"text": "away"}, None),
    ]


@BOTH_PATHS
async def test_more_changes_than_a_subscriber_may_be_behind_are_not_replayed(
    aiohttp_client: ClientFactory,
    deployment: Settings,
    store_of_api: PresenceStore,
    multiplexed: bool,
) -> None:
    api = await aiohttp_client(create_app(dataclasses.replace(deployment, subscriber_buffer=5)))
    cursor = (await graphql(api, "{ feedCursor }"))["data"]["feedCursor"]
    users = [f"user{i}" for i in range(5)]
    await graphql(api, "mutation($u: [ID!]!) { touchMany(userIds: $u) }", u=users)
    await store_of_api.renew_leases()
    for user in users:
        await store_of_api.open_place_session("room", user, "tab")
    followed: list[tuple[str, dict[str, Any]]] = [(PRESENCE, {"u": users}), (PLACE, {"p": "room"})]
    for document, variables in followed:  # five behind: replayed
        async with graphql_socket(api) as socket:
            await subscribe(socket, document, after=cursor, **variables)
            assert len(await collect(socket, 5)) == 5
    await graphql(api, KICK, u="user0")  # a sixth change of each
    await store_of_api.open_place_session("room", "user5", "tab")
    for document, variables in followed:
        async with graphql_socket(api) as socket:
            await subscribe(socket, document, after=cursor, **variables)
            codes, message = await refusal(socket)
        assert codes == ["CURSOR_EXPIRED"]
        assert "More than 5 changes to replay" in message
