"""Places in the store, on Redis 6.2 and Valkey 9: sessions held in a place under their
process's lease, listed most recently joined first and counted without reading the place
whole, their states replaced, and every JOINED, UPDATED and LEFT announced once on the place's
channel by the script that makes the change."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from gql_presence.realtime.held import EndReason, HeldSessions
from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import RedisServer
from gql_presence.store import PresenceStore
from gql_presence.store.channels import Channels
from gql_presence.store.errors import BadInputError, SessionRevokedError, StoreUnavailableError
from gql_presence.store.keys import Keys
from gql_presence.store.wire import read_place_events
from tests.conftest import TEST_SETTINGS, StoreFactory
from tests.helpers import eventually

TTL_S = TEST_SETTINGS.connection_ttl_ms / 1000
DOC = "doc:42"


def ago(**delta: float) -> datetime:
    return datetime.now(UTC) - timedelta(**delta)


@pytest.fixture
async def place_channel(redis: Redis) -> AsyncIterator[PubSub]:
    pubsub = redis.pubsub(ignore_subscribe_messages=True)
    await pubsub.subscribe(Channels().place_events(DOC))
    await pubsub.get_message(timeout=1)
    yield pubsub
    await pubsub.aclose()  # type: ignore[no-untyped-call]


async def place_events(pubsub: PubSub, wait_s: float = 0.2) -> list[tuple[Any, ...]]:
    """(kind, user, session, state) of every place event published until none came."""
    events = []
    while (message := await pubsub.get_message(timeout=wait_s)) is not None:
        for event in read_place_events(message["data"]):
            state = event.state
            parsed = state if state is False else json.loads(str(state))
            events.append((event.kind, event.user_id, event.session_id, parsed))
    return events


async def test_a_session_joins_with_its_state_and_leaves_once(
    store: PresenceStore, place_channel: PubSub
) -> None:
    opened = await store.open_place_session(DOC, "ann", "tab", {"x": 1})
    page = await store.place_members(DOC)
    assert (page.total_count, page.users) == (1, 1)
    assert [(m.user_id, m.session_id, m.joined_at) for m in page.nodes] == [
        ("ann", "tab", opened.joined_at)
    ]
    assert json.loads(page.nodes[0].state or "null") == {"x": 1}
    assert await store.close_place_session(opened.held)
    assert not await store.close_place_session(opened.held)
    assert (await store.place_members(DOC)).total_count == 0
    assert await place_events(place_channel) == [
        ("JOINED", "ann", "tab", {"x": 1}),
        ("LEFT", "ann", "tab", False),
    ]


async def keys_in(redis: Redis) -> int:
    return sum([1 async for _ in redis.scan_iter(count=1000)])


async def test_places_used_once_leave_no_key_once_empty(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(empty_place_ttl_ms=300, feed_retention_ms=300)
    places = [f"place-{i}" for i in range(2000)]
    # What the shard keeps whatever its places (its lease, its counters), and nothing more.
    await store.close_place_session((await store.open_place_session("first", "ann", "tab")).held)
    emptied = await store.place_members("first")

    async def first_expired() -> bool:
        return await redis.exists(Keys().place_users("first")) == 0

    await eventually(first_expired, within_s=2, what="the emptied place's key to expire")
    kept = await keys_in(redis)
    opened = await asyncio.gather(*(store.open_place_session(p, "ann", "tab") for p in places))
    await asyncio.gather(*(store.close_place_session(o.held) for o in opened))
    assert await keys_in(redis) > kept  # each place's sequence, for a while

    async def nothing_left() -> bool:
        return await keys_in(redis) == kept

    await eventually(nothing_left, within_s=3, what="the emptied places' keys to expire")
    # A place used again numbers its events after those it gave out before it emptied.
    await store.open_place_session("first", "ann", "tab")
    assert (await store.place_members("first")).sequence > emptied.sequence


async def test_a_user_holds_at_most_the_maximum_of_sessions_in_a_place(
    make_store: StoreFactory, place_channel: PubSub
) -> None:
    store = make_store(max_sessions=2)
    await store.open_place_session(DOC, "ann", "a")
    await store.open_place_session(DOC, "ann", "b")
    await store.open_place_session(DOC, "ann", "b")  # held already: replaced, not one more
    await store.open_place_session(DOC, "bob", "a")
    await place_events(place_channel)
    with pytest.raises(BadInputError, match=r"at most 2 live sessions \(PRESENCE_MAX_SESSIONS\)"):
        await store.open_place_session(DOC, "ann", "c", {"x": 1})
    assert await place_events(place_channel) == []
    page = await store.place_members(DOC)
    assert sorted((m.user_id, m.session_id) for m in page.nodes) == [
        ("ann", "a"),
        ("ann", "b"),
        ("bob", "a"),
    ]


async def test_a_place_session_does_not_make_its_user_online(store: PresenceStore) -> None:
    await store.open_place_session(DOC, "ann", "tab")
    assert not (await store.presence("ann")).online


async def test_members_are_listed_newest_first_and_paged_and_counted(store: PresenceStore) -> None:
    for user, session in [("bob", "b"), ("ann", "a2"), ("ann", "a1"), ("cy", "c")]:
        await store.open_place_session(DOC, user, session)
    page = await store.place_members(DOC, first=2)
    assert (page.total_count, page.users, page.has_next_page) == (4, 3, True)
    rest = await store.place_members(DOC, first=5, after=page.end_cursor)
    listed = [(m.user_id, m.session_id) for m in (*page.nodes, *rest.nodes)]
    joined = [m.joined_at for m in (*page.nodes, *rest.nodes)]
    assert sorted(listed) == [("ann", "a1"), ("ann", "a2"), ("bob", "b"), ("cy", "c")]
    assert joined == sorted(joined, reverse=True)
    assert not rest.has_next_page
    counts = await store.place_counts([DOC, "empty", DOC])
    assert [(c.place_id, c.sessions, c.users) for c in counts] == [
        (DOC, 4, 3),
        ("empty", 0, 0),
        (DOC, 4, 3),
    ]


async def test_a_second_opening_replaces_the_first_without_a_leave_or_a_join(
    store: PresenceStore, place_channel: PubSub
) -> None:
    first = await store.open_place_session(DOC, "ann", "tab", {"x": 1})
    second = await store.open_place_session(DOC, "ann", "tab", {"x": 1})
    assert second.joined_at == first.joined_at
    third = await store.open_place_session(DOC, "ann", "tab", {"x": 2})
    assert not await store.close_place_session(first.held)
    assert (await store.place_members(DOC)).total_count == 1
    events = await place_events(place_channel)
    assert [(kind, state) for kind, _, _, state in events] == [
        ("JOINED", {"x": 1}),
        ("REPLACED", second.held.generation),
        ("REPLACED", third.held.generation),
        ("UPDATED", {"x": 2}),
    ]


async def test_a_state_set_is_read_and_announced_once_changed(
    store: PresenceStore, place_channel: PubSub
) -> None:
    await store.open_place_session(DOC, "ann", "tab")
    member = await store.set_place_state(DOC, "ann", "tab", {"cursor": [1, 2]})
    assert member.state == '{"cursor":[1,2]}'
    await store.set_place_state(DOC, "ann", "tab", {"cursor": [1, 2]})
    page = await store.place_members(DOC)
    assert page.nodes[0].state == '{"cursor":[1,2]}'
    assert await place_events(place_channel) == [
        ("JOINED", "ann", "tab", False),
        ("UPDATED", "ann", "tab", {"cursor": [1, 2]}),
    ]


async def test_a_state_of_a_session_not_in_the_place_is_refused(store: PresenceStore) -> None:
    with pytest.raises(BadInputError, match="not in the place"):
        await store.set_place_state(DOC, "ann", "tab", {"x": 1})


@pytest.mark.parametrize(
    ("state", "says"),
    [
        ([1], "JSON object; got an array"),
        ("x", "JSON object; got a string"),
        ({"x": math.nan}, "no NaN"),
        ({"x": math.inf}, "no NaN"),
        ({"x": 10**400}, "beyond a double"),
        ({"x": "\ud800"}, "lone surrogate"),
        ({"x": "é" * 600}, "1,024 are allowed"),
    ],
)
async def test_a_bad_state_is_refused_and_changes_nothing(
    store: PresenceStore, state: object, says: str
) -> None:
    with pytest.raises(BadInputError, match=says):
        await store.open_place_session(DOC, "ann", "tab", state)
    assert (await store.place_members(DOC)).total_count == 0


async def test_a_state_of_exactly_1_kib_is_kept(store: PresenceStore) -> None:
    state = {"x": "a" * (1024 - len('{"x":""}'))}
    await store.open_place_session(DOC, "ann", "tab", state)
    assert len((await store.place_members(DOC)).nodes[0].state or "") == 1024


async def test_a_kicked_session_id_is_refused_in_places_too(store: PresenceStore) -> None:
    await store.kick("ann", "tab")
    with pytest.raises(SessionRevokedError):
        await store.open_place_session(DOC, "ann", "tab")


async def test_members_of_a_lapsed_lease_are_out_at_once_and_leave_once_by_the_sweep(
    make_store: StoreFactory, place_channel: PubSub
) -> None:
    dead, alive = make_store(), make_store()
    for i in range(50):
        await dead.open_place_session(DOC, f"d{i}", "tab")
    await alive.open_place_session(DOC, "ann", "tab")
    await place_events(place_channel)
    assert await dead.renew_leases(at=ago(seconds=TTL_S + 1)) == []
    page = await alive.place_members(DOC, first=10)
    assert page.total_count == 1
    assert [m.user_id for m in page.nodes] == ["ann"]
    assert [c.sessions for c in await alive.place_counts([DOC])] == [1]
    await alive.sweep()
    events = await place_events(place_channel)
    assert sorted(events) == sorted(("LEFT", f"d{i}", "tab", False) for i in range(50))
    await alive.sweep()
    assert await place_events(place_channel) == []
    assert (await alive.place_members(DOC)).users == 1


async def test_place_counts_take_at_most_1000_ids(store: PresenceStore) -> None:
    with pytest.raises(BadInputError, match="at most 1,000"):
        await store.place_counts([f"p{i}" for i in range(1001)])
    assert len(await store.place_counts([f"p{i}" for i in range(1000)])) == 1000


async def test_a_holder_that_missed_a_kick_or_a_replacement_ends_its_place_holds(
    store: PresenceStore,
) -> None:
    # Nothing hands this process the events: what ends its holds is heard of by a check.
    sessions = HeldSessions(store, ttl_ms=30_000)
    async with (
        sessions.hold_place(DOC, "ann", "tab", None) as kicked,
        sessions.hold_place(DOC, "bob", "tab", None) as replaced,
    ):
        await store.kick("ann", "tab")
        await store.open_place_session(DOC, "bob", "tab")  # as another process would
        sessions.missed_events()
        await sessions.renew()
        assert (await asyncio.wait_for(kicked.ended(), 1)).reason is EndReason.KICKED
        with pytest.raises(StoreUnavailableError):
            await asyncio.wait_for(replaced.ended(), 1)
    await sessions.settle()
    assert [m.user_id for m in (await store.place_members(DOC)).nodes] == ["bob"]


# --- states set faster than 20 a second: merged, the latest read and announced last ----------

# The shortest time between two UPDATED of one session (docs/semantics.md): 20 a second.
INTERVAL_MS = 50


async def updates(pubsub: PubSub, wait_s: float = 0.2) -> list[tuple[int, int, int]]:
    """(state's i, at ms, number in the place's sequence) of every UPDATED published until
    none came for wait_s."""
    found = []
    while (message := await pubsub.get_message(timeout=wait_s)) is not None:
        found += [
            (json.loads(str(event.state))["i"], event.at_ms, event.sequence)
            for event in read_place_events(message["data"])
            if event.kind == "UPDATED"
        ]
    return found


def assert_merged(found: list[tuple[int, int, int]], last: int, took_s: float) -> None:
    """At most one UPDATED per interval, states and sequence never going back, the last
    state set announced last. (How many calls fit in an interval is the test loop's speed,
    not the service's: a slow loop sees every state announced, and rightly.)"""
    states = [i for i, _, _ in found]
    assert states[-1] == last
    assert states == sorted(set(states)), states
    assert [n for _, _, n in found] == sorted({n for _, _, n in found})
    ats = [at for _, at, _ in found]
    assert all(b - a >= INTERVAL_MS - 1 for a, b in itertools.pairwise(ats)), ats
    assert len(found) <= took_s * 1000 / INTERVAL_MS + 2


async def test_a_state_set_100_times_a_second_is_announced_at_most_20_times_a_second(
    store: PresenceStore, place_channel: PubSub
) -> None:
    await store.open_place_session(DOC, "ann", "tab", {"i": -1})
    started = time.perf_counter()
    for i in range(40):
        member = await store.set_place_state(DOC, "ann", "tab", {"i": i})
        assert member.state == f'{{"i":{i}}}'
        # Every read has the state just set, announced or not yet.
        assert (await store.place_members(DOC)).nodes[0].state == f'{{"i":{i}}}'
        await asyncio.sleep(0.01)
    took_s = time.perf_counter() - started
    assert_merged(await updates(place_channel), 39, took_s)


async def test_states_set_through_two_processes_are_merged_alike(
    make_store: StoreFactory, place_channel: PubSub
) -> None:
    first, second = make_store(), make_store()
    await first.open_place_session(DOC, "ann", "tab", {"i": -1})
    started = time.perf_counter()
    for i in range(40):
        await (first, second)[i % 2].set_place_state(DOC, "ann", "tab", {"i": i})
        assert (await second.place_members(DOC)).nodes[0].state == f'{{"i":{i}}}'
    took_s = time.perf_counter() - started
    assert_merged(await updates(place_channel), 39, took_s)


async def test_a_state_whose_process_died_before_announcing_it_is_announced_by_the_sweep(
    store: PresenceStore, any_server: RedisServer, place_channel: PubSub
) -> None:
    await store.open_place_session(DOC, "ann", "tab", {"i": -1})

    async def burst_then_die() -> None:
        """Another process sets the state twice at once, and ends before announcing the
        second: its event loop closes with the announcement still planned."""
        client = redis_client(any_server.url)
        other = PresenceStore(client, TEST_SETTINGS)
        await other.set_place_state(DOC, "ann", "tab", {"i": 0})
        await other.set_place_state(DOC, "ann", "tab", {"i": 1})
        await client.aclose()

    await asyncio.to_thread(asyncio.run, burst_then_die())
    assert (await store.place_members(DOC)).nodes[0].state == '{"i":1}'
    assert [i for i, _, _ in await updates(place_channel)] == [0]
    await store.sweep()  # a window and more after the state was set: overdue
    assert [i for i, _, _ in await updates(place_channel)] == [1]
    await store.sweep()
    assert await updates(place_channel) == []


async def test_a_session_that_leaves_with_a_state_not_yet_announced_leaves_last(
    store: PresenceStore, place_channel: PubSub
) -> None:
    opened = await store.open_place_session(DOC, "ann", "tab", {"i": -1})
    await store.set_place_state(DOC, "ann", "tab", {"i": 0})
    await store.set_place_state(DOC, "ann", "tab", {"i": 1})
    await store.close_place_session(opened.held)
    await store.open_place_session(DOC, "ann", "tab", {"i": 2})  # back at once
    await asyncio.sleep(2 * INTERVAL_MS / 1000)
    await store.sweep()
    assert [(kind, state) for kind, _, _, state in await place_events(place_channel)] == [
        ("JOINED", {"i": -1}),
        ("UPDATED", {"i": 0}),
        ("LEFT", False),
        ("JOINED", {"i": 2}),
    ]
