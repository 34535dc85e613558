"""Statuses through the API, on real Redis: how a user appears to themself, to backends and to
other end users (docs/semantics.md, "Status")."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from gql_presence.app import create_app
from gql_presence.http.app_keys import EVENTS
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.client import AnyRedis
from tests.conftest import EVERY_DEPLOYMENT, TEST_SETTINGS, ClientFactory, error_codes
from tests.helpers import (
    BACKEND_TOKEN,
    SECURED,
    Service,
    as_user,
    eventually,
    graphql_socket,
    user_token,
)

LOOK = """query($u: ID!) { presence(userId: $u) {
  online status chosenStatus lastSeenVisibleTo lastSeen onlineSince
  customStatus { text emoji expiresAt } sessions { sessionId device idle startedAt } } }"""
TOUCH = """mutation($u: ID!, $s: ID, $d: String, $i: Boolean! = false) {
  touch(userId: $u, sessionId: $s, device: $d, idle: $i) { status } }"""
SET_STATUS = "mutation($u: ID, $s: ChosenStatus!) { setStatus(userId: $u, status: $s) { status chosenStatus } }"
SET_CUSTOM = """mutation($u: ID, $t: String, $e: String, $x: DateTime) {
  setCustomStatus(userId: $u, text: $t, emoji: $e, expiresAt: $x) { customStatus { text emoji expiresAt } } }"""
SET_VISIBLE = "mutation($u: ID, $v: Visibility!) { setLastSeenVisibility(userId: $u, visibleTo: $v) { lastSeenVisibleTo } }"
SET_IDLE = "mutation($u: ID, $s: ID!, $i: Boolean!) { setSessionIdle(userId: $u, sessionId: $s, idle: $i) { status } }"
FRIENDS = "query($u: ID!) { onlineFriends(userId: $u) { totalCount nodes { userId status } } }"
PRESENCES = "query($u: [ID!]!) { presences(userIds: $u) { userId online status lastSeen } }"


def ann() -> str:
    """ann's JWT, made when used: one made at import would expire during a long run."""
    return user_token("ann")


def bob() -> str:
    return user_token("bob")


@contextlib.asynccontextmanager
async def bob_and_cat_following_their_friends(
    friends: Service, document: str
) -> AsyncIterator[tuple[aiohttp.ClientWebSocketResponse, aiohttp.ClientWebSocketResponse]]:
    """bob's and cat's sockets, each subscribed with `document` to its own friends (variable
    `f`), once the process follows ann for both."""
    async with (
        graphql_socket(friends, f"Bearer {bob()}") as bobs,
        graphql_socket(friends, f"Bearer {user_token('cat')}") as cats,
    ):
        for socket, user in ((bobs, "bob"), (cats, "cat")):
            payload = {"query": document, "variables": {"f": user}}
            await socket.send_json({"id": "1", "type": "subscribe", "payload": payload})
        await following(friends, 2, "ann")
        yield bobs, cats


async def backend(service: Service, query: str, **variables: Any) -> Any:
    body = await as_user(service, BACKEND_TOKEN, query, **variables)
    assert "errors" not in body, body
    return next(iter(body["data"].values()))


async def seen(service: Service, token: str, user: str) -> dict[str, Any]:
    body = await as_user(service, token, LOOK, u=user)
    assert "errors" not in body, body
    return dict(body["data"]["presence"])


@pytest.fixture
async def friends(secured: Service) -> Service:
    """ann and bob, friends both ways."""
    await backend(secured, 'mutation { addFriends(userId: "ann", friendIds: ["bob"]) }')
    return secured


@pytest.fixture
async def friends_swept_by_the_test(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: AnyRedis
) -> Service:
    """`friends` on a service whose own sweeper sweeps once at its start and not again for an
    hour: a test that sweeps when it chooses knows when an expiry was announced."""
    settings = dataclasses.replace(
        SECURED,
        redis_url=deployment.redis_url,
        redis_cluster_nodes=deployment.redis_cluster_nodes,
        shards=deployment.shards,
        sweep_interval_ms=3_600_000,
    )
    service = await aiohttp_client(create_app(settings))
    await backend(service, 'mutation { addFriends(userId: "ann", friendIds: ["bob"]) }')
    return service


