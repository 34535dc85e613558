"""Planned execution (gql_presence/planned.py) answers exactly as the full path does.

The differential tests run two services side by side: one with planned execution off
(Strawberry's view and graphql-core's executor, as before) and one where documents are
planned, each on a private Redis of its own. Both Redis servers are seeded alike and every
request goes to both, in the same order, so that their data stay the same: a mutation
changes each of them once. Before a request, the planned service is given the plan its own
full path would have recorded (a document that parses and validates against the schema is
planned, as PlanRecorder does after validation), so the planned side runs the plan whenever
the plan covers the request, and its full path otherwise.

The answers must be the same: status, content type, and the JSON body (data, and each
error's message, path, locations and extensions). One thing differs honestly: each Redis
stamps a touch with its own clock when the touch reaches it, a fraction of a millisecond
apart, so every ISO 8601 time in a body is compared by its format only, and so is a
cursor, which encodes a last-seen time or a position in the feed. Whether each generated document ran planned, or
the full way and why, is counted with hypothesis `event()` (`--hypothesis-show-statistics`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import inspect
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable, Generator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import graphql
import pytest
import strawberry
from aiohttp import web
from aiohttp.test_utils import TestClient
from graphql import (
    GraphQLArgument,
    GraphQLBoolean,
    GraphQLField,
    GraphQLInt,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLString,
    OperationDefinitionNode,
)
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from strawberry.schema.config import StrawberryConfig

from gql_presence.app import create_app
from gql_presence.graphql.plan_run import Leaf, NonNull, ObjectFields, PlannedField
from gql_presence.graphql.planned import Plan, Plans, make_plan
from gql_presence.graphql.scalars import DateTimeScalar
from gql_presence.graphql.schema import build_schema
from gql_presence.graphql.types import PresenceStatus, UserPresence
from gql_presence.http.app_keys import AUTHENTICATOR, STORE
from gql_presence.http.view import PresenceView
from gql_presence.running.connection import connect, redis_client
from gql_presence.running.redis_server import RedisServer
from gql_presence.settings import Settings
from gql_presence.store import Presence
from gql_presence.store.models import ListedUser
from tests.conftest import TEST_SETTINGS, ClientFactory
from tests.graphql_documents import CURSOR_SECRET, several_operations, with_variables, within_limits
from tests.helpers import BACKEND_TOKEN, SECURED, counted_calls, user_token

Client = TestClient[Any, Any]

# A few hundred generated documents in all keep this under about 15 s on a 2-core machine;
# GQLP_FUZZ_EXAMPLES=5000 (say) runs a longer comparison, as it does the fuzz.
EXAMPLES = int(os.environ.get("GQLP_FUZZ_EXAMPLES", "150"))
DIFFERENTIAL = settings(
    max_examples=EXAMPLES,
    deadline=None,
    # One pair of services for every example on purpose: their data only have to be alike.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

TOUCH_AT = "mutation($u: ID!, $s: ID, $at: DateTime) { touch(userId: $u, sessionId: $s, at: $at) { online } }"
SESSIONS = [("alice", "phone"), ("alice", None), ("bob", None), ("carol", "tab"), ("dave", None)]


def seed() -> list[tuple[str, dict[str, Any]]]:
    """The same data for both sides: users active a few seconds ago, one second apart, in
    sessions, with friends."""
    start = datetime.now(UTC).replace(microsecond=0)
    touches = [
        (TOUCH_AT, {"u": u, "s": s, "at": (start - timedelta(seconds=n)).isoformat()})
        for n, (u, s) in enumerate(SESSIONS, start=1)
    ]
    friends = {"u": "alice", "f": ["bob", "carol", "dave", "ß"]}
    return [
        *touches,
        ("mutation($u: ID!, $f: [ID!]!) { addFriends(userId: $u, friendIds: $f) }", friends),
    ]


@dataclasses.dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    retry_after: str | None
    body: Any


@dataclasses.dataclass
class Twins:
    """A service with planned execution off and one with it on, on Redis servers alike."""

    full: Client
    planned: Client
    plans: Plans

    async def both(
        self,
        query: str,
        variables: dict[str, Any] | None = None,
        operation_name: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[Answer, str]:
        """The answer of both services, the same, and how the planned one answered:
        "planned", or why it took the full path."""
        fallback = self.prime(query, variables, operation_name)
        plan = self.plans.get(query, operation_name)
        runs = plan.runs if plan else 0
        payload: dict[str, Any] = {"query": query, "variables": variables}
        if operation_name is not None:
            payload["operationName"] = operation_name
        full = await _answer(self.full, payload, headers)
        planned = await _answer(self.planned, payload, headers)
        shown = f"{query}\nvariables: {variables!r} operationName: {operation_name!r}"
        assert comparable(planned) == comparable(full), shown
        ran = plan is not None and plan.runs == runs + 1
        if fallback is None:
            return planned, "planned" if ran else "refused before execution"
        assert not ran, shown
        return planned, fallback

    async def both_raw(self, body: bytes, content_type: str) -> Answer:
        """The answer of both services, the same, to a body sent as it is."""
        headers = {"Content-Type": content_type}
        full = await _raw_answer(self.full, body, headers)
        planned = await _raw_answer(self.planned, body, headers)
        assert comparable(planned) == comparable(full), body
        return planned

    def prime(
        self, query: str, variables: dict[str, Any] | None, operation_name: str | None
    ) -> str | None:
        """Plans the document as the planned service's full path would; why the plan will
        not run these variables (None: it will)."""
        try:
            document = graphql.parse(query)
        except graphql.GraphQLError:
            return "syntax error"
        if graphql.validate(SCHEMA, document):
            return "invalid document"
        operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        first = operations[0].name.value if operations and operations[0].name else None
        plan = self.plans.learn(SCHEMA, query, operation_name, operation_name or first, document)
        if not isinstance(plan, Plan):
            return plan
        return plan.covers(variables)


SCHEMA = build_schema()._schema  # graphql-core's schema, as the service's own


async def _answer(
    client: Client, payload: dict[str, Any], headers: dict[str, str] | None
) -> Answer:
    headers = {"Content-Type": "application/json", **(headers or {})}
    return await _raw_answer(client, json.dumps(payload).encode(), headers)


async def _raw_answer(client: Client, body: bytes, headers: dict[str, str]) -> Answer:
    response = await client.post("/graphql", data=body, headers=headers)
    text = await response.text()
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        parsed = text
    return Answer(
        response.status,
        response.headers.get("Content-Type", ""),
        response.headers.get("Retry-After"),
        parsed,
    )


_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


def comparable(answer: Answer) -> Answer:
    """The answer with times and cursors reduced to their format (see the module's text)."""

    def reduced(value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {k: reduced(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [reduced(v) for v in value]
        if isinstance(value, str):
            if key in {"endCursor", "feedCursor", "cursor"}:
                return "<cursor>"
            return _TIME.sub("<time>", value)
        return value

    return dataclasses.replace(answer, body=reduced(answer.body))


def _view(app: web.Application) -> PresenceView:
    (view,) = [r.handler for r in app.router.routes() if isinstance(r.handler, PresenceView)]
    return view


TwinsFactory = Callable[..., Awaitable[Twins]]


@pytest.fixture
def make_twins(
    aiohttp_client: ClientFactory, redis_server: RedisServer, twin_redis_server: RedisServer
) -> TwinsFactory:
    async def make(base: Settings = TEST_SETTINGS) -> Twins:
        clients = []
        for server, planned in ((redis_server, False), (twin_redis_server, True)):
            settings = dataclasses.replace(
                base, redis_url=server.url, cursor_secret=CURSOR_SECRET, planned_execution=planned
            )
            async with connect(settings) as redis:
                await redis.client.flushall()
            clients.append(await aiohttp_client(create_app(settings)))
        plans = _view(clients[1].app).pipeline.plans
        assert plans is not None
        twins = Twins(clients[0], clients[1], plans)
        backend = {"Authorization": f"Bearer {BACKEND_TOKEN}"} if base.backend_tokens else None
        for query, variables in seed():
            answer, _ = await twins.both(query, variables, headers=backend)
            assert "errors" not in answer.body, answer
        return twins

    return make


@pytest.fixture
async def twins(make_twins: TwinsFactory) -> Twins:
    return await make_twins()


class _VariablesUsed(graphql.Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def enter_variable(self, node: graphql.VariableNode, *_: object) -> None:
        self.names.add(node.name.value)


@st.composite
def one_root_field(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A generated operation (with variables, as `with_variables`) cut down to one of its
    root fields, as most clients send them, and as plans cover them."""
    document, variables = draw(with_variables())
    (operation,) = graphql.parse(document).definitions
    assert isinstance(operation, OperationDefinitionNode)
    selections = operation.selection_set.selections
    kept = selections[draw(st.integers(0, len(selections) - 1))]
    used = _VariablesUsed()
    graphql.visit(kept, used)
    operation = dataclasses.replace(
        operation,
        selection_set=dataclasses.replace(operation.selection_set, selections=(kept,)),
        variable_definitions=tuple(
            d for d in operation.variable_definitions or () if d.variable.name.value in used.names
        ),
    )
    return graphql.print_ast(graphql.DocumentNode(definitions=(operation,))), variables


def _count(how: str) -> None:
    event(how if how == "planned" else f"full path: {how}")


@DIFFERENTIAL
@given(operation=one_root_field() | with_variables(), named=st.booleans())
async def test_generated_operations_answer_alike_planned_or_not(
    twins: Twins, operation: tuple[str, dict[str, Any]], named: bool
) -> None:
    document, variables = operation
    assume(within_limits(document))
    _, how = await twins.both(document, variables, "Fuzz" if named else None)
    _count(how)


@settings(DIFFERENTIAL, max_examples=max(EXAMPLES // 3, 1))
@given(operations=several_operations())
async def test_documents_of_several_operations_answer_alike_planned_or_not(
    twins: Twins, operations: tuple[str, str | None]
) -> None:
    document, operation_name = operations
    assume(within_limits(document))
    _, how = await twins.both(document, None, operation_name)
    _count(how)


# --- The tricky parts, one by one, through both services.

PRESENCE = "query($u: ID!) { presence(userId: $u) { userId online sessions { sessionId } } }"


async def test_a_planned_query_answers_as_the_full_path(twins: Twins) -> None:
    answer, how = await twins.both(PRESENCE, {"u": "alice"})
    assert how == "planned"
    sessions = answer.body["data"]["presence"]["sessions"]
    assert sorted(s["sessionId"] for s in sessions) == ["default", "phone"]


async def test_a_planned_mutation_changes_the_data_once(twins: Twins) -> None:
    kick = 'mutation { kick(userId: "alice", sessionId: "phone") { kickedSessions online } }'
    answer, how = await twins.both(kick)
    assert how == "planned"
    assert answer.body == {"data": {"kick": {"kickedSessions": 1, "online": True}}}
    again, _ = await twins.both(kick)
    assert again.body["data"]["kick"]["kickedSessions"] == 0


async def test_a_bad_id_nulls_the_whole_answer_with_bad_user_input(twins: Twins) -> None:
    answer, how = await twins.both(PRESENCE, {"u": ""})
    assert how == "planned"
    assert answer.body["data"] is None
    (error,) = answer.body["errors"]
    assert error["path"] == ["presence"]
    assert error["locations"] == [{"line": 1, "column": 18}]
    assert error["extensions"]["code"] == "BAD_USER_INPUT"


async def test_a_strangers_presence_is_forbidden_to_an_end_user(
    make_twins: TwinsFactory,
) -> None:
    twins = await make_twins(SECURED)
    bob = {"Authorization": f"Bearer {user_token('bob')}"}
    answer, how = await twins.both(PRESENCE, {"u": "stranger"}, headers=bob)
    assert how == "planned"
    assert [e["extensions"]["code"] for e in answer.body["errors"]] == ["FORBIDDEN"]
    own, _ = await twins.both(PRESENCE, {"u": "bob"}, headers=bob)
    assert own.body["data"]["presence"]["userId"] == "bob"


async def test_refused_credentials_and_rates_answer_alike(make_twins: TwinsFactory) -> None:
    twins = await make_twins(dataclasses.replace(SECURED, user_rate=0.01, user_burst=1))
    bad = {"Authorization": "Bearer not-a-token"}
    refused, how = await twins.both(PRESENCE, {"u": "bob"}, headers=bad)
    assert how == "refused before execution"
    assert [e["extensions"]["code"] for e in refused.body["errors"]] == ["UNAUTHENTICATED"]
    bob = {"Authorization": f"Bearer {user_token('bob')}"}
    _, how = await twins.both(PRESENCE, {"u": "bob"}, headers=bob)
    assert how == "planned"
    limited, how = await twins.both(PRESENCE, {"u": "bob"}, headers=bob)
    assert how == "refused before execution"
    assert limited.status == 429
    assert limited.retry_after is not None


@pytest.mark.slow
async def test_a_planned_request_over_its_time_budget_gets_unavailable(
    make_twins: TwinsFactory, redis_server: RedisServer, twin_redis_server: RedisServer
) -> None:
    twins = await make_twins(dataclasses.replace(TEST_SETTINGS, request_timeout_ms=300))
    sleepers = [redis_client(s.url) for s in (redis_server, twin_redis_server)]
    gc.collect()  # the suite's garbage collections are not the service's time
    gc.disable()
    try:
        busy = [
            asyncio.create_task(s.execute_command("DEBUG", "SLEEP", "1"))  # type: ignore[no-untyped-call]
            for s in sleepers
        ]
        await asyncio.sleep(0.05)
        late, how = await twins.both(PRESENCE, {"u": "alice"})
        assert how == "planned"
        assert [e["extensions"]["code"] for e in late.body["errors"]] == ["UNAVAILABLE"]
        await asyncio.gather(*busy)
        # Each later request gets its own reply, not the one the stopped request left behind.
        answer, _ = await twins.both(PRESENCE, {"u": "bob"})
        assert answer.body["data"]["presence"]["userId"] == "bob"
    finally:
        gc.enable()
        for sleeper in sleepers:
            await sleeper.aclose()


SKIPPED = """query($u: ID!, $bare: Boolean!, $more: Boolean = true) {
  presence(userId: $u) {
    userId @skip(if: $bare)
    online @include(if: $more)
    ... on UserPresence @skip(if: $bare) { sessions { sessionId } }
  }
}"""


@pytest.mark.parametrize(
    ("variables", "keys"),
    [
        ({"bare": False}, ["userId", "online", "sessions"]),
        ({"bare": True}, ["online"]),
        ({"bare": True, "more": False}, []),
        ({"bare": False, "more": None}, None),  # a condition in error: the full path's answer
    ],
)
async def test_skip_and_include_with_variables(
    twins: Twins, variables: dict[str, Any], keys: list[str] | None
) -> None:
    answer, how = await twins.both(SKIPPED, {"u": "alice", **variables})
    if keys is None:
        assert how == "not covered"
        assert answer.body["data"] is None
        return
    assert how == "planned"
    assert list(answer.body["data"]["presence"]) == keys


async def test_fragment_spreads_on_one_field_are_merged(twins: Twins) -> None:
    query = """{ presence(userId: "alice") { ...Ids ...Times sessions { sessionId } } }
    fragment Ids on UserPresence { userId sessions { sessionId } }
    fragment Times on UserPresence { sessions { lastSeen } lastSeen }"""
    answer, how = await twins.both(query)
    assert how == "planned"
    presence = answer.body["data"]["presence"]
    assert list(presence) == ["userId", "sessions", "lastSeen"]
    assert all(list(s) == ["sessionId", "lastSeen"] for s in presence["sessions"])


async def test_aliases_and_typename(twins: Twins) -> None:
    query = '{ me: presence(userId: "bob") { t: __typename id: userId on: online } }'
    answer, how = await twins.both(query)
    assert how == "planned"
    assert answer.body == {"data": {"me": {"t": "UserPresence", "id": "bob", "on": True}}}
    root, root_how = await twins.both("{ __typename }")
    assert root_how == "planned"
    assert root.body == {"data": {"__typename": "Query"}}


TWO_OPERATIONS = """query Mine { presence(userId: "alice") { online } }
query Friends { friends(userId: "alice") }"""


async def test_the_operation_named_is_the_one_run(twins: Twins) -> None:
    answer, how = await twins.both(TWO_OPERATIONS, operation_name="Friends")
    assert how == "planned"
    assert answer.body == {"data": {"friends": ["bob", "carol", "dave", "ß"]}}


async def test_several_operations_and_no_name_run_the_first(twins: Twins) -> None:
    answer, how = await twins.both(TWO_OPERATIONS)
    assert how == "planned"
    assert answer.body == {"data": {"presence": {"online": True}}}
    unknown, unknown_how = await twins.both(TWO_OPERATIONS, operation_name="Nope")
    assert unknown_how == "no such operation"
    assert unknown.status == 400


async def test_the_root_fields_of_a_mutation_run_in_turn_until_one_fails(twins: Twins) -> None:
    mutation = """mutation($bad: ID!) {
      a: touch(userId: "zed") { online }
      b: touch(userId: $bad) { online }
      c: kick(userId: "zed") { kickedSessions }
    }"""
    answer, how = await twins.both(mutation, {"bad": ""})
    assert how == "planned"
    assert answer.body["data"] is None
    assert [e["path"] for e in answer.body["errors"]] == [["b"]]
    still, _ = await twins.both(PRESENCE, {"u": "zed"})
    assert still.body["data"]["presence"]["online"]  # the kick after the error never ran
    answer, how = await twins.both(mutation, {"bad": "zoe"})
    assert how == "planned"
    assert answer.body == {
        "data": {"a": {"online": True}, "b": {"online": True}, "c": {"kickedSessions": 1}}
    }


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ('{ a: presence(userId: "bob") { online } b: friends(userId: "bob") }', "not covered"),
        ("{ __schema { queryType { name } } }", "not covered"),
        ('{ presence(userId: "bob") { online } __typename }', "not covered"),
        ("query($n: Int!) { onlineUsers(first: $n) { totalCount } }", "variables in error"),
    ],
)
async def test_what_plans_do_not_cover_runs_the_full_path(
    twins: Twins, query: str, reason: str
) -> None:
    _, how = await twins.both(query, {"n": "ten"} if "$n" in query else None)
    assert how == reason


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ({"query": PRESENCE, "variables": {"u": "bob"}}, "application/json; charset=utf-8"),
        ({"query": PRESENCE, "variables": {"u": "bob"}}, "text/plain"),
        ({"query": PRESENCE, "variables": ["bob"]}, "application/json"),
        ({"query": PRESENCE, "variables": {"u": "bob"}, "extensions": 1}, "application/json"),
        ({"query": PRESENCE, "variables": {"u": "bob"}, "operationName": 1}, "application/json"),
        ([{"query": PRESENCE, "variables": {"u": "bob"}}], "application/json"),
        (PRESENCE, "application/json"),
        ("{not json", "application/json"),
    ],
)
async def test_bodies_other_than_a_plain_request_answer_alike(
    twins: Twins, body: object, content_type: str
) -> None:
    """Whatever the planned service's short way does not take is answered the full way."""
    await twins.both(PRESENCE, {"u": "bob"})  # planned from now on
    raw = b"{not json" if body == "{not json" else json.dumps(body).encode()
    answer = await twins.both_raw(raw, content_type)
    assert answer.status in (200, 400, 415)  # 415: a body that is not application/json


async def test_a_document_not_planned_yet_has_its_body_read_and_its_caller_checked_once(
    twins: Twins, monkeypatch: pytest.MonkeyPatch
) -> None:
    view = _view(twins.planned.app)
    authenticator = twins.planned.app[AUTHENTICATOR]
    parsed = counted_calls(monkeypatch, view, "parse_json")
    authenticated = counted_calls(monkeypatch, authenticator, "caller")
    new = '{ presence(userId: "carol") { online } }'
    response = await twins.planned.post("/graphql", json={"query": new})
    assert "errors" not in await response.json()
    assert twins.plans.get(new, None) is not None  # planned on the way, for the next time
    assert (len(parsed), len(authenticated)) == (1, 1)


async def test_a_plan_is_made_only_for_a_document_that_validated(twins: Twins) -> None:
    invalid = '{ presence(userId: "bob") { nosuchfield } }'
    response = await twins.planned.post("/graphql", json={"query": invalid})
    assert (await response.json())["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert twins.plans.get(invalid, None) is None
    valid = '{ presence(userId: "bob") { online } }'
    await twins.planned.post("/graphql", json={"query": valid})
    assert twins.plans.get(valid, None) is not None


async def test_a_planned_request_is_logged_as_any_other(
    twins: Twins, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="gql_presence.requests"):
        _, how = await twins.both(PRESENCE, {"u": ""})
    assert how == "planned"
    logged = [(r.operation, r.outcome, r.status) for r in caplog.records]  # type: ignore[attr-defined]
    assert logged == [("query:presence", "BAD_USER_INPUT", 200)] * 2


# --- graphql-core's own executor against a plan, on a schema made to fail: nulls, errors
# and their propagation through non-null fields and lists.


def _item(value: dict[str, Any], info: Any) -> Any:
    return value.get(info.field_name)


def _fails(_value: object, _info: object) -> str:
    raise ValueError("this field always fails")


async def _late(value: dict[str, Any], info: Any) -> Any:
    return value.get(info.field_name)


ITEM: GraphQLObjectType = GraphQLObjectType(
    "Item",
    lambda: {
        "name": GraphQLField(GraphQLNonNull(GraphQLString), resolve=_item),
        "nick": GraphQLField(GraphQLString, resolve=_item),
        "size": GraphQLField(GraphQLInt, resolve=_item),
        "fails": GraphQLField(GraphQLString, resolve=_fails),
        "mustNot": GraphQLField(GraphQLNonNull(GraphQLString), resolve=_fails),
        "late": GraphQLField(GraphQLString, resolve=_late),
        "lateName": GraphQLField(GraphQLNonNull(GraphQLString), resolve=_late),
        "children": GraphQLField(GraphQLList(GraphQLNonNull(ITEM)), resolve=_item),
        "kids": GraphQLField(GraphQLNonNull(GraphQLList(ITEM)), resolve=_item),
    },
)
TREE = {
    "name": "root",
    "late": "soon",
    "lateName": None,
    "size": "not an int",
    "children": [{"name": "a"}, {"name": None}],
    "kids": [{"name": "b", "lateName": "x"}, None, {"name": None}],
}


async def _done(_value: object, info: Any) -> str:
    return f"{info.field_name} done"


FAILING = GraphQLSchema(
    GraphQLObjectType(
        "Query",
        {
            "item": GraphQLField(ITEM, resolve=lambda *_: TREE),
            "sure": GraphQLField(GraphQLNonNull(ITEM), resolve=lambda *_: TREE),
            "echo": GraphQLField(
                GraphQLString,
                args={"flag": GraphQLArgument(GraphQLNonNull(GraphQLBoolean))},
                resolve=lambda _v, _i, flag: str(flag),
            ),
        },
    ),
    GraphQLObjectType(
        "Mutation",
        {
            "done": GraphQLField(GraphQLString, resolve=_done),
            "soft": GraphQLField(GraphQLString, resolve=_fails),
            "hard": GraphQLField(GraphQLNonNull(GraphQLString), resolve=_fails),
            "item": GraphQLField(ITEM, resolve=lambda *_: TREE),
        },
    ),
)


@pytest.mark.parametrize(
    "query",
    [
        "{ item { name nick } }",
        "{ item { size } }",
        "{ item { fails nick } }",
        "{ item { mustNot nick } }",
        "{ sure { mustNot } }",
        "{ item { children { name } } }",
        "{ item { kids { name } } }",
        "{ item { kids { lateName } } }",
        "{ item { late lateName } }",
        "{ sure { kids { name lateName } children { name } } }",
        "{ item { a: name b: name ... on Item { fails } } }",
        "query($f: Boolean!) { echo(flag: $f) }",
        "mutation { a: done b: soft c: done item { mustNot } d: done }",
        "mutation { a: done b: hard c: done }",
        "mutation { __typename a: done item { kids { lateName } } }",
    ],
)
async def test_nulls_and_errors_propagate_as_in_graphql_core(query: str) -> None:
    await _same_as_graphql_core(FAILING, query, {"f": True})


async def _same_as_graphql_core(
    schema: GraphQLSchema, query: str, variables: dict[str, Any]
) -> None:
    document = graphql.parse(query)
    assert graphql.validate(schema, document) == []
    expected = graphql.execute(schema, document, variable_values=variables)
    if inspect.isawaitable(expected):
        expected = await expected
    assert isinstance(expected, graphql.ExecutionResult)
    plan = make_plan(schema, document, None)
    assert isinstance(plan, Plan)
    got = await plan.run(None, variables)
    assert got is not None
    assert got.data == expected.data
    assert [e.formatted for e in got.errors or []] == [e.formatted for e in expected.errors or []]


# --- Strawberry's plain attributes, which a plan reads itself and completes without a path
# when their value is a plain one: values of every other kind take the general way.


class Soon:
    """An awaitable attribute value (that may go unawaited when a sibling fails)."""

    def __init__(self, value: object) -> None:
        self.value = value

    def __await__(self) -> Generator[None, None, object]:
        return self.value
        yield  # a generator: awaiting it returns the value at once


def odd_values() -> list[dict[str, Any]]:
    """Attribute values of every kind: plain, null, of the wrong type, awaitable."""
    at = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    return [
        {"text": "t", "maybe": None, "when": at, "size": 3, "ids": []},
        {"text": None, "maybe": "m", "when": "not a time", "size": True, "ids": ["a"]},
        {"text": 7, "maybe": 2.5, "when": None, "size": "3", "ids": None},
        {"text": Soon("t"), "maybe": Soon(None), "when": Soon(at), "size": 2**40, "ids": [1]},
        {"text": "t", "maybe": ValueError("no"), "when": at.astimezone(), "size": None, "ids": []},
    ]


@strawberry.type
class Odd:
    text: str
    maybe: str | None
    when: datetime
    size: int | None
    ids: list[strawberry.ID] | None


@strawberry.type
class Shelf:
    label: str
    odds: list[Odd]
    loose: list[Odd | None] | None


@strawberry.type
class OddQuery:
    @strawberry.field
    def odd(self, which: int) -> Odd:
        return Odd(**odd_values()[which])

    @strawberry.field
    def shelf(self, which: int) -> Shelf | None:
        # The first `which` + 1 values: with 0, every value is plain.
        loose: list[Odd | None] = [Odd(**values) for values in odd_values()[: which + 1]]
        return Shelf(label="s", odds=[Odd(**odd_values()[which])], loose=loose)

    @strawberry.field
    def odds(self) -> list[Odd | None]:
        return [Odd(**values) for values in odd_values()]


ODD_SCHEMA = strawberry.Schema(
    OddQuery, config=StrawberryConfig(scalar_map={datetime: DateTimeScalar})
)


@pytest.mark.parametrize("which", range(len(odd_values())))
async def test_plain_attributes_complete_as_in_graphql_core(which: int) -> None:
    query = "query($w: Int!) { odd(which: $w) { text maybe when size ids } }"
    await _same_as_graphql_core(ODD_SCHEMA._schema, query, {"w": which})


async def test_lists_of_objects_with_odd_attributes_complete_as_in_graphql_core() -> None:
    await _same_as_graphql_core(ODD_SCHEMA._schema, "{ odds { maybe when size ids } }", {})


@pytest.mark.parametrize("which", range(len(odd_values())))
async def test_objects_and_lists_of_plain_attributes_complete_as_in_graphql_core(
    which: int,
) -> None:
    """Written in one pass when every value is plain; field by field, as graphql-core,
    from the first value that is not."""
    query = """query($w: Int!) {
      shelf(which: $w) {
        __typename label odds { text when ids } loose { __typename maybe size }
      }
    }"""
    await _same_as_graphql_core(ODD_SCHEMA._schema, query, {"w": which})


def _fields_below_root(schema: GraphQLSchema, query: str) -> tuple[PlannedField, ...]:
    """The planned fields of the object that the query's one root field gives (non-null)."""
    plan = make_plan(schema, graphql.parse(query), None)
    assert isinstance(plan, Plan)
    prepared = plan._prepared({})
    assert not isinstance(prepared, str)
    completion = prepared[1][0].completion
    assert isinstance(completion, NonNull)
    assert isinstance(completion.inner, ObjectFields)
    return completion.inner.fields


def test_a_plan_reads_the_attributes_strawberrys_resolvers_read() -> None:
    schema = build_schema(introspection=True, federation=False, plans=None)._schema
    fields = _fields_below_root(
        schema, '{ odd: presence(userId: "u") { userId online lastSeen status } }'
    )
    presence = UserPresence.of(Presence("u", online=True, last_seen=None, sessions=()))
    for field in fields:
        assert field.attribute is not None
        resolve = field.definition.resolve
        assert resolve is not None
        assert getattr(presence, field.attribute) == resolve(presence, None)


@pytest.mark.parametrize("online", [True, False])
def test_a_listed_node_reads_as_the_dataclass_made_of_what_the_list_knows(online: bool) -> None:
    """A list's node answers every field of UserPresence as the dataclass built from the
    listed user's id, online and lastSeen does."""
    user = ListedUser("ß", online, datetime(2026, 11, 29, 1, 2, 3, 4000, UTC), -1)
    made = UserPresence(
        user_id=strawberry.ID(user.user_id),
        online=user.online,
        last_seen=user.last_seen,
        sessions=[],
        status=PresenceStatus.ONLINE if online else PresenceStatus.OFFLINE,
        custom_status=None,
        chosen_status=None,
        last_seen_visible_to=None,
        online_since=None,
    )
    for field in dataclasses.fields(UserPresence):  # each read alone, from a new node
        listed = UserPresence.listed(user)
        assert getattr(listed, field.name) == getattr(made, field.name), field.name


# --- resolvers of Strawberry's called without its wrapper: arguments renamed, the source as
# `self`, a Strawberry Info; fields with arguments Strawberry converts keep the wrapper.


def _called(**kwargs: Any) -> str:
    info = kwargs.pop("where", None)
    shown = {name: getattr(value, "name", value) for name, value in sorted(kwargs.items())}
    return f"{shown!r} {info.field_name if info else '-'} {info.path.as_list() if info else ''}"


@strawberry.input
class Range:
    low: int = 0


@strawberry.type
class Echo:
    tag: str

    @strawberry.field
    async def args(  # noqa: PLR0917 - a resolver's arguments are the field's
        self,
        where: strawberry.Info,
        user_id: strawberry.ID,
        first: int = 50,
        after: str | None = None,
        at: datetime | None = None,
        named: Annotated[str | None, strawberry.argument(name="renamed")] = None,
        limit: int | None = 5,
    ) -> str:
        return f"{self.tag} " + _called(
            where=where, user_id=user_id, first=first, after=after, at=at, named=named, limit=limit
        )

    @strawberry.field
    def plain(self, flag: bool) -> str:
        return f"{self.tag} " + _called(flag=flag)

    @strawberry.field
    async def fails(self, n: int) -> str:
        raise ValueError(f"no {n}")

    @strawberry.field
    def listed(self, ids: list[strawberry.ID], span: Range | None = None) -> str:
        return _called(ids=ids, span=span)


@strawberry.type
class EchoQuery:
    @strawberry.field
    def echo(self) -> Echo:
        return Echo(tag="e")


ECHO_SCHEMA = strawberry.Schema(
    EchoQuery, config=StrawberryConfig(scalar_map={datetime: DateTimeScalar})
)


@pytest.mark.parametrize(
    ("query", "variables"),
    [
        ('{ echo { args(userId: "u") } }', {}),
        (
            "query($u: ID!, $a: String, $t: DateTime) "
            '{ echo { args(userId: $u, first: 3, after: $a, at: $t, renamed: "r", limit: null) } }',
            {"u": "u", "a": None, "t": "2026-01-02T03:04:05.678Z"},
        ),
        ("query($a: String) { echo { x: args(userId: 7, after: $a) } }", {}),
        ("{ echo { plain(flag: true) fails(n: 2) } }", {}),
        ('{ echo { listed(ids: ["a", 2], span: { low: 3 }) } }', {}),
    ],
)
async def test_resolvers_called_without_strawberrys_wrapper_answer_as_with_it(
    query: str, variables: dict[str, Any]
) -> None:
    await _same_as_graphql_core(ECHO_SCHEMA._schema, query, variables)


def test_only_resolvers_of_scalar_arguments_are_called_without_the_wrapper() -> None:
    query = '{ echo { args(userId: "u") plain(flag: true) listed(ids: []) } }'
    fields = _fields_below_root(ECHO_SCHEMA._schema, query)
    assert {f.name: f.direct is not None for f in fields} == {
        "args": True,
        "plain": True,
        "listed": False,
    }


# --- list reads, whose items a plan writes in one pass when their fields are plain
# attributes: what each reader may see of each user, and the errors and nulls on the way.

LIST_SEED = [
    'mutation { setStatus(status: INVISIBLE, userId: "carol") { status } }',
    'mutation { setLastSeenVisibility(visibleTo: NOBODY, userId: "dave") { online } }',
    'mutation { setLastSeenVisibility(visibleTo: FRIENDS, userId: "bob") { online } }',
    'mutation { setCustomStatus(userId: "bob", text: "lunch", emoji: "🍜") { online } }',
    'mutation { setStatus(status: BUSY, userId: "alice") { status } }',
    'mutation { touch(userId: "erin", sessionId: "tv", device: "tv", idle: true) { online } }',
    'mutation { addFriends(userId: "bob", friendIds: ["alice"]) }',
    'mutation { setPlaceState(placeId: "room", sessionId: "phone", userId: "alice", state: {x: 1}) { userId } }',
]
EVERY_PRESENCE_FIELD = """__typename userId online lastSeen status chosenStatus
    lastSeenVisibleTo onlineSince version customStatus { text emoji expiresAt }
    sessions { __typename sessionId lastSeen startedAt device idle }"""
PRESENCES = f"query($ids: [ID!]!) {{ presences(userIds: $ids) {{ {EVERY_PRESENCE_FIELD} }} }}"
PRESENCE_OF = f"query($u: ID!) {{ presence(userId: $u) {{ {EVERY_PRESENCE_FIELD} }} }}"
PRESENCES_SHAPED = """query($ids: [ID!]!, $more: Boolean!) {
  presences(userIds: $ids) { id: userId ...Seen s: sessions { sessionId } ...More @include(if: $more) }
}
fragment Seen on UserPresence { online lastSeen status }
fragment More on UserPresence { sessions { idle } customStatus { emoji } }"""
ONLINE_FRIENDS = f"""query($u: ID!, $after: String) {{
  onlineFriends(userId: $u, first: 2, after: $after) {{
    totalCount nodes {{ {EVERY_PRESENCE_FIELD} }} pageInfo {{ hasNextPage endCursor }}
  }}
}}"""
ONLINE_FRIENDS_LISTED = """query($u: ID!) {
  onlineFriends(userId: $u, first: 50) { nodes { userId online lastSeen } }
}"""
PLACE_MEMBERS = """query($p: ID!) {
  placeMembers(placeId: $p, first: 50) {
    __typename totalCount users version
    nodes { __typename placeId userId sessionId joinedAt state }
    pageInfo { hasNextPage endCursor }
  }
}"""
USERS = ["alice", "bob", "carol", "dave", "erin", "ß", "nobody"]


async def _list_twins(make_twins: TwinsFactory) -> Twins:
    twins = await make_twins(SECURED)
    for client in (twins.full, twins.planned):
        store = client.app[STORE]
        await store.open_place_session("room", "alice", "phone")
        await store.open_place_session("room", "carol", "tab", {"t": "é"})
    backend = {"Authorization": f"Bearer {BACKEND_TOKEN}"}
    for query in LIST_SEED:
        answer, _ = await twins.both(query, None, headers=backend)
        assert "errors" not in answer.body, answer
    return twins


@pytest.mark.parametrize("reader", ["backend", "alice", "bob"])
async def test_list_reads_answer_alike_to_every_reader(
    make_twins: TwinsFactory, reader: str
) -> None:
    twins = await _list_twins(make_twins)
    token = BACKEND_TOKEN if reader == "backend" else user_token(reader)
    headers = {"Authorization": f"Bearer {token}"}
    cases: list[tuple[str, dict[str, Any]]] = [
        (PRESENCES, {"ids": USERS if reader == "backend" else ["alice", "bob", "carol", "dave"]}),
        (PRESENCES, {"ids": []}),
        (PRESENCES, {"ids": ["alice", "", "bob"]}),  # a bad id: the whole answer null
        (PRESENCES, {"ids": ["alice", "stranger"]}),  # forbidden to an end user
        (PRESENCES_SHAPED, {"ids": ["alice", "bob", "carol"], "more": True}),
        (PRESENCES_SHAPED, {"ids": ["alice", "bob", "carol"], "more": False}),
        (PRESENCE_OF, {"u": "carol"}),  # invisible: offline to others
        (PRESENCE_OF, {"u": "dave"}),  # lastSeen hidden from everyone else
        (PRESENCE_OF, {"u": "nobody"}),  # never seen: nulls
        (ONLINE_FRIENDS, {"u": "alice"}),
        (ONLINE_FRIENDS_LISTED, {"u": "alice"}),
        (PLACE_MEMBERS, {"p": "room"}),
        (PLACE_MEMBERS, {"p": "empty"}),
    ]
    answers = []
    for query, variables in cases:
        answer, how = await twins.both(query, variables, headers=headers)
        assert how == "planned", (query, variables)
        answers.append(answer.body)
    if reader == "alice":
        carol = answers[0]["data"]["presences"][2]
        assert (carol["online"], carol["status"], carol["sessions"]) == (False, "OFFLINE", [])
        assert answers[0]["data"]["presences"][3]["lastSeen"] is None  # dave's, hidden
        assert answers[0]["data"]["presences"][1]["customStatus"]["text"] == "lunch"
        assert [e["extensions"]["code"] for e in answers[2]["errors"]] == ["BAD_USER_INPUT"]
        assert answers[2]["data"] is None
        assert [e["extensions"]["code"] for e in answers[3]["errors"]] == ["FORBIDDEN"]
    if reader == "backend":
        nobody = answers[0]["data"]["presences"][-1]
        assert (nobody["lastSeen"], nobody["customStatus"], nobody["sessions"]) == (None, None, [])
        members = answers[11]["data"]["placeMembers"]["nodes"]
        assert {(m["userId"], json.dumps(m["state"])) for m in members} == {
            ("alice", '{"x": 1}'),
            ("carol", '{"t": "\\u00e9"}'),
        }


def _list_items(schema: GraphQLSchema, query: str) -> ObjectFields:
    plan = make_plan(schema, graphql.parse(query), None)
    assert isinstance(plan, Plan)
    prepared = plan._prepared({"ids": ["a"], "more": True, "u": "a"})
    assert not isinstance(prepared, str)
    completion = prepared[1][0].completion
    while not isinstance(completion, ObjectFields):
        assert completion is not None
        assert not isinstance(completion, Leaf)
        completion = completion.inner if isinstance(completion, NonNull) else completion.item
    return completion


def test_a_list_of_plain_attributes_is_written_in_one_pass() -> None:
    """Items whose fields are plain attributes (and fields of their objects and lists)
    are written without a walk per field; a field with a resolver of its own is not."""
    schema = build_schema(introspection=True, federation=False, plans=None)._schema
    for query in (PRESENCES, PRESENCES_SHAPED):
        items = _list_items(schema, query)
        assert items.flat is not None
        assert [key for key, *_ in items.flat] == [f.key for f in items.fields]
    connection = _list_items(schema, ONLINE_FRIENDS)
    assert connection.flat is None  # its nodes are read by a resolver
