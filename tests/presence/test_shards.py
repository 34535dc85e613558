"""Users spread over three shards, on one Redis and on a three-master Redis Cluster: each user's
data in their shard, friend links with the friend, and lists, totals and statistics merged
across shards as if there were one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis, RedisCluster

from gql_presence.realtime.hub import EventHub
from gql_presence.running.connection import (
    ShardedSubscriber,
    cluster_subscriber,
    subscriber_client,
)
from gql_presence.settings import Settings
from gql_presence.store import Page, PresenceStore, shard_of
from gql_presence.store.client import AnyRedis
from gql_presence.store.days import from_ms, to_ms
from gql_presence.store.keys import Keys
from tests.helpers import eventually, first_event, ignore

SHARDED = pytest.mark.parametrize(
    "deployment", ["three-shards", "cluster", "sharded-cluster"], indirect=True
)
pytestmark = SHARDED


@pytest.fixture
async def store(http_redis: AnyRedis, deployment: Settings) -> PresenceStore:
    store = PresenceStore(http_redis, deployment)
    await store.choose_publish()  # sharded pub/sub on the sharded cluster
    return store


def ids_in_every_shard(prefix: str, per_shard: int, shards: int = 3) -> list[str]:
    """per_shard ids of each shard, shard 0's first."""
    found: dict[int, list[str]] = {shard: [] for shard in range(shards)}
    i = 0
    while any(len(ids) < per_shard for ids in found.values()):
        user_id = f"{prefix}{i}"
        if len(found[shard_of(user_id, shards)]) < per_shard:
            found[shard_of(user_id, shards)].append(user_id)
        i += 1
    return [user_id for shard in range(shards) for user_id in found[shard]]


def ago(**delta: float) -> datetime:
    return datetime.now(UTC) - timedelta(**delta)


def ms(moment: datetime) -> datetime:
    return from_ms(to_ms(moment))


ReadPage = Callable[..., Awaitable[Page]]


async def all_pages(read: ReadPage, first: int) -> tuple[list[str], list[int]]:
    """Follows endCursor to the end: the user ids in order, and each page's totalCount."""
    seen: list[str] = []
    totals: list[int] = []
    after = None
    while True:
        page = await read(first=first, after=after)
        seen += [n.user_id for n in page.nodes]
        totals.append(page.total_count)
        if not page.has_next_page:
            return seen, totals
        after = page.end_cursor


def in_list_order(last_seen: dict[str, datetime]) -> list[str]:
    """Newest first, ties by id."""
    return sorted(last_seen, key=lambda user: (-to_ms(last_seen[user]), user))


async def touch_at(store: PresenceStore, moments: dict[str, datetime]) -> None:
    await asyncio.gather(*(store.touch(user, at=at) for user, at in moments.items()))


# --- where data lives ----------------------------------------------------------------------


async def test_each_users_own_data_lives_in_their_shard(
    store: PresenceStore, http_redis: AnyRedis
) -> None:
    users = ids_in_every_shard("u", 2)
    await store.touch_many(users)
    for user in users:  # a second session: the user's sessions then have a key of their own
        await store.touch(user, "phone")
    await store.kick(users[0], "other")
    for shard in range(3):
        keys = Keys.of_shard(shard)
        expected = {u for u in users if shard_of(u, 3) == shard}
        assert set(await http_redis.zrange(keys.last_seen, 0, -1)) == expected
        assert set(await http_redis.zrange(keys.online, 0, -1)) == expected
        assert set(await http_redis.hkeys(keys.user_index)) == expected
        for user in users:
            assert await http_redis.exists(keys.sessions(user)) == (user in expected)
    assert await http_redis.exists(Keys.of_shard(0).revoked(users[0]))


async def test_touch_many_and_presence_many_group_by_shard(store: PresenceStore) -> None:
    users = ids_in_every_shard("u", 3)
    assert await store.touch_many([*users, users[0], users[-1]]) == 9
    asked = [users[8], "nobody", users[0], users[4], users[8]]
    found = await store.presence_many(asked)
    assert [p.user_id for p in found] == asked
    assert [p.online for p in found] == [True, False, True, True, True]
    assert (await store.online_users()).total_count == 9


# --- lists merged across shards ------------------------------------------------------------


async def test_pages_merge_across_shards_over_ties_with_one_cursor(store: PresenceStore) -> None:
    tied = ids_in_every_shard("tied", 4)
    others = ids_in_every_shard("other", 2)
    moments = dict.fromkeys(tied, ms(ago(seconds=10)))
    moments |= {user: ms(ago(seconds=5 + 3 * i)) for i, user in enumerate(others)}
    await touch_at(store, moments)
    expected = in_list_order(moments)
    for first in (1, 2, 5, 18, 50):
        listed, totals = await all_pages(store.online_users, first)
        assert listed == expected
        assert set(totals) == {18}
        ranged = lambda **page: store.active_in_range(ago(minutes=1), ago(seconds=0), **page)  # noqa: E731
        assert (await all_pages(ranged, first))[0] == expected
    page = await store.online_users(first=4)
    assert [n.user_id for n in page.nodes] == expected[:4]
    assert page.has_next_page
    assert all(n.online for n in page.nodes)
    assert [n.last_seen for n in page.nodes] == [moments[u] for u in expected[:4]]
    empty = await store.online_users(first=0)
    assert (empty.total_count, empty.nodes, empty.has_next_page, empty.end_cursor) == (
        18,
        (),
        True,
        None,
    )