async def following(service: Service, subscriptions: int, *users: str) -> None:
    """Returns once `subscriptions` subscriptions of the service have begun and it follows
    `users`: their events from then on reach them."""
    hub = service.app[EVENTS]
    await eventually(
        lambda: hub.subscriber_count >= subscriptions and all(map(hub.follows, users)),
        what=f"{subscriptions} subscriptions following {users}",
    )


async def test_status_follows_the_sessions_and_the_choice(secured: Service) -> None:
    assert (await backend(secured, TOUCH, u="ann", s="web", d="web"))["status"] == "ONLINE"
    assert (await backend(secured, TOUCH, u="ann", s="web", i=True))["status"] == "AWAY"
    assert (await backend(secured, TOUCH, u="ann", s="phone"))["status"] == "ONLINE"
    assert (await as_user(secured, ann(), SET_IDLE, s="phone", i=True))["data"][
        "setSessionIdle"
    ] == {"status": "AWAY"}
    mine = await seen(secured, ann(), "ann")
    sessions = {s["sessionId"]: s for s in mine["sessions"]}
    assert (sessions["web"]["device"], sessions["web"]["idle"]) == ("web", True)
    assert sessions["phone"]["device"] is None
    assert mine["onlineSince"] == sessions["web"]["startedAt"]
    body = await as_user(secured, ann(), SET_STATUS, s="BUSY")
    assert body["data"]["setStatus"] == {"status": "BUSY", "chosenStatus": "BUSY"}
    await backend(secured, 'mutation { kick(userId: "ann") { kickedSessions } }')
    mine = await seen(secured, ann(), "ann")
    assert (mine["status"], mine["chosenStatus"], mine["onlineSince"]) == ("OFFLINE", "BUSY", None)


async def test_a_custom_status_is_shown_until_it_ends_and_its_end_is_announced(
    secured: Service, store_of_api: PresenceStore, http_redis: AnyRedis
) -> None:
    await backend(secured, TOUCH, u="ann")
    async with graphql_socket(secured, f"Bearer {BACKEND_TOKEN}") as socket:
        await socket.send_json(
            {
                "id": "1",
                "type": "subscribe",
                "payload": {
                    "query": 'subscription { presenceChanged(userIds: ["ann"]) { kind status customStatus { text } } }'
                },
            }
        )
        await following(secured, 1, "ann")
        # Counted from here, so that a slow start of the subscription leaves the window whole.
        ends = datetime.now(UTC) + timedelta(seconds=1.5)
        body = await as_user(
            secured, ann(), SET_CUSTOM, t="In a meeting", e="📅", x=ends.isoformat()
        )
        assert body["data"]["setCustomStatus"]["customStatus"]["text"] == "In a meeting"
        assert (await seen(secured, BACKEND_TOKEN, "ann"))["customStatus"]["emoji"] == "📅"
        message = await socket.receive_json(timeout=3)
        assert message["payload"]["data"]["presenceChanged"] == {
            "kind": "STATUS",
            "status": "ONLINE",
            "customStatus": {"text": "In a meeting"},
        }
        await asyncio.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()) + 0.05)
        assert (await seen(secured, BACKEND_TOKEN, "ann"))["customStatus"] is None
        # The service's own sweeper may announce the end before this sweep does.
        await store_of_api.sweep()
        message = await socket.receive_json(timeout=3)
        assert message["payload"]["data"]["presenceChanged"] == {
            "kind": "STATUS",
            "status": "ONLINE",
            "customStatus": None,
        }


