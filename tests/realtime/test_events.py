"""The events the scripts publish as they change presence, read straight from Redis pub/sub
on Redis 6.2 and Valkey 9: each change announced once, no event without its change."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from gql_presence.realtime.delivery import Feed, FeedDroppedError, PresenceChange
from gql_presence.realtime.held import EndReason, HeldSessions
from gql_presence.realtime.hub import EventHub
from gql_presence.running.connection import ClusterSubscriber, cluster_client, subscriber_client
from gql_presence.running.redis_server import free_port
from gql_presence.store import PresenceStore, shard_of
from gql_presence.store.days import to_ms
from gql_presence.store.errors import BadInputError, SessionRevokedError
from gql_presence.store.models import ChosenStatus, Visibility
from tests.conftest import TEST_SETTINGS, StoreFactory
from tests.helpers import (
    eventually,
    first_event,
    ignore,
    kinds,
    published,
    published_in_full,
    text_messages,
)
from tests.redis_cluster import LocalCluster


async def test_online_is_announced_once_when_the_first_session_begins(
    store: PresenceStore, channel: PubSub
) -> None:
    before = to_ms(datetime.now(UTC))
    await store.touch("alice", "phone")
    await store.touch("alice", "laptop")
    await store.touch("alice", "phone")
    events = await published(channel)
    assert kinds(events) == [("ONLINE", "alice", "", 1)]
    assert before - 1000 <= events[0][2] <= to_ms(datetime.now(UTC)) + 1000


async def test_kicks_are_announced_with_what_remains(store: PresenceStore, channel: PubSub) -> None:
    await store.touch("alice", "phone")
    await store.touch("alice", "laptop")
    await store.kick("alice", "phone")
    # No longer live: nothing kicked, only the id revoked for whoever holds it in a place.
    await store.kick("alice", "phone")
    await store.kick("alice")
    await store.kick("alice")
    assert kinds(await published(channel)) == [
        ("ONLINE", "alice", "", 1),
        ("KICKED", "alice", "phone", 1),
        ("REVOKED", "alice", "phone", 1),
        ("KICKED", "alice", "", 0),
        ("REVOKED", "alice", "", 0),
    ]


async def test_refused_calls_announce_nothing(store: PresenceStore, channel: PubSub) -> None:
    await store.touch("alice", "phone")
    await store.kick("alice")
    with pytest.raises(SessionRevokedError):
        await store.touch("alice", "phone")
    with pytest.raises(BadInputError):
        await store.touch("bob", at=datetime.now(UTC) + timedelta(minutes=1))
    assert kinds(await published(channel)) == [
        ("ONLINE", "alice", "", 1),
        ("KICKED", "alice", "", 0),
    ]


async def test_touch_many_announces_each_user_who_comes_online(
    store: PresenceStore, channel: PubSub
) -> None:
    await store.touch("a")
    await store.touch_many(["a", "b", "c"])
    assert [(k, u) for k, u, *_ in await published(channel)] == [
        ("ONLINE", "a"),
        ("ONLINE", "b"),
        ("ONLINE", "c"),
    ]


async def test_touch_many_announces_each_user_as_they_look(
    make_store: StoreFactory, channel: PubSub
) -> None:
    store = make_store(window_ms=300)
    # Users who chose something look as they chose; the others plainly online, also when an
    # unswept expiry of theirs is announced first, with a session key of their own or not.
    await store.set_status("busy", ChosenStatus.BUSY)
    await store.set_status("ghost", ChosenStatus.INVISIBLE)
    await store.set_custom_status("lunch", "at lunch", "🍜")
    await store.set_last_seen_visibility("shy", Visibility.NOBODY)
    await store.touch("late")
    await store.touch("late-phone", "phone")
    await asyncio.sleep(0.4)  # both expired, no sweep yet
    await published_in_full(channel)
    await store.touch_many(["plain", "busy", "ghost", "lunch", "shy", "late", "late-phone"])
    looks = [
        (e.user_id, e.kind, e.status, e.custom, e.others_kind, e.visible_to, e.invisible)
        for e in await published_in_full(channel)
    ]
    assert sorted(looks) == [
        ("busy", "ONLINE", "BUSY", False, "ONLINE", "EVERYONE", 0),
        ("ghost", "ONLINE", "INVISIBLE", False, "", "EVERYONE", 1),
        ("late", "OFFLINE", "OFFLINE", False, "OFFLINE", "EVERYONE", 0),
        ("late", "ONLINE", "ONLINE", False, "ONLINE", "EVERYONE", 0),
        ("late-phone", "OFFLINE", "OFFLINE", False, "OFFLINE", "EVERYONE", 0),
        ("late-phone", "ONLINE", "ONLINE", False, "ONLINE", "EVERYONE", 0),
        ("lunch", "ONLINE", "ONLINE", ["at lunch", "🍜", False], "ONLINE", "EVERYONE", 0),
        ("plain", "ONLINE", "ONLINE", False, "ONLINE", "EVERYONE", 0),
        ("shy", "ONLINE", "ONLINE", False, "ONLINE", "NOBODY", 0),
    ]


async def test_expiry_is_announced_once_by_concurrent_sweeps_at_the_moment_it_happened(
    make_store: StoreFactory, channel: PubSub
) -> None:
    sweepers = [make_store(window_ms=300) for _ in range(4)]
    touched = [await sweepers[0].touch(f"u{i}", "s") for i in range(50)]
    await asyncio.sleep(0.4)
    await asyncio.gather(*(s.sweep() for s in sweepers for _ in range(3)))
    events = await published(channel)
    offline = [e for e in events if e[0] == "OFFLINE"]
    assert sorted(u for _, u, *_ in offline) == sorted(f"u{i}" for i in range(50))
    expected_at = {p.user_id: to_ms(p.sessions[0].last_seen) + 300 for p in touched}
    assert all(at == expected_at[user] for _, user, at, _, _ in offline)
    assert await published(channel) == []


async def test_an_expiry_found_by_a_touch_is_announced_before_the_new_online(
    make_store: StoreFactory, channel: PubSub
) -> None:
    store = make_store(window_ms=300)
    await store.touch("alice")
    await asyncio.sleep(0.4)  # expired, and no sweep has run
    await store.touch("alice")
    assert kinds(await published(channel)) == [
        ("ONLINE", "alice", "", 1),
        ("OFFLINE", "alice", "", 0),
        ("ONLINE", "alice", "", 1),
    ]
    await store.sweep()
    assert await published(channel) == []


async def test_friend_set_changes_are_announced_for_each_changed_set(
    store: PresenceStore, channel: PubSub
) -> None:
    await store.add_friends("me", ["a", "b"])
    await store.add_friends("me", ["a"])  # no change
    await store.remove_friends("me", ["b"], mutual=False)
    assert [(k, u) for k, u, *_ in await published(channel)] == [
        ("FRIENDS", "a"),
        ("FRIENDS", "b"),
        ("FRIENDS", "me"),
        ("FRIENDS", "me"),
    ]


async def test_a_kick_or_touch_many_meeting_an_unswept_expiry_announces_it(
    make_store: StoreFactory, channel: PubSub
) -> None:
    store = make_store(window_ms=300)
    await store.touch_many(["a", "b"])
    await asyncio.sleep(0.4)  # both expired, no sweep yet
    assert (await store.kick("a")).kicked_sessions == 0
    await store.touch_many(["b"])
    assert kinds(await published(channel)) == [
        ("ONLINE", "a", "", 1),
        ("ONLINE", "b", "", 1),
        ("OFFLINE", "a", "", 0),
        ("REVOKED", "a", "", 0),
        ("OFFLINE", "b", "", 0),
        ("ONLINE", "b", "", 1),
    ]


# --- the event hub of a process -----------------------------------------------------------


@pytest.fixture
async def hub(redis: Redis, any_server: Any) -> AsyncIterator[EventHub]:
    """A hub that PINGs every 0.1 s and counts 0.5 s of silence as a lost connection."""
    subscriber = subscriber_client(any_server.url)
    events = EventHub(
        subscriber, PresenceStore(redis, TEST_SETTINGS), 100, ping_every_s=0.1, silence_limit_s=0.5
    )
    await events.start()
    yield events
    await events.stop()
    await asyncio.wait_for(subscriber.aclose(), 5)


@pytest.mark.slow
async def test_a_connection_that_goes_silent_ends_every_feed(hub: EventHub, redis: Redis) -> None:
    async with hub.feed(ignore, user_ids=["a"]) as feed:
        await redis.client_pause(1500, all=True)  # answers nothing, closes nothing
        with pytest.raises(FeedDroppedError, match="interrupted") as dropped:
            await asyncio.wait_for(first_event(feed), 1.4)
        assert not dropped.value.violation
    # The pause ends and the hub subscribes again.
    await eventually(lambda: hub.subscribed, 3, "a new subscription")


async def test_on_a_cluster_the_subscription_moves_to_the_next_node_when_one_fails(
    redis_cluster: LocalCluster,
) -> None:
    # The first node the subscriber tries does not answer; events of every shard arrive
    # through the next one, as a classic PUBLISH reaches every node of a cluster.
    settings = dataclasses.replace(TEST_SETTINGS, redis_cluster_nodes=redis_cluster.nodes, shards=3)
    client = cluster_client(settings)
    await client.flushall()
    store = PresenceStore(client, settings)
    nodes = [("127.0.0.1", free_port()), *redis_cluster.nodes]
    subscriber = ClusterSubscriber(lambda: nodes, {})
    events = EventHub(subscriber, store, 100)
    try:
        await events.start()
        users = [f"u{i}" for i in range(9)]
        assert {shard_of(user, 3) for user in users} == {0, 1, 2}
        async with events.feed(ignore, user_ids=users) as feed:
            await store.touch_many(users)
            received = set()
            async with asyncio.timeout(5):
                async for event in feed:
                    received.add(event.user_id)
                    if received == set(users):
                        break
    finally:
        await events.stop()
        await subscriber.aclose()
        await client.aclose()


async def test_a_friend_set_grown_past_the_limit_ends_the_feed(
    hub: EventHub, store: PresenceStore, make_store: StoreFactory
) -> None:
    await store.add_friends("me", ["a"])
    # A set that grew before its maximum was lowered (PRESENCE_MAX_FRIENDS is at most 10,000).
    unbounded = make_store(max_friends=20_000)
    async with hub.feed(ignore, friends_of="me") as feed:
        assert hub.users_of(feed) == {"a"}
        await unbounded.add_friends("me", [f"f{i}" for i in range(10_000)], mutual=False)
        with pytest.raises(FeedDroppedError, match="10,000") as dropped:
            await asyncio.wait_for(first_event(feed), 2)
        assert dropped.value.violation


async def test_friends_of_follows_each_change_and_nothing_is_left_behind(
    hub: EventHub, store: PresenceStore
) -> None:
    async with hub.feed(ignore, friends_of="me") as feed:
        await store.add_friends("me", ["a", "b"])
        await eventually(lambda: hub.users_of(feed) == {"a", "b"}, 2, "the friends' arrival")
        await store.remove_friends("me", ["a"])
        await eventually(lambda: hub.users_of(feed) == {"b"}, 2, "the removed friend's leaving")
        await store.touch("b")
        assert (await asyncio.wait_for(first_event(feed), 2)).user_id == "b"
    assert hub.subscriber_count == 0
    await store.add_friends("me", ["c"])  # a change after the subscriber left
    await asyncio.sleep(0.2)
    assert hub.subscriber_count == 0


# --- deliveries: events written straight to a socket (multiplexed) ---------------------------


class Socket:
    """Stands in for a WebSocket's send_frames: keeps the messages of the frames written,
    reports `waiting` bytes."""

    def __init__(self, waiting: int = 0) -> None:
        self.writes: list[list[bytes]] = []
        self.waiting = waiting

    def __call__(self, frames: bytes) -> int | None:
        self.writes.append(text_messages(frames))
        return self.waiting


class Renderer:
    """Renders an event as its user and kind, counting how often it is asked."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, event: PresenceChange) -> bytes:
        self.calls += 1
        return f'"{event.user_id} {event.kind}"'.encode()


