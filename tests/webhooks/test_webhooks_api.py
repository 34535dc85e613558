"""Webhooks managed through GraphQL: backends only, on every path; bad input refused with
what is allowed; the secret shown once."""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

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
    socket_errors,
    user_token,
)

FIELDS = "id url kinds places debounceSeconds enabled disabledReason createdAt deliveredUpTo backlog attempts { at deliveryId changes status error durationMs }"
CREATE = f"""mutation Create($url: String!, $kinds: [ChangeKind!], $places: [String!], $debounce: Int! = 0) {{
  createWebhook(url: $url, kinds: $kinds, places: $places, debounceSeconds: $debounce) {{
    secret webhook {{ {FIELDS} }}
  }}
}}"""
LIST = f"{{ webhooks {{ {FIELDS} }} }}"
ONE = f"query One($id: ID!) {{ webhook(id: $id) {{ {FIELDS} }} }}"
UPDATE = f"""mutation Update($id: ID!, $url: String, $kinds: [ChangeKind!], $places: [String!], $debounce: Int, $enabled: Boolean) {{
  updateWebhook(id: $id, url: $url, kinds: $kinds, places: $places, debounceSeconds: $debounce, enabled: $enabled) {{ {FIELDS} }}
}}"""
ROTATE = "mutation Rotate($id: ID!) { rotateWebhookSecret(id: $id) { secret webhook { id } } }"
DELETE = "mutation Delete($id: ID!) { deleteWebhook(id: $id) }"
REPLAY = "mutation Replay($id: ID!, $after: String) { replayWebhook(id: $id, after: $after) { id deliveredUpTo backlog } }"
URL = "https://hooks.example.com/presence"
EVERY_DOCUMENT: list[tuple[str, dict[str, Any]]] = [
    (LIST, {}),
    (ONE, {"id": "x"}),
    (CREATE, {"url": URL}),
    (UPDATE, {"id": "x", "enabled": False}),
    (ROTATE, {"id": "x"}),
    (DELETE, {"id": "x"}),
    (REPLAY, {"id": "x"}),
]


async def call(
    client: TestClient[Any, Any],
    document: str,
    token: str = BACKEND_TOKEN,
    **variables: Any,
) -> dict[str, Any]:
    response = await client.post(
        "/graphql",
        json={"query": document, "variables": variables},
        headers={"Authorization": f"Bearer {token}"},
    )
    answer: dict[str, Any] = await response.json()
    return answer


async def create(client: TestClient[Any, Any], **variables: Any) -> dict[str, Any]:
    answer = await call(client, CREATE, **{"url": URL, **variables})
    assert "errors" not in answer, answer
    made: dict[str, Any] = answer["data"]["createWebhook"]
    return made


async def test_a_backend_creates_a_webhook_and_sees_its_secret_only_then(
    secured: TestClient[Any, Any],
) -> None:
    made = await create(secured, places=["room-*"], debounce=10)
    webhook = made["webhook"]
    assert made["secret"].startswith("whsec_")
    assert webhook["url"] == URL
    assert webhook["kinds"] == ["ONLINE", "OFFLINE", "KICKED", "STATUS", "JOINED", "LEFT"]
    assert webhook["places"] == ["room-*"]
    assert webhook["debounceSeconds"] == 10
    assert (webhook["enabled"], webhook["disabledReason"]) == (True, None)
    assert (webhook["deliveredUpTo"], webhook["backlog"], webhook["attempts"]) == (None, 0, [])
    listed = await call(secured, LIST)
    assert listed == {"data": {"webhooks": [webhook]}}
    assert made["secret"] not in json.dumps(listed)
    assert await call(secured, ONE, id=webhook["id"]) == {"data": {"webhook": webhook}}
    assert await call(secured, ONE, id="no-such-webhook") == {"data": {"webhook": None}}


