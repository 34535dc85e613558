"""Faults survived without restarting the service: a flushed script cache, a restarted Redis,
a Redis that is down for a while."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp.test_utils import TestClient
from redis.asyncio import Redis
from redis.exceptions import RedisClusterException, ResponseError

from gql_presence.app import create_app
from gql_presence.running.connection import client_for, redis_client
from gql_presence.running.redis_server import RedisServer, redis_server_binary, start_redis_server
from gql_presence.store import PresenceStore
from gql_presence.store.errors import StoreUnavailableError
from gql_presence.store.keys import Keys
from tests.conftest import TEST_SETTINGS, ClientFactory, error_codes, graphql
from tests.helpers import BACKEND_TOKEN, SECURED, eventually
from tests.redis_cluster import LocalCluster, start_redis_cluster

TOUCH = 'mutation { touch(userId: "alice", sessionId: "s") { online } }'
READ = '{ presence(userId: "alice") { online lastSeen } onlineUsers { totalCount } }'


@pytest.fixture
def persistent_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own that keeps its data in an append-only file."""
    server = start_redis_server(data_dir=tmp_path)
    yield server
    server.stop()


async def service(aiohttp_client: ClientFactory, server: RedisServer) -> TestClient[Any, Any]:
    return await aiohttp_client(
        create_app(dataclasses.replace(TEST_SETTINGS, redis_url=server.url))
    )


async def test_script_flush_is_recovered_from(api: TestClient[Any, Any], http_redis: Redis) -> None:
    assert (await graphql(api, TOUCH))["data"]["touch"]["online"] is True
    await http_redis.script_flush()
    assert (await graphql(api, TOUCH))["data"]["touch"]["online"] is True
    assert (await graphql(api, READ))["data"]["onlineUsers"]["totalCount"] == 1


async def test_redis_restart_is_recovered_from_with_nothing_lost(
    aiohttp_client: ClientFactory, persistent_server: RedisServer
) -> None:
    api = await service(aiohttp_client, persistent_server)
    await graphql(api, TOUCH)
    before = (await graphql(api, READ))["data"]
    persistent_server.restart()
    after = await graphql(api, READ)
    assert after == {"data": before}
    assert (await graphql(api, TOUCH))["data"]["touch"]["online"] is True


async def test_redis_down_fails_fast_with_unavailable_then_recovers(
    aiohttp_client: ClientFactory, persistent_server: RedisServer
) -> None:
    api = await service(aiohttp_client, persistent_server)
    await graphql(api, TOUCH)
    persistent_server.stop()
    started = time.monotonic()
    for document in (TOUCH, READ):
        body = await graphql(api, document)
        assert [e["extensions"]["code"] for e in body["errors"]] == ["UNAVAILABLE"]
        assert "try again" in body["errors"][0]["message"]
        assert "Connection" not in body["errors"][0]["message"]
    assert time.monotonic() - started < 10
    persistent_server.restart()
    assert (await graphql(api, READ))["data"]["presence"]["online"] is True


@pytest.mark.slow
async def test_a_cluster_gone_entirely_answers_unavailable(aiohttp_client: ClientFactory) -> None:
    cluster = start_redis_cluster((0, 7000, 11000), binary=redis_server_binary())
    try:
        settings = dataclasses.replace(TEST_SETTINGS, redis_cluster_nodes=cluster.nodes, shards=3)
        api = await aiohttp_client(create_app(settings))
        assert (await graphql(api, TOUCH))["data"]["touch"]["online"] is True
    finally:
        cluster.stop()
    body = await graphql(api, TOUCH)
    assert [e["extensions"]["code"] for e in body["errors"]] == ["UNAVAILABLE"]


async def test_scripts_are_loaded_at_start_up(own_redis_server: RedisServer) -> None:
    client = redis_client(own_redis_server.url)
    from gql_presence.store.scripts import ScriptName, Scripts  # noqa: PLC0415

    scripts = Scripts.register(client)
    await scripts.load(client)
    shas = [scripts.by_name[name].sha for name in ScriptName]
    assert await client.script_exists(*shas) == [True] * len(shas)
    await client.aclose()


async def test_probes_say_alive_and_ready_and_follow_redis(
    aiohttp_client: ClientFactory, persistent_server: RedisServer
) -> None:
    api = await service(aiohttp_client, persistent_server)
    assert (await api.get("/healthz")).status == 200
    ready = await api.get("/readyz")
    assert (ready.status, await ready.json()) == (200, {"status": "ready"})
    persistent_server.stop()
    assert (await api.get("/healthz")).status == 200
    not_ready = await api.get("/readyz")
    assert not_ready.status == 503
    assert (await not_ready.json())["status"] == "not ready"
    persistent_server.restart()  # an empty script cache: readiness loads the scripts again
    assert (await api.get("/readyz")).status == 200
    client = redis_client(persistent_server.url)
    from gql_presence.store.scripts import ScriptName, Scripts  # noqa: PLC0415

    shas = [Scripts.register(client).by_name[name].sha for name in ScriptName]
    assert await client.script_exists(*shas) == [True] * len(shas)
    await client.aclose()


