"""Places over HTTP and WebSocket, against the whole service: placeSession holds a session in
a place, placeChanged tells who joins, updates and leaves (starting with who is there),
placeMembers and placeCounts read them, setPlaceState updates a state; and who may do each,
by the JWT's `places` claim."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from typing import Any

import aiohttp
import pytest

from gql_presence.app import create_app
from gql_presence.graphql.operation import OperationPipeline
from gql_presence.http.app_keys import EVENTS
from gql_presence.settings import Settings
from tests.conftest import EVERY_EVENTS_DEPLOYMENT, ClientFactory, error_codes, graphql
from tests.helpers import (
    BACKEND_TOKEN,
    Service,
    as_user,
    eventually,
    graphql_socket,
    receive_message,
    start_operation,
    user_token,
)

HOLD = (
    "subscription($place: ID!, $user: ID, $session: ID!, $state: JSONObject) { "
    "placeSession(placeId: $place, userId: $user, sessionId: $session, state: $state) "
    "{ placeId userId sessionId live endReason } }"
)
WATCH = (
    "subscription($place: ID!) { placeChanged(placeId: $place) "
    "{ placeId kind userId sessionId at state } }"
)
MEMBERS = (
    "query($place: ID!) { placeMembers(placeId: $place) "
    "{ totalCount users nodes { userId sessionId joinedAt state } pageInfo { hasNextPage } } }"
)
SET_STATE = (
    "mutation($place: ID!, $user: ID, $session: ID!, $state: JSONObject!) { "
    "setPlaceState(placeId: $place, userId: $user, sessionId: $session, state: $state) "
    "{ userId sessionId state } }"
)


@pytest.fixture
async def service(aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any) -> Service:
    return await aiohttp_client(create_app(deployment))


def event(message: dict[str, Any]) -> tuple[Any, ...]:
    assert message["type"] == "next", message
    body = next(iter(message["payload"]["data"].values()))
    return body["kind"], body["userId"], body["sessionId"], body["state"]


@EVERY_EVENTS_DEPLOYMENT
async def test_two_tabs_in_a_place_see_each_other_join_move_and_leave(service: Service) -> None:
    async with (
        graphql_socket(service) as ann,
        graphql_socket(service) as bob,
        graphql_socket(service) as watcher,
    ):
        await start_operation(
            ann, "a", HOLD, place="doc:1", user="ann", session="t1", state={"x": 1}
        )
        first = await receive_message(ann)
        assert first["payload"]["data"]["placeSession"] == {
            "placeId": "doc:1",
            "userId": "ann",
            "sessionId": "t1",
            "live": True,
            "endReason": None,
        }
        await start_operation(watcher, "w", WATCH, place="doc:1")
        assert event(await receive_message(watcher)) == ("JOINED", "ann", "t1", {"x": 1})
        await start_operation(bob, "b", HOLD, place="doc:1", user="bob", session="t2")
        await receive_message(bob)
        assert event(await receive_message(watcher)) == ("JOINED", "bob", "t2", None)
        body = await graphql(
            service, SET_STATE, place="doc:1", user="bob", session="t2", state={"x": 5}
        )
        assert body["data"]["setPlaceState"]["state"] == {"x": 5}
        assert event(await receive_message(watcher)) == ("UPDATED", "bob", "t2", {"x": 5})
        members = (await graphql(service, MEMBERS, place="doc:1"))["data"]["placeMembers"]
        assert (members["totalCount"], members["users"]) == (2, 2)
        assert [(n["userId"], n["state"]) for n in members["nodes"]] == [
            ("bob", {"x": 5}),
            ("ann", {"x": 1}),
        ]
        await ann.send_json({"id": "a", "type": "complete"})
        assert event(await receive_message(watcher)) == ("LEFT", "ann", "t1", None)
        await bob.close()
        assert event(await receive_message(watcher)) == ("LEFT", "bob", "t2", None)
    counts = await graphql(service, '{ placeCounts(placeIds: ["doc:1"]) { sessions users } }')
    assert counts["data"]["placeCounts"] == [{"sessions": 0, "users": 0}]


@EVERY_EVENTS_DEPLOYMENT
async def test_a_place_session_ends_with_kicked_or_replaced(service: Service) -> None:
    async with graphql_socket(service) as first, graphql_socket(service) as second:
        await start_operation(first, "1", HOLD, place="lobby", user="ann", session="s")
        await receive_message(first)
        await start_operation(second, "2", HOLD, place="lobby", user="ann", session="s")
        await receive_message(second)
        last = await receive_message(first)
        assert last["payload"]["data"]["placeSession"]["endReason"] == "REPLACED"
        assert (await receive_message(first))["type"] == "complete"
        await graphql(service, 'mutation { kick(userId: "ann", sessionId: "s") { online } }')
        last = await receive_message(second)
        assert last["payload"]["data"]["placeSession"]["endReason"] == "KICKED"
    members = (await graphql(service, MEMBERS, place="lobby"))["data"]["placeMembers"]
    assert members["totalCount"] == 0


async def test_a_bad_state_is_refused_and_changes_nothing(service: Service) -> None:
    body = await graphql(
        service, SET_STATE, place="doc:1", user="ann", session="t", state={"x": "a" * 2000}
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "1,024" in body["errors"][0]["message"]
    body = await graphql(service, SET_STATE, place="doc:1", user="ann", session="t", state={"x": 1})
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "not in the place" in body["errors"][0]["message"]


@pytest.mark.parametrize(
    ("places", "place", "allowed"),
    [
        (["doc:42"], "doc:42", True),
        (["doc:42"], "doc:4", False),
        (["team:7:*"], "team:7:x", True),
        (["team:7:*"], "team:7", False),
        (["team:7:*"], "team:70", False),
        (["*"], "anything", True),
        (["Doc:42"], "doc:42", False),
        (None, "doc:42", False),
    ],
)
async def test_a_users_places_claim_says_where_they_may_go(
    secured: Service, places: list[str] | None, place: str, allowed: bool
) -> None:
    claims: dict[str, Any] = {} if places is None else {"places": places}
    token = user_token("ann", **claims)
    members = await as_user(secured, token, MEMBERS, place=place)
    counts = await as_user(
        secured, token, "query($p: [ID!]!) { placeCounts(placeIds: $p) { sessions } }", p=[place]
    )
    expected = [] if allowed else ["FORBIDDEN"]
    assert error_codes(members) == expected
    assert error_codes(counts) == expected
    async with graphql_socket(secured, f"Bearer {token}") as socket:
        await start_operation(socket, "s", HOLD, place=place, session="t")
        first = await receive_message(socket)
        if allowed:
            assert first["payload"]["data"]["placeSession"]["live"] is True
        else:
            assert first["type"] == "next"
            assert first["payload"]["errors"][0]["extensions"]["code"] == "FORBIDDEN"


async def test_a_user_acts_in_places_for_themselves_only(secured: Service) -> None:
    token = user_token("ann", places=["*"])
    body = await as_user(secured, token, SET_STATE, place="p", user="bob", session="t", state={})
    assert error_codes(body) == ["FORBIDDEN"]
    backend = await as_user(secured, BACKEND_TOKEN, MEMBERS, place="p")
    assert error_codes(backend) == []


async def test_a_places_claim_that_is_not_a_list_of_strings_is_not_a_valid_token(
    secured: Service,
) -> None:
    body = await as_user(secured, user_token("ann", places="doc:42"), MEMBERS, place="doc:42")
    assert error_codes(body) == ["UNAUTHENTICATED"]


@EVERY_EVENTS_DEPLOYMENT
async def test_watchers_of_one_document_share_each_events_bytes_and_miss_no_join(
    service: Service,
) -> None:
    hub = service.app[EVENTS]
    async with graphql_socket(service) as holder:
        watchers = [await stack_socket(service) for _ in range(3)]
        try:
            # Members join while the watchers subscribe: each ends with all of them, once.
            for i in range(5):
                await start_operation(
                    holder, f"h{i}", HOLD, place="room", user=f"u{i}", session="s"
                )
                if i < len(watchers):
                    await start_operation(watchers[i], "w", WATCH, place="room")
            for _ in range(5):
                await receive_message(holder)
            seen = []
            for socket in watchers:
                joined: set[str] = set()
                while len(joined) < 5:
                    kind, user, _, _ = event(await receive_message(socket))
                    assert kind == "JOINED"
                    assert user not in joined
                    joined.add(user)
                seen.append(joined)
            assert seen == [{f"u{i}" for i in range(5)}] * 3
            assert hub.delivery_count == 3
            # One more change: the same bytes to every watcher, but for its id.
            await graphql(service, SET_STATE, place="room", user="u0", session="s", state={"a": 1})
            raw = [(await socket.receive(timeout=3)).data for socket in watchers]
            assert len(set(raw)) == 1
            assert json.loads(raw[0])["payload"]["data"]["placeChanged"]["kind"] == "UPDATED"
        finally:
            for socket in watchers:
                await socket.close()
    await eventually(lambda: hub.delivery_count == 0, what="the watchers to be forgotten")


async def stack_socket(service: Service) -> aiohttp.ClientWebSocketResponse:
    """An acknowledged graphql-transport-ws connection, closed by its caller."""
    socket = await service.ws_connect("/graphql", protocols=["graphql-transport-ws"])
    await socket.send_json({"type": "connection_init", "payload": {}})
    assert (await socket.receive_json(timeout=3))["type"] == "connection_ack"
    return socket


async def test_a_second_subscribe_of_a_known_document_is_still_refused_a_place_not_allowed(
    secured: Service,
) -> None:
    # The backend's subscribe makes the document's rendering known: the same document and
    # variables from others take a shorter path, which checks their right all the same.
    async with (
        graphql_socket(secured, f"Bearer {BACKEND_TOKEN}") as backend,
        graphql_socket(secured, f"Bearer {user_token('ann', places=['team:*'])}") as refused,
        graphql_socket(secured, f"Bearer {user_token('bob', places=['doc:*'])}") as allowed,
    ):
        await start_operation(backend, "w", WATCH, place="doc:1")
        await start_operation(backend, "h", HOLD, place="doc:1", user="cy", session="t")
        messages = [await receive_message(backend), await receive_message(backend)]
        watched = next(m for m in messages if m["id"] == "w")
        assert event(watched)[:2] == ("JOINED", "cy")
        await start_operation(refused, "w", WATCH, place="doc:1")
        first = await receive_message(refused)
        assert first["payload"]["errors"][0]["extensions"]["code"] == "FORBIDDEN"
        await start_operation(allowed, "w", WATCH, place="doc:1")
        assert event(await receive_message(allowed))[:2] == ("JOINED", "cy")


async def test_a_place_session_its_resolver_holds_itself_lives_and_ends_alike(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A subscription the pipeline leaves to Strawberry (while tracing, as off sockets) is
    # held by the resolver's own generator, over the same decision: the same session, the
    # same end.
    monkeypatch.setattr(OperationPipeline, "_subscribe_on_socket", OperationPipeline._stream)
    async with graphql_socket(service) as ann, graphql_socket(service) as watcher:
        await start_operation(watcher, "w", WATCH, place="room")
        await start_operation(ann, "a", HOLD, place="room", user="ann", session="t", state={"x": 1})
        assert (await receive_message(ann))["payload"]["data"]["placeSession"]["live"] is True
        assert event(await receive_message(watcher)) == ("JOINED", "ann", "t", {"x": 1})
        await graphql(service, 'mutation { kick(userId: "ann", sessionId: "t") { online } }')
        last = await receive_message(ann)
        assert last["payload"]["data"]["placeSession"]["endReason"] == "KICKED"
        assert (await receive_message(ann))["type"] == "complete"
        assert event(await receive_message(watcher)) == ("LEFT", "ann", "t", None)
        await start_operation(ann, "b", HOLD, place="room", user="ann", session="u")
        await receive_message(ann)
        assert event(await receive_message(watcher)) == ("JOINED", "ann", "u", None)
        await ann.send_json({"id": "b", "type": "complete"})
        assert event(await receive_message(watcher)) == ("LEFT", "ann", "u", None)


@pytest.mark.parametrize("deployment", ["one-redis", "three-shards"], indirect=True)
async def test_states_set_faster_than_20_a_second_through_two_services_are_merged_and_read_at_once(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any
) -> None:
    services = [await aiohttp_client(create_app(deployment)) for _ in range(2)]
    async with graphql_socket(services[0]) as ann, graphql_socket(services[1]) as watcher:
        await start_operation(
            ann, "a", HOLD, place="doc:1", user="ann", session="t", state={"i": -1}
        )
        await receive_message(ann)
        await start_operation(watcher, "w", WATCH, place="doc:1")
        assert event(await receive_message(watcher)) == ("JOINED", "ann", "t", {"i": -1})
        for i in range(30):
            await graphql(
                services[i % 2], SET_STATE, place="doc:1", user="ann", session="t", state={"i": i}
            )
            # Read at once through the other service, announced or not.
            members = await graphql(services[(i + 1) % 2], MEMBERS, place="doc:1")
            assert members["data"]["placeMembers"]["nodes"][0]["state"] == {"i": i}
            if i == 1:  # the second state waits to be announced; a new watcher has it first
                async with graphql_socket(services[0]) as late:
                    await start_operation(late, "l", WATCH, place="doc:1")
                    assert event(await receive_message(late)) == ("JOINED", "ann", "t", {"i": 1})
        announced: list[int] = []
        ats: list[datetime] = []
        while not announced or announced[-1] != 29:
            message = await receive_message(watcher)
            kind, _, _, state = event(message)
            assert kind == "UPDATED"
            announced.append(state["i"])
            ats.append(datetime.fromisoformat(message["payload"]["data"]["placeChanged"]["at"]))
        assert announced == sorted(set(announced))
        # Merged: at most one a 50 ms interval, however fast or slow the states came.
        gap = timedelta(milliseconds=49)
        assert all(b - a >= gap for a, b in itertools.pairwise(ats)), ats
