"""onlineTime and onlinePeriods against a small reference that computes the same figures from
the online periods the test made: backfilled starts (touch with `at`), ends by kick, by a
held session's close and by the sweep, at midnight and at a DST change of the stats time zone."""

from __future__ import annotations

import dataclasses
import itertools
import math
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from redis.asyncio import Redis

from gql_presence.app import create_app
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.client import AnyRedis
from gql_presence.store.days import day_start_ms, from_ms, local_date
from gql_presence.store.keys import Keys
from gql_presence.store.online_time import FOLD_DAYS
from gql_presence.store.scripts import ScriptName, Scripts
from gql_presence.store.shard import Shard, named
from tests.conftest import (
    EVERY_DEPLOYMENT,
    TEST_SETTINGS,
    ClientFactory,
    StoreFactory,
    error_codes,
    graphql,
)
from tests.helpers import BACKEND_TOKEN, SECURED, as_user, eventually, user_token

DAY_MS = 86_400_000
# Online time is kept in 2-second units of the clock (lua/includes/online_time.lua).
UNIT_MS = 2000
# What a period ended by a kick (at the server's now) may differ from the reference by: the
# time between the kick and the test's reading of the clock after it, and one unit.
SLACK_S = 3.0

Period = tuple[int, int]  # start, end: ms


def day_seconds(periods: list[Period], first: date, count: int, zone: ZoneInfo) -> list[float]:
    """The reference: for each day, the 2-second ticks of the clock that the periods' parts in
    it hold (the periods of one user never overlap: they are their ONLINE→OFFLINE spans)."""
    starts = [day_start_ms(first + timedelta(days=d), zone) for d in range(count + 1)]
    seconds = []
    for d in range(count):
        units = 0
        for start, end in periods:
            a, b = max(start, starts[d]), min(end, starts[d + 1])
            if a < b:
                units += b // UNIT_MS - a // UNIT_MS
        seconds.append(units * UNIT_MS / 1000)
    return seconds


def nearest_rank(lengths: list[float], q: float) -> float:
    ordered = sorted(lengths)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


async def server_ms(redis: AnyRedis) -> int:
    seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def ms(moment: int) -> datetime:
    return from_ms(moment)


def latest_dst_change(zone: ZoneInfo, today: date, within_days: int) -> date | None:
    """The last day before today, within `within_days`, that is not 24 hours long."""
    for back in range(1, within_days):
        day = today - timedelta(days=back)
        if day_start_ms(day + timedelta(days=1), zone) - day_start_ms(day, zone) != DAY_MS:
            return day
    return None


def dst_zone() -> tuple[ZoneInfo, date]:
    """Of zones whose clocks change in March, April, September, October and November, the
    one whose latest change is nearest: within about 120 days whatever the date."""
    found = []
    for name in ("America/New_York", "Europe/Berlin", "Australia/Sydney", "America/Santiago"):
        zone = ZoneInfo(name)
        change = latest_dst_change(zone, datetime.now(zone).date(), 250)
        if change is not None:
            found.append((change, zone))
    change, zone = max(found, key=lambda pair: pair[0])
    return zone, change


