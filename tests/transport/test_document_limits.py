"""A document's shape is checked in time linear in its text: fragments that expand to a
huge document, fields repeated to be compared in pairs, depth and aliases through fragments.
Callers without credentials are refused before their document is read, and with
introspection off no error suggests a name of the schema."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from graphql import get_introspection_query, parse

from gql_presence.app import create_app
from gql_presence.graphql.document_limits import measure
from gql_presence.policy.limits import MAX_ALIASES, MAX_DEPTH, MAX_SAME_FIELD_PAIRS, MAX_SELECTIONS
from gql_presence.settings import Settings
from gql_presence.store.client import AnyRedis
from tests.conftest import error_codes

Client = TestClient[Any, Any]


async def post(api: Client, query: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    response = await api.post("/graphql", json={"query": query}, headers=headers or {})
    body: dict[str, Any] = await response.json()
    return body


def messages(body: dict[str, Any]) -> str:
    return " | ".join(e["message"] for e in body.get("errors", []))


def fan_out(levels: int, leaf: str = "weeklyStats { uniqueUsers }") -> str:
    """Each fragment spreads the one before it twice: 2**levels copies of the leaf once
    expanded, in about 40 characters a level."""
    fragments = [f"fragment F0 on Query {{ {leaf} }}"]
    fragments += [f"fragment F{i} on Query {{ ...F{i - 1} ...F{i - 1} }}" for i in range(1, levels)]
    return f"{{ ...F{levels - 1} }} " + " ".join(fragments)


def nested(levels: int, leaf: str = "x") -> str:
    return "a { " * levels + leaf + " }" * levels


# Strawberry's depth and alias rules followed every spread anew: 25 levels held the process
# for over a minute, and each level doubles it. The request must now take a moment.
@pytest.mark.timeout(20)
async def test_a_fragment_fan_out_is_refused_with_the_bound_it_exceeds(api: Client) -> None:
    body = await post(api, fan_out(30))
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert f"at most {MAX_SELECTIONS:,} are allowed" in messages(body)
    assert "6,442,450,879 selections" in messages(body)  # each fragment's expansion, counted
    body = await post(api, fan_out(7))  # 64 copies of one field: far fewer, still refused
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert f"at most {MAX_SAME_FIELD_PAIRS:,} pairs are allowed" in messages(body)
    assert "'weeklyStats' is selected 64 times" in messages(body)


def test_measuring_a_document_visits_each_of_its_selections_once() -> None:
    for levels in (10, 40, 400):
        document = parse(fan_out(levels))
        written = 1 + 2 + 2 * (levels - 1)  # the operation's spread, F0's fields, two a level
        shape = measure(document)
        assert shape.visited == written  # never more than the text holds
        # Every fragment and the operation, each with its spreads expanded (a spread is a
        # selection too): F0 is 2, and each next one 2 spreads and twice the one before.
        fragments = [2 ** (i + 2) - 2 for i in range(levels)]
        assert shape.selections == sum(fragments) + 1 + fragments[-1]
    # Within the bound the expansion is walked too, once: still linear in what it stands for.
    small = measure(parse(fan_out(4)))
    assert small.visited == 1 + 2 + 2 * 3 + small.selections
    assert small.same_field_pairs > 0


async def test_fields_repeated_at_one_place_are_refused_beyond_the_pairs_allowed(
    api: Client,
) -> None:
    copies = 'presence(userId: "a") { online }'
    # 17 copies: 136 pairs of `presence` and as many of `presence.online`, within the bound.
    body = await post(api, "{ " + " ".join([copies] * 17) + " }")
    assert body == {"data": {"presence": {"online": False}}}
    body = await post(api, "{ " + " ".join([copies] * 220) + " }")
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "'presence' is selected 220 times" in messages(body)
    assert f"at most {MAX_SAME_FIELD_PAIRS:,} pairs are allowed" in messages(body)
    # Fragments count where they are spread: one fragment, many times side by side.
    spreads = " ".join(f"...A{i}" for i in range(60))
    fragments = " ".join(f"fragment A{i} on Query {{ {copies} }}" for i in range(60))
    body = await post(api, f"{{ {spreads} }} {fragments}")
    assert "'presence' is selected 60 times" in messages(body)


async def test_depth_is_limited_through_fragments_and_says_the_limit(api: Client) -> None:
    message = f"'Deep' exceeds maximum operation depth of {MAX_DEPTH}"
    # Fields the schema lacks are nested all the same, so that the depth is the document's.
    body = await post(api, f"query Deep {{ {nested(MAX_DEPTH + 1)} }}")
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert messages(body) == message
    body = await post(api, f"query Deep {{ {nested(MAX_DEPTH)} }}")
    assert message not in messages(body)  # refused only for the unknown fields
    body = await post(
        api,
        f"query Deep {{ {nested(4, '...G')} }} fragment G on Query {{ {nested(MAX_DEPTH - 3)} }}",
    )
    assert messages(body) == message


async def test_aliases_are_counted_every_time_their_fragment_is_spread(api: Client) -> None:
    document = fan_out(4, leaf="t: __typename")  # 8 spreads of F0
    body = await post(api, document.replace("{ ...F3 }", "{ ...F3 ...F3 }"))
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert messages(body) == f"16 aliases found. Allowed: {MAX_ALIASES}"
    assert "errors" not in await post(api, document)


async def test_the_introspection_query_is_within_every_limit(api: Client) -> None:
    body = await post(api, get_introspection_query(descriptions=True))
    assert "errors" not in body
    assert body["data"]["__schema"]["queryType"]["name"] == "Query"


@pytest.mark.timeout(20)
async def test_fragments_that_spread_each_other_are_refused_promptly(api: Client) -> None:
    cycle = (
        "{ ...A } fragment A on Query { ...B ...B __typename } fragment B on Query { ...A ...A }"
    )
    body = await post(api, cycle)
    assert error_codes(body)
    assert set(error_codes(body)) == {"BAD_USER_INPUT"}
    assert "Cannot spread fragment 'A' within itself" in messages(body)


@pytest.fixture
async def secured(aiohttp_client: Any, deployment: Settings, http_redis: AnyRedis) -> Client:
    settings = dataclasses.replace(deployment, backend_tokens=(("chat", "b" * 40),))
    client: Client = await aiohttp_client(create_app(settings))
    return client


async def test_a_caller_without_credentials_is_refused_before_the_document_is_read(
    secured: Client,
) -> None:
    # A document that does not even parse is refused for its missing credentials: the
    # refusal came first, and no work was spent on the document.
    for document in (
        "{ presence(",
        fan_out(25),
        'subscription { presenceChanged(friendsOf: "a") { kind } }',
    ):
        body = await post(secured, document)
        assert error_codes(body) == ["UNAUTHENTICATED"], body
        assert "Authorization: Bearer" in messages(body)
        assert "data" not in body or body["data"] is None
    with_token = {"Authorization": "Bearer " + "b" * 40}
    body = await post(secured, "{ presence(", with_token)
    assert "Syntax Error" in messages(body)


SUGGESTING = {
    "field": '{ presense(userId: "a") { online } }',
    "argument": '{ presence(usrId: "a") { online } }',
    "type": 'query($id: Strin!) { presence(userId: "a") { online } }',
    "subfield": '{ presence(userId: "a") { onlin } }',
}


async def test_errors_suggest_no_names_when_introspection_is_off(
    aiohttp_client: Any, deployment: Settings, http_redis: AnyRedis
) -> None:
    open_schema = await aiohttp_client(create_app(deployment))
    closed = await aiohttp_client(create_app(dataclasses.replace(deployment, introspection=False)))
    for kind, document in SUGGESTING.items():
        assert "Did you mean" in messages(await post(open_schema, document)), kind
        body = await post(closed, document)
        assert error_codes(body), kind
        assert set(error_codes(body)) == {"BAD_USER_INPUT"}, kind
        assert "Did you mean" not in messages(body), (kind, body)
