"""Browser pages on other origins: CORS for HTTP, the Origin check for WebSockets, both driven
by PRESENCE_CORS_ORIGINS."""

from __future__ import annotations

import dataclasses
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient

from gql_presence.app import create_app
from gql_presence.settings import Settings, SettingsError
from gql_presence.store.client import AnyRedis

APP = "http://localhost:5173"
OTHER = "https://evil.example"
PREFLIGHT = {
    "Origin": APP,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization,content-type",
}


async def service(
    aiohttp_client: AiohttpClient, deployment: Settings, *origins: str
) -> TestClient[Any, Any]:
    return await aiohttp_client(create_app(dataclasses.replace(deployment, cors_origins=origins)))


async def test_a_preflight_from_a_listed_origin_allows_authorization_and_json(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> None:
    client = await service(aiohttp_client, deployment, APP)
    response = await client.options("/graphql", headers=PREFLIGHT)
    assert response.status in {200, 204}
    assert response.headers["Access-Control-Allow-Origin"] == APP
    assert "Origin" in response.headers["Vary"]
    allowed = {
        h.strip().lower() for h in response.headers["Access-Control-Allow-Headers"].split(",")
    }
    assert {"authorization", "content-type"} <= allowed
    assert "POST" in response.headers["Access-Control-Allow-Methods"]

    answer = await client.post(
        "/graphql", json={"query": "{ onlineUsers { totalCount } }"}, headers={"Origin": APP}
    )
    assert answer.status == 200
    assert answer.headers["Access-Control-Allow-Origin"] == APP
    assert "Origin" in answer.headers["Vary"]
    assert (await answer.json())["data"]["onlineUsers"]["totalCount"] == 0


@pytest.mark.parametrize("listed", [(), (APP,)], ids=["unset", "another-listed"])
async def test_an_unlisted_origin_gets_no_cors_headers(
    aiohttp_client: AiohttpClient,
    deployment: Settings,
    http_redis: AnyRedis,
    listed: tuple[str, ...],
) -> None:
    client = await service(aiohttp_client, deployment, *listed)
    preflight = await client.options("/graphql", headers={**PREFLIGHT, "Origin": OTHER})
    assert preflight.status >= 400
    answer = await client.post(
        "/graphql", json={"query": "{ onlineUsers { totalCount } }"}, headers={"Origin": OTHER}
    )
    for response in (preflight, answer):
        assert not [h for h in response.headers if h.lower().startswith("access-control-")]


async def test_any_origin_with_a_star(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> None:
    client = await service(aiohttp_client, deployment, "*")
    response = await client.options("/graphql", headers={**PREFLIGHT, "Origin": OTHER})
    assert response.status in {200, 204}
    assert response.headers["Access-Control-Allow-Origin"] == OTHER


@pytest.mark.parametrize(
    "case",
    [
        ((APP,), APP, True),
        ((APP,), OTHER, False),
        ((), APP, False),
        (("*",), OTHER, True),
    ],
)
async def test_websocket_handshakes_are_checked_against_the_same_list(
    aiohttp_client: AiohttpClient,
    deployment: Settings,
    http_redis: AnyRedis,
    case: tuple[tuple[str, ...], str, bool],
    caplog: pytest.LogCaptureFixture,
) -> None:
    listed, origin, accepted = case
    client = await service(aiohttp_client, deployment, *listed)
    if accepted:
        async with client.ws_connect(
            "/graphql", protocols=["graphql-transport-ws"], headers={"Origin": origin}
        ) as socket:
            await socket.send_json({"type": "connection_init", "payload": {}})
            assert (await socket.receive_json())["type"] == "connection_ack"
        return
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect(
            "/graphql", protocols=["graphql-transport-ws"], headers={"Origin": origin}
        )
    assert refused.value.status == 403
    # The operator's log names the setting that would let it in.
    (line,) = [r.getMessage() for r in caplog.records if r.name == "strawberry.ws"]
    assert "PRESENCE_CORS_ORIGINS" in line
    assert "allowed_origins" not in line


@pytest.mark.parametrize(
    "value",
    [
        "https://app.example.com/",
        "https://app.example.com/path",
        "app.example.com",
        "https://app.example.com:443",
        "HTTPS://app.example.com",
        "ftp://app.example.com",
        "*,https://app.example.com",
    ],
)
def test_a_value_that_is_not_an_origin_is_refused_saying_what_is(value: str) -> None:
    with pytest.raises(SettingsError, match=r"PRESENCE_CORS_ORIGINS .*https://app\.example\.com"):
        Settings.from_env({"PRESENCE_CORS_ORIGINS": value})


def test_origins_are_read() -> None:
    settings = Settings.from_env(
        {"PRESENCE_CORS_ORIGINS": " https://app.example.com, http://localhost:5173 "}
    )
    assert settings.cors_origins == ("https://app.example.com", "http://localhost:5173")
    assert Settings.from_env({"PRESENCE_CORS_ORIGINS": "*"}).cors_origins == ("*",)
    assert Settings.from_env({}).cors_origins == ()