async def test_a_failover_to_a_promoted_replica_is_followed_without_a_restart(
    aiohttp_client: ClientFactory, own_redis_server: RedisServer
) -> None:
    """REDIS_URL names the replica, as a failover endpoint does while the replica is promoted:
    reads are served, changes are refused as UNAVAILABLE, and taken once it is primary."""
    primary = own_redis_server
    address = urlsplit(primary.url)
    replica = start_redis_server(extra=["--replicaof", str(address.hostname), str(address.port)])
    try:
        await graphql(await service(aiohttp_client, primary), TOUCH)
        api = await service(aiohttp_client, replica)
        await wait_for_replication(replica)
        assert (await graphql(api, READ))["data"]["presence"]["online"] is True
        body = await graphql(api, 'mutation { kick(userId: "alice") { online } }')
        assert [e["extensions"]["code"] for e in body["errors"]] == ["UNAVAILABLE"]
        assert (await api.get("/readyz")).status == 503
        primary.stop()
        promoted = redis_client(replica.url)
        await promoted.replicaof("NO", "ONE")
        await promoted.aclose()
        assert (await api.get("/readyz")).status == 200
        body = await graphql(api, 'mutation { kick(userId: "alice") { online } }')
        assert body == {"data": {"kick": {"online": False}}}
    finally:
        replica.stop()


async def wait_for_replication(replica: RedisServer, *, has_data: bool = True) -> None:
    client = redis_client(replica.url)

    async def caught_up() -> bool:
        linked = (await client.info("replication"))["master_link_status"] == "up"
        return linked and (bool(await client.dbsize()) or not has_data)

    await eventually(caught_up, 5, "the replica to catch up")
    await client.aclose()


async def test_keys_of_two_slots_are_a_fault_of_ours_not_an_outage(
    redis_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A script called with keys of two shards can never succeed: it must surface as the fault
    # it is (INTERNAL, with its stack trace logged), not as UNAVAILABLE that clients retry.
    settings = dataclasses.replace(TEST_SETTINGS, redis_cluster_nodes=redis_cluster.nodes, shards=3)
    client = client_for(settings)
    try:
        store = PresenceStore(client, settings)
        await store.load_scripts()  # as at start-up: the client then checks slots itself
        # A key named in the wrong shard: "a" lives in shard 0, its session key in shard 1.
        in_shard_1 = Keys.of_shard(1).prefix
        monkeypatch.setattr(Keys, "sessions", lambda _, user_id: f"{in_shard_1}sess:{user_id}")
        with pytest.raises(
            (RedisClusterException, ResponseError), match=r"same (key )?slot"
        ) as raised:
            await store.touch("a")
        assert not isinstance(raised.value, StoreUnavailableError)
    finally:
        await client.aclose()


async def test_a_read_only_replica_serves_reads_within_a_rate_limit_of_this_process(
    aiohttp_client: ClientFactory, own_redis_server: RedisServer
) -> None:
    """Taking a token from the shared bucket writes: while Redis refuses writes, each process
    counts with a bucket of its own, of the same rate and burst, and returns to the shared
    bucket as soon as Redis takes writes again."""
    settings = dataclasses.replace(
        SECURED, redis_url=own_redis_server.url, backend_rate=0.5, backend_burst=2
    )
    api = await aiohttp_client(create_app(settings))
    headers = {"Authorization": f"Bearer {BACKEND_TOKEN}"}

    async def send(query: str) -> tuple[int, list[str]]:
        response = await api.post("/graphql", json={"query": query}, headers=headers)
        return response.status, error_codes(await response.json())

    other = start_redis_server()
    client = redis_client(own_redis_server.url)
    try:
        address = urlsplit(other.url)
        await client.replicaof(str(address.hostname), str(address.port))
        await wait_for_replication(own_redis_server, has_data=False)
        assert await send(TOUCH) == (200, ["UNAVAILABLE"])  # a change still needs a primary
        assert await send(READ) == (200, [])
        assert await send(READ) == (429, ["RATE_LIMITED"])  # this process's burst is spent
        await client.replicaof("NO", "ONE")
        assert await send(READ) == (200, [])  # the shared bucket, full: a new one
        assert await client.exists(Keys().rate_bucket("backend:chat")) == 1
    finally:
        await client.aclose()
        other.stop()
