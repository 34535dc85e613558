"""Fuzzing the running service: generated queries and mutations, with values literal and in
variables, valid and not, each sent over HTTP and over WebSocket (graphql-transport-ws) to the
app on a real socket and a real Redis.

Whatever the document, the service must answer it as GraphQL: no 5xx, a JSON body with
`data` or `errors` (over WebSocket: results or an `error` message, then the operation's end,
the socket still open), and every error coded, none INTERNAL. Refusals are fine; faults are not.
The documents come from the committed schema.graphql through hypothesis-graphql, with
strategies of our own for the scalars that matter here (ids, times, dates, page sizes,
cursors), so that input validation is exercised at and beyond its edges while most
documents still get through to the resolvers and the scripts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any
from urllib.parse import quote

import graphql
import pytest
from aiohttp.test_utils import TestClient
from graphql import OperationDefinitionNode
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from pytest_aiohttp import AiohttpClient

from gql_presence.app import create_app
from gql_presence.graphql.document_limits import validate_document
from gql_presence.running.redis_server import RedisServer
from gql_presence.settings import Settings
from gql_presence.store import Keys
from gql_presence.store.client import AnyRedis
from gql_presence.store.errors import ErrorCode
from tests.conftest import TEST_SETTINGS
from tests.graphql_documents import (
    CURSOR_SECRET,
    MAX_BYTES,
    MAX_TOKENS,
    OPERATIONS,
    SCHEMA,
    TRANSPORTS,
    aliases,
    depth,
    persisted_bodies,
    several_operations,
    sha256_hex,
    with_variables,
    within_limits,
)
from tests.helpers import graphql_socket, loud_records, over_socket, socket_errors

Client = TestClient[Any, Any]


# Documents per fuzz test (a third as many of several operations): 250 take
# about 7 s on a 2-core machine, most of it spent generating them. No fixed seed: each run
# tries new documents, and Hypothesis replays any that failed before.
# GQLP_FUZZ_EXAMPLES=5000 (say) runs a longer fuzz.
EXAMPLES = int(os.environ.get("GQLP_FUZZ_EXAMPLES", "250"))
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    # One server for every example on purpose: the examples need no fresh state, and
    # starting the app per example would cost more than the fuzz itself.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def deployment(redis_server: RedisServer) -> Settings:
    """The service under test (the `api` fixture), with the secret the fuzz's cursors use,
    and bounds low enough that the examples, which share one Redis, soon meet them: a friend
    set or a user's sessions that are full must be refused, never a fault."""
    return dataclasses.replace(
        TEST_SETTINGS,
        redis_url=redis_server.url,
        cursor_secret=CURSOR_SECRET,
        max_friends=3,
        max_sessions=2,
    )


# --- What every answer must be.


async def answer(
    api: Client, document: str, variables: dict[str, Any] | None, operation_name: str | None = None
) -> list[dict[str, Any]]:
    """Sends the document and checks that the answer is GraphQL with coded, expected errors;
    returns the errors."""
    payload: dict[str, Any] = {"query": document, "variables": variables}
    if operation_name is not None:
        payload["operationName"] = operation_name
    response = await api.post("/graphql", json=payload)
    text = await response.text()
    shown = (
        f"{document}\nvariables: {variables!r}\noperationName: {operation_name!r}\n"
        f"-> {response.status} {text[:2000]}"
    )
    assert response.status < 500, shown
    body = json.loads(text)
    assert isinstance(body, dict), shown
    assert "data" in body or "errors" in body, shown
    errors = body.get("errors") or []
    codes = [(e.get("extensions") or {}).get("code") for e in errors]
    assert all(code in ErrorCode.__members__ for code in codes), shown
    assert ErrorCode.INTERNAL not in codes, shown
    return errors


