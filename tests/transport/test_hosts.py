"""DNS rebinding: in open mode the service answers only requests addressed to loopback names
or to the names PRESENCE_ALLOWED_HOSTS lists, on every route but the probes."""

from __future__ import annotations

import dataclasses
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from gql_presence.app import create_app
from gql_presence.http.hosts import host_name
from gql_presence.settings import Settings, SettingsError
from tests.conftest import ClientFactory, graphql
from tests.helpers import BACKEND_TOKEN, SECURED

Service = TestClient[Any, Any]

TOUCH = {"query": 'mutation { touch(userId: "victim") { online } }'}
PRESENCE = '{ presence(userId: "victim") { online } }'


async def start(aiohttp_client: ClientFactory, deployment: Settings, **changes: Any) -> Service:
    return await aiohttp_client(create_app(dataclasses.replace(deployment, **changes)))


@pytest.fixture
async def open_service(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any
) -> Service:
    return await start(aiohttp_client, deployment)


async def test_open_mode_refuses_a_request_addressed_to_another_name_and_changes_nothing(
    open_service: Service,
) -> None:
    response = await open_service.post("/graphql", json=TOUCH, headers={"Host": "attacker.example"})
    assert response.status == 421
    says = await response.text()
    assert "localhost" in says
    assert "PRESENCE_ALLOWED_HOSTS" in says
    body = await graphql(open_service, PRESENCE)
    assert body["data"]["presence"] == {"online": False}


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("GET", "/graphql", {"Accept": "text/html"}),  # GraphiQL
        ("GET", "/dashboard", {}),
        ("GET", "/", {}),
        ("GET", "/metrics", {}),
        (
            "GET",
            "/graphql",
            {
                "Upgrade": "websocket",
                "Connection": "Upgrade",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Protocol": "graphql-transport-ws",
            },
        ),
    ],
    ids=["graphiql", "dashboard", "root", "metrics", "websocket"],
)
async def test_open_mode_refuses_another_name_on_every_route(
    open_service: Service, method: str, path: str, headers: dict[str, str]
) -> None:
    response = await open_service.request(
        method, path, headers={**headers, "Host": "rebound.attacker.example:8080"}
    )
    assert response.status == 421
    assert "PRESENCE_ALLOWED_HOSTS" in await response.text()


async def test_a_websocket_addressed_to_another_name_is_not_opened(open_service: Service) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await open_service.ws_connect(
            "/graphql", protocols=["graphql-transport-ws"], headers={"Host": "attacker.example"}
        )
    assert refused.value.status == 421


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
async def test_probes_answer_whatever_the_host(open_service: Service, path: str) -> None:
    response = await open_service.get(path, headers={"Host": "10.1.2.3:8080"})
    assert response.status == 200


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "LOCALHOST:8080",
        "localhost.",
        "app.localhost:3000",
        "127.0.0.1",
        "127.8.9.10:8080",
        "[::1]",
        "[::1]:8080",
        "[0:0::1]:8080",
    ],
)
async def test_open_mode_answers_loopback_names(open_service: Service, host: str) -> None:
    response = await open_service.post("/graphql", json=TOUCH, headers={"Host": host})
    assert response.status == 200, await response.text()
    assert (await response.json())["data"]["touch"]["online"] is True


@pytest.mark.parametrize(
    "host",
    [
        "localhost.attacker.example",
        "127.0.0.1.attacker.example",
        "[::2]",
        "0.0.0.0",  # noqa: S104 - a Host header, not an address to bind; browsers reach this machine by it
    ],
)
async def test_names_that_only_look_like_loopback_are_refused(
    open_service: Service, host: str
) -> None:
    response = await open_service.post("/graphql", json=TOUCH, headers={"Host": host})
    assert response.status == 421


async def test_allowed_hosts_adds_names_to_loopback_in_open_mode(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any
) -> None:
    service = await start(
        aiohttp_client, deployment, allow_open=True, allowed_hosts=("presence.internal", "fd00::5")
    )
    for host in ("presence.internal:8080", "Presence.Internal", "[fd00::5]:80", "localhost"):
        response = await service.post("/graphql", json=TOUCH, headers={"Host": host})
        assert response.status == 200, host
    refused = await service.post("/graphql", json=TOUCH, headers={"Host": "attacker.example"})
    assert refused.status == 421
    assert "presence.internal, fd00::5" in await refused.text()


async def test_any_host_is_answered_when_allowed_hosts_is_a_star(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any
) -> None:
    service = await start(aiohttp_client, deployment, allowed_hosts=("*",))
    response = await service.post("/graphql", json=TOUCH, headers={"Host": "anything.example"})
    assert response.status == 200


async def test_with_credentials_any_host_is_answered_unless_hosts_are_listed(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: Any
) -> None:
    secured = dataclasses.replace(
        deployment,
        backend_tokens=SECURED.backend_tokens,
    )
    headers = {"Authorization": f"Bearer {BACKEND_TOKEN}", "Host": "presence.example.com"}
    service = await start(aiohttp_client, secured)
    response = await service.post("/graphql", json=TOUCH, headers=headers)
    assert (await response.json())["data"]["touch"]["online"] is True

    listed = await start(aiohttp_client, secured, allowed_hosts=("presence.internal",))
    refused = await listed.post("/graphql", json=TOUCH, headers=headers)
    assert refused.status == 421
    answered = await listed.post(
        "/graphql", json=TOUCH, headers={**headers, "Host": "presence.internal"}
    )
    assert answered.status == 200


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost:8080", "localhost"),
        ("Example.COM.", "example.com"),
        ("[::1]:8080", "::1"),
        ("[0:0::1]", "::1"),
        ("[::1", None),
        ("", None),
    ],
)
def test_host_name_is_the_header_without_port(header: str, name: str | None) -> None:
    assert host_name(header) == name


def test_allowed_hosts_are_read_as_names_without_ports() -> None:
    settings = Settings.from_env(
        {"PRESENCE_ALLOWED_HOSTS": "presence.internal, 10.0.0.5,[FD00::5]"}
    )
    assert settings.allowed_hosts == ("presence.internal", "10.0.0.5", "fd00::5")
    assert Settings.from_env({}).allowed_hosts == ()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("http://presence.internal", "without scheme or port"),
        ("presence.internal:8080", "without scheme or port"),
        ("bad name", "'bad name' is not one"),
        ("*,presence.internal", "list no others"),
    ],
)
def test_bad_allowed_hosts_are_refused_saying_what_is_allowed(value: str, says: str) -> None:
    with pytest.raises(SettingsError, match="PRESENCE_ALLOWED_HOSTS") as refused:
        Settings.from_env({"PRESENCE_ALLOWED_HOSTS": value})
    assert says in str(refused.value)


async def test_the_services_own_address_leads_to_the_dashboard(open_service: Service) -> None:
    response = await open_service.get("/", allow_redirects=False)
    assert (response.status, response.headers["Location"]) == (302, "/dashboard")
    page = await open_service.get("/")
    assert page.status == 200
    assert "gql-presence" in await page.text()
