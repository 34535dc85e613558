"""The whole service over HTTP, with real GraphQL documents, on a real Redis: one Redis with
one shard, one Redis with three shards, and a three-master Redis Cluster with three shards."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import logging
import re
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from aiohttp.test_utils import TestClient
from redis.asyncio import Redis

from gql_presence.app import create_app
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore, shard_of
from gql_presence.store.cursor import Cursors
from gql_presence.store.keys import Keys
from tests.conftest import EVERY_DEPLOYMENT, ClientFactory, error_codes, graphql

pytestmark = EVERY_DEPLOYMENT

Client = TestClient[Any, Any]

PRESENCE = "userId online lastSeen sessions { sessionId lastSeen }"
PAGE = "totalCount nodes { userId online lastSeen sessions { sessionId } } pageInfo { hasNextPage endCursor }"


def iso(moment: datetime) -> str:
    return moment.isoformat()


async def test_touch_and_read_presence(api: Client) -> None:
    touched = await graphql(
        api,
        f"mutation($u: ID!, $s: ID) {{ touch(userId: $u, sessionId: $s) {{ {PRESENCE} }} }}",
        u="alice",
        s="phone",
    )
    presence = touched["data"]["touch"]
    assert presence["online"] is True
    assert [s["sessionId"] for s in presence["sessions"]] == ["phone"]
    last_seen = presence["lastSeen"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", last_seen)
    read = await graphql(api, f'{{ presence(userId: "alice") {{ {PRESENCE} }} }}')
    assert read["data"]["presence"] == presence


async def test_answers_are_compact_json_in_utf_8(api: Client) -> None:
    query = '{ presence(userId: "ß") { userId online } }'
    expected = b'{"data":{"presence":{"userId":"\\u00df","online":false}}}'
    for _ in ("the first time", "planned"):
        response = await api.post("/graphql", json={"query": query})
        assert response.headers["Content-Type"] == "application/json; charset=utf-8"
        assert await response.read() == expected


async def test_never_seen_user(api: Client) -> None:
    body = await graphql(api, f'{{ presence(userId: "nobody") {{ {PRESENCE} }} }}')
    assert body["data"]["presence"] == {
        "userId": "nobody",
        "online": False,
        "lastSeen": None,
        "sessions": [],
    }


async def test_backfill_with_an_offset_is_returned_in_utc(api: Client) -> None:
    at = datetime.now(UTC) - timedelta(seconds=30)
    with_offset = at.astimezone(ZoneInfo("Asia/Tokyo")).isoformat()
    body = await graphql(
        api, 'mutation($at: DateTime) { touch(userId: "a", at: $at) { lastSeen } }', at=with_offset
    )
    expected = at.replace(microsecond=at.microsecond // 1000 * 1000)
    assert datetime.fromisoformat(body["data"]["touch"]["lastSeen"]) == expected


async def test_lists_with_sessions_of_every_node(api: Client) -> None:
    await graphql(api, 'mutation { a: touch(userId: "a", sessionId: "phone") { online } }')
    await graphql(api, 'mutation { b: touch(userId: "b", sessionId: "tv") { online } }')
    await graphql(api, 'mutation { addFriends(userId: "me", friendIds: ["a", "b", "c"]) }')
    body = await graphql(
        api,
        f"""query($from: DateTime!, $to: DateTime!) {{
          onlineUsers(first: 1) {{ {PAGE} }}
          onlineFriends(userId: "me") {{ {PAGE} }}
          activeInRange(from: $from, to: $to) {{ {PAGE} }}
        }}""",
        **{"from": iso(datetime.now(UTC) - timedelta(minutes=1)), "to": iso(datetime.now(UTC))},
    )
    data = body["data"]
    assert data["onlineUsers"]["totalCount"] == 2
    assert data["onlineUsers"]["pageInfo"]["hasNextPage"] is True
    assert data["onlineUsers"]["nodes"] == [
        {
            "userId": "b",
            "online": True,
            "lastSeen": data["onlineUsers"]["nodes"][0]["lastSeen"],
            "sessions": [{"sessionId": "tv"}],
        }
    ]
    nodes = data["onlineFriends"]["nodes"]
    assert [(n["userId"], n["sessions"]) for n in nodes] == [
        ("b", [{"sessionId": "tv"}]),
        ("a", [{"sessionId": "phone"}]),
    ]
    assert [n["userId"] for n in data["activeInRange"]["nodes"]] == ["b", "a"]
    after = data["onlineUsers"]["pageInfo"]["endCursor"]
    second = await graphql(
        api,
        f"query($after: String) {{ onlineUsers(first: 1, after: $after) {{ {PAGE} }} }}",
        after=after,
    )
    assert [n["userId"] for n in second["data"]["onlineUsers"]["nodes"]] == ["a"]
    assert second["data"]["onlineUsers"]["pageInfo"]["hasNextPage"] is False


async def test_adding_friends_past_the_maximum_is_bad_input_and_changes_nothing(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any
) -> None:
    api = await aiohttp_client(create_app(dataclasses.replace(deployment, max_friends=2)))
    body = await graphql(api, 'mutation { addFriends(userId: "a", friendIds: ["b", "c", "d"]) }')
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "at most 2 friends (PRESENCE_MAX_FRIENDS)" in body["errors"][0]["message"]
    body = await graphql(api, '{ a: friends(userId: "a") b: friends(userId: "b") }')
    assert body["data"] == {"a": [], "b": []}


async def test_kick_touch_many_friends_and_weekly_stats(api: Client) -> None:
    body = await graphql(api, 'mutation { touchMany(userIds: ["a", "b", "c", "a"]) }')
    assert body["data"]["touchMany"] == 3
    body = await graphql(api, 'mutation { kick(userId: "a") { userId kickedSessions online } }')
    assert body["data"]["kick"] == {"userId": "a", "kickedSessions": 1, "online": False}
    body = await graphql(
        api,
        'mutation { addFriends(userId: "a", friendIds: ["b", "c"], mutual: false) removeFriends(userId: "a", friendIds: ["c"]) }',
    )
    assert body["data"] == {"addFriends": 2, "removeFriends": 1}
    body = await graphql(api, '{ a: friends(userId: "a") c: friends(userId: "c") }')
    assert body["data"] == {"a": ["b"], "c": []}
    body = await graphql(
        api,
        "{ weeklyStats { startDate endDate days { date activeUsers } uniqueUsers activeEveryDay newOnEndDate } }",
    )
    stats = body["data"]["weeklyStats"]
    assert stats["endDate"] == datetime.now(UTC).date().isoformat()
    assert [d["activeUsers"] for d in stats["days"]] == [0, 0, 0, 0, 0, 0, 3]
    assert (stats["uniqueUsers"], stats["activeEveryDay"], stats["newOnEndDate"]) == (3, 0, 3)
    body = await graphql(api, '{ weeklyStats(endDate: "2026-01-07") { startDate } }')
    assert body["data"]["weeklyStats"]["startDate"] == "2026-01-01"


@pytest.mark.parametrize(
    ("document", "variables", "says"),
    [
        ('mutation { touch(userId: "") { online } }', {}, "1 to 128"),
        ("mutation($u: ID!) { touch(userId: $u) { online } }", {"u": "x" * 129}, "1 to 128"),
        ('mutation { touch(userId: "a", sessionId: "bad\\nid") { online } }', {}, "control"),
        ('mutation { touch(userId: "a", at: "yesterday") { online } }', {}, "ISO 8601"),
        ('mutation { touch(userId: "a", at: "2026-11-21T09:30:00") { online } }', {}, "offset"),
        (
            'mutation($at: DateTime) { touch(userId: "a", at: $at) { online } }',
            {"at": "2026-11-21T09:30:00"},
            "offset",
        ),
        (
            'mutation($at: DateTime) { touch(userId: "a", at: $at) { online } }',
            {"at": 1763717400},
            "ISO 8601",
        ),
        ('mutation { touch(userId: "a", at: "2001-01-01T00:00:00Z") { online } }', {}, "retention"),
        ('mutation { touch(userId: "a", at: "2999-01-01T00:00:00Z") { online } }', {}, "5 seconds"),
        ('mutation { touch(userId: "a", at: "9999-12-31T23:59:59Z") { online } }', {}, "5 seconds"),
        ('mutation { touch(userId: "a", at: "0001-01-01T00:00:00Z") { online } }', {}, "retention"),
        ("mutation($u: ID!) { touch(userId: $u) { online } }", {"u": "a\ud800b"}, "Unicode"),
        ('{ weeklyStats(endDate: "0001-01-01") { uniqueUsers } }', {}, "endDate"),
        ('{ weeklyStats(endDate: "9999-12-31") { uniqueUsers } }', {}, "endDate"),
        (
            "mutation($ids: [ID!]!) { touchMany(userIds: $ids) }",
            {"ids": [str(i) for i in range(10_001)]},
            "10,000",
        ),
        ('mutation { addFriends(userId: "a", friendIds: ["b", ""]) }', {}, "1 to 128"),
        ("{ onlineUsers(first: 1001) { totalCount } }", {}, "0 and 1000"),
        ("{ onlineUsers(first: -1) { totalCount } }", {}, "0 and 1000"),
        ('{ onlineFriends(userId: "a", after: "forged") { totalCount } }', {}, "endCursor"),
        (
            '{ activeInRange(from: "2026-11-21T10:00:00Z", to: "2026-11-21T09:00:00Z") { totalCount } }',
            {},
            "from",
        ),
        ('{ weeklyStats(endDate: "21.11.2026") { uniqueUsers } }', {}, "ISO 8601"),
        ("{ presence { online } }", {}, "userId"),
        ("{ noSuchField }", {}, "noSuchField"),
        ("{ presence(userId: ", {}, "Syntax Error"),
    ],
)
async def test_bad_input_is_refused_with_a_helpful_message_and_changes_nothing(
    api: Client, http_redis: Redis, document: str, variables: dict[str, Any], says: str
) -> None:
    keys_before = await http_redis.dbsize()  # the service's cursor secret, made at start-up
    body = await graphql(api, document, **variables)
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert says in body["errors"][0]["message"]
    assert body.get("data") is None
    assert await http_redis.dbsize() == keys_before


@pytest.mark.parametrize(
    "document",
    [
        'query($v: Boolean = true) { presence(userId: "a") { online lastSeen @include(if: $v) } }',
        'query($v: Boolean = true) { presence(userId: "a") @skip(if: $v) { online } }',
        'query($u: ID = "a") { presence(userId: $u) { online } }',
    ],
)
async def test_an_explicit_null_where_a_default_stood_is_bad_input_and_not_logged(
    api: Client, caplog: pytest.LogCaptureFixture, document: str
) -> None:
    # GraphQL lets a variable with a default stand where null is not allowed; sending null for
    # it explicitly is found only while the operation runs.
    with caplog.at_level(logging.WARNING, logger="gql_presence.errors"):
        for _ in range(2):  # the full path first, then (over HTTP) the document's plan
            body = await graphql(api, document, v=None, u=None)
            assert error_codes(body) == ["BAD_USER_INPUT"]
            assert "not to be None" in body["errors"][0]["message"]
    assert caplog.records == []


async def test_revoked_session_is_refused_with_its_code(
    api: Client, http_redis: Redis, deployment: Settings
) -> None:
    last_seen = Keys.of_shard(shard_of("a", deployment.shards)).last_seen
    await graphql(api, 'mutation { touch(userId: "a", sessionId: "s") { online } }')
    await graphql(api, 'mutation { kick(userId: "a", sessionId: "s") { kickedSessions } }')
    before = await http_redis.zrange(last_seen, 0, -1, withscores=True)
    assert before
    body = await graphql(api, 'mutation { touch(userId: "a", sessionId: "s") { online } }')
    assert error_codes(body) == ["SESSION_REVOKED"]
    assert "new sessionId" in body["errors"][0]["message"]
    assert await http_redis.zrange(last_seen, 0, -1, withscores=True) == before


async def test_unexpected_errors_are_masked_for_clients_and_logged(
    api: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(self: PresenceStore, user_id: str, reader: str | None) -> None:
        raise RuntimeError("secret detail gqlp:{0}:lastseen")

    monkeypatch.setattr(PresenceStore, "presence", broken)
    with caplog.at_level(logging.ERROR, logger="gql_presence.errors"):
        body = await graphql(api, '{ presence(userId: "a") { online } }')
    assert error_codes(body) == ["INTERNAL"]
    assert "secret" not in str(body)
    assert "gqlp" not in str(body)
    assert "secret detail" in caplog.text


async def test_ready_when_redis_holds_the_scripts_and_takes_changes(api: Client) -> None:
    ready = await api.get("/readyz")
    assert (ready.status, await ready.json()) == (200, {"status": "ready"})


async def test_graphiql_is_served_to_browsers(api: Client) -> None:
    response = await api.get("/graphql", headers={"Accept": "text/html"})
    assert response.status == 200
    assert "graphiql" in (await response.text()).lower()


@pytest.mark.parametrize("body", [b'"a string"', b"5", b"true", b"null"])
async def test_a_body_that_is_json_but_no_object_is_refused_as_bad_input(
    api: Client, body: bytes
) -> None:
    response = await api.post("/graphql", data=body, headers={"Content-Type": "application/json"})
    assert response.status == 400
    assert "must be a JSON object" in await response.text()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"", "The request's JSON could not be read"),
        (b'{"query": "{ __typename }"', "The request's JSON could not be read"),
        (b"{}", "A GraphQL request names its document"),
        (b'{"variables": {"u": "ann"}}', "A GraphQL request names its document"),
    ],
    ids=["empty", "cut short", "an empty object", "variables alone"],
)
async def test_a_body_graphql_cannot_start_on_is_told_what_to_send(
    api: Client, body: bytes, says: str
) -> None:
    response = await api.post("/graphql", data=body, headers={"Content-Type": "application/json"})
    assert response.status == 400
    text = await response.text()
    assert text.startswith(says)
    assert '{"query": "<document>", "variables": {...}}' in text


@pytest.mark.parametrize(
    "body",
    [
        b'{"query": "{ __typename }", "variables": {"v": 1' + b"0" * 5000 + b"}}",
        b'{"query": "{ __typename }", "variables": {"v": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}}",
    ],
    ids=["an integer of 5,001 digits", "arrays nested 100,000 deep"],
)
async def test_json_beyond_what_python_reads_is_refused_as_bad_input(
    api: Client, body: bytes
) -> None:
    response = await api.post("/graphql", data=body, headers={"Content-Type": "application/json"})
    assert response.status == 400
    assert "The request's JSON could not be read" in await response.text()
    variables = body.decode().split('"variables": ')[1][:-1]
    response = await api.get("/graphql", params={"query": "{ __typename }", "variables": variables})
    assert response.status == 400


async def test_a_subscription_over_plain_http_is_refused_with_where_to_go(api: Client) -> None:
    body = await graphql(api, 'subscription { presenceChanged(userIds: ["a"]) { userId } }')
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "WebSocket" in body["errors"][0]["message"]


async def test_a_subscription_first_of_several_operations_is_refused_over_plain_http(
    api: Client,
) -> None:
    # With no operationName, Strawberry runs the first operation of the document.
    body = await graphql(
        api,
        'subscription S { presenceChanged(userIds: ["a"]) { userId } } query Q { __typename }',
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "WebSocket" in body["errors"][0]["message"]


BAD_CURSOR = "after must be an endCursor returned by this service (or null for the first page)."


def cursor_keyed_by(key: bytes, score: int, user_id: str) -> str:
    """A cursor of the shape the service makes, its tag keyed by `key`."""
    payload = json.dumps([score, user_id], separators=(",", ":")).encode()
    tag = hashlib.blake2b(payload, key=key, digest_size=8).digest()
    return base64.urlsafe_b64encode(tag + payload).decode().rstrip("=")


async def test_a_cursor_is_valid_on_every_process_and_a_forged_one_is_refused(
    api: Client, aiohttp_client: ClientFactory, deployment: Settings
) -> None:
    other_process = await aiohttp_client(create_app(deployment))
    await graphql(api, 'mutation { touchMany(userIds: ["a", "b"]) }')
    page = f"query($after: String) {{ onlineUsers(first: 1, after: $after) {{ {PAGE} }} }}"
    first = (await graphql(api, page))["data"]["onlineUsers"]
    second = await graphql(other_process, page, after=first["pageInfo"]["endCursor"])
    listed = [n["userId"] for n in first["nodes"] + second["data"]["onlineUsers"]["nodes"]]
    assert sorted(listed) == ["a", "b"]
    score = -int(datetime.fromisoformat(first["nodes"][0]["lastSeen"]).timestamp() * 1000)
    forged = (
        cursor_keyed_by(b"gql-presence cursor v1", score, listed[0]),  # the key in the source once
        Cursors("the secret of another deployment").encode(score, listed[0]),
    )
    for cursor in forged:
        body = await graphql(api, page, after=cursor)
        assert error_codes(body) == ["BAD_USER_INPUT"]
        assert body["errors"][0]["message"] == BAD_CURSOR
