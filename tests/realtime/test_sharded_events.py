"""Events on a Redis Cluster with sharded pub/sub (Valkey 9, the Redis 7 line): the scripts
publish each event with SPUBLISH on channels of their own shard, so that it stays on the
master of that shard, and a process reads them over one connection per shard. A cluster of
Redis 6.2, and one Redis however many shards it holds, keep classic PUBLISH."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis, RedisCluster

from gql_presence.realtime.delivery import Feed, FeedDroppedError, PresenceChange
from gql_presence.realtime.hub import EventHub
from gql_presence.running.connection import ShardedSubscriber, cluster_client, redis_client
from gql_presence.running.redis_server import RedisServer
from gql_presence.settings import Settings
from gql_presence.store import ChosenStatus, Keys, PresenceStore, shard_of
from gql_presence.store.channels import Channels
from tests.conftest import TEST_SETTINGS
from tests.helpers import eventually, first_event, ignore
from tests.redis_cluster import LocalCluster, bus_publishes, fail_over, subscribers

SHARDS = 3


def settings_of(cluster: LocalCluster) -> Settings:
    return dataclasses.replace(TEST_SETTINGS, redis_cluster_nodes=cluster.nodes, shards=SHARDS)


def one_in_each_shard(prefix: str) -> list[str]:
    """A user id of each shard, shard 0's first."""
    return [
        next(f"{prefix}{i}" for i in itertools.count() if shard_of(f"{prefix}{i}", SHARDS) == s)
        for s in range(SHARDS)
    ]


@contextlib.asynccontextmanager
async def cluster_store(cluster: LocalCluster) -> AsyncIterator[tuple[PresenceStore, RedisCluster]]:
    """A store on the emptied cluster, publishing as the deployment chose, and its client."""
    client = cluster_client(settings_of(cluster))
    await client.flushall()
    store = PresenceStore(client, settings_of(cluster))
    await store.choose_publish()
    try:
        yield store, client
    finally:
        await client.aclose()


@pytest.fixture
async def on_cluster(
    valkey_cluster: LocalCluster,
) -> AsyncIterator[tuple[PresenceStore, RedisCluster]]:
    async with cluster_store(valkey_cluster) as both:
        yield both


@pytest.fixture
def store(on_cluster: tuple[PresenceStore, RedisCluster]) -> PresenceStore:
    return on_cluster[0]


@pytest.fixture
def client(on_cluster: tuple[PresenceStore, RedisCluster]) -> RedisCluster:
    return on_cluster[1]


@contextlib.asynccontextmanager
async def running_hub(
    store: PresenceStore, client: RedisCluster, silence_limit_s: float = 0.5
) -> AsyncIterator[EventHub]:
    """A hub reading the store's sharded channels; `silence_limit_s` of silence counts as a loss."""
    hub = EventHub(
        ShardedSubscriber(client), store, 1000, ping_every_s=0.1, silence_limit_s=silence_limit_s
    )
    await hub.start()
    try:
        yield hub
    finally:
        await hub.stop()


@pytest.fixture
async def hub(store: PresenceStore, client: RedisCluster) -> AsyncIterator[EventHub]:
    async with running_hub(store, client) as events:
        yield events


async def collect(feed: Feed, into: list[PresenceChange], dropped: list[FeedDroppedError]) -> None:
    try:
        async for event in feed:
            into.append(event)  # noqa: PERF401 - kept as they come, for a test to look at
    except FeedDroppedError as error:
        dropped.append(error)


def master_of(cluster: LocalCluster, shard: int) -> tuple[str, int]:
    """The master that serves `shard`'s slot in the clusters of conftest.py."""
    # Slots 0..6999, 7000..10999, 11000..: shard 2's tag {2} is 5649, {1} 9842, {0} 13907.
    return cluster.nodes[{2: 0, 1: 1, 0: 2}[shard]]


# --- the choice, once per deployment ----------------------------------------------------------


async def test_sharded_publish_is_chosen_where_every_master_has_it_and_kept_by_the_deployment(
    valkey_cluster: LocalCluster, redis_cluster: LocalCluster, valkey_server: RedisServer
) -> None:
    async with cluster_store(valkey_cluster) as (store, client):
        assert store.sharded_events
        assert await client.get(Keys().publish) == "SPUBLISH"
        # A process started later follows the deployment's choice, whatever it would choose.
        await client.set(Keys().publish, "PUBLISH")
        later = PresenceStore(client, settings_of(valkey_cluster))
        await later.choose_publish()
        assert not later.sharded_events

    async with cluster_store(redis_cluster) as (store, client):  # Redis 6.2: no SPUBLISH
        assert not store.sharded_events
        assert await client.get(Keys().publish) == "PUBLISH"

    # One Redis (shards or none) has nothing to gain from it: classic, and nothing recorded.
    single = redis_client(valkey_server.url)
    await single.flushall()
    one = PresenceStore(single, dataclasses.replace(TEST_SETTINGS, shards=SHARDS))
    await one.choose_publish()
    assert not one.sharded_events
    assert await single.get(Keys().publish) is None
    await single.aclose()


