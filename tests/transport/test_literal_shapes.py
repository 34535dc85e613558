"""Documents that differ only in their argument literals share one plan
(gql_presence/graphql/literal_shapes.py), and answer byte for byte as their own full run.

Two services side by side, each on a Redis of its own seeded alike: one with planned
execution off, one with it on. Each family of documents is sent with several sets of
literals, in order, to both; the answers' bytes must be the same (times, stamped by each
Redis with its own clock, compared by format). The planned side counts which requests its
shapes answered: a shape is planned once its second text has run the full way.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from graphql import GraphQLSchema, Source, parse

from gql_presence.app import create_app
from gql_presence.graphql.literal_shapes import LiteralShapes
from gql_presence.graphql.schema import build_schema
from gql_presence.http.view import PresenceView
from gql_presence.running.connection import connect
from gql_presence.running.redis_server import RedisServer
from tests.conftest import TEST_SETTINGS, ClientFactory

Client = TestClient[Any, Any]
_TIME = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")


@dataclasses.dataclass
class Twins:
    full: Client
    shaped: Client
    shapes: LiteralShapes

    async def both(self, query: str, variables: dict[str, Any] | None = None) -> bytes:
        """The body both services answer, the same; asserts also the same status."""
        bodies = []
        for client in (self.full, self.shaped):
            response = await client.post("/graphql", json={"query": query, "variables": variables})
            bodies.append((response.status, _TIME.sub(b"<time>", await response.read())))
        assert bodies[0] == bodies[1], query
        return bodies[0][1]

    async def family(self, texts: list[str], *, hits: int) -> list[bytes]:
        """Sends each text to both; `hits` of them must be answered by a shape."""
        before = self.shapes.hits
        bodies = [await self.both(text) for text in texts]
        assert self.shapes.hits - before == hits, texts
        return bodies


def _view(client: Client) -> PresenceView:
    app = client.app
    (view,) = [r.handler for r in app.router.routes() if isinstance(r.handler, PresenceView)]
    return view


@pytest.fixture
async def twins(
    aiohttp_client: ClientFactory, redis_server: RedisServer, twin_redis_server: RedisServer
) -> Twins:
    clients = []
    for server, planned in ((redis_server, False), (twin_redis_server, True)):
        settings = dataclasses.replace(
            TEST_SETTINGS, redis_url=server.url, planned_execution=planned
        )
        async with connect(settings) as redis:
            await redis.client.flushall()
        clients.append(await aiohttp_client(create_app(settings)))
    shapes = _view(clients[1]).pipeline.shapes
    assert shapes is not None
    assert _view(clients[0]).pipeline.shapes is None
    twins = Twins(clients[0], clients[1], shapes)
    for user in ("alice", "bob", "carol"):
        await twins.both(f'mutation {{ touch(userId: "{user}", sessionId: "tab") {{ online }} }}')
    await twins.both('mutation { addFriends(userId: "alice", friendIds: ["bob", "carol"]) }')
    return twins


async def test_touches_and_kicks_with_new_literals_run_one_shape(twins: Twins) -> None:
    touch = 'mutation {{ touch(userId: "{}", sessionId: "s{}") {{ userId online }} }}'
    kick = 'mutation {{ kick(userId: "{}") {{ kickedSessions }} }}'
    touches = [touch.format(u, i) for i, u in enumerate(["dave", "erin", "dave", "fay", "erin"])]
    bodies = await twins.family(touches, hits=3)
    assert b'"userId":"fay","online":true' in bodies[3]
    await twins.family([touches[3], touches[2]], hits=2)  # a text sent again
    kicks = [kick.format(u) for u in ["dave", "erin", "fay", "nobody"]]
    bodies = await twins.family(kicks, hits=2)
    assert b'"kickedSessions":1' in bodies[2]


async def test_literals_of_every_kind_and_mixed_with_variables(twins: Twins) -> None:
    # Block strings, ints, escapes, lists, input objects, enums, nulls and variables.
    texts = [
        'query { onlineFriends(userId: "alice", first: 1) { totalCount nodes { userId } } }',
        'query { onlineFriends(userId: """alice""", first: 2) { totalCount nodes { userId } } }',
        'query { onlineFriends(userId: "\\u0061lice", first: 50) { totalCount } }',
    ]
    await twins.family(texts, hits=0)  # three shapes: a block string is another token
    texts = [
        'query { onlineFriends(userId: "alice", first: 7) { totalCount nodes { userId } } }',
        'query { onlineFriends(userId: "bob", first: 0) { totalCount nodes { userId } } }',
        'query { onlineFriends(userId: """bob""", first: 1) { totalCount nodes { userId } } }',
        'query { onlineFriends(userId: """carol""", first: 3) { totalCount nodes { userId } } }',
    ]
    await twins.family(texts, hits=2)  # each shape planned when seen again, then run
    presences = 'query {{ presences(userIds: ["{}", "{}"]) {{ userId online status }} }}'
    await twins.family([presences.format(*p) for p in ["ab", "bc", "ca", "cc"]], hits=2)
    filtered = (
        'query {{ onlineUsers(first: {}, orderBy: {}, filter: {{userIdPrefix: "{}", '
        "statuses: [ONLINE], device: null}}) {{ nodes {{ userId }} }} }}"
    )
    texts = [filtered.format(*f) for f in [(5, "LAST_SEEN", "a"), (2, "LAST_SEEN", "b")]]
    texts += [filtered.format(9, "LAST_SEEN", "c"), filtered.format(9, "ONLINE_SINCE", "c")]
    await twins.family(texts, hits=1)  # another enum value is another shape
    mixed = 'query($u: ID!) {{ presence(userId: $u) {{ userId }} friends(userId: "{}") }}'
    for user in ("alice", "bob", "carol"):
        await twins.both(mixed.format(user), {"u": user})
    mixed = 'mutation($d: String) {{ touch(userId: "{}", device: $d) {{ online }} }}'
    before = twins.shapes.hits
    for user, device in [("alice", "web"), ("bob", "ios"), ("carol", "x" * 40), ("dave", None)]:
        await twins.both(mixed.format(user), {"d": device})
    assert twins.shapes.hits - before == 2  # the first two texts teach the shape


async def test_bad_literals_give_the_same_errors(twins: Twins) -> None:
    first = 'query {{ onlineFriends(userId: "alice", first: {}) {{ totalCount }} }}'
    await twins.family([first.format(1), first.format(2)], hits=0)
    bodies = await twins.family(
        [first.format(3_000_000_000), first.format(-1), first.format(4), first.format('"4"')],
        hits=2,
    )
    assert b"non 32-bit" in bodies[0]
    assert b'"errors"' in bodies[1]  # refused by the resolver, located in its own text
    touch = 'mutation {{ touch(userId: "{}", device: "{}") {{ online }} }}'
    texts = [touch.format("a", "web"), touch.format("b", "ios"), touch.format("c", "d" * 33)]
    texts += [touch.format("x\\u0000y", "web"), touch.format("bob", "tab")]
    bodies = await twins.family(texts, hits=3)
    assert b'"locations":[{"line":1,"column":12}]' in bodies[2]
    # A float where an Int goes is refused by validation, so never a shape.
    await twins.family([first.format(1.5), first.format(2.5), first.format(3.5)], hits=0)
    # A custom scalar's literal stays in the shape: another value is another document.
    at = 'mutation {{ touch(userId: "{}", at: "{}") {{ online }} }}'
    texts = [at.format(u, "2020-01-01T00:00:00Z") for u in ("alice", "bob", "carol")]
    texts.append(at.format("alice", "not a time"))
    await twins.family(texts, hits=1)


async def test_errors_are_located_in_the_requests_own_text(twins: Twins) -> None:
    kicks = (
        '# a comment\nmutation {{ a: kick(userId: "{}") {{ kickedSessions }} '
        'b: kick(userId: "{}") {{ kickedSessions }} }}'
    )
    texts = [kicks.format("a", "b"), kicks.format("c", "d"), kicks.format("alice", "y" * 300)]
    bodies = await twins.family(texts, hits=1)
    column = texts[2].split("\n")[1].index("b: kick") + 1
    assert f'"locations":[{{"line":2,"column":{column}}}]'.encode() in bodies[2]
    # Variables of its own before the literals, and a query's shorthand.
    named = (
        'mutation Kicks($s: ID) {{ a: kick(userId: "{}", sessionId: $s) {{ kickedSessions }} '
        'b: kick(userId: "{}") {{ kickedSessions }} }}'
    )
    texts = [named.format("a", "b"), named.format("c", "d"), named.format("alice", "y" * 300)]
    bodies = await twins.family(texts, hits=1)
    column = texts[2].index("b: kick") + 1
    assert f'"locations":[{{"line":1,"column":{column}}}]'.encode() in bodies[2]
    short = '{{ presence(userId: "{}") {{ online }} }}'
    texts = [short.format("a"), short.format("b"), short.format("y" * 300)]
    bodies = await twins.family(texts, hits=1)
    assert b'"locations":[{"line":1,"column":3}]' in bodies[2]


def test_the_shapes_kept_are_bounded() -> None:
    schema: GraphQLSchema = build_schema()._schema
    shapes = LiteralShapes(size=3)
    for n in range(10):
        # Ten shapes, each seen twice: only the three most recent are kept.
        field = "userId" if n % 2 else "online"
        query = f'query {{ a{n}: presence(userId: "u") {{ {field} }} }}'
        for user in ("u", "v"):
            text = query.replace('"u"', f'"{user}"')
            document = parse(Source(text))
            shapes.learn(
                schema=schema,
                query=text,
                provided_name=None,
                operation_name=None,
                document=document,
                rules=(),
            )
    kept = [
        n
        for n in range(10)
        if shapes.match(
            f'query {{ a{n}: presence(userId: "w") {{ {"userId" if n % 2 else "online"} }} }}',
            None,
            None,
        )
    ]
    assert kept == [7, 8, 9]
