"""presenceSession over WebSocket, against the whole service: a session that lives with its
subscription, ended by the client, by a kick through any process, or by a second opening."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from typing import Any

import aiohttp
import pytest

from gql_presence.app import create_app
from gql_presence.http.app_keys import HELD_SESSIONS
from gql_presence.settings import Settings
from gql_presence.store import shard_of
from gql_presence.store.keys import Keys
from tests.conftest import EVERY_EVENTS_DEPLOYMENT, ClientFactory, graphql
from tests.helpers import (
    BACKEND_TOKEN,
    FIELDS,
    SECURED,
    SOON_S,
    Service,
    eventually,
    feeds_above,
    graphql_socket,
    receive_message,
    start_operation,
    user_token,
)

SESSION = "subscription($user: ID, $session: ID!) { presenceSession(userId: $user, sessionId: $session) { userId sessionId live at endReason } }"
CHANGES = f"subscription($users: [ID!]) {{ presenceChanged(userIds: $users) {{ {FIELDS} }} }}"
ONLINE = '{ presence(userId: "alice") { online } }'
EVERYONE = f"subscription {{ presenceChanged(all: true) {{ {FIELDS} }} }}"


@pytest.fixture
async def service(aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any) -> Service:
    return await aiohttp_client(create_app(deployment))


def data(message: dict[str, Any]) -> dict[str, Any]:
    assert message["type"] == "next", message
    return dict(next(iter(message["payload"]["data"].values())))


async def presence_online(service: Service, user: str) -> bool:
    body = await graphql(service, f'{{ presence(userId: "{user}") {{ online }} }}')
    return bool(body["data"]["presence"]["online"])


@pytest.mark.slow
@EVERY_EVENTS_DEPLOYMENT
async def test_a_session_lives_with_its_subscription(service: Service) -> None:
    async with graphql_socket(service) as watcher, graphql_socket(service) as tab:
        await start_operation(watcher, "w", CHANGES, users=["alice"])
        await eventually(feeds_above(service, 0), what="the watcher to subscribe")
        await start_operation(tab, "s", SESSION, user="alice", session="tab-1")
        first = data(await receive_message(tab))
        assert {k: first[k] for k in ("userId", "sessionId", "live", "endReason")} == {
            "userId": "alice",
            "sessionId": "tab-1",
            "live": True,
            "endReason": None,
        }
        assert data(await receive_message(watcher))["kind"] == "ONLINE"
        assert await presence_online(service, "alice")
        await tab.send_json({"id": "s", "type": "complete"})
        offline = data(await receive_message(watcher, within_s=SOON_S))  # not by the TTL
        assert (offline["kind"], offline["online"]) == ("OFFLINE", False)
        assert not await presence_online(service, "alice")


async def test_a_closed_socket_ends_its_sessions_at_once(service: Service) -> None:
    async with graphql_socket(service) as watcher:
        await start_operation(watcher, "w", EVERYONE)
        await eventually(feeds_above(service, 0), what="the watcher to subscribe")
        async with graphql_socket(service) as tab:
            await start_operation(tab, "s", SESSION, user="alice", session="tab-1")
            assert data(await receive_message(tab))["live"]
            assert data(await receive_message(watcher))["kind"] == "ONLINE"
        assert (
            data(await receive_message(watcher, within_s=SOON_S))["kind"] == "OFFLINE"
        )  # not by the TTL
        assert service.app[HELD_SESSIONS].count == 0


@pytest.mark.slow
@EVERY_EVENTS_DEPLOYMENT
async def test_a_kick_ends_the_subscription_and_the_socket_stays_open(service: Service) -> None:
    async with graphql_socket(service) as tab:
        await start_operation(tab, "s", SESSION, user="alice", session="tab-1")
        assert data(await receive_message(tab))["live"]
        await start_operation(tab, "w", CHANGES, users=["bob"])
        await graphql(service, 'mutation { kick(userId: "alice") { kickedSessions } }')
        started = time.monotonic()
        last = data(await receive_message(tab, within_s=SOON_S))
        assert (last["live"], last["endReason"]) == (False, "KICKED")
        assert await receive_message(tab, within_s=SOON_S) == {"id": "s", "type": "complete"}
        assert time.monotonic() - started < SOON_S  # ended by the kick, not by the TTL
        # The socket's other subscription goes on.
        await graphql(service, 'mutation { touch(userId: "bob") { online } }')
        assert data(await receive_message(tab))["kind"] == "ONLINE"
        # The kicked id is revoked.
        await start_operation(tab, "again", SESSION, user="alice", session="tab-1")
        refused = await receive_message(tab)
        assert refused["type"] in {"error", "next"}
        assert "SESSION_REVOKED" in json.dumps(refused)
        assert "presenceSession or placeSession a new sessionId" in json.dumps(refused)


async def test_openings_of_one_session_at_once_each_end_replaced_but_the_last(
    service: Service,
) -> None:
    openings = 20
    async with graphql_socket(service) as socket:
        for i in range(openings):
            await start_operation(socket, str(i), SESSION, user="alice", session="tab-1")
        received: dict[str, list[dict[str, Any]]] = {}
        while sum(m[-1]["type"] == "complete" for m in received.values()) < openings - 1:
            message = await receive_message(socket)
            received.setdefault(message["id"], []).append(message)
        for messages in received.values():
            assert data(messages[0])["live"], messages
            if messages[-1]["type"] == "complete":
                last = data(messages[1])
                assert (last["live"], last["endReason"], len(messages)) == (False, "REPLACED", 3)
        body = await graphql(service, '{ presence(userId: "alice") { sessions { sessionId } } }')
        assert body["data"]["presence"]["sessions"] == [{"sessionId": "tab-1"}]

    # Nothing of the openings outlives the socket.
    async def offline() -> bool:
        return not await presence_online(service, "alice")

    await eventually(offline, within_s=3, what="alice to go offline")


async def test_a_second_opening_replaces_the_first(service: Service) -> None:
    async with graphql_socket(service) as first, graphql_socket(service) as second:
        await start_operation(first, "s", SESSION, user="alice", session="tab-1")
        assert data(await receive_message(first))["live"]
        await start_operation(second, "s", SESSION, user="alice", session="tab-1")
        assert data(await receive_message(second))["live"]
        last = data(await receive_message(first))
        assert (last["live"], last["endReason"]) == (False, "REPLACED")
        assert await receive_message(first) == {"id": "s", "type": "complete"}
        assert await presence_online(service, "alice")


async def test_end_users_hold_their_own_sessions_only(
    aiohttp_client: ClientFactory, redis_server: Any
) -> None:
    settings = dataclasses.replace(SECURED, redis_url=redis_server.url)
    service = await aiohttp_client(create_app(settings))
    async with graphql_socket(service, f"Bearer {user_token('alice')}") as tab:
        await start_operation(tab, "own", SESSION, session="tab-1")
        assert data(await receive_message(tab))["userId"] == "alice"
        await start_operation(tab, "other", SESSION, user="bob", session="tab-1")
        assert "FORBIDDEN" in json.dumps(await receive_message(tab))
        assert await receive_message(tab) == {"id": "other", "type": "complete"}
        await start_operation(tab, "all", EVERYONE)
        assert "FORBIDDEN" in json.dumps(await receive_message(tab))
    async with graphql_socket(service, f"Bearer {BACKEND_TOKEN}") as backend:
        await start_operation(backend, "any", SESSION, user="bob", session="tab-1")
        assert data(await receive_message(backend))["userId"] == "bob"


# Ends of a subscription within the milliseconds of its opening: right away, after a few
# turns of the client's loop, and after up to 0.2 s (the subscription to the user's events
# and the opening's reply each take a round trip to Redis, longer on a loaded machine), by a
# `complete` or by the socket closing.
OPENING_WINDOW_S = [0.0, 0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.02, 0.05, 0.2]


async def test_a_session_ended_while_it_opens_leaves_nothing_live(service: Service) -> None:
    async with graphql_socket(service) as watcher:
        await start_operation(watcher, "w", EVERYONE)
        await eventually(feeds_above(service, 0), what="the watcher to subscribe")
        seen: list[tuple[str, str]] = []
        watching = asyncio.create_task(collect_kinds(watcher, seen))

        async def end_openings(worker: int) -> None:
            async with graphql_socket(service) as tab:
                for i in range(10):
                    user = f"u{worker}-{i}"
                    await start_operation(tab, user, SESSION, user=user, session="tab")
                    await asyncio.sleep(OPENING_WINDOW_S[(worker + i) % len(OPENING_WINDOW_S)])
                    await tab.send_json({"id": user, "type": "complete"})
            for i in range(10):
                user = f"v{worker}-{i}"
                async with graphql_socket(service) as tab:
                    await start_operation(tab, user, SESSION, user=user, session="tab")
                    await asyncio.sleep(OPENING_WINDOW_S[(worker + i) % len(OPENING_WINDOW_S)])

        # Side by side, so that some replies are read late, as under load.
        await asyncio.gather(*(end_openings(worker) for worker in range(8)))
        try:
            # Long before the TTL (30 s) would end a session left behind.
            await eventually(
                lambda: service.app[HELD_SESSIONS].count == 0 and not still_online(seen),
                within_s=1,
                what="every session opened to be closed",
            )
        except pytest.fail.Exception:
            left = sorted(still_online(seen))
            pytest.fail(f"{len(left)} users left online: {left}")
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
    assert seen, "no session was opened at all"
    total = await graphql(service, "{ onlineUsers { totalCount } }")
    assert total["data"]["onlineUsers"]["totalCount"] == 0


async def collect_kinds(
    socket: aiohttp.ClientWebSocketResponse, seen: list[tuple[str, str]]
) -> None:
    while True:
        event = data(await receive_message(socket, within_s=60))
        seen.append((event["userId"], event["kind"]))


def still_online(seen: list[tuple[str, str]]) -> set[str]:
    """The users that came online in `seen` and did not go offline after."""
    online: set[str] = set()
    for user, kind in seen:
        if kind == "ONLINE":
            online.add(user)
        elif kind == "OFFLINE":
            online.discard(user)
    return online


# --- what a client receives, byte for byte, and what a held session keeps ----------------------

STATE_KEYS = ["userId", "sessionId", "live", "at", "endReason"]
ALIASED = (
    "subscription($user: ID, $session: ID!) { held: presenceSession(userId: $user, "
    "sessionId: $session) { ...State kind: __typename } } "
    "fragment State on SessionState { who: userId live endReason }"
)


async def raw(socket: aiohttp.ClientWebSocketResponse, within_s: float = 3) -> str:
    message = await socket.receive(timeout=within_s)
    assert message.type is aiohttp.WSMsgType.TEXT, f"the socket ended: {message}"
    return str(message.data)


def exactly(text: str, operation_id: str, **state: object) -> dict[str, Any]:
    """The `next` message of a presenceSession as Strawberry encodes it: compact JSON, its
    members in this order, the state's fields in the document's order; its state."""
    message = json.loads(text)
    assert text == json.dumps(message, separators=(",", ":")), text
    assert list(message) == ["id", "type", "payload"], text
    assert (message["id"], message["type"], list(message["payload"])) == (
        operation_id,
        "next",
        ["data"],
    ), text
    body = message["payload"]["data"]["presenceSession"]
    assert list(body) == STATE_KEYS, text
    assert {k: body[k] for k in state} == state, text
    return dict(body)


COMPLETE = '{"id":"s","type":"complete"}'


async def test_the_messages_of_a_session_ended_by_a_kick_are_exact(service: Service) -> None:
    async with graphql_socket(service) as tab:
        await start_operation(tab, "s", SESSION, user="alice", session="tab-1")
        first = exactly(await raw(tab), "s", userId="alice", sessionId="tab-1", live=True)
        assert first["endReason"] is None
        await graphql(service, 'mutation { kick(userId: "alice", sessionId: "tab-1") { online } }')
        exactly(await raw(tab), "s", userId="alice", live=False, endReason="KICKED")
        assert await raw(tab) == COMPLETE
        assert service.app[HELD_SESSIONS].count == 0
        # The socket takes the same id again, for another session.
        await start_operation(tab, "s", SESSION, user="alice", session="tab-2")
        exactly(await raw(tab), "s", sessionId="tab-2", live=True)


async def test_the_messages_of_a_replaced_session_are_exact(service: Service) -> None:
    async with graphql_socket(service) as first, graphql_socket(service) as second:
        await start_operation(first, "s", SESSION, user="alice", session="tab-1")
        opened = exactly(await raw(first), "s", live=True)
        await start_operation(second, "s", SESSION, user="alice", session="tab-1")
        exactly(await raw(second), "s", live=True)
        last = exactly(await raw(first), "s", live=False, endReason="REPLACED")
        assert last["at"] >= opened["at"]
        assert await raw(first) == COMPLETE
        assert service.app[HELD_SESSIONS].count == 1


async def test_a_completed_session_sends_nothing_more_and_goes_offline(service: Service) -> None:
    async with graphql_socket(service) as tab:
        await start_operation(tab, "s", SESSION, user="alice", session="tab-1")
        exactly(await raw(tab), "s", live=True)
        await tab.send_json({"id": "s", "type": "complete"})
        await eventually(
            lambda: service.app[HELD_SESSIONS].count == 0, within_s=1, what="the close"
        )
        assert not await presence_online(service, "alice")
        # Nothing was sent for it; the next message is the answer to a ping.
        await tab.send_json({"type": "ping"})
        assert await raw(tab) == '{"type":"pong"}'
        # A kick afterwards reaches no one.
        await graphql(service, 'mutation { kick(userId: "alice") { online } }')
        await tab.send_json({"type": "ping"})
        assert await raw(tab) == '{"type":"pong"}'


async def test_a_socket_closed_with_many_sessions_closes_every_one(service: Service) -> None:
    async with graphql_socket(service) as tab:
        for i in range(5):
            await start_operation(tab, f"s{i}", SESSION, user=f"u{i}", session="tab")
        for _ in range(5):
            assert json.loads(await raw(tab))["type"] == "next"
        assert service.app[HELD_SESSIONS].count == 5
    await eventually(lambda: service.app[HELD_SESSIONS].count == 0, within_s=1, what="every close")
    total = await graphql(service, "{ onlineUsers { totalCount } }")
    assert total["data"]["onlineUsers"]["totalCount"] == 0


async def test_a_session_whose_lease_is_lost_ends_with_an_error_next(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any
) -> None:
    # Renewed every 0.1 s, so that a renewal finds it gone at once.
    settings = dataclasses.replace(deployment, connection_ttl_ms=300)
    service = await aiohttp_client(create_app(settings))
    async with graphql_socket(service) as tab:
        await start_operation(tab, "s", SESSION, user="alice", session="tab-1")
        exactly(await raw(tab), "s", live=True)
        # The process's lease gone, as when it stood still past the TTL and was swept.
        await http_redis.delete(Keys.of_shard(shard_of("alice", settings.shards)).leases)
        text = await raw(tab)
        message = json.loads(text)
        assert text == json.dumps(message, separators=(",", ":"))
        assert message == {
            "id": "s",
            "type": "next",
            "payload": {
                "data": None,
                "errors": [
                    {
                        "message": "This session ended: the service could not keep it live "
                        "for a while (its process stood still or lost the store); "
                        "subscribe again.",
                        "extensions": {"code": "UNAVAILABLE"},
                    }
                ],
            },
        }, text
        assert await raw(tab) == COMPLETE
        assert service.app[HELD_SESSIONS].count == 0


async def test_a_document_with_aliases_and_fragments_is_rendered_as_written(
    service: Service,
) -> None:
    async with graphql_socket(service) as tab:
        await start_operation(tab, "s", ALIASED, user="alice", session="tab-1")
        assert await raw(tab) == (
            '{"id":"s","type":"next","payload":{"data":{"held":'
            '{"who":"alice","live":true,"endReason":null,"kind":"SessionState"}}}}'
        )
        await graphql(service, 'mutation { kick(userId: "alice") { online } }')
        assert await raw(tab) == (
            '{"id":"s","type":"next","payload":{"data":{"held":'
            '{"who":"alice","live":false,"endReason":"KICKED","kind":"SessionState"}}}}'
        )
        assert await raw(tab) == COMPLETE


CHOOSING = (
    "subscription($user: ID, $session: ID!, $why: Boolean!) "
    "{ presenceSession(userId: $user, sessionId: $session) "
    "{ sessionId live endReason @include(if: $why) } }"
)


async def test_sessions_of_one_document_each_render_their_own_variables_to_the_end(
    service: Service,
) -> None:
    """Whose session it is may differ between sessions of one document without a payload
    differing; a variable the payload reads is each session's own, in its last message too."""
    async with graphql_socket(service) as tab:
        await start_operation(tab, "a", SESSION, user="alice", session="tab-1")
        await start_operation(tab, "b", SESSION, user="bob", session="tab-2")
        await start_operation(tab, "c", CHOOSING, user="carol", session="tab-3", why=True)
        await start_operation(tab, "d", CHOOSING, user="dave", session="tab-4", why=False)
        opened = {m["id"]: data(m) for m in [await receive_message(tab) for _ in range(4)]}
        assert opened["a"]["userId"] == "alice"
        assert opened["b"]["userId"] == "bob"
        assert opened["c"] == {"sessionId": "tab-3", "live": True, "endReason": None}
        assert opened["d"] == {"sessionId": "tab-4", "live": True}
        for user in ("alice", "bob", "carol", "dave"):
            await graphql(service, f'mutation {{ kick(userId: "{user}") {{ online }} }}')
        ended: dict[str, dict[str, Any]] = {}
        while len(ended) < 4:
            message = await receive_message(tab)
            if message["type"] == "next":
                ended[message["id"]] = data(message)
    assert (ended["a"]["userId"], ended["a"]["sessionId"], ended["a"]["live"]) == (
        "alice",
        "tab-1",
        False,
    )
    assert (ended["b"]["userId"], ended["b"]["sessionId"]) == ("bob", "tab-2")
    assert ended["c"] == {"sessionId": "tab-3", "live": False, "endReason": "KICKED"}
    assert ended["d"] == {"sessionId": "tab-4", "live": False}