async def answer_over_socket(
    api: Client, document: str, variables: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The same as answer(), over a WebSocket of its own."""
    async with graphql_socket(api) as socket:
        messages = await over_socket(socket, document, variables)
        shown = f"{document}\nvariables: {variables!r}\n-> {json.dumps(messages)[:2000]}"
        kinds = [m["type"] for m in messages]
        assert kinds in (["next", "complete"], ["error"]), shown
        errors = socket_errors(messages)
        codes = [(e.get("extensions") or {}).get("code") for e in errors]
        assert all(code in ErrorCode.__members__ for code in codes), shown
        assert ErrorCode.INTERNAL not in codes, shown
        assert not socket.closed, shown
    return errors


def record(errors: list[dict[str, Any]]) -> None:
    """What the example came to, for --hypothesis-show-statistics."""
    codes = sorted({e["extensions"]["code"] for e in errors})
    if not errors:
        event("answered without errors")
    elif any("path" not in e for e in errors):
        event("refused before execution")
    else:
        event(f"executed, refused in part: {','.join(codes)}")


@pytest.mark.slow
@FUZZ_SETTINGS
@given(document=OPERATIONS)
async def test_generated_operations_are_answered_without_a_fault(
    api: Client, document: str
) -> None:
    assume(within_limits(document))
    record(await answer(api, document, None))
    await answer_over_socket(api, document, None)


@pytest.mark.slow
@FUZZ_SETTINGS
@given(operation=with_variables())
async def test_generated_operations_with_variables_are_answered_without_a_fault(
    api: Client, operation: tuple[str, dict[str, Any]]
) -> None:
    document, variables = operation
    assume(within_limits(document))
    record(await answer(api, document, variables))
    await answer_over_socket(api, document, variables)


@pytest.mark.slow
@settings(FUZZ_SETTINGS, max_examples=max(EXAMPLES // 3, 1))
@given(operations=several_operations())
async def test_documents_of_several_operations_are_answered_without_a_fault(
    api: Client, operations: tuple[str, str | None]
) -> None:
    document, operation_name = operations
    assume(within_limits(document))
    record(await answer(api, document, None, operation_name))


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(document=OPERATIONS)
def test_generated_documents_are_well_within_the_limits(document: str) -> None:
    """hypothesis-graphql writes shallow documents, and aliases only where the members of a
    union select one field name of different types (the feed's `Change`: `kind`, `version`,
    `sessionId`); lists of ids are unbounded in principle but short in practice, so the
    `assume` above rarely skips one."""
    (operation,) = graphql.parse(document).definitions
    assert isinstance(operation, OperationDefinitionNode)
    assert aliases(operation.selection_set) <= len(("kind", "version", "sessionId"))
    assert depth(operation.selection_set) <= 4
    assert within_limits(document)


async def test_lone_surrogates_in_a_document_are_a_syntax_error(api: Client) -> None:
    """Lone surrogates are kept out of generated documents (one makes the whole document a
    syntax error) and sent in variables instead; here is the document case, once."""
    for literal in ('"alice\ud800"', '"alice\\ud800"'):
        errors = await answer(api, f"{{ presence(userId: {literal}) {{ online }} }}", None)
        assert [e["message"].split(":")[0] for e in errors] == ["Syntax Error"]


# --- federation's representations ----------------------------------------------------------------

# Any JSON value a gateway, or anyone else, could send as a representation.
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=140),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=10,
)
# Shaped like a User's, with anything where each of its fields goes: most get as far as the
# id's own check.
USER_LIKE = st.fixed_dictionaries(
    {
        "__typename": st.sampled_from(["User", "user", "UserPresence", "_Service", ""])
        | JSON_VALUES,
        "id": st.text(max_size=140) | JSON_VALUES,
    },
    optional={"name": JSON_VALUES, "presence": JSON_VALUES},
)
USERS = st.builds(lambda i: {"__typename": "User", "id": i}, st.text(min_size=1, max_size=130))
REPRESENTATIONS = st.lists(USERS, max_size=6) | st.lists(
    JSON_VALUES | USER_LIKE | USERS, max_size=6
)
ENTITIES = """
query($representations: [_Any!]!) {
  _entities(representations: $representations) { __typename ... on User { id presence { online } } }
}"""


@pytest.fixture
async def federated_api(aiohttp_client: AiohttpClient, deployment: Settings) -> Client:
    return await aiohttp_client(create_app(dataclasses.replace(deployment, federation=True)))


# --- Persisted documents: bodies naming a document by its hash, right and wrong in every
# member, sent as JSON of three encodings and as GET parameters. Whatever the body: no 5xx,
# no INTERNAL, nothing logged above WARNING nor with a stack trace; and Redis holds only
# documents that passed every check, each under its own hash.


@pytest.fixture
async def persisted_api(
    aiohttp_client: AiohttpClient, deployment: Settings, http_redis: AnyRedis
) -> Client:
    """The service, with queries over GET too (persisted queries' other transport)."""
    return await aiohttp_client(create_app(dataclasses.replace(deployment, queries_over_get=True)))


async def send(api: Client, body: dict[str, Any], transport: str) -> tuple[int, str, str]:
    if transport == "get":
        # Each member as GraphQL over HTTP's GET carries it: text as it is, the rest as JSON;
        # a lone surrogate percent-encoded as the bytes "surrogatepass" writes.
        params = [(k, v if isinstance(v, str) else json.dumps(v)) for k, v in body.items()]
        query = "&".join(
            f"{quote(k)}={quote(v, safe='', errors='surrogatepass')}" for k, v in params
        )
        response = await api.get(f"/graphql?{query}")
    else:
        text = json.dumps(body, ensure_ascii=transport == "json")
        encoding = "utf-16" if transport == "utf-16" else "utf-8"
        response = await api.post(
            "/graphql",
            data=text.encode(encoding, "surrogatepass"),
            headers={"Content-Type": "application/json"},
        )
    return response.status, response.content_type, await response.text()


def check_answer(status: int, content_type: str, text: str, shown: str) -> str:
    """Checks the answer; returns what it came to, for --hypothesis-show-statistics."""
    shown = f"{shown}\n-> {status} {text[:2000]}"
    assert status < 500, shown
    if status != 200 or content_type != "application/json":
        # Refused by HTTP (a GET mutation, a body that is not JSON), said in the text; or a
        # GET that names no document, which gets GraphiQL's page.
        reason = text.partition('"')[0][:60]  # without what the body named
        return f"HTTP {status} {content_type} {reason}"
    answer = json.loads(text)
    assert isinstance(answer, dict), shown
    codes = [str((e.get("extensions") or {}).get("code")) for e in answer.get("errors") or []]
    assert all(code in ErrorCode.__members__ for code in codes), shown
    assert ErrorCode.INTERNAL not in codes, shown
    return ",".join(sorted(set(codes))) or "answered without errors"


async def only_checked_documents_are_kept(redis: AnyRedis) -> None:
    key = Keys().persisted_documents
    # Read as text: redis-py decodes UTF-8 strictly, so a document that is not fails here.
    kept = await redis.hgetall(key)
    for sha256, document in kept.items():
        assert isinstance(sha256, str)
        assert isinstance(document, str)
        assert await redis.hstrlen(key, sha256) <= MAX_BYTES, sha256
        assert sha256_hex(document) == sha256
        parsed = graphql.parse(document, max_tokens=MAX_TOKENS)
        assert validate_document(SCHEMA, parsed, tuple(graphql.specified_rules), True) == []


@pytest.mark.slow
@FUZZ_SETTINGS
@given(representations=REPRESENTATIONS)
async def test_any_representations_are_answered_without_a_fault(
    federated_api: Client, caplog: pytest.LogCaptureFixture, representations: list[Any]
) -> None:
    variables = {"representations": representations}
    caplog.clear()
    with caplog.at_level(logging.INFO):
        record(await answer(federated_api, ENTITIES, variables))
        await answer_over_socket(federated_api, ENTITIES, variables)
    faults = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not faults, [r.getMessage() for r in faults]


@pytest.mark.slow
@FUZZ_SETTINGS
@given(body=persisted_bodies(), transport=TRANSPORTS)
async def test_persisted_document_bodies_are_answered_without_a_fault(
    persisted_api: Client,
    http_redis: AnyRedis,
    caplog: pytest.LogCaptureFixture,
    body: dict[str, Any],
    transport: str,
) -> None:
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        # The body, then the same by its hash alone (registered by the first, or not).
        for step, sent in enumerate((body, {k: v for k, v in body.items() if k != "query"})):
            answer = await send(persisted_api, sent, transport)
            outcome = check_answer(*answer, f"{transport}: {json.dumps(sent)[:2000]}")
            event(f"{('as sent', 'by hash alone')[step]}: {outcome}")
    assert loud_records(caplog) == [], json.dumps(body)[:2000]
    await only_checked_documents_are_kept(http_redis)