async def test_one_rendering_per_event_is_shared_and_a_batch_is_written_at_once(
    hub: EventHub, store: PresenceStore
) -> None:
    render, first, second = Renderer(), Socket(), Socket()
    one = await hub.deliver(ignore, first, b'{"id":"1","payload":', render, user_ids=["a", "b"])
    two = await hub.deliver(ignore, second, b'{"id":"2","payload":', render, user_ids=["a"])
    await store.touch_many(["a", "b"])  # one message of two events
    await eventually(lambda: len(first.writes) == 1 and len(second.writes) == 1)
    assert first.writes == [
        [b'{"id":"1","payload":"a ONLINE"}', b'{"id":"1","payload":"b ONLINE"}']
    ]
    assert second.writes == [[b'{"id":"2","payload":"a ONLINE"}']]
    assert render.calls == 2  # once per event, not per delivery
    hub.forget(one)
    hub.forget(two)
    assert hub.subscriber_count == 0


async def test_a_delivery_is_dropped_for_a_batch_or_a_backlog_over_its_buffer(
    hub: EventHub, store: PresenceStore
) -> None:
    dropped: list[FeedDroppedError] = []

    async def on_drop(reason: FeedDroppedError) -> None:
        dropped.append(reason)

    # The hub's buffer is 100 events: a batch of 101 is too many at once.
    many = [f"u{i}" for i in range(101)]
    await hub.deliver(on_drop, Socket(), b"{", Renderer(), user_ids=many)
    await store.touch_many(many)
    await eventually(lambda: len(dropped) == 1, 2, "the drop")
    assert dropped[0].violation
    assert "too slow: more than 100 events were waiting" in dropped[0].reason

    # Fewer messages, but more than 100 messages' worth of bytes still unsent in the socket.
    message_size = len(b'{"a ONLINE"}')
    backlog = Socket(waiting=100 * message_size + 1)
    await hub.deliver(on_drop, backlog, b"{", Renderer(), user_ids=["a"])
    await store.touch("a")
    await eventually(lambda: len(dropped) == 2, 2, "the second drop")
    assert "too slow" in dropped[1].reason
    assert hub.subscriber_count == 0