async def test_a_store_publishes_as_the_deployment_does_without_being_asked_to_choose(
    valkey_cluster: LocalCluster, store: PresenceStore, hub: EventHub
) -> None:
    # A process that only writes (a command, a tool, a test behind the service's back) and
    # never called choose_publish must not publish where no process listens.
    client = cluster_client(settings_of(valkey_cluster))
    bare = PresenceStore(client, settings_of(valkey_cluster))
    user = one_in_each_shard("bare")[1]
    try:
        async with hub.feed(ignore, user_ids=[user]) as feed:
            await bare.touch(user)
            assert (await asyncio.wait_for(first_event(feed), 3)).kind == "ONLINE"
    finally:
        await client.aclose()


# --- where events go --------------------------------------------------------------------------


async def test_a_users_events_stay_on_the_master_of_their_shard(
    valkey_cluster: LocalCluster, store: PresenceStore, hub: EventHub
) -> None:
    users = one_in_each_shard("stay")
    async with hub.feed(ignore, user_ids=users) as feed:
        # Each user's channel is subscribed on their shard's master only, and by shard.
        for shard, user in enumerate(users):
            channel = store.user_events_channel(user)
            for other in range(SHARDS):
                on_node = subscribers(master_of(valkey_cluster, other), channel)
                assert on_node == ((1 if other == shard else 0), 0)

        before = bus_publishes(valkey_cluster.nodes)
        await store.touch_many(users)
        for user in users:
            await store.set_status(user, ChosenStatus.BUSY)
            await store.kick(user)
        heard = []
        async with asyncio.timeout(3):
            async for event in feed:
                heard.append((event.user_id, event.kind))
                if len(heard) == 3 * len(users):
                    break
        assert sorted(heard) == sorted(
            (u, kind) for u in users for kind in ("ONLINE", "STATUS", "KICKED")
        )
        # Not one message about them crossed the cluster bus (nodes have no replicas here).
        assert bus_publishes(valkey_cluster.nodes) == before


async def test_classic_publish_crosses_the_bus_to_every_node(
    valkey_cluster: LocalCluster, client: RedisCluster
) -> None:
    # What the test above rules out, as a deployment that chose classic PUBLISH does it.
    await client.set(Keys().publish, "PUBLISH")
    classic = PresenceStore(client, settings_of(valkey_cluster))
    await classic.choose_publish()
    before = bus_publishes(valkey_cluster.nodes)
    await classic.touch(one_in_each_shard("bus")[0])
    # ONLINE on the user's channel and on every user's, each sent to both other masters.
    assert bus_publishes(valkey_cluster.nodes)["publish"] == before["publish"] + 2 * 2


# --- a process's followers --------------------------------------------------------------------


async def test_each_event_reaches_a_follower_once_and_in_order_while_followers_of_everyone_come_and_go(
    store: PresenceStore, hub: EventHub
) -> None:
    users = one_in_each_shard("order")
    heard: list[PresenceChange] = []
    dropped: list[FeedDroppedError] = []
    everyone_heard: list[list[PresenceChange]] = []
    stop = asyncio.Event()

    async def come_and_go() -> None:
        # Each joining and leaving moves, shard by shard, where the hub takes the users'
        # events from: their own channels, or every user's.
        while not stop.is_set():
            async with hub.feed(ignore, everyone=True) as everyone:
                got: list[PresenceChange] = []
                reader = asyncio.create_task(collect(everyone, got, []))
                await asyncio.sleep(0.01)
                reader.cancel()
                everyone_heard.append(got)
            await asyncio.sleep(0.005)

    async with hub.feed(ignore, user_ids=users) as feed:
        reader = asyncio.create_task(collect(feed, heard, dropped))
        churn = asyncio.create_task(come_and_go())
        rounds = 25
        for r in range(rounds):
            for user in users:
                await store.touch(user, f"s{r}")
                await store.kick(user)
        await eventually(lambda: len(heard) >= 2 * rounds * len(users), 5, "every event")
        await asyncio.sleep(0.2)  # and no more
        stop.set()
        await churn
        reader.cancel()
    assert not dropped
    for user in users:
        kinds = [event.kind for event in heard if event.user_id == user]
        assert kinds == ["ONLINE", "KICKED"] * rounds, user
    assert len(heard) == 2 * rounds * len(users)
    # The followers of everyone came and went while events flowed, on every shard.
    assert {event.user_id for got in everyone_heard for event in got} == set(users)


async def test_a_follower_of_everyone_gets_the_events_of_every_shard(
    valkey_cluster: LocalCluster, store: PresenceStore, hub: EventHub
) -> None:
    users = [f"all{i}" for i in range(30)]
    assert {shard_of(user, SHARDS) for user in users} == set(range(SHARDS))
    async with hub.feed(ignore, everyone=True) as feed:
        # Each shard's channel of every user, on its master, by sharded pub/sub only.
        for shard in range(SHARDS):
            channel = Channels.of_shard(shard).shard_events
            assert subscribers(master_of(valkey_cluster, shard), channel) == (1, 0)
        await store.touch_many(users)
        heard: list[str] = []
        async with asyncio.timeout(3):
            async for event in feed:
                heard.append(event.user_id)
                if len(heard) == len(users):
                    break
        assert sorted(heard) == sorted(users)
        await store.touch("all0", "again")
        await asyncio.sleep(0.2)
        assert feed.pending == 0  # a second session of someone online: no event


