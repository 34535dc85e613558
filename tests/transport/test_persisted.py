"""Persisted documents: Apollo's automatic persisted queries, shared through Redis, and the
trusted-documents allow-list (PRESENCE_TRUSTED_DOCUMENTS)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from pytest_aiohttp import AiohttpClient
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from gql_presence.app import create_app
from gql_presence.graphql import document_limits
from gql_presence.graphql import persisted as persisted_documents
from gql_presence.running.redis_server import RedisServer
from gql_presence.settings import Settings, SettingsError
from gql_presence.store import PresenceStore
from gql_presence.store import deployment as store_deployment
from gql_presence.store.client import AnyRedis
from gql_presence.store.errors import BadInputError
from gql_presence.store.keys import Keys
from gql_presence.store.scripts import ScriptName, Scripts
from tests.conftest import TEST_SETTINGS, error_codes
from tests.helpers import (
    BACKEND_TOKEN,
    SECURED,
    counted_calls,
    eventually,
    graphql_socket,
    loud_records,
    over_socket,
    script_calls,
    socket_errors,
    user_token,
)

PRESENCE = 'query Alice { presence(userId: "alice") { online } }'
TOUCH = 'mutation { touch(userId: "alice") { online } }'
OTHER = '{ presence(userId: "alice") { online lastSeen } }'
ANSWER = {"data": {"presence": {"online": False}}}
OTHER_ANSWER = {"online": False, "lastSeen": None}
KEYS = Keys()
MAX_DOCUMENT_BYTES = 32 * 1024


def sha256(document: str) -> str:
    # A lone surrogate hashed as the three bytes Python's "surrogatepass" writes for it, as a
    # client that does not check its text would.
    return hashlib.sha256(document.encode("utf-8", "surrogatepass")).hexdigest()


def persisted(document: str) -> dict[str, Any]:
    return {"persistedQuery": {"version": 1, "sha256Hash": sha256(document)}}


async def post(
    client: TestClient[Any, Any], body: dict[str, Any], token: str | None = None
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = await client.post("/graphql", json=body, headers=headers)
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json()
    return answer


async def service(
    aiohttp_client: AiohttpClient, settings: Settings, **changes: Any
) -> TestClient[Any, Any]:
    return await aiohttp_client(create_app(dataclasses.replace(settings, **changes)))


async def kept_in_redis(redis: AnyRedis) -> int:
    """How many documents Redis keeps, counting both of their keys."""
    documents: int = await redis.hlen(KEYS.persisted_documents)
    used: int = await redis.zcard(KEYS.persisted_documents_used)
    return documents + used


def fan_out(levels: int) -> str:
    """Each fragment spreads the one before it twice: 2**levels selections once expanded."""
    fragments = ["fragment F0 on Query { weeklyStats { uniqueUsers } }"]
    fragments += [f"fragment F{i} on Query {{ ...F{i - 1} ...F{i - 1} }}" for i in range(1, levels)]
    return f"{{ ...F{levels - 1} }} " + " ".join(fragments)


def padded(document: str, size_bytes: int, character: str = "\U0001f600") -> str:
    """The document after a comment of `character`s, `size_bytes` bytes of UTF-8 in all."""
    room = size_bytes - len(f"#\n{document}".encode())
    count, rest = divmod(room, len(character.encode()))
    return f"#{character * count}{' ' * rest}\n{document}"


# --- the store ---------------------------------------------------------------------------------


async def test_the_store_keeps_documents_by_hash(store: PresenceStore) -> None:
    assert await store.persisted_document(sha256(PRESENCE)) is None
    await store.persist_document(sha256(PRESENCE), PRESENCE)
    assert await store.persisted_document(sha256(PRESENCE)) == PRESENCE


async def test_the_store_keeps_only_utf_8_documents_within_the_bytes_bound(
    store: PresenceStore,
) -> None:
    largest = padded(PRESENCE, MAX_DOCUMENT_BYTES)
    await store.persist_document(sha256(largest), largest)
    assert await store.persisted_document(sha256(largest)) == largest
    for document in (
        padded(PRESENCE, MAX_DOCUMENT_BYTES + 1),
        padded(PRESENCE, MAX_DOCUMENT_BYTES + 2, "\u00e9"),
        '{ presence(userId: "alice\ud800") { online } }',
    ):
        with pytest.raises(BadInputError):
            await store.persist_document(sha256(document), document)
        assert await store.persisted_document(sha256(document)) is None


async def test_the_store_refreshes_the_use_of_many_documents_in_one_call(redis: Redis) -> None:
    store = PresenceStore(redis, Settings())
    for name in ("a", "b"):
        await store.persist_document(sha256(name), name)
    await redis.zadd(KEYS.persisted_documents_used, {sha256("a"): 1, sha256("b"): 2})
    # "c" was never kept (or was forgotten): a refresh does not bring it back.
    assert await store.refresh_documents([sha256("a"), sha256("c")]) == 1
    used = KEYS.persisted_documents_used
    assert (await redis.zscore(used, sha256("a")) or 0) > 2
    assert await redis.zscore(used, sha256("b")) == 2
    assert await redis.zscore(used, sha256("c")) is None


async def test_beyond_the_cap_the_least_recently_used_document_is_forgotten(redis: Redis) -> None:
    scripts = Scripts.register(redis)
    keys = Keys()
    both = [keys.persisted_documents, keys.persisted_documents_used]

    async def persist(name: str) -> int:
        return int(
            await scripts.run(ScriptName.PERSIST_DOCUMENT, both, [name, f"{{{name}}}", 2, 1024, 0])
        )

    assert await persist("a") == 0
    assert await persist("b") == 0
    await redis.zadd(keys.persisted_documents_used, {"a": 10**15})  # "a" used most recently
    assert await persist("c") == 1
    assert await scripts.run(ScriptName.PERSISTED_DOCUMENT, both, ["b"]) is None
    assert await scripts.run(ScriptName.PERSISTED_DOCUMENT, both, ["a"]) == "{a}"
    assert await redis.hlen(keys.persisted_documents) == 2


async def test_the_script_keeps_no_document_over_its_bytes_whoever_calls(redis: Redis) -> None:
    scripts = Scripts.register(redis)
    both = [KEYS.persisted_documents, KEYS.persisted_documents_used]
    # Five bytes of UTF-8 in three characters: the script counts bytes.
    with pytest.raises(ResponseError, match="DOCUMENT_TOO_LARGE"):
        await scripts.run(ScriptName.PERSIST_DOCUMENT, both, ["a", "{\u00e9\u00e9", 2, 4, 0])
    assert await redis.exists(*both) == 0
    assert await scripts.run(ScriptName.PERSIST_DOCUMENT, both, ["a", "{\u00e9}", 2, 4, 0]) == 0


# --- automatic persisted queries --------------------------------------------------------------


async def test_an_unknown_hash_is_not_found_then_registered_with_its_query_for_every_process(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> None:
    first = await service(aiohttp_client, deployment)
    unknown = await post(first, {"extensions": persisted(PRESENCE)})
    assert unknown["errors"][0]["message"] == "PersistedQueryNotFound"
    assert error_codes(unknown) == ["PERSISTED_QUERY_NOT_FOUND"]

    registered = await post(first, {"query": PRESENCE, "extensions": persisted(PRESENCE)})
    assert registered == {"data": {"presence": {"online": False}}}
    by_hash = await post(first, {"extensions": persisted(PRESENCE)})
    assert by_hash == {"data": {"presence": {"online": False}}}

    another_process = await service(aiohttp_client, deployment)
    assert await post(another_process, {"extensions": persisted(PRESENCE)}) == by_hash


async def test_a_hash_that_is_not_the_querys_is_refused_and_registers_nothing(
    api: TestClient[Any, Any],
) -> None:
    wrong = await post(api, {"query": OTHER, "extensions": persisted(PRESENCE)})
    assert error_codes(wrong) == ["BAD_USER_INPUT"]
    assert "SHA-256" in wrong["errors"][0]["message"]
    assert error_codes(await post(api, {"extensions": persisted(PRESENCE)})) == [
        "PERSISTED_QUERY_NOT_FOUND"
    ]


# Documents that fail one check each: the token limit, the document limits, validation, parsing.
REFUSED_DOCUMENTS = {
    "over the token limit": "{ " + "__typename " * 2001 + "}",
    "too many aliases": "{ "
    + " ".join(f'a{i}: presence(userId: "a") {{ online }}' for i in range(16))
    + " }",
    "a fragment bomb": fan_out(40),
    "an unknown field": "{ nothing }",
    "an argument of the wrong type": "{ presence(userId: true) { online } }",
    "a syntax error": "{ presence(",
}


@pytest.mark.parametrize("document", REFUSED_DOCUMENTS.values(), ids=REFUSED_DOCUMENTS.keys())
async def test_a_document_refused_by_any_check_is_kept_nowhere(
    api: TestClient[Any, Any], http_redis: AnyRedis, document: str
) -> None:
    refused = await post(api, {"query": document, "extensions": persisted(document)})
    assert set(error_codes(refused)) == {"BAD_USER_INPUT"}, refused
    assert await kept_in_redis(http_redis) == 0
    # Nor by this process: by its hash alone, it is unknown.
    unknown = await post(api, {"extensions": persisted(document)})
    assert error_codes(unknown) == ["PERSISTED_QUERY_NOT_FOUND"]
    # The same checks hold for the document sent with its hash a second time.
    refused_again = await post(api, {"query": document, "extensions": persisted(document)})
    assert set(error_codes(refused_again)) == {"BAD_USER_INPUT"}
    assert await kept_in_redis(http_redis) == 0


async def test_a_document_is_bounded_in_bytes_whatever_its_characters(
    api: TestClient[Any, Any], http_redis: AnyRedis
) -> None:
    # 8,200 characters of 4 bytes each: fewer than 32 Ki characters, over 32 KiB.
    wide = padded(PRESENCE, 8200 * 4)
    assert len(wide) < MAX_DOCUMENT_BYTES < len(wide.encode())
    for body in ({"query": wide}, {"query": wide, "extensions": persisted(wide)}):
        refused = await post(api, body)
        assert error_codes(refused) == ["BAD_USER_INPUT"], refused
        assert f"at most {MAX_DOCUMENT_BYTES:,} bytes" in refused["errors"][0]["message"]
    assert await kept_in_redis(http_redis) == 0
    # The largest document allowed is kept whole, and takes what the limit says.
    largest = padded(PRESENCE, MAX_DOCUMENT_BYTES)
    assert await post(api, {"query": largest, "extensions": persisted(largest)}) == ANSWER
    stored = await http_redis.hstrlen(KEYS.persisted_documents, sha256(largest))
    assert stored == MAX_DOCUMENT_BYTES


async def test_a_lone_surrogate_is_bad_input_kept_nowhere_and_logged_quietly(
    api: TestClient[Any, Any], http_redis: AnyRedis, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG):
        for document in (
            '{ presence(userId: "alice\ud800") { online } }',
            f"# \udfff\n{PRESENCE}",
        ):
            for body in (
                {"query": document, "extensions": persisted(document)},
                {"query": document},
            ):
                # Sent as JSON escapes (`"\ud800"`), which decode to a lone surrogate.
                response = await api.post("/graphql", json=body)
                assert response.status == 200, await response.text()
                refused = await response.json()
                assert error_codes(refused) == ["BAD_USER_INPUT"], refused
            unknown = await post(api, {"extensions": persisted(document)})
            assert error_codes(unknown) == ["PERSISTED_QUERY_NOT_FOUND"]
    assert await kept_in_redis(http_redis) == 0
    assert loud_records(caplog) == []


async def test_a_registration_redis_cannot_take_is_unavailable_and_kept_nowhere(
    aiohttp_client: AiohttpClient, own_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    api = await service(aiohttp_client, TEST_SETTINGS, redis_url=own_redis_server.url)
    assert await post(api, {"query": OTHER}) == {"data": {"presence": OTHER_ANSWER}}
    own_redis_server.stop()
    with caplog.at_level(logging.DEBUG):
        # OTHER is planned already, PRESENCE not: the registration fails before either runs,
        # from its plan or through Strawberry.
        for document in (OTHER, PRESENCE):
            refused = await post(api, {"query": document, "extensions": persisted(document)})
            assert error_codes(refused) == ["UNAVAILABLE"]
    assert loud_records(caplog) == []
    own_redis_server.restart()
    for document in (OTHER, PRESENCE):
        unknown = await post(api, {"extensions": persisted(document)})
        assert error_codes(unknown) == ["PERSISTED_QUERY_NOT_FOUND"]


@pytest.mark.parametrize(
    "extensions",
    [
        {"persistedQuery": {"version": 2, "sha256Hash": sha256(PRESENCE)}},
        {"persistedQuery": {"version": 1, "sha256Hash": sha256(PRESENCE).upper()}},
        {"persistedQuery": {"version": 1}},
        {"persistedQuery": "yes"},
    ],
)
async def test_a_malformed_persisted_query_is_told_what_is_expected(
    api: TestClient[Any, Any], extensions: dict[str, Any]
) -> None:
    assert error_codes(await post(api, {"extensions": extensions})) == ["BAD_USER_INPUT"]


async def test_persisted_queries_over_get_where_get_is_allowed(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> None:
    client = await service(aiohttp_client, deployment, queries_over_get=True)

    async def get(document: str, *, with_query: bool) -> Any:
        params = {"extensions": json.dumps(persisted(document))}
        if with_query:
            params["query"] = document
        response = await client.get("/graphql", params=params)
        text = await response.text()
        return response.status, json.loads(text) if response.status == 200 else text

    assert (await get(PRESENCE, with_query=False))[1]["errors"][0]["message"] == (
        "PersistedQueryNotFound"
    )
    assert await get(PRESENCE, with_query=True) == (200, {"data": {"presence": {"online": False}}})
    assert await get(PRESENCE, with_query=False) == (200, {"data": {"presence": {"online": False}}})
    # A mutation known by its hash is still no GET request.
    await post(client, {"query": TOUCH, "extensions": persisted(TOUCH)})
    status, text = await get(TOUCH, with_query=False)
    assert status == 400
    assert "a mutation must be sent by post" in text.lower()


async def test_a_persisted_document_is_validated_once(
    api: TestClient[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    validated = counted_calls(monkeypatch, document_limits, "validate_document")
    await post(api, {"query": PRESENCE, "extensions": persisted(PRESENCE)})
    for _ in range(3):
        assert await post(api, {"extensions": persisted(PRESENCE)}) == {
            "data": {"presence": {"online": False}}
        }
    assert len(validated) == 1
    await post(api, {"query": OTHER})
    await post(api, {"query": OTHER})
    # A document sent as text is validated the first time; later requests run its plan,
    # made from the validated document (planned.py).
    assert len(validated) == 2


# --- recency, for every process ----------------------------------------------------------------


def others(count: int) -> list[str]:
    return [f'query Other{i} {{ presence(userId: "u{i}") {{ online }} }}' for i in range(count)]


async def score(redis: AnyRedis, document: str) -> float | None:
    found: float | None = await redis.zscore(KEYS.persisted_documents_used, sha256(document))
    return found


async def test_a_document_in_use_through_one_process_stays_kept_for_every_process(
    aiohttp_client: AiohttpClient,
    deployment: Settings,
    http_redis: AnyRedis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_deployment, "MAX_PERSISTED_DOCUMENTS", 3)
    monkeypatch.setattr(persisted_documents, "REFRESH_INTERVAL_S", 0.05, raising=False)
    first = await service(aiohttp_client, deployment)
    second = await service(aiohttp_client, deployment)
    old, older, newest = others(3)
    assert await post(first, {"query": PRESENCE, "extensions": persisted(PRESENCE)}) == ANSWER
    for document in (old, older):
        await post(second, {"query": document, "extensions": persisted(document)})
    # PRESENCE the least recently used of the three in Redis; then in use by its hash, from
    # the first process's own copy.
    used = {sha256(PRESENCE): 1, sha256(older): 2, sha256(old): 3}
    await http_redis.zadd(KEYS.persisted_documents_used, used)
    assert await post(first, {"extensions": persisted(PRESENCE)}) == ANSWER

    async def refreshed() -> bool:
        return (await score(http_redis, PRESENCE) or 0) > 3

    await eventually(refreshed, within_s=2, what="the first process's use to reach Redis")
    # A fourth document: the least recently used of the deployment is forgotten.
    await post(second, {"query": newest, "extensions": persisted(newest)})
    assert await score(http_redis, older) is None
    third = await service(aiohttp_client, deployment)
    assert await post(third, {"extensions": persisted(PRESENCE)}) == ANSWER


async def test_a_flood_of_registrations_does_not_evict_a_document_in_use(
    aiohttp_client: AiohttpClient,
    deployment: Settings,
    http_redis: AnyRedis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As 1,500 registrations within seconds against 1,000 kept: half as many again as the cap.
    monkeypatch.setattr(store_deployment, "MAX_PERSISTED_DOCUMENTS", 4)
    first = await service(aiohttp_client, deployment)
    flooding = await service(aiohttp_client, deployment)
    assert await post(first, {"query": PRESENCE, "extensions": persisted(PRESENCE)}) == ANSWER
    for _ in range(5):
        assert await post(first, {"extensions": persisted(PRESENCE)}) == ANSWER
    # Within the same seconds, long before the first process's interval of refresh ends.
    for document in others(6):
        await post(flooding, {"query": document, "extensions": persisted(document)})
    another_process = await service(aiohttp_client, deployment)
    assert await post(another_process, {"extensions": persisted(PRESENCE)}) == ANSWER
    # The flood's registrations, none used since, were forgotten in its place.
    assert await kept_in_redis(http_redis) == 2 * 4


async def test_uses_reach_redis_in_batches_not_one_call_per_request(
    aiohttp_client: AiohttpClient,
    deployment: Settings,
    http_redis: AnyRedis,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(persisted_documents, "REFRESH_BATCH", 2, raising=False)
    registering = await service(aiohttp_client, deployment)
    api = await service(aiohttp_client, deployment)
    (other,) = others(1)
    for document in (PRESENCE, other):
        await post(registering, {"query": document, "extensions": persisted(document)})
        await post(api, {"extensions": persisted(document)})  # its own copy, from Redis
    backdated = {sha256(PRESENCE): 1, sha256(other): 2}
    await http_redis.zadd(KEYS.persisted_documents_used, backdated)
    lookups = await script_calls(api, "persisted_document")
    for _ in range(3):
        assert await post(api, {"extensions": persisted(PRESENCE)}) == ANSWER
    # Answered from the process's own copy, with no Redis call; the same document used again
    # and again is one hash to refresh, and the batch is not full: no refresh yet.
    assert await script_calls(api, "persisted_document") == lookups
    assert await script_calls(api, "refresh_documents") == 0
    assert await score(http_redis, PRESENCE) == 1
    await post(api, {"extensions": persisted(other)})

    async def both_refreshed() -> bool:
        return (await score(http_redis, PRESENCE) or 0) > 2 and (
            await score(http_redis, other) or 0
        ) > 2

    # A full batch goes at once, long before the interval ends.
    await eventually(both_refreshed, within_s=2, what="a full batch of uses to reach Redis")


# --- trusted documents ------------------------------------------------------------------------


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    path = tmp_path / "persisted-documents.json"
    path.write_text(json.dumps({sha256(PRESENCE): PRESENCE}))
    return path


@pytest.fixture
async def trusting(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis, manifest: Path
) -> TestClient[Any, Any]:
    settings = dataclasses.replace(
        SECURED,
        redis_url=deployment.redis_url,
        trusted_documents=Settings.from_env(
            {"PRESENCE_TRUSTED_DOCUMENTS": str(manifest)}
        ).trusted_documents,
    )
    return await aiohttp_client(create_app(settings))


async def test_end_users_run_trusted_documents_by_hash_or_document_id(
    trusting: TestClient[Any, Any],
) -> None:
    alice = user_token("alice")
    answer = {"data": {"presence": {"online": False}}}
    assert await post(trusting, {"extensions": persisted(PRESENCE)}, alice) == answer
    assert await post(trusting, {"documentId": f"sha256:{sha256(PRESENCE)}"}, alice) == answer
    assert await post(trusting, {"documentId": sha256(PRESENCE)}, alice) == answer
    assert await post(trusting, {"query": PRESENCE}, alice) == answer  # the very text


async def test_end_users_are_refused_any_other_document(trusting: TestClient[Any, Any]) -> None:
    alice = user_token("alice")
    for body in (
        {"query": OTHER},
        {"query": OTHER, "extensions": persisted(OTHER)},
        {"extensions": persisted(OTHER)},
        {"documentId": sha256(OTHER)},
    ):
        refused = await post(trusting, body, alice)
        assert error_codes(refused) == ["FORBIDDEN"], body
        assert "trusted documents" in refused["errors"][0]["message"]


async def test_backends_may_still_send_any_document(trusting: TestClient[Any, Any]) -> None:
    body = await post(trusting, {"query": OTHER}, BACKEND_TOKEN)
    assert body["data"]["presence"]["online"] is False


async def test_over_a_websocket_end_users_run_only_trusted_documents(
    trusting: TestClient[Any, Any],
) -> None:
    async with graphql_socket(trusting, f"Bearer {user_token('alice')}") as socket:
        trusted = await over_socket(socket, PRESENCE, operation_id="1")
        assert trusted[0]["payload"] == {"data": {"presence": {"online": False}}}
        refused = socket_errors(await over_socket(socket, OTHER, operation_id="2"))
        assert [e["extensions"]["code"] for e in refused] == ["FORBIDDEN"]
        assert "trusted documents" in refused[0]["message"]
    async with graphql_socket(trusting, f"Bearer {BACKEND_TOKEN}") as socket:
        answer = await over_socket(socket, OTHER)
        assert answer[0]["payload"]["data"]["presence"]["online"] is False


def test_a_manifest_that_is_not_one_stops_the_start(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    for content in ("[]", "{", json.dumps({"0" * 64: PRESENCE}), json.dumps({sha256("x"): 1})):
        path.write_text(content)
        with pytest.raises(SettingsError, match="PRESENCE_TRUSTED_DOCUMENTS"):
            Settings.from_env({"PRESENCE_TRUSTED_DOCUMENTS": str(path)})
    with pytest.raises(SettingsError, match="cannot be read"):
        Settings.from_env({"PRESENCE_TRUSTED_DOCUMENTS": str(tmp_path / "missing.json")})
