"""PRESENCE_FEDERATION=true: the schema as an Apollo Federation 2 subgraph, alone and composed
by a real gateway (Apollo Gateway from the npm registry) with a second subgraph."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from pytest_aiohttp import AiohttpClient, AiohttpServer

from gql_presence.app import create_app
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.client import AnyRedis
from tests.conftest import error_codes
from tests.helpers import (
    BACKEND_TOKEN,
    SECURED,
    graphql_socket,
    over_socket,
    script_calls,
    socket_errors,
    user_token,
)

ENTITIES = """
query($representations: [_Any!]!) {
  _entities(representations: $representations) { ... on User { id presence { online } } }
}"""


def users(*ids: str) -> dict[str, Any]:
    return {"representations": [{"__typename": "User", "id": i} for i in ids]}


def federated(deployment: Settings, **changes: Any) -> Settings:
    return dataclasses.replace(
        SECURED,
        redis_url=deployment.redis_url,
        redis_cluster_nodes=deployment.redis_cluster_nodes,
        shards=deployment.shards,
        federation=True,
        **changes,
    )


async def post(
    client: TestClient[Any, Any], query: str, token: str, **variables: Any
) -> dict[str, Any]:
    response = await client.post(
        "/graphql",
        json={"query": query, "variables": variables},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def test_the_subgraph_resolves_users_presence_through_entities(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> None:
    client = await aiohttp_client(create_app(federated(deployment)))
    await PresenceStore(http_redis, deployment).touch("alice")
    body = await post(client, ENTITIES, BACKEND_TOKEN, **users("alice", "bob"))
    assert body == {
        "data": {
            "_entities": [
                {"id": "alice", "presence": {"online": True}},
                {"id": "bob", "presence": {"online": False}},
            ]
        }
    }
    sdl = (await post(client, "{ _service { sdl } }", BACKEND_TOKEN))["data"]["_service"]["sdl"]
    assert 'type User @key(fields: "id")' in sdl
    assert "specs.apollo.dev/federation/v2" in sdl


async def test_an_end_user_reads_their_own_and_their_friends_presence_through_entities(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> None:
    client = await aiohttp_client(create_app(federated(deployment)))
    await post(
        client, 'mutation { addFriends(userId: "alice", friendIds: ["carol"]) }', BACKEND_TOKEN
    )
    alice = user_token("alice")
    own = await post(client, ENTITIES, alice, **users("alice", "carol"))
    assert own["data"]["_entities"] == [
        {"id": "alice", "presence": {"online": False}},
        {"id": "carol", "presence": {"online": False}},
    ]
    other = await post(client, ENTITIES, alice, **users("carol", "bob"))
    assert [e["extensions"]["code"] for e in other["errors"]] == ["FORBIDDEN"]
    assert other["errors"][0]["path"] == ["_entities", 1, "presence"]


async def test_without_the_setting_the_schema_is_unchanged(api: TestClient[Any, Any]) -> None:
    response = await api.post("/graphql", json={"query": "{ _service { sdl } }"})
    body = await response.json()
    assert "Cannot query field '_service'" in body["errors"][0]["message"]
    assert Settings.from_env({"PRESENCE_FEDERATION": "true"}).federation is True
    assert Settings.from_env({}).federation is False


# --- bounded work ------------------------------------------------------------------------------


async def test_entities_take_at_most_1000_representations(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> None:
    client = await aiohttp_client(create_app(federated(deployment)))
    many = [f"user-{i}" for i in range(1001)]
    body = await post(client, ENTITIES, BACKEND_TOKEN, **users(*many))
    assert body["data"] is None
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "at most 1,000 representations" in body["errors"][0]["message"]
    assert await script_calls(client, "presence") == 0  # refused before any Redis work


@pytest.mark.parametrize("deployment", ["three-shards"], indirect=True)
async def test_entities_read_presence_in_one_script_call_per_shard(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> None:
    client = await aiohttp_client(create_app(federated(deployment)))
    await PresenceStore(http_redis, deployment).touch("user-7")
    many = [f"user-{i}" for i in range(1000)]
    body = await post(client, ENTITIES, BACKEND_TOKEN, **users(*many))
    found = body["data"]["_entities"]
    assert [e["id"] for e in found] == many
    assert [e["id"] for e in found if e["presence"]["online"]] == ["user-7"]
    assert await script_calls(client, "presence") == 3  # one read per shard
    # One user asking for themselves a thousand times: one read.
    own = await post(client, ENTITIES, user_token("alice"), **users(*["alice"] * 1000))
    assert len(own["data"]["_entities"]) == 1000
    assert await script_calls(client, "presence") == 4


async def test_entities_cost_a_token_per_100_representations(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> None:
    """A bucket of 10 at once: 100 representations take one token, 900 take nine more; the
    next request finds the bucket empty."""
    settings = federated(deployment, backend_rate=0.5, backend_burst=10)
    client = await aiohttp_client(create_app(settings))
    hundred = [f"user-{i}" for i in range(100)]
    assert "errors" not in await post(client, ENTITIES, BACKEND_TOKEN, **users(*hundred))
    assert "errors" not in await post(client, ENTITIES, BACKEND_TOKEN, **users(*hundred * 9))
    response = await client.post(
        "/graphql",
        json={"query": "{ __typename }"},
        headers={"Authorization": f"Bearer {BACKEND_TOKEN}"},
    )
    assert response.status == 429
    assert error_codes(await response.json()) == ["RATE_LIMITED"]


# --- the schema, with introspection off ----------------------------------------------------------


async def test_with_introspection_off_only_a_backend_reads_the_subgraphs_schema(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> None:
    client = await aiohttp_client(create_app(federated(deployment, introspection=False)))
    sdl = "{ _service { sdl } }"
    refused = await post(client, sdl, user_token("alice"))
    assert refused["data"] is None
    assert error_codes(refused) == ["FORBIDDEN"]
    assert "backend token" in refused["errors"][0]["message"]
    anonymous = await client.post("/graphql", json={"query": sdl})
    assert error_codes(await anonymous.json()) == ["UNAUTHENTICATED"]
    async with graphql_socket(client, f"Bearer {user_token('alice')}") as socket:
        over = socket_errors(await over_socket(socket, sdl))
        assert [e["extensions"]["code"] for e in over] == ["FORBIDDEN"]
    served = await post(client, sdl, BACKEND_TOKEN)
    assert 'type User @key(fields: "id")' in served["data"]["_service"]["sdl"]
    # With introspection on, the schema is anyone's to read, through either path.
    opened = await aiohttp_client(create_app(federated(deployment)))
    assert "errors" not in await post(opened, sdl, user_token("alice"))


# --- representations that are not a User's ----------------------------------------------------

MALFORMED: list[object] = [
    {"__typename": "User"},
    {"id": "alice"},
    {"__typename": "Nobody", "id": "alice"},
    {"__typename": None, "id": "alice"},
    {"__typename": "User", "id": None},
    {"__typename": "User", "id": {"nested": "alice"}},
    {"__typename": "User", "id": ["alice"]},
    {"__typename": "User", "id": 7},
    {"__typename": "User", "id": True},
    {"__typename": "User", "id": ""},
    {"__typename": "User", "id": "alice", "name": "Alice"},
    {},
    "alice",
    7,
    ["User", "alice"],
]


@pytest.mark.parametrize("representation", MALFORMED, ids=json.dumps)
async def test_a_malformed_representation_is_the_callers_fault(
    aiohttp_client: AiohttpClient,
    deployment: Settings,
    http_redis: AnyRedis,
    caplog: pytest.LogCaptureFixture,
    representation: object,
) -> None:
    client = await aiohttp_client(create_app(federated(deployment)))
    representations = [{"__typename": "User", "id": "bob"}, representation]
    with caplog.at_level(logging.INFO):
        body = await post(client, ENTITIES, BACKEND_TOKEN, representations=representations)
    assert error_codes(body) == ["BAD_USER_INPUT"], body
    message = body["errors"][0]["message"]
    assert "representations[1]" in message
    if not (isinstance(representation, dict) and representation.get("id") == ""):
        assert '{"__typename": "User", "id": "<id>"}' in message
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert await script_calls(client, "presence") == 0


async def test_a_malformed_representation_written_in_the_document_is_the_callers_fault(
    aiohttp_client: AiohttpClient,
    deployment: Settings,
    http_redis: AnyRedis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = await aiohttp_client(create_app(federated(deployment)))
    with caplog.at_level(logging.INFO):
        for literal in ('{__typename: "User"}', '{__typename: "User", id: 7}', '"alice"'):
            query = f"{{ _entities(representations: [{literal}]) {{ ... on User {{ id }} }} }}"
            body = await post(client, query, BACKEND_TOKEN)
            assert error_codes(body) == ["BAD_USER_INPUT"], body
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


# --- composed by a gateway ---------------------------------------------------------------------


@pytest.fixture
async def gateway(
    js_clients: Path, aiohttp_server: AiohttpServer, deployment: Settings, http_redis: AnyRedis
) -> AsyncIterator[str]:
    """Apollo Gateway over this service (as a subgraph) and a small profiles subgraph."""
    subgraph: TestServer = await aiohttp_server(create_app(federated(deployment)))
    process = await asyncio.create_subprocess_exec(
        "node",
        str(js_clients / "federation.mjs"),
        str(subgraph.make_url("/graphql")),
        BACKEND_TOKEN,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        assert process.stderr is not None
        line = await asyncio.wait_for(process.stdout.readline(), timeout=60)
        if not line:
            pytest.fail((await process.stderr.read()).decode())
        yield str(json.loads(line)["gateway"])
    finally:
        process.terminate()
        await process.wait()


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_gateway_answers_a_users_name_and_presence_in_one_query(
    gateway: str, deployment: Settings, http_redis: AnyRedis
) -> None:
    await PresenceStore(http_redis, deployment).touch("alice", "phone")
    query = '{ user(id: "alice") { name presence { online sessions { sessionId } } } }'
    async with aiohttp.ClientSession() as session:

        async def ask(query: str, token: str) -> Any:
            headers = {"Authorization": f"Bearer {token}"}
            async with session.post(gateway, json={"query": query}, headers=headers) as answer:
                return await answer.json()

        # The user's own token, forwarded by the gateway to this service.
        assert await ask(query, user_token("alice")) == {
            "data": {
                "user": {
                    "name": "Alice Liddell",
                    "presence": {"online": True, "sessions": [{"sessionId": "phone"}]},
                }
            }
        }
        refused = await ask('{ user(id: "bob") { name presence { online } } }', user_token("alice"))
        assert refused["errors"][0]["extensions"]["code"] == "FORBIDDEN"