# --- a process receives the events of the users followed there, and only those ---------------


async def test_a_process_receives_no_event_of_a_user_nobody_follows_there(
    hub: EventHub, store: PresenceStore
) -> None:
    followed = [f"f{i}" for i in range(10)]
    await store.add_friends("owner", ["f0"])
    async with hub.feed(ignore, user_ids=followed) as feed, hub.feed(ignore, friends_of="owner"):
        assert all(map(hub.follows, followed))
        assert not hub.follows("other0")
        others = [f"other{i}" for i in range(200)]
        await store.touch_many(others)
        await store.kick("other1", None)
        await store.add_friends("other2", ["other3"])
        await store.touch("f3")
        event = await asyncio.wait_for(first_event(feed), 2)
        assert (event.user_id, event.kind) == ("f3", "ONLINE")
        # f3's one message; not one of the others' 201 events, nor their friends' change.
        assert (hub.messages_received, hub.events_decoded) == (1, 1)
    await eventually(lambda: hub.channel_count == 1, 2, "every user's channel to be left")
    await store.touch("f4")
    await asyncio.sleep(0.1)
    assert hub.messages_received == 1


async def test_everyone_gets_every_event_once_and_so_do_those_who_follow_users_meanwhile(
    hub: EventHub, store: PresenceStore
) -> None:
    async with hub.feed(ignore, user_ids=["a"]) as mine:
        async with hub.feed(ignore, everyone=True) as every:
            assert hub.follows("anyone")
            await store.touch_many(["a", "b", "c"])
            await store.kick("a")
            assert await events_of(every, 4) == [
                ("a", "ONLINE"),
                ("b", "ONLINE"),
                ("c", "ONLINE"),
                ("a", "KICKED"),
            ]
        await store.touch("a", "s2")
        # a's events: each once, whether the channel of every user brought them or a's own.
        assert await events_of(mine, 3) == [("a", "ONLINE"), ("a", "KICKED"), ("a", "ONLINE")]
        await asyncio.sleep(0.1)
        assert mine.pending == 0