@EVERY_DEPLOYMENT
async def test_an_invisible_user_is_offline_to_other_end_users_only(friends: Service) -> None:
    await backend(friends, TOUCH, u="ann", s="web")
    await backend(friends, TOUCH, u="bob", s="web")
    before = (await seen(friends, bob(), "ann"))["lastSeen"]
    await as_user(friends, ann(), SET_CUSTOM, t="Focus")
    assert (await as_user(friends, ann(), SET_STATUS, s="INVISIBLE"))["data"]["setStatus"] == {
        "status": "INVISIBLE",
        "chosenStatus": "INVISIBLE",
    }
    await backend(friends, TOUCH, u="ann", s="web")
    to_bob = await seen(friends, bob(), "ann")
    assert to_bob == {
        "online": False,
        "status": "OFFLINE",
        "chosenStatus": None,
        "lastSeenVisibleTo": None,
        "lastSeen": before,
        "onlineSince": None,
        "customStatus": None,
        "sessions": [],
    }
    listed = await as_user(friends, bob(), FRIENDS, u="bob")
    assert listed["data"]["onlineFriends"] == {"totalCount": 0, "nodes": []}
    assert (await seen(friends, ann(), "ann"))["status"] == "INVISIBLE"
    assert (await seen(friends, BACKEND_TOKEN, "ann"))["customStatus"]["text"] == "Focus"
    await as_user(friends, ann(), SET_STATUS, s="AUTO")
    listed = await as_user(friends, bob(), FRIENDS, u="bob")
    assert listed["data"]["onlineFriends"]["nodes"] == [{"userId": "ann", "status": "ONLINE"}]


async def test_who_may_see_last_seen(friends: Service) -> None:
    await backend(
        friends, 'mutation { addFriends(userId: "cat", friendIds: ["ann"], mutual: false) }'
    )
    await backend(friends, TOUCH, u="ann", s="web")
    cat = user_token("cat")
    await as_user(friends, ann(), SET_VISIBLE, v="FRIENDS")
    assert (await seen(friends, bob(), "ann"))["lastSeen"] is not None
    hidden = await seen(friends, cat, "ann")
    assert (hidden["lastSeen"], hidden["sessions"], hidden["onlineSince"]) == (None, [], None)
    assert (hidden["online"], hidden["status"]) == (True, "ONLINE")
    await as_user(friends, ann(), SET_VISIBLE, v="NOBODY")
    assert (await seen(friends, bob(), "ann"))["lastSeen"] is None
    mine = await seen(friends, ann(), "ann")
    assert mine["lastSeenVisibleTo"] == "NOBODY"
    assert mine["lastSeen"] is not None


async def test_a_kicked_sessions_id_reaches_only_those_who_may_see_sessions(
    friends: Service,
) -> None:
    # cat has ann as a friend, but is not in ann's friend set: ann lets FRIENDS see her
    # lastSeen and sessions, so bob sees them and cat does not, in reads and events alike.
    await backend(
        friends, 'mutation { addFriends(userId: "cat", friendIds: ["ann"], mutual: false) }'
    )
    await as_user(friends, ann(), SET_VISIBLE, v="FRIENDS")
    await backend(friends, TOUCH, u="ann", s="web")
    await backend(friends, TOUCH, u="ann", s="phone-7f3a")
    document = "subscription($f: ID!) { presenceChanged(friendsOf: $f) { kind sessionId } }"
    async with bob_and_cat_following_their_friends(friends, document) as (bobs, cats):
        await backend(
            friends, 'mutation { kick(userId: "ann", sessionId: "phone-7f3a") { online } }'
        )
        assert await next_event(bobs) == {"kind": "KICKED", "sessionId": "phone-7f3a"}
        assert await next_event(cats) == {"kind": "KICKED", "sessionId": None}
    assert [s["sessionId"] for s in (await seen(friends, bob(), "ann"))["sessions"]] == ["web"]
    assert (await seen(friends, user_token("cat"), "ann"))["sessions"] == []