async def test_a_period_across_midnight_and_a_dst_change_counts_on_every_day(
    make_store: StoreFactory, redis: Redis
) -> None:
    zone, change = dst_zone()
    first = change - timedelta(days=1)
    start = day_start_ms(first, zone) + 22 * 3_600_000  # 22:00 the evening before the change
    now = await server_ms(redis)
    today = local_date(now, zone)
    window_ms = now - start + 2 * DAY_MS
    store = make_store(
        stats_timezone=zone.key, window_ms=window_ms, retention_ms=window_ms + 10 * DAY_MS
    )
    count = (today - first).days + 1
    await store.touch("dst", at=ms(start))

    # Online now: the current period counts up to now, on each day it touched.
    online = (await store.online_time.online_time(["dst"], first, today))[0]
    now = await server_ms(redis)
    expected = day_seconds([(start, now)], first, count, zone)
    assert [d.seconds for d in online.days[:-1]] == expected[:-1]
    assert online.days[1].seconds in (23 * 3600, 25 * 3600)  # the day of the change
    assert online.days[0].seconds == 2 * 3600
    assert online.days[-1].seconds == pytest.approx(expected[-1], abs=SLACK_S)

    kicked = await store.kick("dst")
    end = await server_ms(redis)
    assert not kicked.online
    ended = (await store.online_time.online_time(["dst"], first, today))[0]
    expected = day_seconds([(start, end)], first, count, zone)
    assert [d.date for d in ended.days] == [first + timedelta(days=d) for d in range(count)]
    assert [d.seconds for d in ended.days[:-1]] == expected[:-1]
    assert ended.days[-1].seconds == pytest.approx(expected[-1], abs=SLACK_S)
    assert ended.total_seconds == pytest.approx(sum(expected), abs=SLACK_S)
    # Once ended, the period stays where it is: no longer counting up.
    later = (await store.online_time.online_time(["dst"], first, today))[0]
    assert later == ended
    periods = await store.online_time.online_periods(ms(end - 3_600_000), ms(end))
    assert periods.count == 1
    assert periods.mean == pytest.approx((end - start) / 1000, abs=SLACK_S)