async def test_an_end_user_learns_of_changes_of_followed_friend_sets_made_in_their_shard(
    store: PresenceStore, hub: EventHub
) -> None:
    # The links of ann's friend set that hold bob live in bob's shard, and are announced there.
    ann, bob = one_in_each_shard("set")[:2]
    await store.add_friends(bob, [ann], mutual=False)
    # bob follows ann by id, and as his friend (friendsOf): each feed knows whether ann's set
    # holds him, from the start and as it changes.
    async with (
        hub.feed(ignore, user_ids=[ann], reader=bob) as by_id,
        hub.feed(ignore, friends_of=bob, reader=bob) as as_friend,
    ):
        assert by_id.in_friend_sets_of == as_friend.in_friend_sets_of == frozenset()
        await store.add_friends(ann, [bob], mutual=False)
        await eventually(
            lambda: ann in by_id.in_friend_sets_of and ann in as_friend.in_friend_sets_of,
            3,
            "bob to learn that ann's friend set holds him",
        )
        await store.remove_friends(ann, [bob], mutual=False)
        await eventually(
            lambda: not by_id.in_friend_sets_of and not as_friend.in_friend_sets_of,
            3,
            "bob to learn that it no longer does",
        )
    async with hub.feed(ignore, user_ids=[ann], reader=bob) as by_id:
        assert by_id.in_friend_sets_of == frozenset()
    await store.add_friends(ann, [bob], mutual=False)
    async with hub.feed(ignore, user_ids=[ann], reader=bob) as by_id:
        assert by_id.in_friend_sets_of == {ann}


# --- losses -------------------------------------------------------------------------------


async def test_a_lost_connection_ends_the_followers_of_its_shard_only(
    valkey_cluster: LocalCluster, store: PresenceStore, hub: EventHub
) -> None:
    users = one_in_each_shard("lost")
    async with (
        hub.feed(ignore, user_ids=[users[0]]) as of_shard_0,
        hub.feed(ignore, user_ids=[users[1]]) as of_shard_1,
    ):
        host, port = master_of(valkey_cluster, 0)
        node = Redis(host=host, port=port)
        assert await node.client_kill_filter(_type="pubsub") == 1
        await node.aclose()
        with pytest.raises(FeedDroppedError, match="interrupted"):
            await asyncio.wait_for(first_event(of_shard_0), 3)
        # The other shards' events went on, none missed.
        await store.touch(users[1])
        assert (await asyncio.wait_for(first_event(of_shard_1), 3)).kind == "ONLINE"
        await eventually(lambda: hub.subscribed, 3, "the shard's connection again")
        async with hub.feed(ignore, user_ids=[users[0]]) as again:
            await store.touch(users[0])
            assert (await asyncio.wait_for(first_event(again), 3)).kind == "ONLINE"


async def test_after_a_failover_a_shards_followers_are_told_and_its_events_go_on(
    valkey_failover_cluster: tuple[LocalCluster, tuple[str, int]],
) -> None:
    cluster, replica = valkey_failover_cluster
    # The other masters can be slow to answer while the cluster elects a new one on a loaded
    # machine; a loss found by silence there is not what this test is about.
    async with (
        cluster_store(cluster) as (store, client),
        running_hub(store, client, silence_limit_s=3.0) as hub,
    ):
        assert store.sharded_events
        users = one_in_each_shard("fo")
        heard: dict[str, list[PresenceChange]] = {user: [] for user in users}
        dropped: dict[str, list[FeedDroppedError]] = {user: [] for user in users}
        async with (
            hub.feed(ignore, user_ids=[users[0]]) as on_failing,
            hub.feed(ignore, user_ids=[users[1]]) as elsewhere,
        ):
            readers = [
                asyncio.create_task(collect(feed, heard[user], dropped[user]))
                for feed, user in ((on_failing, users[0]), (elsewhere, users[1]))
            ]
            await asyncio.to_thread(fail_over, replica, cluster)
            # The follower of the user whose master failed over is told (events may have been
            # published on the new master before this process subscribed there)...
            await eventually(lambda: bool(dropped[users[0]]), 5, "the shard's followers told")
            assert "interrupted" in str(dropped[users[0]][0])
            # ... and this process subscribes again, on the new master.
            await eventually(lambda: hub.subscribed, 5, "the subscription again")
            async with hub.feed(ignore, user_ids=[users[0]]) as again:
                assert subscribers(replica, store.user_events_channel(users[0])) == (1, 0)
                await store.touch(users[0])
                assert (await asyncio.wait_for(first_event(again), 3)).kind == "ONLINE"
            # The follower of a user on another master heard every event, and was not told.
            await store.touch(users[1])
            await eventually(lambda: len(heard[users[1]]) == 1, 3, "the other shard's event")
            assert not dropped[users[1]]
            for reader in readers:
                reader.cancel()