async def test_a_webhook_is_changed_disabled_enabled_rotated_replayed_and_deleted(
    secured: TestClient[Any, Any],
) -> None:
    made = await create(secured)
    webhook_id = made["webhook"]["id"]
    changed = await call(
        secured, UPDATE, id=webhook_id, kinds=["UPDATED"], debounce=60, url=URL + "/2"
    )
    after = changed["data"]["updateWebhook"]
    assert (after["kinds"], after["debounceSeconds"], after["url"]) == (["UPDATED"], 60, URL + "/2")
    assert after["places"] is None
    disabled = await call(secured, UPDATE, id=webhook_id, enabled=False)
    assert disabled["data"]["updateWebhook"]["enabled"] is False
    enabled = await call(secured, UPDATE, id=webhook_id, enabled=True)
    assert enabled["data"]["updateWebhook"]["enabled"] is True
    rotated = await call(secured, ROTATE, id=webhook_id)
    new_secret = rotated["data"]["rotateWebhookSecret"]["secret"]
    assert new_secret.startswith("whsec_")
    assert new_secret != made["secret"]
    replayed = await call(secured, REPLAY, id=webhook_id, after=None)
    assert replayed["data"]["replayWebhook"] == {
        "id": webhook_id,
        "deliveredUpTo": None,
        "backlog": 0,
    }
    assert await call(secured, DELETE, id=webhook_id) == {"data": {"deleteWebhook": True}}
    assert await call(secured, DELETE, id=webhook_id) == {"data": {"deleteWebhook": False}}
    assert await call(secured, LIST) == {"data": {"webhooks": []}}
    for document in (UPDATE, ROTATE, REPLAY):
        gone = await call(secured, document, id=webhook_id)
        assert error_codes(gone) == ["BAD_USER_INPUT"]
        assert "No webhook has the id" in gone["errors"][0]["message"]


async def test_attempts_show_newest_first(
    secured: TestClient[Any, Any], deployment: Settings, http_redis: AnyRedis
) -> None:
    webhook_id = (await create(secured))["webhook"]["id"]
    store = PresenceStore(http_redis, dataclasses.replace(SECURED, shards=deployment.shards))
    for i, status in enumerate((None, 500, 204)):
        await store.webhooks.record_attempt(
            webhook_id,
            delivery_id=f"msg_{i}",
            changes=3,
            status=status,
            error=None if status == 204 else "went wrong",
            duration_ms=12.5,
            acknowledged=status == 204,
            delivered_up_to="cursor-3",
        )
    webhook = (await call(secured, ONE, id=webhook_id))["data"]["webhook"]
    assert [(a["deliveryId"], a["status"], a["error"]) for a in webhook["attempts"]] == [
        ("msg_2", 204, None),
        ("msg_1", 500, "went wrong"),
        ("msg_0", None, "went wrong"),
    ]
    assert webhook["attempts"][0]["durationMs"] == 12.5
    assert webhook["attempts"][0]["changes"] == 3
    assert webhook["deliveredUpTo"] == "cursor-3"


@pytest.mark.parametrize(
    ("variables", "said"),
    [
        ({"url": "http://hooks.example.com/"}, "A webhook's url is https"),
        ({"url": "https://user:pw@hooks.example.com/"}, "user name or password"),
        ({"url": "https://169.254.169.254/latest"}, "addresses 169.254.169.254"),
        ({"url": "https://[::ffff:10.0.0.1]/"}, "addresses ::ffff:a00:1"),
        ({"url": "https://hooks.example.com/" + "x" * 2048}, "at most 2,048 characters"),
        ({"debounce": 61}, "debounceSeconds must be 0 to 60; got 61"),
        ({"debounce": -1}, "debounceSeconds must be 0 to 60; got -1"),
        ({"kinds": ["SOMETIMES"]}, "Value 'SOMETIMES' does not exist in 'ChangeKind' enum"),
        ({"places": ["a*b"]}, "`*` may stand only at the end"),
    ],
)
async def test_bad_input_is_refused_saying_what_is_allowed_and_creates_nothing(
    secured: TestClient[Any, Any], variables: dict[str, Any], said: str
) -> None:
    refused = await call(secured, CREATE, **{"url": URL, **variables})
    assert error_codes(refused) == ["BAD_USER_INPUT"]
    assert said in refused["errors"][0]["message"]
    assert await call(secured, LIST) == {"data": {"webhooks": []}}


async def test_a_bad_update_changes_nothing(secured: TestClient[Any, Any]) -> None:
    webhook = (await create(secured))["webhook"]
    refused = await call(secured, UPDATE, id=webhook["id"], url="https://127.0.0.1/", debounce=5)
    assert error_codes(refused) == ["BAD_USER_INPUT"]
    assert await call(secured, LIST) == {"data": {"webhooks": [webhook]}}


