"""Who may call what: every operation against every kind of credential, over HTTP and
WebSocket, with real tokens signed by real keys."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hmac
import json
import logging
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from cryptography.hazmat.primitives.asymmetric import rsa

from gql_presence.app import create_app
from gql_presence.cli import main
from gql_presence.http.app_keys import EVENTS
from gql_presence.running.redis_server import RedisServer
from gql_presence.settings import Settings, SettingsError
from tests.conftest import ClientFactory, error_codes
from tests.helpers import (
    AUDIENCE,
    BACKEND_TOKEN,
    EC_KEY,
    HS_SECRET,
    ISSUER,
    RSA_KEY,
    SECURED,
    eventually,
    pem,
    user_token,
)


def b64(value: bytes) -> str:
    return base64.urlsafe_b64encode(value).rstrip(b"=").decode()


def handmade_token(algorithm: str, secret: bytes | None) -> str:
    """A token written by hand, as an attacker would: `alg: none` (no signature), or HS256
    signed with whatever they hold (which PyJWT itself refuses to make)."""
    claims = {"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "exp": time.time() + 3600}
    header = {"alg": algorithm, "typ": "JWT"}
    signed = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    signature = b"" if secret is None else hmac.digest(secret, signed.encode(), "sha256")
    return f"{signed}.{b64(signature)}"


CREDENTIALS: dict[str, str | None] = {
    "no token": None,
    "bad token": "Bearer not-a-token-at-all",
    "expired token": f"Bearer {user_token(exp=time.time() - 120)}",
    "wrong audience": f"Bearer {user_token(aud='another-service')}",
    "alg none": f"Bearer {handmade_token('none', None)}",
    "another user's token": f"Bearer {user_token('mallory')}",
    "own token": f"Bearer {user_token('alice')}",
    "backend token": f"Bearer {BACKEND_TOKEN}",
}

OPERATIONS = {
    "onlineUsers": "{ onlineUsers { totalCount } }",
    "activeInRange": '{ activeInRange(from: "2026-01-01T00:00:00Z", to: "2026-01-02T00:00:00Z") { totalCount } }',
    "weeklyStats": "{ weeklyStats { uniqueUsers } }",
    "presence": '{ presence(userId: "alice") { online } }',
    "onlineFriends": '{ onlineFriends(userId: "alice") { totalCount } }',
    "friends": '{ friends(userId: "alice") }',
    "touch": 'mutation { touch(userId: "alice") { online } }',
    "touchMany": 'mutation { touchMany(userIds: ["alice"]) }',
    "kick": 'mutation { kick(userId: "alice") { online } }',
    "addFriends": 'mutation { addFriends(userId: "alice", friendIds: ["bob"]) }',
    "removeFriends": 'mutation { removeFriends(userId: "alice", friendIds: ["bob"]) }',
    "changes": "{ changes { hasMore } }",
    "feedCursor": "{ feedCursor }",
}
OWN = {"presence", "onlineFriends", "friends"}


def expected(credential: str, operation: str) -> str:
    if credential == "backend token":
        return "ok"
    if credential == "own token":
        return "ok" if operation in OWN | {"friendsOf", "userIds"} else "FORBIDDEN"
    if credential == "another user's token":
        return "FORBIDDEN"
    return "UNAUTHENTICATED"


def outcome(body: dict[str, Any]) -> str:
    codes = set(error_codes(body))
    assert len(codes) <= 1, body
    return codes.pop() if codes else "ok"


@pytest.fixture
async def secured(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> TestClient[Any, Any]:
    return await aiohttp_client(
        create_app(dataclasses.replace(SECURED, redis_url=redis_server.url))
    )


async def call(
    api: TestClient[Any, Any], document: str, authorization: str | None
) -> dict[str, Any]:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = await api.post("/graphql", json={"query": document}, headers=headers)
    assert response.status == 200
    body: dict[str, Any] = await response.json()
    return body


async def test_every_operation_against_every_credential(secured: TestClient[Any, Any]) -> None:
    seen = {
        (credential, operation): outcome(await call(secured, document, authorization))
        for credential, authorization in CREDENTIALS.items()
        for operation, document in OPERATIONS.items()
    }
    assert seen == {(c, o): expected(c, o) for c in CREDENTIALS for o in OPERATIONS}


async def test_refusals_say_what_is_wrong(secured: TestClient[Any, Any]) -> None:
    document = OPERATIONS["presence"]
    messages = {
        credential: (await call(secured, document, CREDENTIALS[credential]))["errors"][0]["message"]
        for credential in ("no token", "expired token", "wrong audience", "alg none")
    }
    assert "Authorization: Bearer" in messages["no token"]
    assert "expired" in messages["expired token"]
    assert "aud" in messages["wrong audience"]
    assert "'none' are not accepted" in messages["alg none"]
    # A token issued by a clock ahead of ours is not yet valid: not a bad signature.
    ahead = int(time.time()) + 120
    for early in (user_token(nbf=ahead), user_token(iat=ahead)):
        message = (await call(secured, document, f"Bearer {early}"))["errors"][0]["message"]
        assert "not valid yet" in message
    body = await call(secured, '{ friends(userId: "bob") }', CREDENTIALS["own token"])
    assert "for themselves only" in body["errors"][0]["message"]


async def test_a_refused_mutation_changes_nothing(secured: TestClient[Any, Any]) -> None:
    for credential in ("no token", "bad token", "own token"):
        await call(secured, OPERATIONS["touch"], CREDENTIALS[credential])
    body = await call(secured, OPERATIONS["presence"], CREDENTIALS["backend token"])
    assert body == {"data": {"presence": {"online": False}}}


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
async def test_public_key_tokens_are_accepted_and_cannot_switch_algorithm(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any, algorithm: str
) -> None:
    key = RSA_KEY if algorithm == "RS256" else EC_KEY
    settings = dataclasses.replace(
        SECURED, jwt_secret=None, jwt_public_key=pem(key), redis_url=redis_server.url
    )
    api = await aiohttp_client(create_app(settings))
    signed = user_token(key=key, algorithm=algorithm)
    assert outcome(await call(api, OPERATIONS["presence"], f"Bearer {signed}")) == "ok"
    # The public key used as an HMAC secret: the classic algorithm confusion.
    forged = handmade_token("HS256", pem(key).encode())
    assert outcome(await call(api, OPERATIONS["presence"], f"Bearer {forged}")) == "UNAUTHENTICATED"
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    wrong_signature = user_token(key=other_key, algorithm="RS256")
    assert outcome(await call(api, OPERATIONS["presence"], f"Bearer {wrong_signature}")) == (
        "UNAUTHENTICATED"
    )


async def test_users_may_list_everyone_when_the_setting_opens_it(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Any
) -> None:
    settings = dataclasses.replace(SECURED, users_see_everyone=True, redis_url=redis_server.url)
    api = await aiohttp_client(create_app(settings))
    own = CREDENTIALS["own token"]
    for operation in ("onlineUsers", "activeInRange", "weeklyStats"):
        assert outcome(await call(api, OPERATIONS[operation], own)) == "ok"
    assert outcome(await call(api, OPERATIONS["touch"], own)) == "FORBIDDEN"


# --- WebSocket: credentials in connection_init --------------------------------------------

SUBSCRIPTIONS = {
    "friendsOf": 'subscription { presenceChanged(friendsOf: "alice") { userId } }',
    "userIds": 'subscription { presenceChanged(userIds: ["alice"]) { userId } }',
}


async def subscribe(api: TestClient[Any, Any], authorization: str | None, document: str) -> str:
    """How a subscription with these credentials in connection_init ends up."""
    url = str(api.make_url("/graphql")).replace("http://", "ws://")
    payload = {} if authorization is None else {"Authorization": authorization}
    hub = api.app[EVENTS]
    # The previous subscription's feed may still be closing.
    await eventually(lambda: not hub.subscriber_count, 3, "the previous feed to end")
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, protocols=["graphql-transport-ws"]) as socket,
    ):
        await socket.send_json({"type": "connection_init", "payload": payload})
        reply = await socket.receive(timeout=3)
        if reply.type is aiohttp.WSMsgType.CLOSE:
            assert reply.data == 4403
            reason = str(reply.extra)
            assert "Bearer" in reason or "JWT" in reason or "token" in reason, reason
            return "UNAUTHENTICATED"
        assert json.loads(reply.data)["type"] == "connection_ack"
        await socket.send_json({"id": "1", "type": "subscribe", "payload": {"query": document}})
        refusal: dict[str, Any] = {}

        async def subscribed_or_refused() -> bool:
            if not hub.subscriber_count:
                with contextlib.suppress(TimeoutError):
                    refusal.update(await socket.receive_json(timeout=0.05))
            return bool(hub.subscriber_count or refusal)

        await eventually(subscribed_or_refused, 3, "a subscription or its refusal")
        if refusal:
            message = refusal
            # A refusal: an `error` message, or a result with errors, then the end.
            assert message["type"] in {"error", "next"}, message
            errors = (
                message["payload"] if message["type"] == "error" else message["payload"]["errors"]
            )
            (code,) = {e["extensions"]["code"] for e in errors}
            return str(code)
        return "ok"


async def test_every_subscription_against_every_credential(secured: TestClient[Any, Any]) -> None:
    seen = {
        (credential, kind): await subscribe(secured, authorization, document)
        for credential, authorization in CREDENTIALS.items()
        for kind, document in SUBSCRIPTIONS.items()
    }
    assert seen == {(c, k): expected(c, k) for c in CREDENTIALS for k in SUBSCRIPTIONS}


# --- open mode ----------------------------------------------------------------------------


async def test_with_no_credentials_configured_everyone_may_do_everything(
    api: TestClient[Any, Any],
) -> None:
    for document in OPERATIONS.values():
        assert outcome(await call(api, document, None)) == "ok"


def test_open_mode_refuses_to_serve_beyond_loopback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PRESENCE_ALLOW_OPEN", raising=False)
    monkeypatch.delenv("PRESENCE_BACKEND_TOKENS", raising=False)
    assert main(["serve", "--host", "0.0.0.0"]) == 2  # noqa: S104 - the address refused
    assert "PRESENCE_ALLOW_OPEN" in capsys.readouterr().err


# --- settings -----------------------------------------------------------------------------


def test_credential_settings_are_read_and_checked(tmp_path: Path) -> None:
    key_file = tmp_path / "key.pem"
    key_file.write_text(pem(EC_KEY))
    settings = Settings.from_env(
        {
            "PRESENCE_BACKEND_TOKENS": f"chat:{BACKEND_TOKEN}, billing:{'c' * 32}",
            "PRESENCE_JWT_PUBLIC_KEY_FILE": str(key_file),
            "PRESENCE_JWT_ISSUER": ISSUER,
            "PRESENCE_JWT_AUDIENCE": AUDIENCE,
        }
    )
    assert settings.backend_tokens == (("chat", BACKEND_TOKEN), ("billing", "c" * 32))
    assert settings.jwt_public_key == pem(EC_KEY)
    assert settings.secured
    refused = {
        "PRESENCE_BACKEND_TOKENS": "chat:short",
        "PRESENCE_JWT_SECRET": "short",
        "PRESENCE_JWT_PUBLIC_KEY_FILE": str(tmp_path / "missing.pem"),
    }
    for name, value in refused.items():
        with pytest.raises(SettingsError, match=name):
            Settings.from_env(
                {name: value, "PRESENCE_JWT_ISSUER": ISSUER, "PRESENCE_JWT_AUDIENCE": AUDIENCE}
            )
    with pytest.raises(SettingsError, match="PRESENCE_JWT_AUDIENCE"):
        Settings.from_env({"PRESENCE_JWT_SECRET": HS_SECRET, "PRESENCE_JWT_ISSUER": ISSUER})
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)  # noqa: S505 - refused
    key_file.write_text(pem(weak))
    with pytest.raises(SettingsError, match="2048"):
        Settings.from_env(
            {
                "PRESENCE_JWT_PUBLIC_KEY_FILE": str(key_file),
                "PRESENCE_JWT_ISSUER": ISSUER,
                "PRESENCE_JWT_AUDIENCE": AUDIENCE,
            }
        )


async def test_the_request_log_names_the_backend_but_no_user(
    secured: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="gql_presence.requests"):
        for credential in ("backend token", "own token", "no token", "bad token"):
            await call(secured, OPERATIONS["presence"], CREDENTIALS[credential])
    callers = [
        getattr(r, "caller", None) for r in caplog.records if r.name == "gql_presence.requests"
    ]
    assert callers == ["backend:chat", "user", "anonymous", "anonymous"]
    assert "alice" not in caplog.text
