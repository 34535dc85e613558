"""Online time kept by earlier versions (ot:<span>:<block>: a u16 per user and day, 32 days a
span, 1,024 indexes a block, a user's days next to each other) is carried into each day's keys
by the sweeper, and onlineTime answers what the earlier layout held."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from datetime import date, timedelta
from zoneinfo import ZoneInfo

import pytest
from redis.asyncio import Redis

from gql_presence.app import create_app
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.client import AnyRedis
from gql_presence.store.days import day_number, day_start_ms, local_date, local_now_ms
from gql_presence.store.keys import Keys
from gql_presence.store.shard import by_shard
from tests.conftest import ClientFactory, StoreFactory
from tests.helpers import eventually

DAY_MS = 86_400_000
OLD_SPAN_DAYS, OLD_BLOCK_USERS = 32, 1024
ZONE = ZoneInfo("Europe/Berlin")
KEPT_DAYS = 60
# Bit indexes in four blocks of the earlier layout, three of them in one block of the new.
INDEXES = {"a": 3, "b": 1030, "c": 2047, "d": 4100, "e": 9000}


async def write_old(redis: AnyRedis, keys: Keys, index: int, day: int, units: int) -> None:
    """What the earlier version's record_period did for a user's time on a day."""
    span, block = day // OLD_SPAN_DAYS, index // OLD_BLOCK_USERS
    key = keys.old_online_time(span, block)
    if not await redis.exists(key):
        await redis.set(key, b"\0" * (2 * OLD_BLOCK_USERS * OLD_SPAN_DAYS))
    position = (index % OLD_BLOCK_USERS) * OLD_SPAN_DAYS + day % OLD_SPAN_DAYS
    await redis.execute_command(
        "BITFIELD", key, "OVERFLOW", "SAT", "INCRBY", "u16", f"#{position}", units
    )
    end = date(1970, 1, 1) + timedelta(days=(span + 1) * OLD_SPAN_DAYS)
    await redis.pexpireat(key, day_start_ms(end, ZONE) + KEPT_DAYS * DAY_MS)


def shown_seconds(day: date, units: int) -> float:
    """What the earlier version answered for a day: 0 once the day is no longer kept."""
    kept_from = local_now_ms() - KEPT_DAYS * DAY_MS
    return 0.0 if day_start_ms(day + timedelta(days=1), ZONE) <= kept_from else units * 2.0


async def old_keys(redis: AnyRedis) -> list[str]:
    return [k async for k in redis.scan_iter(match="gqlp:*:ot:[0-9]*:[0-9]*")]


@pytest.mark.parametrize("shards", [1, 3])
async def test_the_earlier_layout_is_carried_over_once_and_answers_the_same(
    make_store: StoreFactory, redis: Redis, shards: int
) -> None:
    settings = {"stats_timezone": ZONE.key, "analytics_ms": KEPT_DAYS * DAY_MS, "shards": shards}
    store, other = make_store(**settings), make_store(**settings)
    today = local_date(local_now_ms(), ZONE)
    first = today - timedelta(days=70)  # ten days past what is kept
    folded = today - timedelta(days=3)
    shard_of = {u: i for i, group in by_shard(list(INDEXES), shards).items() for u in group}
    for i in set(shard_of.values()):
        await redis.set(Keys.of_shard(i).next_index, 9001)
    # Some days of each user, each of its earlier-layout keys written as the earlier script did.
    rng = random.Random(7)  # noqa: S311 - test data, not a secret
    written: dict[tuple[date, str], int] = {}
    for user_id, index in INDEXES.items():
        keys = Keys.of_shard(shard_of[user_id])
        await redis.hset(keys.user_index, user_id, index)
        # The first day (no longer kept), the day folded, yesterday and some others.
        for offset in {0, 67, 69, *rng.sample(range(71), 15)}:
            day = first + timedelta(days=offset)
            units = 43_200 if user_id == "a" else rng.randrange(1, 40_000)
            await write_old(redis, keys, index, day_number(day), units)
            written[day, user_id] = written.get((day, user_id), 0) + units
    # A day the upgraded version folded before the carry-over: its time comes in late.
    await store.online_time.fold(folded)
    # Periods that ended yesterday since the upgrade, counted as the write path does: the sum
    # is held at a u16's top, as one counter of either layout would hold it.
    yesterday = today - timedelta(days=1)
    for user_id, units in (("a", 30_000), ("b", 1000)):
        keys, index = Keys.of_shard(shard_of[user_id]), INDEXES[user_id]
        dense = keys.online_day(day_number(yesterday), index // 4096)
        if not await redis.exists(dense):
            await redis.set(dense, bytes(2 * 4096))
            await redis.pexpireat(dense, day_start_ms(today, ZONE) + KEPT_DAYS * DAY_MS)
        at = f"#{index % 4096}"
        await redis.bitfield(dense, default_overflow="SAT").incrby("u16", at, units).execute()
        written[yesterday, user_id] = min(65535, written[yesterday, user_id] + units)
    count = (today - first).days + 1
    dates = [first + timedelta(days=d) for d in range(count)]
    expected = {
        user_id: [shown_seconds(day, written.get((day, user_id), 0)) for day in dates]
        for user_id in INDEXES
    }
    assert all(sum(seconds) > 0 for seconds in expected.values())
    assert expected["a"][0] == 0
    assert expected["a"][-2] == 65535 * 2
    n_old = len(await old_keys(redis))

    # Two processes at once: each key is carried by one of them.
    carried = await asyncio.gather(store.online_time.carry_over(), other.online_time.carry_over())
    answers = await store.online_time.online_time(list(INDEXES), first, today)
    assert {a.user_id: [d.seconds for d in a.days] for a in answers} == expected
    assert sum(carried) >= n_old > 0
    assert not await old_keys(redis)
    # Each day's keys expire as the write path's do: the late additions of the day folded, the
    # dense counters of yesterday's block of 4,096 indexes.
    for user_id, index in INDEXES.items():
        keys = Keys.of_shard(shard_of[user_id])
        for day, name in (
            (folded, keys.online_late(day_number(folded))),
            (today - timedelta(days=1), keys.online_day(day_number(today) - 1, index // 4096)),
        ):
            left_ms = day_start_ms(day + timedelta(days=1), ZONE) + KEPT_DAYS * DAY_MS
            assert abs(await redis.pttl(name) - (left_ms - local_now_ms())) < 2000, name

    # Again: nothing is counted twice, and a pass that found nothing ends the carry-over on
    # every shard that has users (one that never had any keeps nothing, and has nothing).
    assert await store.online_time.carry_over() == 0
    for i in range(shards):
        keys = Keys.of_shard(i)
        done = await redis.get(keys.online_time_carried)
        assert done == ("done" if await redis.exists(keys.next_index) else None)
    assert await redis.get(Keys.of_shard(0).online_time_carried) == "done"
    assert await store.online_time.carry_over() == 0
    assert await store.online_time.online_time(list(INDEXES), first, today) == answers
    # The days carried fold as the rest do, and still answer the same.
    await store.online_time.fold_closed()
    assert await store.online_time.online_time(list(INDEXES), first, today) == answers


async def test_the_service_carries_the_earlier_layout_over_before_it_folds(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: AnyRedis
) -> None:
    settings = dataclasses.replace(
        deployment, stats_timezone=ZONE.key, analytics_ms=KEPT_DAYS * DAY_MS
    )
    store = PresenceStore(http_redis, settings)
    keys = Keys()
    today = local_date(local_now_ms(), ZONE)
    first = today - timedelta(days=3)  # folded by the sweeper
    await http_redis.hset(keys.user_index, "a", 5)
    await http_redis.set(keys.next_index, 6)
    await write_old(http_redis, keys, 5, day_number(first), 7200)
    await write_old(http_redis, keys, 5, day_number(today) - 1, 900)
    await aiohttp_client(create_app(settings))

    async def folded() -> bool:
        return bool(await http_redis.exists(keys.online_folded(day_number(first))[0]))

    await eventually(folded, what="the sweeper to carry over and fold")
    assert not await old_keys(http_redis)
    # Carried before the fold: into the day's bitmap and counters, with no late additions.
    assert not await http_redis.exists(keys.online_late(day_number(first)))
    found = await store.online_time.online_time(["a"], first, today)
    assert [d.seconds for d in found[0].days] == [14400, 0, 1800, 0]
