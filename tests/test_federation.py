"""PRESENCE_FEDERATION=true: the schema as an Apollo Federation 2 subgraph, alone and composed
by a real gateway (Apollo Gateway from the npm registry) with a second subgraph."""

from __future__ import annotations

import asyncio
import dataclasses
import json
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
from tests.helpers import BACKEND_TOKEN, SECURED, user_token

ENTITIES = """
query($representations: [_Any!]!) {
  _entities(representations: $representations) { ... on User { id presence { online } } }
}"""


def users(*ids: str) -> dict[str, Any]:
    return {"representations": [{"__typename": "User", "id": i} for i in ids]}


def federated(deployment: Settings, **changes: Any) -> Settings:
    return dataclasses.replace(SECURED, redis_url=deployment.redis_url, federation=True, **changes)


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


async def test_an_end_user_reads_only_their_own_presence_through_entities(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> None:
    client = await aiohttp_client(create_app(federated(deployment)))
    alice = user_token("alice")
    own = await post(client, ENTITIES, alice, **users("alice"))
    assert own["data"]["_entities"] == [{"id": "alice", "presence": {"online": False}}]
    other = await post(client, ENTITIES, alice, **users("bob"))
    assert [e["extensions"]["code"] for e in other["errors"]] == ["FORBIDDEN"]


async def test_without_the_setting_the_schema_is_unchanged(api: TestClient[Any, Any]) -> None:
    response = await api.post("/graphql", json={"query": "{ _service { sdl } }"})
    body = await response.json()
    assert "Cannot query field '_service'" in body["errors"][0]["message"]
    assert Settings.from_env({"PRESENCE_FEDERATION": "true"}).federation is True
    assert Settings.from_env({}).federation is False


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