async def test_two_devices_online_at_once_count_once(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(window_ms=DAY_MS)
    now = await server_ms(redis)
    await store.touch("duo", "phone", at=ms(now - 3 * 3_600_000))
    await store.touch("duo", "laptop", at=ms(now - 3_600_000))
    await store.touch("duo", "phone", at=ms(now - 1_800_000))
    await store.kick("duo", "laptop")  # still online on the phone: the period goes on
    await store.kick("duo")
    end = await server_ms(redis)
    today = local_date(end, ZoneInfo("UTC"))
    found = (await store.online_time.online_time(["duo"], today - timedelta(days=1), today))[0]
    expected = day_seconds([(now - 3 * 3_600_000, end)], today - timedelta(days=1), 2, UTC_ZONE)
    assert found.days[0].seconds == pytest.approx(expected[0], abs=SLACK_S)
    assert found.days[1].seconds == pytest.approx(expected[1], abs=SLACK_S)
    assert found.total_seconds == pytest.approx(3 * 3600, abs=SLACK_S)
    periods = await store.online_time.online_periods(ms(end - 60_000), ms(end))
    assert periods.count == 1  # the kick of one session ended no period


UTC_ZONE = ZoneInfo("UTC")


async def test_a_period_the_sweep_ends_counts_from_onlinesince_to_its_expiry(
    make_store: StoreFactory, redis: Redis
) -> None:
    window_ms = 3000
    store = make_store(window_ms=window_ms, revoke_ms=window_ms)
    start = await server_ms(redis) - 2700
    await store.touch("swept", at=ms(start))

    async def swept() -> bool:
        return (await store.sweep()).offline > 0

    await eventually(swept, what="the sweep to end the period")
    end = start + window_ms  # OFFLINE at the expiry: the last activity plus the window
    day = local_date(start, UTC_ZONE)
    found = (await store.online_time.online_time(["swept"], day, day))[0]
    assert [d.seconds for d in found.days] == day_seconds([(start, end)], day, 1, UTC_ZONE)
    periods = await store.online_time.online_periods(ms(start), ms(end))
    assert (periods.count, periods.mean) == (1, window_ms / 1000)


async def test_touch_many_ends_an_expired_period_before_a_new_one(
    make_store: StoreFactory, redis: Redis
) -> None:
    window_ms = 3000
    store = make_store(window_ms=window_ms, revoke_ms=window_ms)
    start = await server_ms(redis) - 2900

    async def expired() -> bool:
        return await server_ms(redis) > start + window_ms

    await store.touch("many", at=ms(start))
    await eventually(expired, what="the presence to expire")
    await store.touch_many(["many", "other"])  # OFFLINE at the expiry, then ONLINE again
    periods = await store.online_time.online_periods(ms(start), ms(start + window_ms))
    assert (periods.count, periods.mean) == (1, window_ms / 1000)


async def test_a_held_session_closed_ends_the_period(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(window_ms=DAY_MS)
    start = await server_ms(redis) - 3_600_000
    await store.touch("held", "web", at=ms(start))
    opened = await store.open_session("held", "tab")
    await store.kick("held", "web")  # the held session keeps the user online
    assert (await store.online_time.online_periods(ms(start), ms(start + DAY_MS))).count == 0
    assert await store.close_session(opened.held)
    end = await server_ms(redis)
    periods = await store.online_time.online_periods(ms(end - 60_000), ms(end))
    assert periods.count == 1
    assert periods.mean == pytest.approx(3600, abs=SLACK_S)
    found = await store.online_time.online_time(
        ["held"], local_date(start, UTC_ZONE), local_date(end, UTC_ZONE)
    )
    assert found[0].total_seconds == pytest.approx(3600, abs=SLACK_S)


async def test_a_held_session_whose_process_died_ends_the_period_at_the_lapse(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(window_ms=DAY_MS)
    start = await server_ms(redis) - 3_600_000
    await store.touch("died", "web", at=ms(start))
    await store.open_session("died", "tab")
    await store.kick("died", "web")  # held alone now
    ttl_ms = TEST_SETTINGS.connection_ttl_ms
    # The process stops renewing: its lease lapses a second ago.
    lapse = await server_ms(redis) - 1000
    assert await store.renew_leases(at=ms(lapse - ttl_ms)) == []
    today = local_date(lapse, UTC_ZONE)
    days = (today - timedelta(days=1), today)
    before = await store.online_time.online_time(["died"], *days)
    assert before[0].total_seconds == pytest.approx((lapse - start) / 1000, abs=SLACK_S)
    assert (await store.sweep()).lapsed == 1
    after = await store.online_time.online_time(["died"], *days)
    assert after[0].total_seconds == pytest.approx((lapse - start) / 1000, abs=SLACK_S)
    periods = await store.online_time.online_periods(ms(lapse - 60_000), ms(lapse + 60_000))
    assert periods.count == 1
    assert periods.mean == pytest.approx((lapse - start) / 1000, abs=SLACK_S)


async def test_period_lengths_give_quantiles_within_five_percent(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(window_ms=11 * DAY_MS)
    now = await server_ms(redis)
    lengths_ms = [round(2000 * (10 * 86400 / 2) ** (i / 119)) for i in range(120)]
    for i, length in enumerate(lengths_ms):
        await store.touch(f"p{i}", at=ms(now - length))
    lengths = []
    for i, length in enumerate(lengths_ms):
        await store.kick(f"p{i}")
        lengths.append((await server_ms(redis) - (now - length)) / 1000)
    end = await server_ms(redis)
    found = await store.online_time.online_periods(ms(now - 3_600_000), ms(end))
    assert found.count == len(lengths)
    assert found.mean == pytest.approx(sum(lengths) / len(lengths), rel=1e-3)
    for q, value in zip((0.5, 0.9, 0.99), found.quantiles, strict=True):
        true = nearest_rank(lengths, q)
        assert value is not None
        assert abs(value - true) <= 0.05 * true, (q, value, true)
    assert sum(b.count for b in found.buckets) == len(lengths)
    bounds = [b.up_to_seconds or math.inf for b in found.buckets]
    assert bounds[0] >= min(lengths) / 1.1
    assert bounds[-1] >= max(lengths)
    assert all(later == pytest.approx(1.1 * b) for b, later in itertools.pairwise(bounds))
    # Over whole days (read a day at a time) and the hours at either end: the same.
    wide = await store.online_time.online_periods(ms(end - 3 * DAY_MS - 1), ms(end + DAY_MS))
    assert wide == found
    # Outside the hours the periods ended in: nothing.
    empty = await store.online_time.online_periods(ms(end + 2 * 3_600_000), ms(end + 3 * 3_600_000))
    assert (empty.count, empty.mean, empty.quantiles, empty.buckets) == (0, None, (None,) * 3, ())


async def test_days_older_than_what_is_kept_read_zero(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(window_ms=5 * DAY_MS, retention_ms=6 * DAY_MS, analytics_ms=DAY_MS)
    now = await server_ms(redis)
    await store.touch("old", at=ms(now - 4 * DAY_MS))
    await store.kick("old")
    today = local_date(now, UTC_ZONE)
    found = (await store.online_time.online_time(["old"], today - timedelta(days=4), today))[0]
    assert [d.seconds for d in found.days[:3]] == [0, 0, 0]
    assert found.days[3].seconds == 86400


async def test_a_reused_index_does_not_inherit_its_last_users_online_time(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(window_ms=DAY_MS, retention_ms=2 * DAY_MS)
    keys = Keys()
    now = await server_ms(redis)
    await store.touch("gone", at=ms(now - 7_200_000))
    await store.kick("gone")
    index = await redis.hget(keys.user_index, "gone")
    # Last seen longer ago than the retention and its slack: the sweep forgets the user.
    await redis.zadd(keys.last_seen, {"gone": -(now - 5 * DAY_MS)})
    assert (await store.sweep()).purged == 1
    # Handed out again once no kept bitmap can hold it (as if that time had passed).
    assert index is not None
    await redis.zadd(keys.cooling_indexes, {str(index): 0})
    await store.sweep()
    await store.touch("new")
    assert await redis.hget(keys.user_index, "new") == index
    today = local_date(now, UTC_ZONE)
    found = await store.online_time.online_time(["new"], today - timedelta(days=1), today)
    assert found[0].total_seconds <= SLACK_S


async def test_users_come_in_the_order_given_and_unknown_users_read_zero(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(window_ms=DAY_MS)
    now = await server_ms(redis)
    await store.touch("b", at=ms(now - 600_000))
    today = local_date(now, UTC_ZONE)
    found = await store.online_time.online_time(
        ["nobody", "b", "nobody"], today - timedelta(days=1), today
    )
    assert [f.user_id for f in found] == ["nobody", "b", "nobody"]
    assert found[0] == found[2]
    assert found[0].total_seconds == 0
    assert found[1].total_seconds == pytest.approx(600, abs=SLACK_S)


def dst_change_days_ago(at_least: int) -> tuple[ZoneInfo, date]:
    """Of the zones dst_zone looks at, the one whose latest change at least `at_least` days
    ago is nearest, and that change."""
    found = []
    for name in ("America/New_York", "Europe/Berlin", "Australia/Sydney", "America/Santiago"):
        zone = ZoneInfo(name)
        latest = datetime.now(zone).date() - timedelta(days=at_least - 1)
        change = latest_dst_change(zone, latest, 250)
        if change is not None:
            found.append((change, zone))
    change, zone = max(found, key=lambda pair: pair[0])
    return zone, change


async def test_folded_days_answer_as_before_the_fold(
    make_store: StoreFactory, redis: Redis
) -> None:
    # Periods begun days ago around a DST change in the stats time zone, in three blocks of
    # indexes: one across midnight and the change, one on two devices at once, one from
    # midnight exactly; ended now. Then one still open when the days are folded, which adds
    # to them when it ends.
    zone, change = dst_change_days_ago(5)
    first = change - timedelta(days=1)
    evening = day_start_ms(first, zone) + 22 * 3_600_000  # 22:00 before the change
    now = await server_ms(redis)
    window_ms = now - evening + 2 * DAY_MS
    store = make_store(
        stats_timezone=zone.key, window_ms=window_ms, retention_ms=window_ms + 10 * DAY_MS
    )
    keys = Keys()
    starts = {"night": evening, "duo": evening + 3_600_000, "dawn": day_start_ms(change, zone)}
    await store.touch("night", at=ms(starts["night"]))
    await redis.set(keys.next_index, 5000)
    await store.touch("duo", "phone", at=ms(starts["duo"]))
    await store.touch("duo", "laptop", at=ms(starts["duo"] + 3_600_000))
    await redis.set(keys.next_index, 9000)
    await store.touch("dawn", at=ms(starts["dawn"]))
    await store.touch("late", at=ms(evening - 3_600_000))
    ends = {}
    for user_id in starts:
        await store.kick(user_id)
        ends[user_id] = await server_ms(redis)
    now = await server_ms(redis)
    today = local_date(now, zone)
    count = (today - first).days + 1
    asked = ["night", "duo", "dawn", "late", "nobody"]
    before = await store.online_time.online_time(asked[:3], first, today)
    for found in before:
        expected = day_seconds([(starts[found.user_id], ends[found.user_id])], first, count, zone)
        assert [d.seconds for d in found.days[:-1]] == expected[:-1], found.user_id
        assert found.total_seconds == pytest.approx(sum(expected), abs=SLACK_S)
    assert before[0].days[1].seconds in (23 * 3600, 25 * 3600)  # the day of the change
    assert before[1].days[0].seconds == 3600  # two devices: from 23:00 once

    closed = [first + timedelta(days=d) for d in range(count - 2)]
    for day in closed:
        assert await store.online_time.fold(day) == 3  # three blocks of indexes
    assert await store.online_time.online_time(asked[:3], first, today) == before
    # The days folded keep no dense counters, and the fold's keys are there.
    epoch = date(1970, 1, 1)
    for day in closed:
        number = (day - epoch).days
        assert not await redis.keys(keys.online_day(number, 0)[:-1] + "*"), day
        assert await redis.exists(*keys.online_folded(number)) == 4, day
    # Folding again changes nothing.
    assert await store.online_time.fold_closed(now) == 0
    assert await store.online_time.online_time(asked[:3], first, today) == before

    # A period still open when its days were folded adds to them when it ends.
    await store.kick("late")
    end = await server_ms(redis)
    answers = await store.online_time.online_time(asked, first, today)
    late = answers[3]
    expected = day_seconds([(evening - 3_600_000, end)], first, count, zone)
    assert [d.seconds for d in late.days[:-1]] == expected[:-1]
    assert late.total_seconds == pytest.approx(sum(expected), abs=SLACK_S)
    assert await redis.exists(keys.online_late((first - epoch).days)) == 1
    # What the others showed is unchanged by it.
    assert answers[:3] == before
    assert answers[4].total_seconds == 0


async def test_the_sweeper_folds_a_day_once_the_day_after_it_has_ended(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(window_ms=4 * DAY_MS, retention_ms=20 * DAY_MS)
    keys = Keys()
    now = await server_ms(redis)
    today = local_date(now, UTC_ZONE)
    first = today - timedelta(days=3)
    start = day_start_ms(first, UTC_ZONE) + DAY_MS // 2  # 12:00 three days ago
    await store.touch("a", at=ms(start))
    await store.kick("a")
    end = await server_ms(redis)
    before = await store.online_time.online_time(["a"], first, today)
    # One block of indexes on each day it looks at, up to the day before yesterday.
    assert await store.online_time.fold_closed(end) == FOLD_DAYS
    number = (today - date(1970, 1, 1)).days
    for back, folded in ((3, True), (2, True), (1, False), (0, False)):
        marker = keys.online_folded(number - back)[0]
        assert bool(await redis.exists(marker)) is folded, back
        dense = keys.online_day(number - back, 0)
        assert bool(await redis.exists(dense)) is not folded, back
    after = await store.online_time.online_time(["a"], first, today)
    assert after == before
    expected = day_seconds([(start, end)], first, 4, UTC_ZONE)
    assert [d.seconds for d in after[0].days[:-1]] == expected[:-1]
    assert expected[0] == 43200


# --- over GraphQL, on each deployment ----------------------------------------------------------

ONLINE_TIME = """query($ids: [ID!]!, $from: Date!, $to: Date!) {
  onlineTime(userIds: $ids, from: $from, to: $to) { userId totalSeconds days { date seconds } }
}"""
ONLINE_PERIODS = """query($from: DateTime!, $to: DateTime!) {
  onlinePeriods(from: $from, to: $to) { count mean p50 p90 p99 buckets { upToSeconds count } }
}"""
TOUCH = "mutation($u: ID!, $s: ID, $at: DateTime) { touch(userId: $u, sessionId: $s, at: $at) { online } }"
KICK = "mutation($u: ID!) { kick(userId: $u) { online } }"


@EVERY_DEPLOYMENT
async def test_online_time_and_periods_over_graphql_match_the_reference(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: AnyRedis
) -> None:
    settings = dataclasses.replace(deployment, window_ms=2 * DAY_MS, retention_ms=10 * DAY_MS)
    api = await aiohttp_client(create_app(settings))
    now = await server_ms(http_redis)
    users = [f"user-{i}" for i in range(9)]
    starts = {u: now - (i + 1) * 5_400_000 for i, u in enumerate(users)}  # 1.5 h apart
    # Online since 23:00 yesterday, and still when yesterday is folded.
    users.append("night")
    starts["night"] = day_start_ms(local_date(now, UTC_ZONE), UTC_ZONE) - 3_600_000
    for u in users:
        body = await graphql(api, TOUCH, u=u, s="web", at=ms(starts[u]).isoformat())
        assert "errors" not in body, body
        # A second device part of the time: the same period.
        await graphql(api, TOUCH, u=u, s="ios", at=ms(starts[u] + 600_000).isoformat())
    kicked = users[::2]
    for u in kicked:
        assert (await graphql(api, KICK, u=u))["data"]["kick"]["online"] is False
    end = await server_ms(http_redis)
    today = local_date(end, UTC_ZONE)
    first = today - timedelta(days=1)
    asked = [*reversed(users), "stranger"]
    body = await graphql(
        api, ONLINE_TIME, ids=asked, **{"from": first.isoformat(), "to": today.isoformat()}
    )
    assert "errors" not in body, body
    found = body["data"]["onlineTime"]
    assert [f["userId"] for f in found] == asked
    for entry in found[:-1]:
        u = entry["userId"]
        expected = day_seconds([(starts[u], end)], first, 2, UTC_ZONE)
        assert [d["date"] for d in entry["days"]] == [first.isoformat(), today.isoformat()]
        got = [d["seconds"] for d in entry["days"]]
        assert got == pytest.approx(expected, abs=SLACK_S), (u, got, expected)
        assert entry["totalSeconds"] == pytest.approx((end - starts[u]) / 1000, abs=SLACK_S)
    assert found[-1]["totalSeconds"] == 0
    # Yesterday folded, on every shard: the same answers; then a period open during the fold
    # adds to it as it ends.
    assert await PresenceStore(http_redis, settings).online_time.fold(first) > 0
    days = {"from": first.isoformat(), "to": today.isoformat()}
    body = await graphql(api, ONLINE_TIME, ids=asked, **days)
    folded = body["data"]["onlineTime"]
    assert [f["days"][0] for f in folded] == [f["days"][0] for f in found]
    still = "night"
    assert still not in kicked
    assert (await graphql(api, KICK, u=still))["data"]["kick"]["online"] is False
    late_end = await server_ms(http_redis)
    body = await graphql(api, ONLINE_TIME, ids=[still], **days)
    late = [d["seconds"] for d in body["data"]["onlineTime"][0]["days"]]
    expected = day_seconds([(starts[still], late_end)], first, 2, UTC_ZONE)
    assert late == pytest.approx(expected, abs=SLACK_S)
    body = await graphql(
        api, ONLINE_PERIODS, **{"from": ms(end - 3_600_000).isoformat(), "to": ms(end).isoformat()}
    )
    periods = body["data"]["onlinePeriods"]
    lengths = [(end - starts[u]) / 1000 for u in kicked] + [(late_end - starts[still]) / 1000]
    assert periods["count"] == len(kicked) + 1
    assert periods["mean"] == pytest.approx(sum(lengths) / len(lengths), abs=SLACK_S)
    assert abs(periods["p50"] - nearest_rank(lengths, 0.5)) <= 0.05 * nearest_rank(lengths, 0.5)
    assert sum(b["count"] for b in periods["buckets"]) == len(kicked) + 1


async def test_bad_input_is_refused_saying_what_is_allowed(api: Any) -> None:
    day = date(2026, 11, 1)
    too_long = await graphql(
        api,
        ONLINE_TIME,
        ids=["a"],
        **{"from": day.isoformat(), "to": (day + timedelta(days=92)).isoformat()},
    )
    assert error_codes(too_long) == ["BAD_USER_INPUT"]
    assert "at most 92 days" in too_long["errors"][0]["message"]
    backwards = await graphql(
        api,
        ONLINE_TIME,
        ids=["a"],
        **{"from": day.isoformat(), "to": (day - timedelta(days=1)).isoformat()},
    )
    assert error_codes(backwards) == ["BAD_USER_INPUT"]
    many = await graphql(
        api,
        ONLINE_TIME,
        ids=[f"u{i}" for i in range(1001)],
        **{"from": day.isoformat(), "to": day.isoformat()},
    )
    assert error_codes(many) == ["BAD_USER_INPUT"]
    assert "at most 1,000" in many["errors"][0]["message"]
    last = await graphql(api, ONLINE_TIME, ids=["a"], **{"from": "9999-12-31", "to": "9999-12-31"})
    assert error_codes(last) == ["BAD_USER_INPUT"]
    assert "at most 9999-12-30" in last["errors"][0]["message"]
    start = datetime(2026, 11, 1, tzinfo=UTC)
    wide = await graphql(
        api,
        ONLINE_PERIODS,
        **{"from": start.isoformat(), "to": (start + timedelta(days=93)).isoformat()},
    )
    assert error_codes(wide) == ["BAD_USER_INPUT"]
    assert "at most 92 days" in wide["errors"][0]["message"]
    exact = await graphql(
        api,
        ONLINE_TIME,
        ids=["a"],
        **{"from": day.isoformat(), "to": (day + timedelta(days=91)).isoformat()},
    )
    assert len(exact["data"]["onlineTime"][0]["days"]) == 92


@pytest.mark.parametrize("see_everyone", [False, True])
async def test_who_may_ask(
    aiohttp_client: ClientFactory, http_redis: AnyRedis, see_everyone: bool
) -> None:
    settings = dataclasses.replace(SECURED, users_see_everyone=see_everyone)
    api = await aiohttp_client(create_app(settings))
    day = {"from": "2026-11-01", "to": "2026-11-02"}
    span = {"from": "2026-11-01T00:00:00Z", "to": "2026-11-02T00:00:00Z"}
    alice = user_token("alice")
    own = await as_user(api, alice, ONLINE_TIME, ids=["alice"], **day)
    assert own["data"]["onlineTime"][0]["userId"] == "alice"
    other = await as_user(api, alice, ONLINE_TIME, ids=["alice", "bob"], **day)
    assert error_codes(other) == ["FORBIDDEN"]
    periods = await as_user(api, alice, ONLINE_PERIODS, **span)
    assert error_codes(periods) == ([] if see_everyone else ["FORBIDDEN"])
    backend = await as_user(api, BACKEND_TOKEN, ONLINE_TIME, ids=["alice", "bob"], **day)
    assert len(backend["data"]["onlineTime"]) == 2
    assert "errors" not in await as_user(api, BACKEND_TOKEN, ONLINE_PERIODS, **span)
    nobody = await graphql(api, ONLINE_TIME, ids=[], **day)
    assert error_codes(nobody) == ["UNAUTHENTICATED"]


async def test_online_time_costs_a_token_per_100_user_days_it_reads(
    aiohttp_client: ClientFactory, http_redis: AnyRedis
) -> None:
    """Its work grows with users times days (1,000 users over 92 days read 92,000 user-days,
    about what a touchMany of as many ids costs), and so does its cost; a refused call costs
    its first token only. A bucket of 11 at once, refilled at one token every 2 s."""
    settings = dataclasses.replace(SECURED, backend_rate=0.5, backend_burst=11)
    api = await aiohttp_client(create_app(settings))
    many = [f"u{i}" for i in range(1000)]
    too_long = {"from": "2026-11-01", "to": "2027-02-01"}  # 93 days
    refused = await as_user(api, BACKEND_TOKEN, ONLINE_TIME, ids=many, **too_long)
    assert error_codes(refused) == ["BAD_USER_INPUT"]
    week = {"from": "2026-11-01", "to": "2026-11-07"}
    ids = many[:140]  # over 7 days: 980 user-days, ten tokens
    read = await as_user(api, BACKEND_TOKEN, ONLINE_TIME, ids=ids, **week)
    assert [one["userId"] for one in read["data"]["onlineTime"]] == ids
    spent = await as_user(api, BACKEND_TOKEN, ONLINE_TIME, ids=["u0"], **week)
    assert error_codes(spent) == ["RATE_LIMITED"]


async def test_the_service_folds_closed_days_as_it_runs(
    aiohttp_client: ClientFactory, deployment: Settings, http_redis: AnyRedis
) -> None:
    settings = dataclasses.replace(deployment, window_ms=4 * DAY_MS, retention_ms=10 * DAY_MS)
    store = PresenceStore(http_redis, settings)
    now = await server_ms(http_redis)
    today = local_date(now, UTC_ZONE)
    first = today - timedelta(days=3)
    await store.touch("a", at=ms(day_start_ms(first, UTC_ZONE) + DAY_MS // 2))
    await store.kick("a")
    before = await store.online_time.online_time(["a"], first, today)
    number = (first - date(1970, 1, 1)).days
    await aiohttp_client(create_app(settings))

    async def folded() -> bool:
        return bool(await http_redis.exists(Keys().online_folded(number + 1)[0]))

    await eventually(folded, what="the sweeper to fold the day before yesterday")
    assert not await http_redis.exists(Keys().online_folded(number + 2)[0])
    assert await store.online_time.online_time(["a"], first, today) == before
    assert before[0].days[0].seconds == 43200


async def test_a_day_reads_the_same_while_its_fold_is_under_way(
    make_store: StoreFactory, redis: Redis
) -> None:
    settings = dataclasses.replace(TEST_SETTINGS, window_ms=2 * DAY_MS)
    store = make_store(window_ms=settings.window_ms)
    keys = Keys()
    now = await server_ms(redis)
    today = local_date(now, UTC_ZONE)
    yesterday = today - timedelta(days=1)
    start = day_start_ms(yesterday, UTC_ZONE) + 3_600_000
    periods: dict[str, Period] = {}
    # In blocks 0, 1 and 2 of indexes; "c" still online when the fold begins.
    for user_id, index in (("a", 0), ("b", 5000), ("c", 9000), ("e", 9001)):
        await redis.set(keys.next_index, index)
        await store.touch(user_id, at=ms(start))
    for user_id in ("a", "b", "e"):
        await store.kick(user_id)
        periods[user_id] = (start, await server_ms(redis))
    asked = ["a", "b", "e", "c", "d"]
    before = await store.online_time.online_time(asked[:3], yesterday, today)

    # One call of the fold: block 0 folded, blocks 1 and 2 not yet.
    shard = Shard(redis, settings, 0, Scripts.register(redis))
    number = (yesterday - date(1970, 1, 1)).days
    marker, bitmap, counters, directory = keys.online_folded(number)
    reply = await shard.run(
        ScriptName.FOLD_ONLINE_TIME,
        named(
            next_index=keys.next_index,
            marker=marker,
            bitmap=bitmap,
            counters=counters,
            directory=directory,
        ),
        named(shard=shard.options, day=number, blocks=1, expire_ms=now + DAY_MS),
    )
    assert [int(n) for n in reply] == [1, 1, 3]
    assert await store.online_time.online_time(asked[:3], yesterday, today) == before
    # Ended now: "c" into its block's dense counters, which the fold has not reached; "d",
    # given an index past those the fold covers, into the day's late additions.
    await store.kick("c")
    periods["c"] = (start, await server_ms(redis))
    await redis.set(keys.next_index, 13_000)
    await store.touch("d", at=ms(start + 3_600_000))
    await store.kick("d")
    periods["d"] = (start + 3_600_000, await server_ms(redis))
    assert await redis.hkeys(keys.online_late(number)) == ["13000"]
    during = await store.online_time.online_time(asked, yesterday, today)
    for found in during:
        expected = day_seconds([periods[found.user_id]], yesterday, 2, UTC_ZONE)
        assert found.days[0].seconds == expected[0], found.user_id
    assert during[:3] == before

    assert await store.online_time.fold(yesterday) == 2
    after = await store.online_time.online_time(asked, yesterday, today)
    assert after == during