async def test_the_fifty_first_webhook_is_refused(secured: TestClient[Any, Any]) -> None:
    for _ in range(50):
        await create(secured)
    refused = await call(secured, CREATE, url=URL)
    assert error_codes(refused) == ["BAD_USER_INPUT"]
    assert "at most 50 webhooks" in refused["errors"][0]["message"]
    assert len((await call(secured, LIST))["data"]["webhooks"]) == 50


async def test_http_and_private_addresses_are_taken_only_inside_the_allowed_networks(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> None:
    allowed = dataclasses.replace(
        SECURED,
        redis_url=deployment.redis_url,
        webhook_allowed_networks=(ipaddress.ip_network("127.0.0.0/8"),),
    )
    client = await aiohttp_client(create_app(allowed))
    made = await create(client, url="http://127.0.0.1:9000/in")
    assert made["webhook"]["url"] == "http://127.0.0.1:9000/in"
    refused = await call(client, CREATE, url="http://10.0.0.1/in")
    assert error_codes(refused) == ["BAD_USER_INPUT"]


async def test_end_users_are_forbidden_every_webhook_field_over_http(
    secured: TestClient[Any, Any],
) -> None:
    alice = user_token("alice")
    for document, variables in EVERY_DOCUMENT:
        refused = await call(secured, document, alice, **variables)
        assert error_codes(refused) == ["FORBIDDEN"], document
        assert "is for backend services" in refused["errors"][0]["message"]
    assert await call(secured, LIST) == {"data": {"webhooks": []}}


async def test_end_users_are_forbidden_every_webhook_field_over_a_websocket(
    secured: TestClient[Any, Any],
) -> None:
    async with graphql_socket(secured, f"Bearer {user_token('alice')}") as socket:
        for i, (document, variables) in enumerate(EVERY_DOCUMENT):
            refused = socket_errors(await over_socket(socket, document, variables, str(i)))
            assert [e["extensions"]["code"] for e in refused] == ["FORBIDDEN"], document
    async with graphql_socket(secured, f"Bearer {BACKEND_TOKEN}") as socket:
        [answer, *_] = await over_socket(socket, CREATE, {"url": URL})
        assert answer["payload"]["data"]["createWebhook"]["secret"].startswith("whsec_")


async def test_end_users_are_forbidden_webhooks_in_persisted_and_trusted_documents(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis, tmp_path: Path
) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({hashlib.sha256(LIST.encode()).hexdigest(): LIST}))
    trusting = dataclasses.replace(
        SECURED,
        redis_url=deployment.redis_url,
        trusted_documents=Settings.from_env(
            {"PRESENCE_TRUSTED_DOCUMENTS": str(manifest)}
        ).trusted_documents,
    )
    client = await aiohttp_client(create_app(trusting))
    sha = hashlib.sha256(LIST.encode()).hexdigest()
    alice = {"Authorization": f"Bearer {user_token('alice')}"}
    for body in (
        {"documentId": f"sha256:{sha}"},
        {"extensions": {"persistedQuery": {"version": 1, "sha256Hash": sha}}},
    ):
        response = await client.post("/graphql", json=body, headers=alice)
        refused = await response.json()
        assert error_codes(refused) == ["FORBIDDEN"], body
        assert "is for backend services" in refused["errors"][0]["message"]
    # Automatic persisted queries: registered by a backend, then sent by hash alone.
    open_client = await aiohttp_client(
        create_app(dataclasses.replace(SECURED, redis_url=deployment.redis_url))
    )
    backend = {"Authorization": f"Bearer {BACKEND_TOKEN}"}
    apq = {"extensions": {"persistedQuery": {"version": 1, "sha256Hash": sha}}}
    registered = await open_client.post("/graphql", json={"query": LIST, **apq}, headers=backend)
    assert (await registered.json()) == {"data": {"webhooks": []}}
    response = await open_client.post("/graphql", json=apq, headers=alice)
    assert error_codes(await response.json()) == ["FORBIDDEN"]


async def test_no_secret_reaches_the_logs(
    secured: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    made = await create(secured)
    rotated = await call(secured, ROTATE, id=made["webhook"]["id"])
    secrets = [made["secret"], rotated["data"]["rotateWebhookSecret"]["secret"]]
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "createWebhook" in logged or "Create" in logged
    for secret in secrets:
        assert secret.removeprefix("whsec_") not in logged
