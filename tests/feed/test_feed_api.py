"""The feed over HTTP: changes and feedCursor for backends, versions in reads and events, on
one Redis, one Redis with three shards, and the cluster."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from gql_presence.app import create_app
from gql_presence.http.app_keys import EVENTS
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.client import AnyRedis
from tests.conftest import EVERY_DEPLOYMENT, ClientFactory, error_codes, graphql
from tests.helpers import BACKEND_TOKEN, as_user, eventually, graphql_socket, rated

pytestmark = EVERY_DEPLOYMENT

Client = TestClient[Any, Any]

CHANGES = """query($after: String, $first: Int!, $kinds: [ChangeKind!], $places: [String!]) {
  changes(after: $after, first: $first, kinds: $kinds, places: $places) {
    nodes {
      __typename
      ... on PresenceEvent { userId presenceKind: kind version }
      ... on PlaceEvent { placeId userId placeKind: kind placeVersion: version }
    }
    endCursor hasMore
  }
}"""


def summary(node: dict[str, Any]) -> tuple[str, str, int]:
    kind = node.get("presenceKind") or node["placeKind"]
    return kind, node.get("placeId") or node["userId"], node.get("placeVersion") or node["version"]


async def changes(api: Client, **variables: Any) -> dict[str, Any]:
    body = await graphql(api, CHANGES, **{"first": 100, **variables})
    assert "errors" not in body, body
    page: dict[str, Any] = body["data"]["changes"]
    return page


async def test_changes_since_a_cursor_with_versions(api: Client) -> None:
    start = (await graphql(api, "{ feedCursor }"))["data"]["feedCursor"]
    for user in ["ann", "bob", "cy", "dee", "eve"]:
        await graphql(api, "mutation($u: ID!) { touch(userId: $u) { online } }", u=user)
    await graphql(api, 'mutation { kick(userId: "ann") { online } }')
    page = await changes(api, after=start)
    got = [summary(n) for n in page["nodes"]]
    assert sorted(got) == sorted(
        [("ONLINE", u, 1) for u in ["ann", "bob", "cy", "dee", "eve"]] + [("KICKED", "ann", 2)]
    )
    # Per user, in the order of their versions.
    assert [g for g in got if g[1] == "ann"] == [("ONLINE", "ann", 1), ("KICKED", "ann", 2)]
    assert page["hasMore"] is False
    after = await changes(api, after=page["endCursor"])
    assert after["nodes"] == []


async def test_changes_page_through_every_shard(api: Client) -> None:
    users = [f"user{i}" for i in range(9)]
    await graphql(api, "mutation($u: [ID!]!) { touchMany(userIds: $u) }", u=users)
    seen: list[str] = []
    after = None
    for _ in range(9):
        page = await changes(api, after=after, first=2)
        seen += [n["userId"] for n in page["nodes"]]
        after = page["endCursor"]
        if not page["hasMore"]:
            break
    assert sorted(seen) == users


async def test_changes_of_the_kinds_and_places_asked_for(
    api: Client, store_of_api: PresenceStore
) -> None:
    await store_of_api.renew_leases()
    for place in ["room:1", "room:2", "hall"]:
        await store_of_api.open_place_session(place, "ann", "tab")
    page = await changes(api, kinds=["JOINED"], places=["room:*"])
    got = sorted(summary(n) for n in page["nodes"])
    assert [(kind, place) for kind, place, _ in got] == [("JOINED", "room:1"), ("JOINED", "room:2")]
    # The read of a place and its last event carry one version.
    members = await graphql(api, '{ placeMembers(placeId: "room:1") { version } }')
    assert members["data"]["placeMembers"]["version"] == got[0][2]


async def test_a_read_and_the_last_event_carry_one_version(api: Client) -> None:
    await graphql(api, 'mutation { touch(userId: "ann") { online } }')
    await graphql(api, 'mutation { setStatus(userId: "ann", status: BUSY) { online } }')
    last = (await changes(api))["nodes"][-1]
    read = await graphql(api, '{ presence(userId: "ann") { version } }')
    assert read["data"]["presence"]["version"] == last["version"] == 2


async def test_refusals(api: Client) -> None:
    body = await graphql(api, CHANGES, first=0)
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "1 to 1,000" in body["errors"][0]["message"]
    body = await graphql(api, CHANGES, first=10, after="not a cursor")
    assert error_codes(body) == ["BAD_USER_INPUT"]
    body = await graphql(
        api, "query($kinds: [ChangeKind!]) { changes(kinds: $kinds) { endCursor } }", kinds=[]
    )
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "at least one kind" in body["errors"][0]["message"]


LIVE = 'subscription { presenceChanged(userIds: ["ann", "bob"]) { userId kind cursor version } }'
PLACE = 'subscription { placeChanged(placeId: "room") { userId kind cursor version } }'


async def next_event(socket: aiohttp.ClientWebSocketResponse) -> dict[str, Any]:
    message = await socket.receive_json(timeout=3)
    assert message["type"] == "next", message
    event: dict[str, Any] = next(iter(message["payload"]["data"].values()))
    return event


async def subscribe(socket: aiohttp.ClientWebSocketResponse, document: str) -> None:
    await socket.send_json({"id": "1", "type": "subscribe", "payload": {"query": document}})


@pytest.mark.parametrize("multiplexed", [True, False], indirect=True)
async def test_a_live_events_cursor_gives_the_changes_after_it(
    api: Client, multiplexed: bool
) -> None:
    async with graphql_socket(api) as socket, graphql_socket(api) as other:
        await subscribe(socket, LIVE)
        # Another document: its own rendering of the same events, with the same cursors.
        await subscribe(other, 'subscription { presenceChanged(userIds: ["ann"]) { cursor } }')
        await eventually(lambda: api.app[EVENTS].subscriber_count == 2, what="the subscriptions")
        assert api.app[EVENTS].delivery_count == 2 * multiplexed
        await graphql(api, 'mutation { touch(userId: "ann") { online } }')
        ann = await next_event(socket)
        # Sealed once for the event (a seal of the same position twice differs).
        assert (await next_event(other))["cursor"] == ann["cursor"]
        await graphql(api, 'mutation { touch(userId: "bob") { online } }')
        await graphql(api, 'mutation { kick(userId: "ann") { online } }')
        bob, kicked = await next_event(socket), await next_event(socket)
    assert (ann["kind"], ann["version"]) == ("ONLINE", 1)
    page = await changes(api, after=ann["cursor"])
    assert sorted(summary(n) for n in page["nodes"]) == [("KICKED", "ann", 2), ("ONLINE", "bob", 1)]
    # Nothing after the last event; a change's cursor in `changes` is the live event's.
    assert (await changes(api, after=kicked["cursor"]))["nodes"] == []
    after_bob = await changes(api, after=bob["cursor"], kinds=["KICKED"])
    assert [summary(n) for n in after_bob["nodes"]] == [("KICKED", "ann", 2)]
    node_cursors = await graphql(
        api,
        "query($a: String) { changes(after: $a) { nodes { ... on PresenceEvent { cursor } } } }",
        a=ann["cursor"],
    )
    last = node_cursors["data"]["changes"]["nodes"][-1]["cursor"]
    assert (await changes(api, after=last))["nodes"] == []


@pytest.mark.parametrize("multiplexed", [True, False], indirect=True)
async def test_a_place_events_cursor_and_its_opening_members_cursor(
    api: Client, store_of_api: PresenceStore, multiplexed: bool
) -> None:
    await store_of_api.renew_leases()
    await store_of_api.open_place_session("room", "ann", "tab")
    async with graphql_socket(api) as socket:
        await subscribe(socket, PLACE)
        opening = await next_event(socket)
        await store_of_api.open_place_session("room", "bob", "tab")
        bob = await next_event(socket)
        await store_of_api.open_place_session("room", "cy", "tab")
        cy = await next_event(socket)
    assert (opening["userId"], opening["kind"], bob["userId"], cy["userId"]) == (
        "ann",
        "JOINED",
        "bob",
        "cy",
    )
    # The opening members' cursor is the read's position: nothing after the read is lost.
    page = await changes(api, after=opening["cursor"], places=["room"])
    assert [joined(n) for n in page["nodes"]] == [("bob", 2), ("cy", 3)]
    page = await changes(api, after=bob["cursor"], places=["room"])
    assert [joined(n) for n in page["nodes"]] == [("cy", 3)]
    assert (await changes(api, after=cy["cursor"], places=["room"]))["nodes"] == []


def joined(node: dict[str, Any]) -> tuple[str, int]:
    assert node["placeKind"] == "JOINED", node
    return node["userId"], node["placeVersion"]


async def test_a_page_costs_a_token_per_100_changes_it_may_hold(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: AnyRedis
) -> None:
    """A page's work grows with `first`, as touchMany's with its ids: fifteen aliases of the
    largest page are not one token. A refused page costs its first token only. A bucket of
    11 at once."""
    settings = rated(
        11,
        deployment.redis_url,
        redis_cluster_nodes=deployment.redis_cluster_nodes,
        shards=deployment.shards,
    )
    api = await aiohttp_client(create_app(settings))
    refused = await as_user(api, BACKEND_TOKEN, CHANGES, first=1001)
    assert error_codes(refused) == ["BAD_USER_INPUT"]
    page = await as_user(api, BACKEND_TOKEN, CHANGES, first=1000)  # ten tokens
    assert page["data"]["changes"]["hasMore"] is False
    spent = await as_user(api, BACKEND_TOKEN, CHANGES, first=1)
    assert error_codes(spent) == ["RATE_LIMITED"]
