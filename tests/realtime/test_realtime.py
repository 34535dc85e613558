"""Subscriptions over WebSocket (graphql-transport-ws), as a frontend uses them: through the
`gql` client library, against the whole service on a real port and a real Redis."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import signal
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from gql.transport.exceptions import TransportQueryError
from strawberry.subscriptions.protocols.graphql_transport_ws.handlers import (
    BaseGraphQLTransportWSHandler,
)

from gql_presence.app import close_sockets, create_app
from gql_presence.graphql import operation as operation_module
from gql_presence.http.app_keys import EVENTS
from gql_presence.http.view import PresenceView
from gql_presence.policy.limits import MAX_SOCKET_MESSAGE_BYTES, MAX_SUBSCRIPTIONS_PER_SOCKET
from gql_presence.running.redis_server import RedisServer, free_port
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.days import to_ms
from tests.conftest import (
    CLUSTER_PASSWORD,
    EVERY_EVENTS_DEPLOYMENT,
    TEST_SETTINGS,
    ClientFactory,
    graphql,
)
from tests.helpers import (
    BACKEND_TOKEN,
    FIELDS,
    SECURED,
    SOON_S,
    Subscriber,
    counted_calls,
    eventually,
    feeds_above,
    flood_until_dropped,
    graphql_socket,
    ids,
    over_socket,
    pile_up_events,
    released,
    run_service,
    stalled_subscriber,
    stop,
    subscribed,
    subscription,
    subscriptions_begun,
    user_token,
    wait_until_serving,
    ws_url,
)
from tests.redis_cluster import LocalCluster

Service = TestClient[Any, Any]
BACKEND = f"Bearer {BACKEND_TOKEN}"


async def start_service(aiohttp_client: ClientFactory, **changes: Any) -> Service:
    return await aiohttp_client(create_app(dataclasses.replace(TEST_SETTINGS, **changes)))


@pytest.fixture
async def service(aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any) -> Service:
    """The service on the deployment: one Redis unless a test asks for EVERY_EVENTS_DEPLOYMENT."""
    return await aiohttp_client(create_app(deployment))


def without_at(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k != "at"}


@pytest.mark.slow
@EVERY_EVENTS_DEPLOYMENT
async def test_online_kicked_and_offline_arrive_in_order_with_their_fields(
    service: Service,
) -> None:
    document = subscription(f"userIds: {ids('alice')}")
    async with subscribed(ws_url(service), document, feeds_above(service, 0)) as alice:
        before = datetime.now(UTC)
        await graphql(service, 'mutation { touch(userId: "alice", sessionId: "phone") { online } }')
        await graphql(
            service, 'mutation { touch(userId: "alice", sessionId: "laptop") { online } }'
        )
        await graphql(service, 'mutation { touch(userId: "bob") { online } }')
        online = await alice.next()
        assert without_at(online) == {
            "userId": "alice",
            "kind": "ONLINE",
            "sessionId": None,
            "online": True,
        }
        at = datetime.fromisoformat(online["at"])
        assert before - timedelta(seconds=1) <= at <= datetime.now(UTC) + timedelta(seconds=1)

        await graphql(service, 'mutation { kick(userId: "alice", sessionId: "phone") { online } }')
        assert without_at(await alice.next()) == {
            "userId": "alice",
            "kind": "KICKED",
            "sessionId": "phone",
            "online": True,
        }
        await graphql(service, 'mutation { kick(userId: "alice") { online } }')
        assert without_at(await alice.next()) == {
            "userId": "alice",
            "kind": "KICKED",
            "sessionId": None,
            "online": False,
        }

        # A session backfilled to 57 s ago expires 3 s from now (the window is 60 s), time
        # enough for the touch to reach the store on a busy machine; the sweep announces it
        # within 2 s of that moment.
        touched_at = datetime.now(UTC) - timedelta(seconds=57)
        body = await graphql(
            service,
            'mutation($at: DateTime) { touch(userId: "alice", sessionId: "tv", at: $at) { online } }',
            at=touched_at.isoformat(),
        )
        assert body == {"data": {"touch": {"online": True}}}
        assert (await alice.next(within_s=5))["kind"] == "ONLINE"
        offline = await alice.next(within_s=8)
        received = datetime.now(UTC)
        assert without_at(offline) == {
            "userId": "alice",
            "kind": "OFFLINE",
            "sessionId": None,
            "online": False,
        }
        expired_at = datetime.fromisoformat(offline["at"])
        assert to_ms(expired_at) == to_ms(touched_at) + 60_000
        assert received - expired_at < timedelta(seconds=2)
        await alice.nothing_more()


async def test_a_cluster_that_requires_a_password_serves_requests_and_events(
    aiohttp_client: ClientFactory, password_cluster: LocalCluster
) -> None:
    # The requests' client and the event subscription's connection both authenticate.
    service = await start_service(
        aiohttp_client,
        redis_cluster_nodes=password_cluster.nodes,
        redis_cluster_password=CLUSTER_PASSWORD,
        shards=3,
    )
    users = ["u0", "u2", "u7"]  # one in each of the three shards
    document = subscription(f"userIds: {ids(*users)}")
    async with subscribed(ws_url(service), document, feeds_above(service, 0)) as subscriber:
        body = await graphql(
            service, "mutation($ids: [ID!]!) { touchMany(userIds: $ids) }", ids=users
        )
        assert body == {"data": {"touchMany": 3}}
        received = {(await subscriber.next())["userId"] for _ in users}
        assert received == set(users)
    readiness = await service.get("/readyz")
    assert readiness.status == 200, await readiness.text()


@EVERY_EVENTS_DEPLOYMENT
async def test_a_process_receives_the_events_of_the_users_followed_there_only(
    service: Service, store_of_api: PresenceStore
) -> None:
    hub = service.app[EVENTS]
    followed = [f"quiet{i}" for i in range(10)]
    document = subscription(f"userIds: {ids(*followed)}")
    async with subscribed(ws_url(service), document, feeds_above(service, 0)) as subscriber:
        assert all(map(hub.follows, followed))
        await store_of_api.touch_many([f"busy{i}" for i in range(300)])
        await store_of_api.kick("busy1")
        await store_of_api.touch("quiet9")
        assert (await subscriber.next())["userId"] == "quiet9"
        assert (hub.messages_received, hub.events_decoded) == (1, 1)


@EVERY_EVENTS_DEPLOYMENT
async def test_friends_of_follows_the_friend_set_as_it_changes(service: Service) -> None:
    # With three shards, "me" lives in shard 0, "former" in shard 1 and "newer" in shard 2.
    await graphql(service, 'mutation { addFriends(userId: "me", friendIds: ["former"]) }')
    hub = service.app[EVENTS]
    async with subscribed(
        ws_url(service), subscription('friendsOf: "me"'), lambda: hub.follows("former")
    ) as mine:
        await graphql(
            service, 'mutation { touch(userId: "former") { online } touchMany(userIds: ["newer"]) }'
        )
        assert without_at(await mine.next())["userId"] == "former"
        await mine.nothing_more()

        await graphql(
            service,
            'mutation { addFriends(userId: "me", friendIds: ["newer"]) removeFriends(userId: "me", friendIds: ["former"]) }',
        )
        # The friend set is read again when it changes.
        await eventually(
            lambda: hub.follows("newer") and not hub.follows("former"), 2, "the new friend set"
        )
        await graphql(
            service,
            'mutation { a: kick(userId: "former") { online } b: kick(userId: "newer") { online } }',
        )
        assert without_at(await mine.next()) == {
            "userId": "newer",
            "kind": "KICKED",
            "sessionId": None,
            "online": False,
        }
        await mine.nothing_more()


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ("", "exactly one"),
        (f'userIds: {ids("a")}, friendsOf: "b"', "exactly one"),
        ('userIds: [""]', "1 to 128"),
        ('friendsOf: ""', "1 to 128"),
    ],
)
async def test_bad_arguments_are_refused(service: Service, arguments: str, says: str) -> None:
    document = (
        subscription(arguments)
        if arguments
        else f"subscription {{ presenceChanged {{ {FIELDS} }} }}"
    )
    await refused_as_bad_input(Subscriber(ws_url(service), document), says)


async def test_more_than_10_000_users_are_refused(service: Service) -> None:
    document = f"subscription($ids: [ID!]) {{ presenceChanged(userIds: $ids) {{ {FIELDS} }} }}"
    users = [str(i) for i in range(10_001)]
    await refused_as_bad_input(Subscriber(ws_url(service), document, {"ids": users}), "10,000")


async def refused_as_bad_input(subscriber: Subscriber, says: str) -> None:
    await asyncio.wait_for(subscriber.run(), 5)
    assert isinstance(subscriber.ended, TransportQueryError)
    errors = subscriber.ended.errors or []
    assert [e["extensions"]["code"] for e in errors] == ["BAD_USER_INPUT"]
    assert says in errors[0]["message"]


async def test_a_subscriber_that_stops_reading_is_dropped_without_stalling_others(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    service = await start_service(
        aiohttp_client, redis_url=redis_server.url, subscriber_buffer=100, revoke_ms=0
    )
    users = [f"u{i}" for i in range(10_000)]
    async with aiohttp.ClientSession() as session:
        stalled = await session.ws_connect(ws_url(service), protocols=["graphql-transport-ws"])
        await stalled.send_json({"type": "connection_init"})
        assert (await stalled.receive_json())["type"] == "connection_ack"
        await stalled.send_json(
            {
                "id": "1",
                "type": "subscribe",
                "payload": {
                    "query": "subscription($ids: [ID!]) { presenceChanged(userIds: $ids) { userId } }",
                    "variables": {"ids": users},
                },
            }
        )
        # From here on the stalled client reads nothing, while 30,000 events are published.
        async with subscribed(
            ws_url(service), subscription(f"userIds: {ids('u1', 'u2')}"), feeds_above(service, 1)
        ) as reader:
            for _ in range(3):
                await graphql(
                    service, "mutation($ids: [ID!]!) { touchMany(userIds: $ids) }", ids=users
                )
                for user in ("u1", "u2"):
                    await graphql(service, f'mutation {{ kick(userId: "{user}") {{ online }} }}')
                for _ in range(2):
                    assert (await reader.next())["kind"] == "ONLINE"
                for _ in range(2):
                    assert (await reader.next())["kind"] == "KICKED"
        # The stalled subscriber was dropped: its socket ends with a close frame that says why.
        close = None
        deadline = time.monotonic() + 30
        while close is None and time.monotonic() < deadline:
            message = await stalled.receive(timeout=30)
            if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                close = message
        assert close is not None
        assert close.data == aiohttp.WSCloseCode.POLICY_VIOLATION
        assert "too slow" in str(close.extra)
        await stalled.close()


async def test_a_dropped_subscriber_that_reads_nothing_is_released_within_a_second_or_two(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    service = await start_service(aiohttp_client, redis_url=redis_server.url, subscriber_buffer=100)
    async with stalled_subscriber(service) as connection:
        await flood_until_dropped(service)
        # What was queued for it is discarded and its connection ends, although it never reads.
        await released(service, connection)


async def test_shutdown_closes_a_socket_that_reads_nothing_without_waiting_for_it(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    service = await start_service(
        aiohttp_client, redis_url=redis_server.url, subscriber_buffer=100_000
    )
    async with stalled_subscriber(service) as connection:
        await pile_up_events(service, connection)
        started = time.monotonic()
        await close_sockets(service.app)
        assert time.monotonic() - started < SOON_S  # bounded, not waiting for the client
        await released(service, connection)
        await eventually(lambda: service.app[EVENTS].subscriber_count == 0, what="the feed to end")


async def raw_subscription(session: aiohttp.ClientSession, url: str, document: str) -> Any:
    socket = await session.ws_connect(url, protocols=["graphql-transport-ws"])
    await socket.send_json({"type": "connection_init"})
    assert (await socket.receive_json())["type"] == "connection_ack"
    await socket.send_json({"id": "1", "type": "subscribe", "payload": {"query": document}})
    return socket


async def test_lost_redis_closes_subscriptions_so_clients_subscribe_again(
    aiohttp_client: ClientFactory, own_redis_server: RedisServer
) -> None:
    service = await start_service(aiohttp_client, redis_url=own_redis_server.url)
    hub = service.app[EVENTS]
    document = subscription(f"userIds: {ids('alice')}")
    async with aiohttp.ClientSession() as session:
        socket = await raw_subscription(session, ws_url(service), document)
        await eventually(lambda: hub.subscriber_count == 1)
        own_redis_server.stop()
        closed = await socket.receive(timeout=10)
        assert (closed.type, closed.data) == (
            aiohttp.WSMsgType.CLOSE,
            aiohttp.WSCloseCode.SERVICE_RESTART,
        )
        assert "event stream interrupted" in str(closed.extra)

    # While the process has no event stream, a subscription is refused rather than left deaf.
    refused = Subscriber(ws_url(service), document)
    await asyncio.wait_for(refused.run(), 10)
    assert isinstance(refused.ended, TransportQueryError)
    assert [e["extensions"]["code"] for e in refused.ended.errors or []] == ["UNAVAILABLE"]

    own_redis_server.restart()
    await eventually(lambda: hub.subscribed, within_s=10)
    async with subscribed(ws_url(service), document, feeds_above(service, 0)) as after:
        await graphql(service, 'mutation { touch(userId: "alice") { online } }')
        assert (await after.next(within_s=5))["kind"] == "ONLINE"


@pytest.mark.slow
def test_events_cross_api_processes_and_expiry_is_announced_once(
    tmp_path: Any, redis_server: RedisServer
) -> None:
    asyncio.run(_two_processes(tmp_path, redis_server))


async def _two_processes(tmp_path: Any, redis_server: RedisServer) -> None:
    ports = [free_port(), free_port()]

    async def both_begun() -> bool:
        counts = [await asyncio.to_thread(subscriptions_begun, port) for port in ports]
        return min(counts) >= 1

    env = {"REDIS_URL": redis_server.url, "PRESENCE_WINDOW_SECONDS": "1"}
    services = [run_service(tmp_path / f"p{i}", port, **env) for i, port in enumerate(ports)]
    try:
        for service, port in zip(services, ports, strict=True):
            await asyncio.to_thread(wait_until_serving, service, port)
        urls = [f"ws://127.0.0.1:{port}/graphql" for port in ports]
        document = subscription(f"userIds: {ids('cross')}")
        async with subscribed(urls[0], document) as first, subscribed(urls[1], document) as second:
            await eventually(both_begun, what="both subscriptions to begin")
            async with aiohttp.ClientSession() as http:
                touch = {"query": 'mutation { touch(userId: "cross") { online } }'}
                async with http.post(
                    f"http://127.0.0.1:{ports[1]}/graphql", json=touch
                ) as response:
                    assert (await response.json())["data"]["touch"]["online"] is True
            for subscriber in (first, second):
                assert (await subscriber.next())["kind"] == "ONLINE"
                # Both processes sweep every second; the 1 s window expires once, announced once.
                assert (await subscriber.next(within_s=4))["kind"] == "OFFLINE"
            await first.nothing_more(1.5)
            await second.nothing_more(0)
    finally:
        for service in services:
            stop(service)


def test_settings_give_the_subscriber_buffer() -> None:
    assert Settings.from_env({"PRESENCE_SUBSCRIBER_BUFFER": "250"}).subscriber_buffer == 250


@pytest.mark.slow
def test_shutdown_closes_subscriptions_and_ends_promptly(
    tmp_path: Any, redis_server: RedisServer
) -> None:
    asyncio.run(_shutdown(tmp_path, redis_server))


async def _shutdown(tmp_path: Any, redis_server: RedisServer) -> None:
    port = free_port()
    process = run_service(tmp_path, port, REDIS_URL=redis_server.url)
    await asyncio.to_thread(wait_until_serving, process, port)
    async with aiohttp.ClientSession() as session:
        socket = await session.ws_connect(
            f"ws://127.0.0.1:{port}/graphql", protocols=["graphql-transport-ws"]
        )
        await socket.send_json({"type": "connection_init"})
        assert (await socket.receive_json())["type"] == "connection_ack"
        await socket.send_json(
            {
                "id": "1",
                "type": "subscribe",
                "payload": {"query": subscription(f"userIds: {ids('a')}")},
            }
        )
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        message = await socket.receive(timeout=10)
        assert message.type == aiohttp.WSMsgType.CLOSE
        assert message.data == aiohttp.WSCloseCode.GOING_AWAY
        await asyncio.to_thread(process.communicate, timeout=10)
        assert time.monotonic() - started < 10
        assert process.returncode == 0


# --- multiplexed delivery ----------------------------------------------------------------------

SHARED_DOCUMENT = """
subscription Watch($ids: [ID!], $withSession: Boolean!, $noKind: Boolean!) {
  changed: presenceChanged(userIds: $ids) {
    __typename
    who: userId
    ...Parts
    sessionId @include(if: $withSession)
    kind @skip(if: $noKind)
  }
}
fragment Parts on PresenceEvent { at online userId }
"""


def each_on_its_own(service: Service) -> None:
    """Makes the service run every subscription as Strawberry does, an execution per event
    and subscriber, by giving its view Strawberry's own graphql-transport-ws handler."""
    [view] = [
        route.handler
        for route in service.app.router.routes()
        if isinstance(route.handler, PresenceView)
    ]
    view.graphql_transport_ws_handler_class = BaseGraphQLTransportWSHandler