async def test_presences_reads_friends_in_the_order_given(friends: Service) -> None:
    await backend(friends, 'mutation { addFriends(userId: "ann", friendIds: ["new"]) }')
    await backend(friends, TOUCH, u="bob")
    body = await as_user(friends, ann(), PRESENCES, u=["bob", "ann", "new"])
    assert [(p["userId"], p["status"]) for p in body["data"]["presences"]] == [
        ("bob", "ONLINE"),
        ("ann", "OFFLINE"),
        ("new", "OFFLINE"),
    ]
    assert body["data"]["presences"][2]["lastSeen"] is None
    assert error_codes(await as_user(friends, ann(), PRESENCES, u=["bob", "eve"])) == ["FORBIDDEN"]
    assert error_codes(await as_user(friends, ann(), LOOK, u="eve")) == ["FORBIDDEN"]
    many = [f"u{i}" for i in range(1001)]
    body = await as_user(friends, BACKEND_TOKEN, PRESENCES, u=many)
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "1,000" in body["errors"][0]["message"]


@pytest.mark.parametrize(
    ("query", "variables", "allowed"),
    [
        (SET_CUSTOM, {"t": "x" * 129}, "1 to 128"),
        (SET_CUSTOM, {"t": "line\nbreak"}, "control characters"),
        (SET_CUSTOM, {"t": "evil\u202etxt"}, "bidirectional"),
        (SET_CUSTOM, {"t": "ok", "e": "🙂" * 17}, "1 to 16"),
        (SET_CUSTOM, {"t": "ok", "x": "2020-01-01T00:00:00Z"}, "future"),
        (SET_CUSTOM, {"t": "ok", "x": "2999-01-01T00:00:00Z"}, "retention"),
        (SET_IDLE, {"s": "nowhere", "i": True}, "not live"),
    ],
)
async def test_bad_input_says_what_is_allowed_and_changes_nothing(
    secured: Service, query: str, variables: dict[str, Any], allowed: str
) -> None:
    await as_user(secured, ann(), SET_CUSTOM, t="kept")
    body = await as_user(secured, ann(), query, **variables)
    assert error_codes(body) == ["BAD_USER_INPUT"], body
    assert allowed in body["errors"][0]["message"]
    assert (await seen(secured, ann(), "ann"))["customStatus"]["text"] == "kept"


async def test_a_long_device_is_refused(secured: Service) -> None:
    body = await as_user(secured, BACKEND_TOKEN, TOUCH, u="ann", d="d" * 33)
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "1 to 32" in body["errors"][0]["message"]
    assert (await seen(secured, BACKEND_TOKEN, "ann"))["online"] is False


async def test_end_users_change_only_their_own_status(secured: Service) -> None:
    changes: list[tuple[str, dict[str, Any]]] = [
        (SET_STATUS, {"s": "BUSY"}),
        (SET_CUSTOM, {"t": "hi"}),
        (SET_VISIBLE, {"v": "NOBODY"}),
        (SET_IDLE, {"s": "web", "i": True}),
    ]
    for query, variables in changes:
        assert error_codes(await as_user(secured, ann(), query, u="bob", **variables)) == [
            "FORBIDDEN"
        ]
    assert (await seen(secured, BACKEND_TOKEN, "bob"))["chosenStatus"] == "AUTO"