async def test_follow_churn_and_friend_set_changes_leave_each_event_once_in_order(
    hub: EventHub, store: PresenceStore
) -> None:
    # While others follow and leave "a", and the channel of every user is subscribed and left,
    # and friends of "me" come and go, those who follow "a" throughout get each of its events
    # once, in order: ONLINE and KICKED in turn.
    await store.add_friends("me", ["a"])
    rounds = 30
    async with (
        hub.feed(ignore, user_ids=["a", "x"]) as steady,
        hub.feed(ignore, friends_of="me") as friendly,
    ):

        async def churn() -> None:
            for i in range(rounds):
                async with contextlib.AsyncExitStack() as stack:
                    await stack.enter_async_context(hub.feed(ignore, user_ids=["a"]))
                    if i % 3 == 0:
                        await stack.enter_async_context(hub.feed(ignore, everyone=True))
                    await store.add_friends("me", [f"n{i}"])
                    await asyncio.sleep(0)
                await store.remove_friends("me", [f"n{i}"])

        async def change() -> None:
            for i in range(rounds):
                await store.touch("a", f"s{i}")
                await asyncio.sleep(0.001 * (i % 4))
                await store.kick("a", f"s{i}")

        await asyncio.gather(churn(), change())
        expected = [("a", "ONLINE"), ("a", "KICKED")] * rounds
        assert await events_of(steady, 2 * rounds) == expected
        assert await events_of(friendly, 2 * rounds) == expected
        await asyncio.sleep(0.1)
        assert steady.pending == friendly.pending == 0