async def test_a_cursor_stays_correct_when_users_move_between_pages(store: PresenceStore) -> None:
    users = ids_in_every_shard("u", 3)
    moments = {user: ms(ago(seconds=30 - i)) for i, user in enumerate(users)}
    await touch_at(store, moments)
    first_page = await store.online_users(first=3)
    assert [n.user_id for n in first_page.nodes] == in_list_order(moments)[:3]
    # The last user listed comes back (moves to the top) and another leaves.
    await store.touch(first_page.nodes[-1].user_id)
    gone = in_list_order(moments)[4]
    await store.kick(gone)
    rest = await all_pages(
        lambda first, after: store.online_users(first, after or first_page.end_cursor), 2
    )
    assert rest[0] == [u for u in in_list_order(moments)[3:] if u != gone]


async def test_online_friends_merge_the_friends_of_every_shard(store: PresenceStore) -> None:
    friends = ids_in_every_shard("f", 3)
    offline, online = friends[::3], [f for f in friends if f not in friends[::3]]
    await store.add_friends("me", friends)
    moments = dict.fromkeys(online[:3], ms(ago(seconds=10)))
    moments |= {user: ms(ago(seconds=20 + i)) for i, user in enumerate(online[3:])}
    await touch_at(store, moments)
    await touch_at(store, dict.fromkeys(offline, ago(minutes=5)))  # older than the window
    await store.touch("stranger")
    for first in (1, 4, 50):
        listed, totals = await all_pages(lambda **page: store.online_friends("me", **page), first)
        assert listed == in_list_order(moments)
        assert set(totals) == {len(online)}
    await store.touch("me")
    for friend in friends:  # the links back, all in the shard of "me"
        assert [n.user_id for n in (await store.online_friends(friend)).nodes] == ["me"]


async def test_weekly_stats_add_up_the_shards(store: PresenceStore, http_redis: AnyRedis) -> None:
    users = ids_in_every_shard("u", 3)  # three in each shard
    await touch_at(store, dict.fromkeys(users[:6], ago(days=1)))
    await store.touch_many(users[3:])
    stats = await store.weekly_stats()
    assert stats.end_date == datetime.now(UTC).date()
    assert [d.active_users for d in stats.days] == [0, 0, 0, 0, 0, 6, 6]
    assert (stats.unique_users, stats.active_every_day, stats.new_on_end_date) == (9, 0, 3)
    # Each shard counted its own three users.
    assert [await http_redis.hlen(Keys.of_shard(s).user_index) for s in range(3)] == [3, 3, 3]


# --- friends: each link kept with the friend -----------------------------------------------


async def test_friend_links_live_in_the_friends_shard(
    store: PresenceStore, http_redis: AnyRedis
) -> None:
    me = "me"  # lives in shard 0
    friends = ids_in_every_shard("f", 2)
    assert await store.add_friends(me, [*friends, me, friends[0]]) == 6
    for shard in range(3):
        keys = Keys.of_shard(shard)
        assert set(await http_redis.smembers(keys.friends(me))) == {
            f for f in friends if shard_of(f, 3) == shard
        }
    for friend in friends:  # the links back, in the shard of "me"
        assert await http_redis.smembers(Keys.of_shard(0).friends(friend)) == {me}
        assert await store.friends(friend) == [me]
    assert await store.friends(me) == sorted(friends)
    assert await store.add_friends(me, friends[:4]) == 0

    assert await store.remove_friends(me, [friends[0], friends[5], "nobody"]) == 2
    assert await store.friends(me) == sorted(friends[1:5])
    assert await store.friends(friends[5]) == []
    assert await store.remove_friends(me, friends[1:3], mutual=False) == 2
    assert await store.friends(friends[1]) == [me]
    assert await store.add_friends(friends[1], [me], mutual=False) == 0
    assert await store.remove_friends(friends[1], [me], mutual=False) == 1
    assert await store.friends(me) == sorted(friends[3:5])


# --- events: one channel for every shard, or with sharded pub/sub one per shard -------------


@pytest.fixture
async def hub(
    store: PresenceStore, http_redis: AnyRedis, deployment: Settings
) -> AsyncIterator[EventHub]:
    subscriber: Redis | ShardedSubscriber
    if store.sharded_events:
        assert isinstance(http_redis, RedisCluster)
        subscriber = ShardedSubscriber(http_redis)
    elif isinstance(http_redis, RedisCluster):
        subscriber = cluster_subscriber(http_redis, deployment.redis_cluster_nodes)
    else:
        assert deployment.redis_url is not None
        subscriber = subscriber_client(deployment.redis_url)
    events = EventHub(subscriber, store, 100)
    await events.start()
    yield events
    await events.stop()
    if isinstance(subscriber, Redis):
        await asyncio.wait_for(subscriber.aclose(), 5)


async def test_friends_of_follows_friends_of_every_shard(
    hub: EventHub, store: PresenceStore
) -> None:
    first, second, third = ids_in_every_shard("f", 1)
    await store.add_friends("me", [first])
    async with hub.feed(ignore, friends_of="me") as feed:
        assert hub.users_of(feed) == {first}
        await store.add_friends("me", [second, third], mutual=False)
        await eventually(lambda: hub.users_of(feed) == {first, second, third}, 2, "the new friends")
        await store.remove_friends("me", [first, second])
        await eventually(lambda: hub.users_of(feed) == {third}, 2, "the removed friends' leaving")
        await store.touch_many([first, second, third])
        event = await asyncio.wait_for(first_event(feed), 2)
        assert (event.user_id, event.kind) == (third, "ONLINE")
