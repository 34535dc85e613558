"""Limits that stop abuse: document size and shape, body size, transports, switches for
development tools, the time budget, and per-caller rate limits."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import io
import json
import time
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from redis.asyncio import Redis

from gql_presence.app import create_app
from gql_presence.policy.auth import Caller, CallerKind
from gql_presence.policy.limits import (
    MAX_ALIASES,
    MAX_BODY_BYTES,
    MAX_DOCUMENT_BYTES,
    MAX_TOKENS,
    LocalBuckets,
    RateLimiter,
)
from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import RedisServer
from gql_presence.store import PresenceStore
from gql_presence.store.errors import RateLimitedError, StoreUnavailableError
from gql_presence.store.keys import Keys
from gql_presence.store.scripts import ScriptName, Scripts
from gql_presence.store.validation import MAX_ID_LENGTH, MAX_IDS_PER_CALL
from tests.conftest import TEST_SETTINGS, ClientFactory, StoreFactory, error_codes, graphql
from tests.helpers import (
    BACKEND_TOKEN,
    OTHER_BACKEND_TOKEN,
    SECURED,
    as_user,
    counted_calls,
    eventually,
    feeds_above,
    graphql_socket,
    over_socket,
    rated,
    socket_errors,
    user_token,
)

Client = TestClient[Any, Any]
JSON = {"Content-Type": "application/json"}


async def service(aiohttp_client: ClientFactory, server: RedisServer, **changes: Any) -> Client:
    settings = dataclasses.replace(TEST_SETTINGS, redis_url=server.url, **changes)
    return await aiohttp_client(create_app(settings))


async def block_redis(client: Redis, seconds: float) -> None:
    """Keeps Redis (and the connection that asked) busy, as a slow command would."""
    await client.execute_command("DEBUG", "SLEEP", str(seconds))  # type: ignore[no-untyped-call]


def presences(count: int) -> str:
    fields = " ".join(f'p{i}: presence(userId: "u{i}") {{ online }}' for i in range(count))
    return f"{{ {fields} }}"


async def test_aliases_are_limited_also_through_fragments(api: Client) -> None:
    assert "errors" not in await graphql(api, presences(MAX_ALIASES))
    body = await graphql(api, presences(MAX_ALIASES + 1))
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "aliases" in body["errors"][0]["message"]
    half = MAX_ALIASES // 2 + 1
    fragments = " ".join(
        f"fragment F{i} on Query {{ {' '.join(f'a{i}_{j}: weeklyStats {{ uniqueUsers }}' for j in range(half))} }}"
        for i in range(2)
    )
    body = await graphql(api, f"{{ ...F0 ...F1 }} {fragments}")
    assert set(error_codes(body)) == {"BAD_USER_INPUT"}


async def test_tokens_and_document_size_are_limited(api: Client) -> None:
    many_tokens = "{ " + " ".join(["__typename"] * MAX_TOKENS) + " }"
    body = await graphql(api, many_tokens)
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "tokens" in body["errors"][0]["message"]
    long_document = '{ presence(userId: "' + "x" * MAX_DOCUMENT_BYTES + '") { online } }'
    body = await graphql(api, long_document)
    assert error_codes(body) == ["BAD_USER_INPUT"]
    assert "variables" in body["errors"][0]["message"]


@pytest.mark.slow
async def test_the_largest_valid_request_fits_and_a_larger_body_gets_413(api: Client) -> None:
    # 10,000 ids of 128 characters, each of them 4 bytes of UTF-8: the most a request needs.
    ids = [f"{i:05}" + "😀" * (MAX_ID_LENGTH - 5) for i in range(MAX_IDS_PER_CALL)]
    request = {
        "query": "mutation($ids: [ID!]!) { touchMany(userIds: $ids) }",
        "variables": {"ids": ids},
    }
    encoded = json.dumps(request, ensure_ascii=False).encode()
    assert len(encoded) > MAX_BODY_BYTES * 0.95  # close to the limit: the limit is that tight
    response = await api.post("/graphql", data=io.BytesIO(encoded), headers=JSON)
    assert await response.json() == {"data": {"touchMany": MAX_IDS_PER_CALL}}
    response = await api.post(
        "/graphql",
        data=io.BytesIO(b'{"query": "{ __typename }", "pad": "' + b"x" * MAX_BODY_BYTES + b'"}'),
        headers=JSON,
    )
    assert response.status == 413


async def test_batches_are_refused(api: Client) -> None:
    response = await api.post("/graphql", json=[{"query": "{ __typename }"}] * 2)
    assert response.status == 400
    text = await response.text()
    assert text.startswith("Batching is not enabled")
    assert 'a JSON object {"query": "<document>", "variables": {...}}, not an array' in text


async def test_get_serves_no_mutations_and_queries_only_when_allowed(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Redis
) -> None:
    query = {"query": '{ presence(userId: "a") { online } }'}
    mutation = {"query": 'mutation { touch(userId: "a") { online } }'}
    closed = await service(aiohttp_client, redis_server)
    assert (await closed.get("/graphql", params=query)).status >= 400
    opened = await service(aiohttp_client, redis_server, queries_over_get=True)
    response = await opened.get("/graphql", params=query)
    assert (await response.json()) == {"data": {"presence": {"online": False}}}
    assert (await opened.get("/graphql", params=mutation)).status >= 400
    assert await http_redis.exists(Keys().online) == 0  # the mutation did not run


async def test_introspection_and_graphiql_can_be_turned_off(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Redis
) -> None:
    introspection = "{ __schema { queryType { name } } }"
    assert "errors" not in await graphql(await service(aiohttp_client, redis_server), introspection)
    production = await service(aiohttp_client, redis_server, introspection=False, graphiql=False)
    body = await graphql(production, introspection)
    assert set(error_codes(body)) == {"BAD_USER_INPUT"}
    assert "introspection" in body["errors"][0]["message"]
    page = await production.get("/graphql", headers={"Accept": "text/html"})
    assert page.status == 404
    assert "errors" not in await graphql(production, '{ presence(userId: "a") { online } }')


@pytest.mark.slow
async def test_a_request_over_its_time_budget_gets_unavailable_and_no_other_reply(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Redis
) -> None:
    api = await service(aiohttp_client, redis_server, request_timeout_ms=300)
    await graphql(api, 'mutation { touch(userId: "a") { online } }')
    sleeper = redis_client(redis_server.url)
    # The service shares this process with the whole suite, whose garbage collections pause
    # it for up to a quarter of a second: a pause inside a 0.3 s budget is not the service's.
    gc.collect()
    gc.disable()
    try:
        busy = asyncio.create_task(block_redis(sleeper, 1.5))
        await asyncio.sleep(0.05)
        started = time.monotonic()
        body = await graphql(api, '{ presence(userId: "a") { userId online } }')
        assert time.monotonic() - started < 1.4  # not held until Redis answered
        assert error_codes(body) == ["UNAVAILABLE"]
        assert "0.3 s" in body["errors"][0]["message"]
        await busy
        await sleeper.aclose()
        # Every later request gets its own reply, not the one the stopped request left behind.
        for user in ("b", "a", "c"):
            body = await graphql(api, f'{{ presence(userId: "{user}") {{ userId online }} }}')
            assert body == {"data": {"presence": {"userId": user, "online": user == "a"}}}
    finally:
        gc.enable()


async def test_an_operation_over_a_websocket_meets_the_same_time_budget(
    aiohttp_client: ClientFactory, redis_server: RedisServer
) -> None:
    api = await service(aiohttp_client, redis_server, request_timeout_ms=300)
    await graphql(api, 'mutation { touch(userId: "a") { online } }')
    sleeper = redis_client(redis_server.url)
    gc.collect()  # as above: the suite's collections are not the service's time
    gc.disable()
    try:
        async with graphql_socket(api) as socket:
            busy = asyncio.create_task(block_redis(sleeper, 1.5))
            await asyncio.sleep(0.05)
            started = time.monotonic()
            late = socket_errors(await over_socket(socket, '{ presence(userId: "a") { online } }'))
            assert time.monotonic() - started < 1.4  # not held until Redis answered
            assert [e["extensions"]["code"] for e in late] == ["UNAVAILABLE"]
            assert "0.3 s" in late[0]["message"]
            await busy
            # The socket goes on, and each later operation gets its own answer.
            for number, user in enumerate(("b", "a"), start=2):
                answer = await over_socket(
                    socket, f'{{ presence(userId: "{user}") {{ online }} }}', None, str(number)
                )
                assert answer[0]["payload"] == {"data": {"presence": {"online": user == "a"}}}
    finally:
        gc.enable()
        await sleeper.aclose()


async def test_a_full_pool_makes_requests_wait_then_fail_cleanly(redis_server: RedisServer) -> None:
    client = redis_client(redis_server.url, max_connections=1, pool_wait_s=0.2)
    store = PresenceStore(client, TEST_SETTINGS)
    holder = asyncio.create_task(block_redis(client, 0.6))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        await store.presence("waiting")
    # It waited for the pool, and gave up before the connection came free (at 0.6 s).
    assert time.monotonic() - started >= 0.15
    await holder
    assert (await store.presence("waiting")).user_id == "waiting"
    await client.aclose()


# --- rate limits --------------------------------------------------------------------------


async def test_callers_over_their_rate_are_refused_with_when_to_retry(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Redis
) -> None:
    settings = dataclasses.replace(
        SECURED,
        redis_url=redis_server.url,
        backend_tokens=(("chat", BACKEND_TOKEN), ("billing", "c" * 40)),
        backend_rate=0.5,
        backend_burst=2,
        user_rate=0.5,
        user_burst=1,
    )
    api = await aiohttp_client(create_app(settings))
    document = {"query": '{ presence(userId: "alice") { online } }'}

    async def send(token: str) -> tuple[int, dict[str, Any], str | None]:
        headers = {"Authorization": f"Bearer {token}"}
        response = await api.post("/graphql", json=document, headers=headers)
        return response.status, await response.json(), response.headers.get("Retry-After")

    assert [(await send(BACKEND_TOKEN))[0] for _ in range(2)] == [200, 200]
    status, body, retry_after = await send(BACKEND_TOKEN)
    assert status == 429
    assert error_codes(body) == ["RATE_LIMITED"]
    assert body["errors"][0]["extensions"]["retryAfterSeconds"] == 2
    assert retry_after == "2"
    assert (await send("c" * 40))[0] == 200  # another backend has a bucket of its own
    alice = user_token("alice")
    assert [(await send(alice))[0] for _ in range(2)] == [200, 429]
    assert (await send(user_token("bob")))[0] == 200  # each user has a bucket of their own


async def test_an_operation_costs_a_token_per_100_ids_its_fields_are_given(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Redis
) -> None:
    """Whatever carries the ids: a variable read by two aliases, or a list written in the
    document; the first time a document runs, or from its plan. A bucket of 11 at once,
    refilled at one token every 2 s."""
    api = await aiohttp_client(create_app(rated(11, redis_server.url)))

    async def send(token: str, query: str, **variables: Any) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token}"}
        body = {"query": query, "variables": variables}
        response = await api.post("/graphql", json=body, headers=headers)
        return response.status, await response.json()

    twice = "mutation($ids: [ID!]!) { a: touchMany(userIds: $ids) b: touchMany(userIds: $ids) }"
    status, body = await send(BACKEND_TOKEN, twice, ids=[f"u{i}" for i in range(50)])
    assert (status, body["data"]) == (200, {"a": 50, "b": 50})  # 100 ids: one token
    status, body = await send(BACKEND_TOKEN, twice, ids=[f"u{i}" for i in range(500)])
    assert (status, body["data"]) == (200, {"a": 500, "b": 500})  # 1,000 ids: ten tokens
    status, body = await send(BACKEND_TOKEN, "{ __typename }")
    assert (status, error_codes(body)) == (429, ["RATE_LIMITED"])

    written = json.dumps([f"f{i}" for i in range(1050)])  # 1,050 ids: eleven tokens
    add = f'mutation {{ addFriends(userId: "u", friendIds: {written}, mutual: false) }}'
    assert (await send("c" * 40, add))[1] == {"data": {"addFriends": 1050}}
    status, body = await send("c" * 40, "{ __typename }")
    assert (status, error_codes(body)) == (429, ["RATE_LIMITED"])


async def test_a_list_page_costs_a_token_per_100_entries_it_may_hold(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Redis
) -> None:
    """A page's work grows with `first`, as touchMany's with its ids, whichever list it is:
    fifteen aliases of the largest pages are not one token. A bucket of 10 at once."""
    api = await aiohttp_client(create_app(rated(10, redis_server.url)))
    users = """{ a: onlineUsers(first: 600, filter: {userIdPrefix: "u"}) { totalCount }
      b: onlineFriends(userId: "u", first: 400) { totalCount } }"""
    assert "errors" not in await as_user(api, BACKEND_TOKEN, users)  # 1,000 entries: ten tokens
    assert error_codes(await as_user(api, BACKEND_TOKEN, "{ __typename }")) == ["RATE_LIMITED"]
    others = """{ a: activeInRange(from: "2026-11-01T00:00:00Z", to: "2026-11-02T00:00:00Z",
      first: 500) { totalCount } b: placeMembers(placeId: "p", first: 500) { totalCount } }"""
    assert "errors" not in await as_user(api, OTHER_BACKEND_TOKEN, others)
    spent = await as_user(api, OTHER_BACKEND_TOKEN, "{ __typename }")
    assert error_codes(spent) == ["RATE_LIMITED"]


async def test_a_filtered_page_that_walks_past_many_users_costs_what_they_would(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Redis
) -> None:
    """A filter whose matches lie far down the list walks past the users before them, 2,000
    a script call: each call after the first costs what a page of 2,000 would (20 tokens),
    so that a page of one is not one token's worth of a walk past everyone online."""
    unrated = await aiohttp_client(
        create_app(dataclasses.replace(SECURED, redis_url=redis_server.url))
    )
    touch_many = "mutation($u: [ID!]!) { touchMany(userIds: $u) }"
    # The matches first, so that they are the oldest: more of them than are gathered whole.
    await as_user(unrated, BACKEND_TOKEN, touch_many, u=[f"a{i}" for i in range(4200)])
    await as_user(unrated, BACKEND_TOKEN, touch_many, u=[f"b{i}" for i in range(2100)])
    api = await aiohttp_client(create_app(rated(10, redis_server.url)))
    page = "query($p: String!) { onlineUsers(first: 1, filter: {userIdPrefix: $p}) { nodes { userId } } }"
    # Found at the top of the list: one call, one token.
    near = await as_user(api, BACKEND_TOKEN, page, p="b")
    assert [n["userId"][0] for n in near["data"]["onlineUsers"]["nodes"]] == ["b"]
    assert "errors" not in await as_user(api, BACKEND_TOKEN, "{ __typename }")
    # Found past 2,100 others: two calls, 21 tokens, more than the bucket holds.
    far = await as_user(api, OTHER_BACKEND_TOKEN, page, p="a")
    assert [n["userId"][0] for n in far["data"]["onlineUsers"]["nodes"]] == ["a"]
    spent = await as_user(api, OTHER_BACKEND_TOKEN, "{ __typename }")
    assert error_codes(spent) == ["RATE_LIMITED"]