async def raw_texts(socket: aiohttp.ClientWebSocketResponse, count: int) -> list[str]:
    return [(await socket.receive(timeout=3)).data for _ in range(count)]


async def test_a_multiplexed_subscriber_receives_what_one_executed_on_its_own_does(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    shared = await start_service(aiohttp_client, redis_url=redis_server.url)
    alone = await start_service(aiohttp_client, redis_url=redis_server.url)
    each_on_its_own(alone)
    variants = [
        {"ids": ["alice"], "withSession": True, "noKind": False},
        {"ids": ["alice"], "withSession": False, "noKind": True},
        # Whom it follows differs from the first's, how an event is shown does not: the
        # payloads the first's are rendered for it too.
        {"ids": ["bob", "alice"], "withSession": True, "noKind": False},
        # Given many ids: an executor of its own, the same messages.
        {"ids": [f"u{i}" for i in range(300)] + ["alice"], "withSession": True, "noKind": False},
    ]
    async with aiohttp.ClientSession() as session:
        sockets = []
        for service in (shared, alone):
            for variables in variants:
                socket = await session.ws_connect(
                    ws_url(service), protocols=["graphql-transport-ws"]
                )
                await socket.send_json({"type": "connection_init"})
                assert (await socket.receive_json())["type"] == "connection_ack"
                payload = {"query": SHARED_DOCUMENT, "variables": variables}
                await socket.send_json({"id": "op-1", "type": "subscribe", "payload": payload})
                sockets.append(socket)
        await eventually(lambda: shared.app[EVENTS].delivery_count == 4, what="multiplexed")
        await eventually(lambda: alone.app[EVENTS].subscriber_count == 4, what="subscriptions")
        assert alone.app[EVENTS].delivery_count == 0
        await graphql(shared, 'mutation { touch(userId: "alice", sessionId: "phone") { online } }')
        await graphql(shared, 'mutation { kick(userId: "alice", sessionId: "phone") { online } }')
        received = [await raw_texts(socket, 2) for socket in sockets]
    # Byte for byte the same messages, and each variant's own.
    assert received[:4] == received[4:]
    assert received[2] == received[3] == received[0]
    first = json.loads(received[0][0])
    assert first["id"] == "op-1"
    changed = first["payload"]["data"]["changed"]
    assert changed["__typename"] == "PresenceEvent"
    assert (changed["who"], changed["userId"], changed["kind"]) == ("alice", "alice", "ONLINE")
    assert "sessionId" in changed
    assert "kind" not in json.loads(received[1][0])["payload"]["data"]["changed"]
    assert "sessionId" not in json.loads(received[1][0])["payload"]["data"]["changed"]


async def test_compressed_sockets_take_multiplexed_events_between_other_messages(
    service: Service,
) -> None:
    async with aiohttp.ClientSession() as session:
        socket = await session.ws_connect(
            ws_url(service), protocols=["graphql-transport-ws"], compress=15
        )
        assert socket.compress == 15  # permessage-deflate was negotiated
        await socket.send_json({"type": "connection_init"})
        assert (await socket.receive_json())["type"] == "connection_ack"
        document = subscription(f"userIds: {ids('alice')}")
        await socket.send_json({"id": "s", "type": "subscribe", "payload": {"query": document}})
        await eventually(lambda: service.app[EVENTS].delivery_count == 1, what="subscribed")
        # A large answer (compressed in a thread, over 16 KiB) between events written at once.
        introspection = (
            "{ __schema { types { name description"
            " fields { name description args { name description type { name } } } } } }"
        )
        for i in range(3):
            query = {"query": introspection}
            await socket.send_json({"id": f"q{i}", "type": "subscribe", "payload": query})
            alices = f'userId: "alice", sessionId: "s{i}"'
            await graphql(service, f"mutation {{ touch({alices}) {{ online }} }}")
            await graphql(service, f"mutation {{ kick({alices}) {{ online }} }}")
        messages: list[dict[str, Any]] = []
        while sum(m["type"] == "complete" for m in messages) < 3 or len(messages) < 12:
            messages.append(await socket.receive_json(timeout=3))
        events = [m for m in messages if m["id"] == "s"]
        assert [e["payload"]["data"]["presenceChanged"]["kind"] for e in events] == [
            "ONLINE",
            "KICKED",
        ] * 3
        answers = [m for m in messages if m["type"] == "next" and m["id"] != "s"]
        assert len(answers) == 3
        assert all(len(json.dumps(a)) > 16_384 for a in answers)
        await socket.close()


async def test_a_completed_multiplexed_subscription_ends_and_its_id_may_be_used_again(
    service: Service,
) -> None:
    hub = service.app[EVENTS]
    async with graphql_socket(service) as socket:
        alice = {"query": subscription(f"userIds: {ids('alice')}")}
        await socket.send_json({"id": "a", "type": "subscribe", "payload": alice})
        await eventually(lambda: hub.delivery_count == 1, what="the subscription")
        await socket.send_json({"id": "a", "type": "complete"})
        await eventually(lambda: hub.subscriber_count == 0, what="the subscription's end")
        await graphql(service, 'mutation { touch(userId: "alice", sessionId: "one") { online } }')

        bob = {"query": subscription(f"userIds: {ids('bob')}")}
        await socket.send_json({"id": "a", "type": "subscribe", "payload": bob})
        await eventually(lambda: hub.delivery_count == 1, what="the subscription again")
        await graphql(service, 'mutation { touch(userId: "bob") { online } }')
        message = await socket.receive_json(timeout=3)
        assert message["id"] == "a"
        assert message["payload"]["data"]["presenceChanged"]["userId"] == "bob"
    await eventually(lambda: hub.subscriber_count == 0, what="the socket's subscriptions to end")


async def test_multiplexed_subscriptions_count_towards_the_limit_of_a_socket(
    service: Service,
) -> None:
    hub = service.app[EVENTS]
    async with graphql_socket(service) as socket:
        alice = {"query": subscription(f"userIds: {ids('alice')}")}
        for i in range(MAX_SUBSCRIPTIONS_PER_SOCKET):
            await socket.send_json({"id": str(i), "type": "subscribe", "payload": alice})
        await eventually(lambda: hub.delivery_count == MAX_SUBSCRIPTIONS_PER_SOCKET)
        await socket.send_json({"id": "over", "type": "subscribe", "payload": alice})
        refused = await socket.receive_json(timeout=3)
        assert (refused["id"], refused["type"]) == ("over", "error")
        [error] = refused["payload"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert f"{MAX_SUBSCRIPTIONS_PER_SOCKET} operations" in error["message"]


async def test_a_repeated_subscription_is_decided_from_the_one_made_before(
    aiohttp_client: ClientFactory,
    redis_server: RedisServer,
    http_redis: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A subscribe of a document, operation name and variables subscribed before (a page
    reloaded, many clients of one dashboard) is decided from the first one's decision: the
    document's executor is built once, whoever subscribes, and each gets its events."""
    service = await start_service(aiohttp_client, redis_url=redis_server.url)
    built = counted_calls(monkeypatch, operation_module, "subscription_executor")
    payload = {
        "query": SHARED_DOCUMENT,
        "variables": {"ids": ["alice"], "withSession": True, "noKind": False},
    }
    hub = service.app[EVENTS]
    async with aiohttp.ClientSession() as session:
        sockets = []
        for count in (1, 2, 3):
            socket = await session.ws_connect(ws_url(service), protocols=["graphql-transport-ws"])
            await socket.send_json({"type": "connection_init"})
            assert (await socket.receive_json())["type"] == "connection_ack"
            await socket.send_json({"id": "op", "type": "subscribe", "payload": payload})
            await eventually(lambda c=count: hub.delivery_count == c, what="subscribed")
            sockets.append(socket)
        await graphql(service, 'mutation { touch(userId: "alice", sessionId: "phone") { online } }')
        received = [await raw_texts(socket, 1) for socket in sockets]
    assert len(built) == 1
    assert received[0] == received[1] == received[2]


async def test_a_document_already_multiplexed_is_still_authorized_for_each_caller(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    """A subscribe whose document, operation name and variables a multiplexed subscription
    already runs skips the document's execution, not the caller's checks: its refusal is the
    one a first subscriber gets."""
    secured = dataclasses.replace(SECURED, redis_url=redis_server.url)
    shared = await start_service(aiohttp_client, **dataclasses.asdict(secured))
    fresh = await start_service(aiohttp_client, **dataclasses.asdict(secured))
    friends = {"query": subscription('friendsOf: "alice"')}
    everyone = {"query": subscription("all: true")}

    async def refusal(service: Service, payload: dict[str, Any]) -> list[Any]:
        async with graphql_socket(service, f"Bearer {user_token('bob')}") as bob:
            await bob.send_json({"id": "b", "type": "subscribe", "payload": payload})
            messages = [await bob.receive_json(timeout=3)]
            while messages[-1]["type"] not in {"complete", "error"}:
                messages.append(await bob.receive_json(timeout=3))
            return messages

    hub = shared.app[EVENTS]
    async with (
        graphql_socket(shared, f"Bearer {user_token('alice')}") as alice,
        graphql_socket(shared, BACKEND) as backend,
    ):
        await alice.send_json({"id": "a", "type": "subscribe", "payload": friends})
        await backend.send_json({"id": "a", "type": "subscribe", "payload": everyone})
        await eventually(lambda: hub.delivery_count == 2, what="the first subscriptions")
        for payload in (friends, everyone):
            refused = await refusal(shared, payload)
            assert refused == await refusal(fresh, payload)
            assert refused[0]["payload"]["errors"][0]["extensions"]["code"] == "FORBIDDEN"
        assert hub.delivery_count == 2

        # A caller who may subscribe joins the same rendering, and gets its own id's events.
        async with graphql_socket(shared, BACKEND) as second:
            await second.send_json({"id": "z", "type": "subscribe", "payload": everyone})
            await eventually(lambda: hub.delivery_count == 3, what="the second subscription")
            touch = {"query": 'mutation { touch(userId: "carol") { online } }'}
            await shared.post("/graphql", json=touch, headers={"Authorization": BACKEND})
            first, again = await raw_texts(backend, 1), await raw_texts(second, 1)
        assert again[0] == first[0].replace('"id":"a"', '"id":"z"', 1)


async def test_a_document_already_multiplexed_is_still_admitted_for_each_caller(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    settings = dataclasses.replace(
        SECURED, redis_url=redis_server.url, backend_rate=0.5, backend_burst=2
    )
    service = await start_service(aiohttp_client, **dataclasses.asdict(settings))
    everyone = {"query": subscription("all: true")}
    async with graphql_socket(service, BACKEND) as socket:
        for operation_id in ("a", "b"):
            await socket.send_json({"id": operation_id, "type": "subscribe", "payload": everyone})
        await eventually(lambda: service.app[EVENTS].delivery_count == 2, what="subscriptions")
        await socket.send_json({"id": "c", "type": "subscribe", "payload": everyone})
        refused = await socket.receive_json(timeout=3)
        assert (refused["id"], refused["type"]) == ("c", "error")
        assert refused["payload"][0]["extensions"]["code"] == "RATE_LIMITED"


async def test_a_socket_without_connection_init_is_closed_when_the_wait_is_over(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    service = await start_service(
        aiohttp_client, redis_url=redis_server.url, connection_init_wait_ms=300
    )
    silent = await service.ws_connect("/graphql", protocols=["graphql-transport-ws"])
    async with graphql_socket(service) as initialised:
        closed = await silent.receive(timeout=3)
        assert (closed.type, closed.data, closed.extra) == (
            aiohttp.WSMsgType.CLOSE,
            4408,
            "Connection initialisation timeout",
        )
        # One that said connection_init in time stays open past the wait.
        await asyncio.sleep(0.4)
        await initialised.send_json({"type": "ping"})
        assert (await initialised.receive_json(timeout=3))["type"] == "pong"
    # A late connection_init finds the socket closed.
    assert silent.closed


async def test_a_socket_that_neither_initialises_nor_answers_pings_is_told_why_it_is_closed(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    """Pings go out every third of the connection TTL (here 0.2 s), each to be answered within
    half of that, from connection_ack on: one that never initialised misses none, and hears
    4408 and why when its wait (here 0.5 s) is over."""
    service = await start_service(
        aiohttp_client,
        redis_url=redis_server.url,
        connection_ttl_ms=600,
        connection_init_wait_ms=500,
    )
    silent = await service.ws_connect(
        "/graphql", protocols=["graphql-transport-ws"], autoping=False
    )
    closed = await silent.receive(timeout=3)
    while closed.type is aiohttp.WSMsgType.PING:  # not answered
        closed = await silent.receive(timeout=3)
    assert (closed.type, closed.data, closed.extra) == (
        aiohttp.WSMsgType.CLOSE,
        4408,
        "Connection initialisation timeout",
    )
    await silent.close()


async def test_an_initialised_socket_that_answers_no_ping_is_dropped(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    service = await start_service(aiohttp_client, redis_url=redis_server.url, connection_ttl_ms=600)
    socket = await service.ws_connect(
        "/graphql", protocols=["graphql-transport-ws"], autoping=False
    )
    await socket.send_json({"type": "connection_init", "payload": {}})
    assert (await socket.receive_json(timeout=3))["type"] == "connection_ack"
    assert (await socket.receive(timeout=SOON_S)).type is aiohttp.WSMsgType.PING  # not answered
    # Nothing but the unanswered ping would end the socket.
    ended = await socket.receive(timeout=SOON_S)
    assert ended.type in {aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED}
    await socket.close()


async def test_an_initialised_socket_that_answers_pings_stays_open(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    """Pings every 0.2 s, each to be answered within 0.1 s: a client that answers them (as
    every WebSocket client does while it reads) keeps its socket for as long as it likes."""
    service = await start_service(aiohttp_client, redis_url=redis_server.url, connection_ttl_ms=600)
    socket = await service.ws_connect(
        "/graphql", protocols=["graphql-transport-ws"], autoping=False
    )
    await socket.send_json({"type": "connection_init", "payload": {}})
    assert (await socket.receive_json(timeout=3))["type"] == "connection_ack"
    # Each ping after the first comes after the one before's deadline: the socket outlived it.
    for _ in range(4):
        ping = await socket.receive(timeout=SOON_S)
        assert ping.type is aiohttp.WSMsgType.PING, ping
        await socket.pong(ping.data)
    await socket.send_json({"type": "ping"})
    while (answer := await socket.receive(timeout=SOON_S)).type is aiohttp.WSMsgType.PING:
        await socket.pong(answer.data)
    assert json.loads(answer.data)["type"] == "pong"
    await socket.close()


SUBSCRIBE = {"query": 'subscription { presenceChanged(userIds: ["a"]) { userId } }'}


@pytest.mark.parametrize(
    ("messages", "code", "says"),
    [
        ([{"type": "subscribe", "id": "1", "payload": SUBSCRIBE}], 4401, "connection_init"),
        (
            [{"type": "connection_init", "payload": {}}, {"type": "connection_init"}],
            4429,
            "Too many initialisation requests",
        ),
        ([{"type": "connection_init", "payload": [1]}], 4400, "JSON object"),
        (
            [
                {"type": "connection_init", "payload": {}},
                # The longest id allowed, longer than a close reason holds.
                {"type": "subscribe", "id": "y" * 128, "payload": SUBSCRIBE},
                {"type": "subscribe", "id": "y" * 128, "payload": SUBSCRIBE},
            ],
            4409,
            "already",
        ),
        ([{"type": "z" * 500}], 4400, "Unknown message type: zzz"),
        (["not JSON"], 4400, "valid JSON"),
        ([b"\x00"], 4400, "must be text"),
        ([(b"\xff\xfe", aiohttp.WSMsgType.TEXT)], 1007, "UTF-8"),
    ],
    ids=[
        "subscribe first",
        "init twice",
        "init payload",
        "id in use",
        "unknown type",
        "not JSON",
        "binary",
        "not UTF-8",
    ],
)
async def test_every_close_a_client_can_cause_says_its_code_and_why(
    service: Service, messages: list[object], code: int, says: str
) -> None:
    async with service.ws_connect("/graphql", protocols=["graphql-transport-ws"]) as socket:
        for message in messages:
            if isinstance(message, tuple):
                await socket.send_frame(*message)
            elif isinstance(message, bytes):
                await socket.send_bytes(message)
            elif isinstance(message, str):
                await socket.send_str(message)
            else:
                await socket.send_json(message)
        received = await socket.receive(timeout=3)
        while received.type is aiohttp.WSMsgType.TEXT:  # connection_ack, a subscription's
            received = await socket.receive(timeout=3)
    assert (received.type, received.data) == (aiohttp.WSMsgType.CLOSE, code), received
    reason = str(received.extra)
    assert says in reason
    # A close frame's reason holds 123 bytes: a longer one is no close at all.
    assert len(reason.encode()) <= 123


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        ({"query": "query (" + "a" * 300}, "Syntax Error: Expected '$', found Name 'aaa"),
        ({"query": "{ " + "b" * 300 + " }"}, "Cannot query field 'bbb"),
        ({"query": "query A { __typename }", "operationName": "B"}, "B"),
    ],
    ids=["syntax", "validation", "operation name"],
)
async def test_a_document_a_socket_cannot_run_is_refused_with_a_code_and_the_socket_stays_open(
    service: Service, caplog: pytest.LogCaptureFixture, payload: dict[str, Any], says: str
) -> None:
    async with graphql_socket(service) as socket:
        await socket.send_json({"id": "1", "type": "subscribe", "payload": payload})
        refused = await socket.receive_json(timeout=3)
        assert (refused["id"], refused["type"]) == ("1", "error"), refused
        [error] = refused["payload"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
        assert says in error["message"]
        await socket.send_json({"type": "ping"})
        assert (await socket.receive_json(timeout=3))["type"] == "pong"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_a_message_over_the_limit_closes_the_socket_saying_the_limit(
    service: Service,
) -> None:
    """aiohttp refuses the message on its frame's header, before its bytes arrive: here a
    header alone, since a client still sending when the socket closes may lose the close to
    the connection's reset."""
    reader, writer = await asyncio.open_connection(service.host, service.port)
    writer.write(
        b"GET /graphql HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n"
        # A masked text frame of MAX_SOCKET_MESSAGE_BYTES (RFC 6455, 5.2), its payload unsent.
        + bytes([0x81, 0x80 | 127])
        + MAX_SOCKET_MESSAGE_BYTES.to_bytes(8, "big")
        + b"mask"
    )
    await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 3)
    opcode, size = await asyncio.wait_for(reader.readexactly(2), 3)
    close = await asyncio.wait_for(reader.readexactly(size), 3)
    writer.close()
    assert (opcode, int.from_bytes(close[:2], "big")) == (0x88, 1009)
    assert (
        close[2:].decode() == f"A message must be shorter than {MAX_SOCKET_MESSAGE_BYTES:,} bytes."
    )


async def test_a_socket_without_the_subprotocol_is_told_which_to_ask_for(service: Service) -> None:
    async with service.ws_connect("/graphql") as socket:
        closed = await socket.receive(timeout=3)
    assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, 4406)
    assert "graphql-transport-ws" in str(closed.extra)


@pytest.mark.parametrize(
    "message",
    [
        [1],
        "subscribe",
        7,
        {"id": "1", "type": "subscribe", "payload": [1]},
        {"id": "1", "type": "subscribe", "payload": {"query": 7}},
        {"id": "1", "type": "subscribe", "payload": {"query": "{ __typename }", "variables": [1]}},
        {"id": 1, "type": "subscribe", "payload": {"query": "{ __typename }"}},
        # An id comes back in every message of its operation: a long one would make each
        # event of a subscription as long.
        {"id": "y" * 129, "type": "subscribe", "payload": {"query": "{ __typename }"}},
        {"id": "é" * 65, "type": "subscribe", "payload": {"query": "{ __typename }"}},
    ],
)
async def test_a_message_of_the_wrong_shape_closes_the_socket_saying_what_is_expected(
    service: Service, caplog: pytest.LogCaptureFixture, message: object
) -> None:
    # graphql-transport-ws's answer to a message it cannot take: close with 4400 and why.
    async with graphql_socket(service) as socket:
        await socket.send_json(message)
        closed = await socket.receive(timeout=3)
    assert (closed.type, closed.data) == (aiohttp.WSMsgType.CLOSE, 4400)
    assert "must be" in str(closed.extra)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_subscribe_refused_is_answered_alike_on_either_path(
    aiohttp_client: ClientFactory,
    redis_server: RedisServer,
    http_redis: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A subscribe the pipeline decides itself (on a socket) and one Strawberry runs through
    the resolvers (while tracing, as off sockets) get the same answers to what is refused:
    a document that fails validation, variables that do not fit it (also when the document
    passed before), arguments or a caller the decision refuses."""
    secured = dataclasses.replace(SECURED, redis_url=redis_server.url)
    service = await start_service(aiohttp_client, **dataclasses.asdict(secured))
    refused: list[tuple[str, dict[str, Any] | None]] = [
        ("subscription { presenceChanged(userIds: 1) { nope } }", None),
        ("subscription($ids: [ID!]) { presenceChanged(userIds: $ids) { userId } }", {"ids": [{}]}),
        # The same document again, passed before: its variables are still checked.
        (
            "subscription($ids: [ID!]) { presenceChanged(userIds: $ids) { userId } }",
            {"ids": [None]},
        ),
        ('subscription { presenceChanged(userIds: ["a"], all: true) { userId } }', None),
        ('subscription { presenceChanged(userIds: ["carol"]) { userId } }', None),
        ("subscription { presenceChanged(all: true) { userId } }", None),
        ('subscription { presenceSession(userId: "carol", sessionId: "t") { live } }', None),
        ('subscription { placeChanged(placeId: "") { kind } }', None),
    ]

    async def answers() -> list[list[dict[str, Any]]]:
        async with graphql_socket(service, f"Bearer {user_token('bob')}") as bob:
            return [
                await over_socket(bob, document, variables, str(number))
                for number, (document, variables) in enumerate(refused)
            ]

    decided = await answers()
    # As while tracing: every subscription runs through Strawberry and the resolvers.
    [view] = [
        route.handler
        for route in service.app.router.routes()
        if isinstance(route.handler, PresenceView)
    ]
    monkeypatch.setattr(view.pipeline, "_on_socket", False)
    assert await answers() == decided
    assert all(
        "errors" in json.dumps(messages) or messages[0]["type"] == "error" for messages in decided
    )
    assert service.app[EVENTS].delivery_count == 0
