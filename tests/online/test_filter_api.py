"""onlineUsers(filter:) over HTTP on one Redis, on three shards and on a Redis Cluster: the
users of every shard merged in order, paged with cursors bound to their filter, and bad
filters refused with BAD_USER_INPUT."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.conftest import EVERY_DEPLOYMENT, error_codes, graphql

pytestmark = EVERY_DEPLOYMENT

Client = TestClient[Any, Any]
PAGE = (
    "query($f: OnlineFilter, $after: String, $order: OnlineOrder! = LAST_SEEN) {"
    " onlineUsers(first: 2, after: $after, filter: $f, orderBy: $order) {"
    " totalCount nodes { userId status sessions { device } } pageInfo { hasNextPage endCursor }"
    " } }"
)
TOUCH = (
    "mutation($u: ID!, $s: ID, $d: String, $at: DateTime) {"
    " touch(userId: $u, sessionId: $s, device: $d, at: $at) { online } }"
)


async def listed(api: Client, kept: dict[str, Any], order: str = "LAST_SEEN") -> list[str]:
    """Every page in turn: the ids in order; each page's totalCount the same."""
    ids: list[str] = []
    totals = set()
    after = None
    while True:
        body = await graphql(api, PAGE, f=kept, after=after, order=order)
        assert "errors" not in body, body
        page = body["data"]["onlineUsers"]
        ids += [n["userId"] for n in page["nodes"]]
        totals.add(page["totalCount"])
        if not page["pageInfo"]["hasNextPage"]:
            assert totals == {len(ids)}, (kept, totals, ids)
            return ids
        after = page["pageInfo"]["endCursor"]


def iso(seconds_ago: float, since: datetime | None = None) -> str:
    return ((since or datetime.now(UTC)) - timedelta(seconds=seconds_ago)).isoformat()


@pytest.mark.usefixtures("looked_at")
async def test_filters_merge_every_shard_in_order(api: Client) -> None:
    # Eight users spread over the shards, come online 40, 35, ... 5 seconds before the start
    # (every moment counted from it, however long the test takes).
    start = datetime.now(UTC)
    users = [f"user-{i}" for i in range(8)]
    for i, user in enumerate(users):
        device = "ios" if i % 2 else "web"
        body = await graphql(api, TOUCH, u=user, s="s", d=device, at=iso(40 - 5 * i, start))
        assert "errors" not in body, body
    await graphql(api, 'mutation { setStatus(userId: "user-3", status: BUSY) { status } }')
    newest_first = users[::-1]
    assert await listed(api, {"device": "ios"}) == [u for u in newest_first if u[-1] in "1357"]
    assert await listed(api, {"userIdPrefix": "user-"}) == newest_first
    assert await listed(api, {"statuses": ["BUSY"]}) == ["user-3"]
    assert await listed(api, {"statuses": ["ONLINE"], "device": "ios"}) == [
        "user-7",
        "user-5",
        "user-1",
    ]
    recent = {"onlineSinceFrom": iso(22, start)}
    assert await listed(api, recent) == ["user-7", "user-6", "user-5", "user-4"]
    assert await listed(api, recent, "ONLINE_SINCE") == ["user-7", "user-6", "user-5", "user-4"]
    earlier = {"onlineSinceTo": iso(22, start), "device": "web"}
    assert await listed(api, earlier, "ONLINE_SINCE") == [
        "user-2",
        "user-0",
    ]


async def test_a_cursor_of_another_filter_is_refused(api: Client) -> None:
    for user in ("a", "b", "c"):
        await graphql(api, TOUCH, u=user, s="s", d="web")
    body = await graphql(api, PAGE, f={"device": "web"})
    after = body["data"]["onlineUsers"]["pageInfo"]["endCursor"]
    refused = await graphql(api, PAGE, f={"device": "ios"}, after=after)
    assert error_codes(refused) == ["BAD_USER_INPUT"]
    assert "same filter" in refused["errors"][0]["message"]


async def test_bad_filters_say_what_is_allowed(api: Client) -> None:
    for kept, message in [
        ({"userIdPrefix": ""}, "filter.userIdPrefix must be 1 to 128 characters"),
        ({"device": "x" * 33}, "filter.device must be 1 to 32 characters"),
        (
            {"onlineSinceFrom": iso(0), "onlineSinceTo": iso(60)},
            "filter.onlineSinceTo must not be before filter.onlineSinceFrom",
        ),
    ]:
        body = await graphql(api, PAGE, f=kept)
        assert error_codes(body) == ["BAD_USER_INPUT"], body
        assert message in body["errors"][0]["message"]


async def test_total_count_in_a_fragment_is_counted(api: Client) -> None:
    for user in ("a", "b"):
        await graphql(api, TOUCH, u=user, s="s", d="web")
    query = (
        "fragment Total on PresenceConnection { totalCount }"
        ' { onlineUsers(first: 1, filter: {device: "web", userIdPrefix: "a"}) { ...Total } }'
    )
    body = await graphql(api, query)
    assert body["data"]["onlineUsers"]["totalCount"] == 1, body
    query = '{ onlineUsers(first: 1, filter: {device: "web", statuses: [ONLINE]}) { ... on PresenceConnection { totalCount } } }'
    body = await graphql(api, query)
    assert body["data"]["onlineUsers"]["totalCount"] == 2, body