async def next_event(socket: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    message = await socket.receive_json(timeout=3)
    assert message["type"] == "next", message
    return dict(message["payload"]["data"]["presenceChanged"])


async def test_subscribers_see_invisibility_as_the_user_lets_them(friends: Service) -> None:
    document = "subscription($f: ID, $u: [ID!]) { presenceChanged(friendsOf: $f, userIds: $u) { kind userId status } }"
    await backend(friends, TOUCH, u="ann", s="web")
    async with (
        graphql_socket(friends, f"Bearer {bob()}") as bobs,
        graphql_socket(friends, f"Bearer {BACKEND_TOKEN}") as watcher,
    ):
        for socket, variables in ((bobs, {"f": "bob"}), (watcher, {"u": ["ann"]})):
            payload = {"query": document, "variables": variables}
            await socket.send_json({"id": "1", "type": "subscribe", "payload": payload})
        await following(friends, 2, "ann")
        await as_user(friends, ann(), SET_STATUS, s="INVISIBLE")
        assert await next_event(bobs) == {"kind": "OFFLINE", "userId": "ann", "status": "OFFLINE"}
        assert await next_event(watcher) == {
            "kind": "STATUS",
            "userId": "ann",
            "status": "INVISIBLE",
        }
        await backend(friends, 'mutation { kick(userId: "ann") { kickedSessions } }')
        assert (await next_event(watcher))["kind"] == "KICKED"
        await backend(friends, TOUCH, u="ann", s="phone")
        assert (await next_event(watcher))["kind"] == "ONLINE"
        await as_user(friends, ann(), SET_STATUS, s="BUSY")
        # Nothing reached bob while ann was invisible: her return is the next he hears of her.
        assert await next_event(bobs) == {"kind": "ONLINE", "userId": "ann", "status": "BUSY"}
        assert await next_event(watcher) == {"kind": "STATUS", "userId": "ann", "status": "BUSY"}


BY_LOGIN = """query($a: String, $o: OnlineOrder!) { onlineUsers(first: 2, after: $a, orderBy: $o) {
  totalCount nodes { userId onlineSince } pageInfo { endCursor hasNextPage } } }"""


@EVERY_DEPLOYMENT
async def test_the_online_list_by_login_time(secured: Service) -> None:
    now = datetime.now(UTC)
    for user, seconds_ago in (("early", 50), ("late", 5), ("middle", 20)):
        at = (now - timedelta(seconds=seconds_ago)).isoformat()
        await backend(
            secured,
            "mutation($u: ID!, $a: DateTime) { touch(userId: $u, at: $a) { online } }",
            u=user,
            a=at,
        )
    await backend(secured, TOUCH, u="early")  # activity moves lastSeen, not onlineSince
    first = await backend(secured, BY_LOGIN, o="ONLINE_SINCE")
    assert [n["userId"] for n in first["nodes"]] == ["late", "middle"]
    assert first["totalCount"] == 3
    rest = await backend(secured, BY_LOGIN, o="ONLINE_SINCE", a=first["pageInfo"]["endCursor"])
    assert [n["userId"] for n in rest["nodes"]] == ["early"]
    assert not rest["pageInfo"]["hasNextPage"]
    by_activity = await backend(secured, BY_LOGIN, o="LAST_SEEN")
    assert [n["userId"] for n in by_activity["nodes"]] == ["early", "late"]
    body = await as_user(
        secured, BACKEND_TOKEN, BY_LOGIN, o="LAST_SEEN", a=first["pageInfo"]["endCursor"]
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "same order" in body["errors"][0]["message"]
    await backend(secured, 'mutation { kick(userId: "late") { kickedSessions } }')
    first = await backend(secured, BY_LOGIN, o="ONLINE_SINCE")
    assert [n["userId"] for n in first["nodes"]] == ["middle", "early"]


async def test_a_held_session_says_its_device_and_turns_its_user_away_when_hidden(
    friends: Service,
) -> None:
    document = 'subscription { presenceSession(sessionId: "tab", device: "web") { live } }'
    watched = 'subscription { presenceChanged(friendsOf: "bob") { kind status } }'
    async with (
        graphql_socket(friends, f"Bearer {ann()}") as anns,
        graphql_socket(friends, f"Bearer {bob()}") as bobs,
    ):
        await bobs.send_json({"id": "1", "type": "subscribe", "payload": {"query": watched}})
        await following(friends, 1, "ann")
        await anns.send_json({"id": "1", "type": "subscribe", "payload": {"query": document}})
        assert (await anns.receive_json(timeout=3))["payload"]["data"]["presenceSession"]["live"]
        assert await next_event(bobs) == {"kind": "ONLINE", "status": "ONLINE"}
        mine = await seen(friends, ann(), "ann")
        assert mine["sessions"] == [
            {"sessionId": "tab", "device": "web", "idle": False, "startedAt": mine["onlineSince"]}
        ]
        await as_user(friends, ann(), SET_IDLE, s="tab", i=True)
        assert await next_event(bobs) == {"kind": "STATUS", "status": "AWAY"}
        await as_user(friends, ann(), SET_IDLE, s="tab", i=False)
        assert await next_event(bobs) == {"kind": "STATUS", "status": "ONLINE"}


@pytest.fixture
async def lists_open(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: AnyRedis
) -> Service:
    """The service with credentials required, its lists open to end users
    (PRESENCE_USERS_SEE_EVERYONE)."""
    settings = dataclasses.replace(
        SECURED,
        redis_url=deployment.redis_url,
        redis_cluster_nodes=deployment.redis_cluster_nodes,
        shards=deployment.shards,
        users_see_everyone=True,
    )
    return await aiohttp_client(create_app(settings))


@EVERY_DEPLOYMENT
async def test_online_totals_leave_invisible_users_out_for_end_users_only(
    lists_open: Service,
) -> None:
    secured = lists_open
    users = [f"u{i}" for i in range(6)]
    await backend(secured, "mutation($u: [ID!]!) { touchMany(userIds: $u) }", u=users[:3])
    for user in users[3:]:
        await backend(secured, TOUCH, u=user, s="web")
    for user in ("u1", "u4", "quiet"):
        await backend(secured, SET_STATUS, u=user, s="INVISIBLE")
    await backend(secured, "mutation($u: [ID!]!) { touchMany(userIds: $u) }", u=["u1", "quiet"])
    document = "query($o: OnlineOrder!) { onlineUsers(first: 10, orderBy: $o) { totalCount nodes { userId } } }"
    for order in ("LAST_SEEN", "ONLINE_SINCE"):
        assert (await backend(secured, document, o=order))["totalCount"] == 7
        body = await as_user(secured, ann(), document, o=order)
        listed = body["data"]["onlineUsers"]
        assert listed["totalCount"] == 4
        assert sorted(n["userId"] for n in listed["nodes"]) == ["u0", "u2", "u3", "u5"]
    # Their activity counts in activeInRange, as offline users to an end user.
    active = """query($f: DateTime!, $t: DateTime!) {
      activeInRange(from: $f, to: $t, first: 10) { totalCount nodes { userId online } } }"""
    span = {"f": "2000-01-01T00:00:00Z", "t": datetime.now(UTC).isoformat()}
    body = await as_user(secured, ann(), active, **span)
    nodes = {n["userId"]: n["online"] for n in body["data"]["activeInRange"]["nodes"]}
    assert body["data"]["activeInRange"]["totalCount"] == 7
    assert (nodes["u1"], nodes["u4"], nodes["quiet"], nodes["u0"]) == (False, False, False, True)
    as_backend = (await backend(secured, active, **span))["nodes"]
    assert [n["online"] for n in as_backend] == [True] * 7
    await backend(secured, SET_STATUS, u="u4", s="AUTO")
    await backend(secured, 'mutation { kick(userId: "u1") { kickedSessions } }')
    assert (await backend(secured, document, o="LAST_SEEN"))["totalCount"] == 6
    body = await as_user(secured, ann(), document, o="ONLINE_SINCE")
    assert body["data"]["onlineUsers"]["totalCount"] == 5


async def test_a_user_turns_away_when_their_last_active_session_expires(
    friends: Service, store_of_api: PresenceStore
) -> None:
    window = timedelta(milliseconds=TEST_SETTINGS.window_ms)
    # The web session expires 1.5 s from now: time for both touches to land before it, on a
    # loaded machine too (400 ms was not always).
    almost_gone = (datetime.now(UTC) - window + timedelta(milliseconds=1500)).isoformat()
    touch_at = "mutation($u: ID!, $s: ID, $a: DateTime) { touch(userId: $u, sessionId: $s, at: $a) { status } }"
    assert (await backend(friends, touch_at, u="ann", s="web", a=almost_gone))["status"] == "ONLINE"
    assert (await backend(friends, TOUCH, u="ann", s="phone", i=True))["status"] == "ONLINE"
    watched = 'subscription { presenceChanged(friendsOf: "bob") { kind status } }'
    async with graphql_socket(friends, f"Bearer {bob()}") as bobs:
        await bobs.send_json({"id": "1", "type": "subscribe", "payload": {"query": watched}})
        await following(friends, 1, "ann")

        async def away() -> bool:
            return bool((await seen(friends, bob(), "ann"))["status"] == "AWAY")

        await eventually(away, what="ann's web session to expire")
        await store_of_api.sweep()
        assert await next_event(bobs) == {"kind": "STATUS", "status": "AWAY"}
        await store_of_api.sweep()
        await backend(friends, TOUCH, u="ann", s="phone")
        # The next event is the return: the second sweep announced nothing.
        assert await next_event(bobs) == {"kind": "STATUS", "status": "ONLINE"}


async def test_events_show_their_time_to_those_who_may_see_last_seen(
    friends_swept_by_the_test: Service, store_of_api: PresenceStore
) -> None:
    friends = friends_swept_by_the_test
    await backend(
        friends, 'mutation { addFriends(userId: "cat", friendIds: ["ann"], mutual: false) }'
    )
    await as_user(friends, ann(), SET_VISIBLE, v="FRIENDS")
    document = "subscription($f: ID!) { presenceChanged(friendsOf: $f) { kind at } }"
    touch_at = 'mutation($a: DateTime) { touch(userId: "ann", at: $a) { online } }'

    async def goes_offline() -> datetime:
        """ann goes offline by time, told by a sweep at least 200 ms after the moment her
        presence expired, which it returns."""
        window = timedelta(milliseconds=TEST_SETTINGS.window_ms)
        expiry = datetime.now(UTC) + timedelta(milliseconds=300)
        await backend(friends, touch_at, a=(expiry - window).isoformat())
        # Past the expiry by 200 ms, so that the time the sweep tells of it stands apart from it.
        await asyncio.sleep(0.5)
        await store_of_api.sweep()
        return expiry

    async with bob_and_cat_following_their_friends(friends, document) as (bobs, cats):

        async def offline_at(socket: aiohttp.ClientWebSocketResponse) -> datetime:
            assert (await next_event(socket))["kind"] == "ONLINE"
            event = await next_event(socket)
            assert event["kind"] == "OFFLINE"
            return datetime.fromisoformat(event["at"])

        expiry = await goes_offline()
        # bob is in ann's friend set: the moment it happened; cat is not: when it was told.
        assert abs(await offline_at(bobs) - expiry) < timedelta(milliseconds=50)
        assert await offline_at(cats) - expiry > timedelta(milliseconds=150)
        await backend(
            friends, 'mutation { removeFriends(userId: "ann", friendIds: ["bob"], mutual: false) }'
        )
        await asyncio.sleep(0.3)
        expiry = await goes_offline()
        assert await offline_at(bobs) - expiry > timedelta(milliseconds=150)


async def test_a_cursor_shows_neither_the_time_nor_the_id_it_holds(friends: Service) -> None:
    await as_user(friends, ann(), SET_VISIBLE, v="NOBODY")
    await backend(friends, TOUCH, u="ann", s="web")
    page = """query($a: String) { onlineFriends(userId: "bob", first: 1, after: $a) {
      nodes { userId lastSeen } pageInfo { endCursor } } }"""
    body = (await as_user(friends, bob(), page))["data"]["onlineFriends"]
    assert body["nodes"] == [{"userId": "ann", "lastSeen": None}]
    cursor = body["pageInfo"]["endCursor"]
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    last_seen = (await seen(friends, BACKEND_TOKEN, "ann"))["lastSeen"]
    seconds = str(int(datetime.fromisoformat(last_seen).timestamp()))
    assert b"ann" not in raw
    assert seconds[:8].encode() not in raw
    following = await as_user(friends, bob(), page, a=cursor)
    assert following["data"]["onlineFriends"]["nodes"] == []


async def test_a_kicked_session_cannot_be_marked_idle(secured: Service) -> None:
    await backend(secured, TOUCH, u="ann", s="web")
    await backend(secured, 'mutation { kick(userId: "ann", sessionId: "web") { kickedSessions } }')
    body = await as_user(secured, ann(), SET_IDLE, s="web", i=True)
    assert error_codes(body) == ["SESSION_REVOKED"]


async def test_an_end_user_follows_themself_and_their_friends_by_id(friends: Service) -> None:
    document = 'subscription { presenceChanged(userIds: ["ann", "bob"]) { kind userId status } }'
    async with (
        graphql_socket(friends, f"Bearer {bob()}") as bobs,
        graphql_socket(friends, f"Bearer {user_token('cat')}") as cats,
    ):
        await bobs.send_json({"id": "1", "type": "subscribe", "payload": {"query": document}})
        await following(friends, 1, "ann", "bob")
        # The same document from one who is not ann's friend, nor bob: refused, though this
        # process renders the document already.
        await cats.send_json({"id": "1", "type": "subscribe", "payload": {"query": document}})
        refusal = await cats.receive_json(timeout=3)
        assert refusal["payload"]["errors"][0]["extensions"]["code"] == "FORBIDDEN"
        assert '"ann" is not one' in refusal["payload"]["errors"][0]["message"]
        await backend(friends, TOUCH, u="ann", s="web")
        await as_user(friends, bob(), SET_STATUS, s="BUSY")
        await backend(friends, TOUCH, u="bob", s="phone")
        assert await next_event(bobs) == {"kind": "ONLINE", "userId": "ann", "status": "ONLINE"}
        assert await next_event(bobs) == {"kind": "ONLINE", "userId": "bob", "status": "BUSY"}
        # A stranger among the ids of a document new to the process is refused too.
        mixed = 'subscription { presenceChanged(userIds: ["cat", "ann"]) { kind } }'
        await cats.send_json({"id": "2", "type": "subscribe", "payload": {"query": mixed}})
        while (refusal := await cats.receive_json(timeout=3))["id"] != "2":
            assert refusal == {"id": "1", "type": "complete"}
        assert refusal["payload"]["errors"][0]["extensions"]["code"] == "FORBIDDEN"


async def test_a_follower_by_id_sees_the_time_when_in_the_users_friend_set(
    friends_swept_by_the_test: Service, store_of_api: PresenceStore
) -> None:
    friends = friends_swept_by_the_test
    await as_user(friends, ann(), SET_VISIBLE, v="FRIENDS")
    await backend(
        friends, 'mutation { addFriends(userId: "cat", friendIds: ["ann"], mutual: false) }'
    )
    document = 'subscription { presenceChanged(userIds: ["ann"]) { kind at } }'
    window = timedelta(milliseconds=TEST_SETTINGS.window_ms)
    touch_at = 'mutation($a: DateTime) { touch(userId: "ann", at: $a) { online } }'
    async with (
        graphql_socket(friends, f"Bearer {bob()}") as bobs,
        graphql_socket(friends, f"Bearer {user_token('cat')}") as cats,
    ):
        for socket in (bobs, cats):
            await socket.send_json({"id": "1", "type": "subscribe", "payload": {"query": document}})
        await following(friends, 2, "ann")
        expiry = datetime.now(UTC) + timedelta(milliseconds=300)
        await backend(friends, touch_at, a=(expiry - window).isoformat())
        # Past the expiry by 200 ms, so that the time the sweep tells of it stands apart from it.
        await asyncio.sleep(0.5)
        await store_of_api.sweep()

        async def offline_at(socket: aiohttp.ClientWebSocketResponse) -> datetime:
            assert (await next_event(socket))["kind"] == "ONLINE"
            event = await next_event(socket)
            assert event["kind"] == "OFFLINE"
            return datetime.fromisoformat(event["at"])

        # bob is in ann's friend set: the moment it happened; cat (ann is in cat's set, not
        # cat in ann's) is not: when it was told.
        assert abs(await offline_at(bobs) - expiry) < timedelta(milliseconds=50)
        assert await offline_at(cats) - expiry > timedelta(milliseconds=150)