async def test_a_subscription_costs_a_token_per_100_users_it_follows(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Redis
) -> None:
    """The second subscribe of the same document and variables joins the first one's
    delivery without running the resolver: it costs as much all the same."""
    settings = dataclasses.replace(
        SECURED, redis_url=redis_server.url, backend_rate=0.5, backend_burst=20
    )
    api = await aiohttp_client(create_app(settings))
    follow = "subscription($ids: [ID!]) { presenceChanged(userIds: $ids) { userId } }"
    payload = {"query": follow, "variables": {"ids": [f"u{i}" for i in range(1000)]}}
    async with (
        graphql_socket(api, f"Bearer {BACKEND_TOKEN}") as first,
        graphql_socket(api, f"Bearer {BACKEND_TOKEN}") as second,
    ):
        for count, socket in enumerate((first, second)):
            await socket.send_json({"id": "1", "type": "subscribe", "payload": payload})
            await eventually(feeds_above(api, count), what="the subscription")
        refused = await over_socket(first, "{ __typename }", operation_id="2")
        assert [e["extensions"]["code"] for e in socket_errors(refused)] == ["RATE_LIMITED"]


async def test_a_resume_pays_for_the_feed_it_reads_past_a_page(
    aiohttp_client: ClientFactory, redis_server: RedisServer, http_redis: Redis
) -> None:
    """A resume reads the feed after its cursor a page of 1,000 changes at a time, those of
    users it does not follow too: each page after a shard's first costs what a page of
    1,000 entries would (10 tokens)."""
    unrated = await aiohttp_client(
        create_app(dataclasses.replace(SECURED, redis_url=redis_server.url))
    )
    cursor = (await as_user(unrated, BACKEND_TOKEN, "{ feedCursor }"))["data"]["feedCursor"]
    touch_many = "mutation($u: [ID!]!) { touchMany(userIds: $u) }"
    await as_user(unrated, BACKEND_TOKEN, touch_many, u=[f"u{i}" for i in range(2100)])
    api = await aiohttp_client(create_app(rated(10, redis_server.url)))
    resume = 'subscription($a: String) { presenceChanged(userIds: ["u0"], after: $a) { userId } }'
    answers = {}
    for token, after in ((BACKEND_TOKEN, None), (OTHER_BACKEND_TOKEN, cursor)):
        async with graphql_socket(api, f"Bearer {token}") as socket:
            payload = {"query": resume, "variables": {"a": after}}
            await socket.send_json({"id": "1", "type": "subscribe", "payload": payload})
            await eventually(feeds_above(api, 0), what="the subscription")
            if after is not None:  # written once the whole read is done, and paid for
                replayed = await socket.receive_json(timeout=5)
                assert replayed["payload"]["data"]["presenceChanged"] == {"userId": "u0"}
            answers[after] = await over_socket(socket, "{ __typename }", operation_id="2")
    # Without after, one token; with it, three pages read (2,100 changes): 21 tokens.
    assert socket_errors(answers[None]) == []
    assert [e["extensions"]["code"] for e in socket_errors(answers[cursor])] == ["RATE_LIMITED"]