async def test_a_held_session_keeps_no_task(service: Service) -> None:
    sockets, per_socket = 10, 20
    async with contextlib.AsyncExitStack() as stack:
        tabs = [await stack.enter_async_context(graphql_socket(service)) for _ in range(sockets)]
        # The socket's own tasks are there already; only the sessions' are counted.
        await asyncio.sleep(0.05)
        before = len(asyncio.all_tasks())
        for s, tab in enumerate(tabs):
            for i in range(per_socket):
                await start_operation(tab, f"s{i}", SESSION, user=f"u{s}-{i}", session="tab")
        for tab in tabs:
            for _ in range(per_socket):
                assert json.loads(await raw(tab))["type"] == "next"
        assert service.app[HELD_SESSIONS].count == sockets * per_socket
        await asyncio.sleep(0.05)  # whatever ends with the openings has ended
        assert len(asyncio.all_tasks()) - before < 5
    await eventually(lambda: service.app[HELD_SESSIONS].count == 0, within_s=2, what="closes")


async def test_a_session_past_the_users_maximum_is_bad_input_and_held_nowhere(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any
) -> None:
    service = await aiohttp_client(create_app(dataclasses.replace(deployment, max_sessions=1)))
    await graphql(service, 'mutation { touch(userId: "alice", sessionId: "phone") { online } }')
    async with graphql_socket(service) as tab:
        await start_operation(tab, "s", SESSION, user="alice", session="tab-1")
        message = json.loads(await raw(tab))
        [error] = message["payload"]["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT", message
        assert "at most 1 live sessions (PRESENCE_MAX_SESSIONS)" in error["message"]
        assert await raw(tab) == COMPLETE
        assert service.app[HELD_SESSIONS].count == 0
    body = await graphql(service, '{ presence(userId: "alice") { sessions { sessionId } } }')
    assert body["data"]["presence"]["sessions"] == [{"sessionId": "phone"}]


async def test_a_revoked_id_is_refused_as_before(service: Service) -> None:
    async with graphql_socket(service) as tab:
        await graphql(service, 'mutation { kick(userId: "alice", sessionId: "tab-1") { online } }')
        await start_operation(tab, "s", SESSION, user="alice", session="tab-1")
        text = await raw(tab)
        message = json.loads(text)
        assert text == json.dumps(message, separators=(",", ":"))
        assert list(message) == ["id", "type", "payload"]
        assert (message["type"], message["payload"]["data"]) == ("next", None), text
        [error] = message["payload"]["errors"]
        assert list(error) == ["message", "extensions"], text
        assert error["extensions"]["code"] == "SESSION_REVOKED", text
        assert await raw(tab) == COMPLETE
        assert service.app[HELD_SESSIONS].count == 0