async def events_of(feed: Feed, count: int) -> list[tuple[str, str]]:
    """The next `count` events of the feed, as (user, kind)."""
    got = []
    async with asyncio.timeout(3):
        async for event in feed:
            got.append((event.user_id, str(event.kind)))
            if len(got) == count:
                break
    return got


async def test_a_held_session_hears_its_user_while_held_and_ends_on_a_kick_or_replacement(
    hub: EventHub, store: PresenceStore
) -> None:
    sessions = HeldSessions(store, 30_000, hub)
    hub.watch_sessions(sessions.on_event, sessions.missed_events)
    elsewhere = HeldSessions(store, 30_000)  # another process's
    kicked = await sessions.open("alice", "tab")
    replaced = await sessions.open("bob", "tab")
    # Nobody follows alice or bob here: their channels are subscribed for the holds alone.
    assert hub.channel_count == 3
    await store.kick("alice", "tab")
    assert (await asyncio.wait_for(kicked.ended(), 2)).reason is EndReason.KICKED
    newer = await elsewhere.open("bob", "tab")
    assert (await asyncio.wait_for(replaced.ended(), 2)).reason is EndReason.REPLACED
    sessions.release(kicked)
    sessions.release(replaced)
    await eventually(lambda: hub.channel_count == 1, 2, "the users' channels to be left")
    elsewhere.release(newer)
    await sessions.settle()
    await elsewhere.settle()


async def test_a_hub_stopped_as_a_feed_ends_leaves_no_connection_open(
    redis: Redis, any_server: Any
) -> None:
    # The feed's end leaves its channels by a command sent in a task of its own, which may run
    # while the hub stops and closes its connection: it must not open that connection again.
    for _ in range(10):
        subscriber = Redis.from_url(any_server.url, client_name="stopping-hub")
        events = EventHub(subscriber, PresenceStore(redis, TEST_SETTINGS), 100)
        await events.start()
        try:
            async with events.feed(ignore, user_ids=[f"u{i}" for i in range(50)]):
                pass
        finally:
            await events.stop()

        async def none_left() -> bool:
            clients = await redis.client_list()
            return not [c for c in clients if c.get("name") == "stopping-hub"]

        # A closed connection leaves Redis's list once Redis has read its end.
        await eventually(none_left, within_s=1, what="the hub's connections closed")
        await subscriber.aclose()