async def test_a_retried_token_request_takes_one_token(redis: Redis) -> None:
    scripts = Scripts.register(redis)
    bucket = [Keys().rate_bucket("backend:chat")]

    async def take(request_id: str) -> list[int]:
        reply: list[int] = await scripts.run(
            ScriptName.TAKE_TOKEN, bucket, ["1", 2, request_id, 1, 0, 1]
        )
        return reply

    assert await take("request-1") == await take("request-1") == [1, 0]
    assert await take("request-2") == [1, 0]
    granted, retry_after_ms = await take("request-3")
    assert granted == 0
    assert 0 < retry_after_ms <= 1000
    assert 0 < await redis.pttl(bucket[0]) <= 3000  # gone once it would be full again


async def test_admissions_taken_at_once_are_granted_in_turn_while_tokens_last(
    redis: Redis,
) -> None:
    """One call admitting several operations grants the first as many as there are tokens,
    as that many calls at the same moment would; a retry of it takes nothing again."""
    scripts = Scripts.register(redis)
    bucket = [Keys().rate_bucket("backend:chat")]

    async def take(request_id: str, admissions: int) -> list[int]:
        reply: list[int] = await scripts.run(
            ScriptName.TAKE_TOKEN, bucket, ["1", 3, request_id, 1, 0, admissions]
        )
        return reply

    assert await take("request-1", 2) == await take("request-1", 2) == [2, 0]
    granted, retry_after_ms = await take("request-2", 4)
    assert granted == 1  # the burst of 3 is spent
    assert 0 < retry_after_ms <= 1000
    granted, retry_after_ms = await take("request-2", 4)  # retried: nothing taken again
    assert granted == 1
    assert 0 < retry_after_ms <= 1000
    assert (await take("request-3", 2))[0] == 0


async def test_a_process_admits_one_callers_concurrent_operations_in_one_script_call(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Operations of one caller admitted in the same turn of the event loop share one call
    of take_token.lua, and exactly as many are admitted as the bucket holds tokens."""
    store = make_store()
    settings = dataclasses.replace(TEST_SETTINGS, backend_rate=1, backend_burst=5)
    together = counted_calls(monkeypatch, store, "take_tokens")
    apart = counted_calls(monkeypatch, store, "take_token")
    limiter = RateLimiter(store, settings)
    chat = Caller(CallerKind.BACKEND, "chat")
    outcomes = await asyncio.gather(
        *(limiter.admit(chat) for _ in range(8)), return_exceptions=True
    )
    assert outcomes[:5] == [None] * 5
    assert all(isinstance(o, RateLimitedError) and o.retry_after_s == 1 for o in outcomes[5:])
    assert [call[-1] for call in together] == [8]
    assert apart == []
    # Each its own call when not together (while tracing): the same admissions.
    one_by_one = RateLimiter(store, settings, together=False)
    other = Caller(CallerKind.BACKEND, "other")
    outcomes = await asyncio.gather(
        *(one_by_one.admit(other) for _ in range(8)), return_exceptions=True
    )
    assert outcomes[:5] == [None] * 5
    assert all(isinstance(o, RateLimitedError) for o in outcomes[5:])
    assert len(apart) == 8


async def test_admissions_that_joined_an_operation_cancelled_are_still_answered(
    make_store: StoreFactory,
) -> None:
    """The first operation of a turn takes for those that join it: cancelled before the call
    leaves, it takes nothing, and they are admitted all the same."""
    limiter = RateLimiter(
        make_store(), dataclasses.replace(TEST_SETTINGS, backend_rate=1, backend_burst=3)
    )
    chat = Caller(CallerKind.BACKEND, "chat")
    first, *joined = [asyncio.create_task(limiter.admit(chat)) for _ in range(3)]
    await asyncio.sleep(0)  # the first waits for the others to join; they join
    first.cancel()
    assert await asyncio.gather(*joined) == [None, None]
    assert first.cancelled()
    await limiter.admit(chat)  # the third token: the cancelled one took none
    with pytest.raises(RateLimitedError):
        await limiter.admit(chat)


async def test_every_process_takes_its_own_tokens_from_a_shared_bucket(
    make_store: StoreFactory,
) -> None:
    """Each process names its takings from a count of its own: two processes' first takings
    are two requests, not one retried."""
    first, second = make_store(), make_store()  # two processes' stores on one Redis
    assert await first.take_token("backend:chat", 1, 2) == 0
    assert await second.take_token("backend:chat", 1, 2) == 0
    assert await first.take_token("backend:chat", 1, 2) > 0  # the burst of 2 is spent


async def test_two_processes_admissions_taken_together_share_one_bucket(
    make_store: StoreFactory,
) -> None:
    """Admissions that each process takes at once come out of the same bucket in turn: one
    process's call is not taken for a retry of the other's, and neither grants beyond it."""
    first, second = make_store(), make_store()  # two processes' stores on one Redis
    assert await first.take_tokens("backend:chat", 0.001, 4, 3) == (3, 0)
    granted, wait_ms = await second.take_tokens("backend:chat", 0.001, 4, 3)
    assert granted == 1  # the fourth token; the other two wait
    assert wait_ms > 0
    assert (await first.take_tokens("backend:chat", 0.001, 4, 2))[0] == 0


async def test_an_operations_cost_beyond_its_first_token_is_owed(redis: Redis) -> None:
    """Admission needs a token in the bucket; the rest of the cost is taken whatever is
    left, and the debt is paid back at the rate before the next admission."""
    scripts = Scripts.register(redis)
    bucket = [Keys().rate_bucket("backend:chat")]

    async def take(cost: int, *, owed: bool) -> list[int]:
        reply: list[int] = await scripts.run(
            ScriptName.TAKE_TOKEN,
            bucket,
            ["1", 2, f"r{time.monotonic_ns()}", cost, int(owed), 1],
        )
        return reply

    assert await take(1, owed=False) == [1, 0]
    assert await take(9, owed=True) == [1, 0]  # one token was left: eight owed
    granted, retry_after_ms = await take(1, owed=False)
    assert granted == 0
    assert 8900 < retry_after_ms <= 9000  # nine tokens at one a second
    assert 9000 < await redis.pttl(bucket[0]) <= 11_000  # kept until full again


def test_a_process_own_buckets_refill_at_the_rate_and_forget_idle_callers() -> None:
    now = [0.0]
    buckets = LocalBuckets(clock=lambda: now[0])
    assert [buckets.take("a", 0.5, 2) for _ in range(3)] == [0, 0, 2000]
    assert buckets.take("b", 0.5, 2) == 0  # each caller has a bucket of its own
    now[0] = 1.0
    assert buckets.take("a", 0.5, 2) == 1000
    now[0] = 2.0
    assert buckets.take("a", 0.5, 2) == 0
    for i in range(3000):  # many callers, each idle long enough to be full again
        now[0] += 5
        assert buckets.take(f"user-{i}", 0.5, 2) == 0
    assert len(buckets) <= 1024  # idle callers cost no memory
    # As the script: the rest of an operation's cost is owed, and paid back at the rate.
    assert buckets.take("c", 0.5, 2) == 0
    assert buckets.take("c", 0.5, 2, 4, owed=True) == 0
    assert buckets.take("c", 0.5, 2) == 8000
