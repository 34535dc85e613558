"""activity, retention and stickiness in the store: each figure against a reference computed
from the activities the test made (tests/analytics/reference.py), at the edges of periods:
midnight and Monday in the stats time zone, a DST change, a month's end, and a session held
across midnight; on Redis 6.2 and Valkey 9, with one shard and with three."""

from __future__ import annotations

import asyncio
import contextlib
import random
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from redis.asyncio import Redis

from gql_presence.observability.metrics import Metrics
from gql_presence.running.sweeper import sweep_forever
from gql_presence.store import Granularity, PresenceStore
from gql_presence.store.analytics import FOLD_AFTER_MS
from gql_presence.store.days import to_ms
from gql_presence.store.errors import BadInputError
from tests.analytics.reference import Reference, as_rows
from tests.conftest import StoreFactory
from tests.helpers import eventually

ZONE = ZoneInfo("Europe/Berlin")
DAY_MS = 86_400_000
KEEP = {"retention_ms": 240 * DAY_MS, "hourly_ms": 240 * DAY_MS, "stats_timezone": ZONE.key}
ONE_MS = timedelta(milliseconds=1)
DAY = timedelta(days=1)


def local(day: date, hour: int = 0, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), ZONE).astimezone(UTC)


def last_dst_change(now: datetime) -> datetime:
    """The latest change of the zone's offset at least two days ago (UTC, to the hour)."""
    at = now.replace(minute=0, second=0, microsecond=0) - timedelta(days=2)
    while at.astimezone(ZONE).utcoffset() == (at - timedelta(hours=1)).astimezone(ZONE).utcoffset():
        at -= timedelta(hours=1)
    return at


async def backfill(store: PresenceStore, reference: Reference, now: datetime) -> datetime:
    """Activities at every edge and at random times since before the last DST change; returns
    when the earliest was."""
    rng = random.Random(36)  # noqa: S311 - sample data
    users = [f"user-{i}" for i in range(30)]
    today = now.astimezone(ZONE).date()
    change = last_dst_change(now)
    monday = today - timedelta(days=today.weekday() or 7)
    month_start = today.replace(day=1)
    edges = [change - timedelta(minutes=30), change, change + timedelta(minutes=30)]
    edges += [change + timedelta(hours=h) for h in (2, 23, 25)]
    for day in (today - timedelta(days=1), today - timedelta(days=2), monday, month_start):
        edges += [local(day) - ONE_MS, local(day), local(day, 0, 30)]
    earliest = change - timedelta(days=3)
    span = (now - earliest).total_seconds()
    moments = edges + [earliest + timedelta(seconds=rng.uniform(0, span)) for _ in range(60)]
    for at in sorted(m for m in moments if m < now - timedelta(minutes=2)):
        who = rng.sample(users, rng.randint(1, 8))
        await store.touch_many(who, at=at)
        reference.add(who, at)
    return earliest


@pytest.fixture(params=[1, 3], ids=["one-shard", "three-shards"])
def shards(request: pytest.FixtureRequest) -> int:
    count: int = request.param
    return count


async def test_activity_matches_the_reference_at_every_granularity(
    make_store: StoreFactory, shards: int
) -> None:
    store = make_store(shards=shards, **KEEP)
    reference = Reference(ZONE)
    now = datetime.now(UTC)
    earliest = await backfill(store, reference, now)
    # A session held across midnight: open now, its lease renewed yesterday before midnight.
    await store.touch_many(["held"], at=earliest)
    reference.add(["held"], earliest)
    await store.open_session("held", "tab")
    reference.add(["held"], datetime.now(UTC))
    renewed = local(now.astimezone(ZONE).date()) - timedelta(seconds=1)
    await store.renew_leases(at=renewed)
    reference.add(["held"], renewed)
    now = datetime.now(UTC)
    change = last_dst_change(now)
    ranges = {
        Granularity.DAY: (earliest - timedelta(days=2), now),
        Granularity.WEEK: (earliest - timedelta(days=8), now),
        Granularity.MONTH: (earliest - timedelta(days=40), now),
        Granularity.HOUR: (change - timedelta(hours=30), change + timedelta(hours=30)),
    }
    for granularity, (start, end) in ranges.items():
        periods = await store.analytics.activity(start, end, granularity)
        starts = reference.periods(start, end, granularity.value)
        assert [p.start for p in periods] == starts, granularity
        expected = [reference.activity(s, granularity.value) for s in starts]
        assert as_rows(periods) == expected, granularity
    latest = await store.analytics.activity(now - timedelta(hours=72), now, Granularity.HOUR)
    starts = reference.periods(now - timedelta(hours=72), now, "HOUR")
    assert as_rows(latest) == [reference.activity(s, "HOUR") for s in starts]
    days = await store.analytics.activity(now - timedelta(days=2), now, Granularity.DAY)
    assert [p.active_users for p in days][-2:] == [
        reference.activity(p.start, "DAY")["activeUsers"] for p in days[-2:]
    ]


async def test_retention_and_stickiness_match_the_reference(
    make_store: StoreFactory, shards: int
) -> None:
    store = make_store(shards=shards, **KEEP)
    reference = Reference(ZONE)
    now = datetime.now(UTC)
    earliest = await backfill(store, reference, now)
    now = datetime.now(UTC)
    first_day = earliest.astimezone(ZONE).date()
    asked = [
        (Granularity.WEEK, first_day, 40, 12),
        (Granularity.DAY, first_day, 10, 30),
        (Granularity.MONTH, first_day - timedelta(days=20), 9, 8),
        (Granularity.DAY, now.astimezone(ZONE).date() - timedelta(days=5), 8, 3),
        (Granularity.HOUR, last_dst_change(now).astimezone(ZONE).date(), 30, 4),
    ]
    for granularity, start, cohorts, periods in asked:
        rows = await store.analytics.retention(start, cohorts, periods, granularity)
        expected = reference.retention(start, cohorts, periods, granularity.value, now)
        assert [(r.start, r.size, list(r.retained)) for r in rows] == expected, granularity
    today = now.astimezone(ZONE).date()
    for end_date, days in ((today, 28), (today, 90), (today - timedelta(days=3), 1)):
        sticky = await store.analytics.stickiness(end_date, days)
        active, ratio, histogram = reference.stickiness(end_date, days)
        assert (sticky.end_date, sticky.days) == (end_date, days)
        assert (sticky.active_users, list(sticky.active_days)) == (active, histogram)
        assert sticky.ratio == pytest.approx(ratio)
    assert (await store.analytics.stickiness(None, 28)).end_date == today


async def test_a_backfilled_activity_moves_a_users_first_day_back(store: PresenceStore) -> None:
    now = datetime.now(UTC)
    await store.touch_many(["ann"], at=now - timedelta(days=2))
    await store.touch_many(["ann"], at=now - timedelta(days=33))
    days = await store.analytics.activity(now - timedelta(days=34), now, Granularity.DAY)
    new = [p.new_users for p in days]
    assert sum(new) == 1
    assert [p.active_users for p in days] == [
        int(p.start <= now - timedelta(days=2) < p.start + timedelta(days=1))
        or int(p.start <= now - timedelta(days=33) < p.start + timedelta(days=1))
        for p in days
    ]
    first_active = next(p for p in days if p.active_users)
    assert first_active.new_users == 1
    for granularity in (Granularity.WEEK, Granularity.MONTH):
        periods = await store.analytics.activity(now - timedelta(days=70), now, granularity)
        holding = [p for p in periods if p.start <= now - timedelta(days=33)][-1]
        assert [p.new_users for p in periods] == [int(p is holding) for p in periods]


async def test_large_batches_match_the_reference(make_store: StoreFactory) -> None:
    """touchMany of many users adds them to the week and month by the day's whole bitmap."""
    store = make_store(**KEEP)
    reference = Reference(ZONE)
    now = datetime.now(UTC)
    batches = [
        (range(0, 700), now - timedelta(days=3)),
        (range(400, 1300), now - timedelta(days=2)),
        (range(900, 1600), now - timedelta(days=33)),  # first days moved back a month
        (range(1200, 1210), now - timedelta(days=2, hours=1)),
    ]
    for users, at in batches:
        who = [f"u{i}" for i in users]
        await store.touch_many(who, at=at)
        reference.add(who, at)
    now = datetime.now(UTC)
    for granularity in (Granularity.DAY, Granularity.WEEK, Granularity.MONTH):
        start = now - timedelta(days=70)
        periods = await store.analytics.activity(start, now, granularity)
        starts = reference.periods(start, now, granularity.value)
        assert as_rows(periods) == [reference.activity(s, granularity.value) for s in starts]
    first_day = (now - timedelta(days=40)).astimezone(ZONE).date()
    rows = await store.analytics.retention(first_day, 8, 6, Granularity.WEEK)
    expected = reference.retention(first_day, 8, 6, "WEEK", now)
    assert [(r.start, r.size, list(r.retained)) for r in rows] == expected


async def test_every_bitmap_of_activity_expires(make_store: StoreFactory, redis: Redis) -> None:
    """Each bitmap's expiry is set once, by the write that makes it: whoever writes first in a
    period (a new user, a known one, a backfill into an older week) leaves none kept forever."""
    store = make_store(**KEEP)
    now = datetime.now(UTC)
    await store.touch_many(["ann"], at=now - timedelta(days=40))
    await store.touch("bob", "tab")
    await store.touch_many(["ann", "cat"], at=now - timedelta(days=9))
    await store.touch_many(["ann"], at=now - timedelta(days=20))
    await store.touch("ann", "tab")
    kinds = ("hour", "day", "week", "month", "first", "firstw", "firstm")
    for kind in kinds:
        keys = [k async for k in redis.scan_iter(match=f"*:{kind}:*")]
        assert keys, kind
        for key in keys:
            assert await redis.pttl(key) > 0, key


async def test_bitmaps_of_ended_periods_shrink_and_answer_the_same(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(**KEEP)
    day = datetime.now(UTC).astimezone(ZONE).date() - timedelta(days=2)
    at = local(day + timedelta(days=1)) - timedelta(minutes=30)  # the day's last hour
    for first in range(0, 4000, 100):  # user indexes rising batch by batch
        await store.touch_many([f"u{i}" for i in range(first, first + 100)], at=at)
    asked = [(at - timedelta(hours=2), at, Granularity.HOUR), (at - DAY, at, Granularity.DAY)]
    before = [await store.analytics.activity(*question) for question in asked]
    bitmaps = [k for kind in ("hour", "day", "first") async for k in redis.scan_iter(f"*:{kind}:*")]
    sizes = [await redis.memory_usage(key) or 0 for key in bitmaps]
    expiries = [await redis.pttl(key) for key in bitmaps]
    # An hour after the next one began: the hour, its day and the day's first bitmap.
    assert await store.analytics.compact_ended(to_ms(at + timedelta(hours=2))) >= 3
    for key, size, expiry in zip(bitmaps, sizes, expiries, strict=True):
        assert (await redis.memory_usage(key) or size) < size, key
        assert expiry - 1000 < await redis.pttl(key) <= expiry, key
    assert [await store.analytics.activity(*question) for question in asked] == before
    assert [p.active_users for p in before[1]] == [4000]
    assert await store.analytics.compact_ended(to_ms(at)) == 0  # nothing kept ended then


async def test_periods_outside_what_is_kept_count_zero(make_store: StoreFactory) -> None:
    writer = make_store(retention_ms=10 * DAY_MS, hourly_ms=10 * DAY_MS)
    now = datetime.now(UTC)
    await writer.touch_many(["ann", "bob"], at=now - timedelta(days=3))
    reader = make_store(retention_ms=DAY_MS, hourly_ms=DAY_MS)
    for granularity in (Granularity.HOUR, Granularity.DAY):
        periods = await reader.analytics.activity(now - timedelta(days=4), now, granularity)
        assert sum(p.active_users for p in periods) == 0, granularity
    weeks = await reader.analytics.activity(now - timedelta(days=12), now, Granularity.WEEK)
    assert sum(p.active_users for p in weeks) == 2  # weeks are kept PRESENCE_ANALYTICS_DAYS
    assert (await reader.analytics.stickiness(None, 7)).active_users == 0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda s, now: s.analytics.activity(now, now - timedelta(hours=1), Granularity.DAY),
            "from must not be later than to",
        ),
        (
            lambda s, now: s.analytics.activity(now - timedelta(days=32), now, Granularity.HOUR),
            "at most 744 periods",
        ),
        (
            lambda s, now: s.analytics.retention(now.date(), 0, 12, Granularity.WEEK),
            "cohorts must be between 1 and 52",
        ),
        (
            lambda s, now: s.analytics.retention(now.date(), 12, 53, Granularity.WEEK),
            "periods must be between 1 and 52",
        ),
        (lambda s, now: s.analytics.stickiness(None, 91), "days must be between 1 and 90"),
        (lambda s, now: s.analytics.stickiness(None, 0), "days must be between 1 and 90"),
        (lambda s, now: s.analytics.stickiness(date(1, 1, 1), 7), "Dates must lie between"),
    ],
)
async def test_bad_input_says_what_is_allowed(
    store: PresenceStore, call: object, message: str
) -> None:
    with pytest.raises(BadInputError, match=message):
        await call(store, datetime.now(UTC))  # type: ignore[operator]


async def test_folded_hours_answer_as_their_bitmaps_did(
    make_store: StoreFactory, redis: Redis, shards: int
) -> None:
    """Hours folded into counts, across a DST change and days' edges, give the answers their
    bitmaps gave, and only the hours still needed stay bitmaps."""
    store = make_store(shards=shards, **KEEP)
    reference = Reference(ZONE)
    now = datetime.now(UTC)
    await backfill(store, reference, now)
    change = last_dst_change(now)
    change_day = change.astimezone(ZONE).date()
    # Users back hour after hour across the change and the next midnight, for returning
    # users and retained cohorts in folded hours.
    midnight = local(change_day + DAY)
    for at in (change - timedelta(minutes=30), change + timedelta(minutes=30), midnight):
        for moment in (at - timedelta(minutes=20), at + timedelta(minutes=50)):
            await store.touch_many(["back-1", "back-2", "back-3"], at=moment)
            reference.add(["back-1", "back-2", "back-3"], moment)
    latest_day = now.astimezone(ZONE).date() - timedelta(days=4)

    async def answers() -> list[object]:
        found: list[object] = []
        for start, end in (
            (change - timedelta(hours=30), change + timedelta(hours=30)),
            (now - timedelta(hours=100), now),
        ):
            found.append(as_rows(await store.analytics.activity(start, end, Granularity.HOUR)))
        for day in (change_day - timedelta(days=1), change_day, latest_day):
            rows = await store.analytics.retention(day, 40, 52, Granularity.HOUR)
            found.append([(r.start, r.size, r.retained) for r in rows])
        return found

    before = await answers()
    assert sum(row["returningUsers"] for row in before[0]) >= 9  # type: ignore[attr-defined]
    starts = reference.periods(now - timedelta(hours=100), now, "HOUR")
    assert before[1] == [reference.activity(s, "HOUR") for s in starts]
    rows = reference.retention(change_day, 40, 52, "HOUR", datetime.now(UTC))
    assert before[3] == [(s, size, tuple(kept)) for s, size, kept in rows]
    # The sweeper's runs, a day apart from a few days after the change until now.
    at = change + timedelta(days=4)
    folded = 0
    while at < now:
        folded += await store.analytics.fold_ended(to_ms(at))
        at += DAY
    folded += await store.analytics.fold_ended()
    # Every hour of a day with someone active is folded in at least one shard; the hours of
    # a day with nobody active leave nothing to fold, and no record.
    active_days = [
        d
        for d in reference.periods(change, now - timedelta(hours=54 + 24), "DAY")
        if reference.active(d, "DAY")
    ]
    assert folded >= 23 * len(active_days)
    assert await answers() == before
    # No hour bitmap is kept past the day after the folds' horizon, live or as folded.
    kept = [
        datetime.fromtimestamp(int(key.split(":")[-1]) / 1000, UTC)
        async for key in redis.scan_iter(match="*:hour*:*")
    ]
    horizon = now - timedelta(hours=54 + 25)
    assert [h for h in kept if change - timedelta(days=2) < h < horizon] == []


async def make_a_day(store: PresenceStore, reference: Reference, day: date) -> None:
    """Users first active in the morning of `day` and back in its afternoon, with others new
    in the afternoon, and some back the next night."""
    users = [f"u{i}" for i in range(12)]
    for at, who in (
        (local(day, 2, 10), users[:6]),
        (local(day, 9, 40), users[3:9]),
        (local(day, 14, 5), users[:4] + users[8:]),
        (local(day, 15, 30), users[5:10]),
        (local(day + DAY, 1), users[::2]),
    ):
        await store.touch_many(who, at=at)
        reference.add(who, at)


async def hourly_answers(store: PresenceStore, day: date) -> list[object]:
    hours = await store.analytics.activity(local(day), local(day + DAY, 3), Granularity.HOUR)
    rows = await store.analytics.retention(day, 24, 30, Granularity.HOUR)
    return [as_rows(hours), [(r.start, r.size, r.retained) for r in rows]]


def morning_hours(keys: list[str], day: date) -> list[str]:
    """The keys among these of hours (live or folded) that start before 11:00 of `day`."""
    starts = (to_ms(local(day)), to_ms(local(day, 11)))
    return [k for k in keys if starts[0] <= int(k.split(":")[-1]) < starts[1]]


async def test_a_day_folded_up_to_midday_answers_for_its_afternoon_as_before(
    make_store: StoreFactory, redis: Redis, shards: int
) -> None:
    """Once a day's morning is folded its hours' bitmaps go, and the afternoon's new users
    and cohorts still leave out the users first seen in the morning."""
    store = make_store(shards=shards, **KEEP)
    reference = Reference(ZONE)
    now = datetime.now(UTC)
    day = (now - 4 * DAY).astimezone(ZONE).date()
    await make_a_day(store, reference, day)
    before = await hourly_answers(store, day)
    starts = reference.periods(local(day), local(day + DAY, 3), "HOUR")
    assert before[0] == [reference.activity(s, "HOUR") for s in starts]
    rows = reference.retention(day, 24, 30, "HOUR", datetime.now(UTC))
    assert before[1] == [(s, size, tuple(kept)) for s, size, kept in rows]
    assert [r["newUsers"] for r in before[0] if r["newUsers"]] == [6, 3, 3]
    # The sweeper's run that folds the hours up to 11:00 of the day, and not the afternoon's.
    assert await store.analytics.fold_ended(to_ms(local(day, 12, 30)) + FOLD_AFTER_MS) > 0
    assert await hourly_answers(store, day) == before
    kept = [key async for key in redis.scan_iter(match="*:hour*:*")]
    assert morning_hours(kept, day) == []


async def test_a_day_folded_in_part_before_its_seen_bitmap_was_kept_reads_as_before(
    make_store: StoreFactory, redis: Redis
) -> None:
    """A day whose morning was folded where every folded hour's bitmap stayed until the
    day's last hour was (no seen bitmap) answers as before, and folds on."""
    store = make_store(**KEEP)
    reference = Reference(ZONE)
    now = datetime.now(UTC)
    day = (now - 4 * DAY).astimezone(ZONE).date()
    await make_a_day(store, reference, day)
    before = await hourly_answers(store, day)
    # The morning folded as it was: each hour's bitmap kept under its frozen name.
    morning = morning_hours([key async for key in redis.scan_iter(match="*:hour:*")], day)
    assert morning
    for key in morning:
        await redis.bitop("OR", key + ":copy", key)
    await store.analytics.fold_ended(to_ms(local(day, 11, 30)) + FOLD_AFTER_MS)
    for key in morning:
        await redis.rename(key + ":copy", key.replace(":hour:", ":hourf:"))
    assert [await redis.delete(key) async for key in redis.scan_iter(match="*:hseen:*")] == [1]
    assert await hourly_answers(store, day) == before
    assert await store.analytics.fold_ended(to_ms(local(day, 16, 30)) + FOLD_AFTER_MS) > 0
    assert await hourly_answers(store, day) == before
    kept = [key async for key in redis.scan_iter(match="*:hour*:*")]
    assert morning_hours(kept, day) == []


async def test_a_write_into_a_folded_hour_counts_in_its_day_only(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(**KEEP)
    now = datetime.now(UTC)
    day = (now - timedelta(days=4)).astimezone(ZONE).date()
    at = local(day, 12, 30)
    await store.touch_many(["ann", "bob"], at=at)
    await store.touch_many(["bob"], at=at + timedelta(hours=1))
    assert await store.analytics.fold_ended() > 0
    assert await make_store(**KEEP).analytics.fold_ended() == 0  # another process: done
    hours = await store.analytics.activity(at - timedelta(hours=2), at + DAY, Granularity.HOUR)
    await store.touch_many(["cat", "bob"], at=at)  # in a folded hour: cat is new that day
    await store.touch_many(["ann"], at=at + timedelta(hours=1))
    assert await store.analytics.activity(at - timedelta(hours=2), at + DAY, Granularity.HOUR) == (
        hours
    )
    days = await store.analytics.activity(local(day), local(day), Granularity.DAY)
    assert [(p.active_users, p.new_users) for p in days] == [(3, 3)]
    # The hour's live bitmap, made again by the write, is read by nothing and expires.
    live = [k async for k in redis.scan_iter(match="*:hour:*")]
    assert live
    for key in live:
        assert await redis.pttl(key) > 0


async def test_a_deployment_with_no_activity_folds_nothing_and_keeps_nothing(
    make_store: StoreFactory, redis: Redis
) -> None:
    """The sweeper folds at every start: where nobody was active, it must leave no keys (a
    refused request is checked to change nothing by the keys it leaves)."""
    store = make_store(shards=3, **KEEP)
    keys_before = await redis.dbsize()
    folded = await store.analytics.fold_ended()
    assert folded == 0
    await store.online_time.fold_closed()
    await store.online_time.carry_over()
    await store.sweep()
    assert await redis.dbsize() == keys_before


def five_days_ago() -> tuple[date, datetime]:
    """The day five days ago, and its start."""
    day = (datetime.now(UTC) - 5 * DAY).astimezone(ZONE).date()
    return day, local(day)


async def make_hours(store: PresenceStore, reference: Reference, start: datetime) -> list[object]:
    """Activity in each of the 60 hours from `start`, of users arriving over them: every hour
    has new users, and each cohort has users back in some of the hours after it. Returns the
    hourly figures then (hours_answers)."""
    rng = random.Random(52)  # noqa: S311 - sample data
    for hour in range(60):
        at = start + timedelta(hours=hour, minutes=rng.randrange(60))
        who = rng.sample([f"u{i}" for i in range(8 + 2 * hour)], rng.randint(2, 8))
        await store.touch_many(who, at=at)
        reference.add(who, at)
    return await hours_answers(store, start)


async def hours_answers(store: PresenceStore, start: datetime) -> list[object]:
    hours = await store.analytics.activity(start, start + timedelta(hours=70), Granularity.HOUR)
    day = start.astimezone(ZONE).date()
    rows = await store.analytics.retention(day, 52, 52, Granularity.HOUR)
    return [as_rows(hours), [(r.start, r.size, r.retained) for r in rows]]


async def hour_keys(redis: Redis, kind: str) -> list[int]:
    """The starts (ms) of the hours with a key of this kind (hour, hourf, hcoh)."""
    return sorted([int(k.split(":")[-1]) async for k in redis.scan_iter(match=f"*:{kind}:*")])


async def test_an_hour_folded_two_hours_after_its_end_answers_as_its_bitmap_did(
    make_store: StoreFactory, redis: Redis, shards: int
) -> None:
    """Each hour is folded two hours after it ends, and its bitmap goes once the next one is:
    its cohort's row of hourly retention is filled in from the cohort's list as each of the
    52 hours after it is folded, and every figure stays as it was, at each step."""
    store = make_store(shards=shards, **KEEP)
    reference = Reference(ZONE)
    day, start = five_days_ago()
    before = await make_hours(store, reference, start)
    starts = reference.periods(start, start + timedelta(hours=70), "HOUR")
    assert before[0] == [reference.activity(s, "HOUR") for s in starts]
    rows = reference.retention(day, 52, 52, "HOUR", datetime.now(UTC))
    assert before[1] == [(s, size, tuple(kept)) for s, size, kept in rows]
    for hour in range(60 + 52 + 2):
        ended = start + timedelta(hours=hour + 1)
        folded = await store.analytics.fold_ended(to_ms(ended) + FOLD_AFTER_MS)
        assert folded > 0 or hour >= 60
        if hour % 7 == 0 or hour >= 58:
            assert await hours_answers(store, start) == before, f"folded through hour {hour}"
        # Of the hours folded, only the newest keeps its bitmap (as folded, for the next
        # hour's returning users); the cohorts of the 52 hours up to it keep their lists.
        assert all(s >= to_ms(ended) for s in await hour_keys(redis, "hour"))
        frozen = set(await hour_keys(redis, "hourf"))
        assert frozen == ({to_ms(ended) - 3_600_000} if hour < 60 else set())
        lists = await hour_keys(redis, "hcoh")
        assert all(to_ms(ended) - 52 * 3_600_000 <= s < to_ms(ended) for s in lists)
        assert lists or hour >= 59 + 52
    # Every row is closed once the 52 hours after its hour are folded, its list gone.
    assert await hour_keys(redis, "hcoh") == []


async def kept_state(redis: Redis) -> dict[str, object]:
    return {key: await redis.dump(key) async for key in redis.scan_iter()}


async def test_a_fold_run_late_or_twice_changes_nothing(
    make_store: StoreFactory, redis: Redis
) -> None:
    """A sweeper that ran 30 hours late folds them all in one run, as one an hour would have;
    the same run again, in this process or a new one, changes no key; a process started later
    folds on from there."""
    store = make_store(**KEEP)
    reference = Reference(ZONE)
    _, start = five_days_ago()
    before = await make_hours(store, reference, start)
    late = to_ms(start + timedelta(hours=30)) + FOLD_AFTER_MS
    assert await store.analytics.fold_ended(late) == 30
    assert await hours_answers(store, start) == before
    state = await kept_state(redis)
    assert await store.analytics.fold_ended(late) == 0
    assert await make_store(**KEEP).analytics.fold_ended(late) == 0  # a process restarted
    assert await kept_state(redis) == state
    assert await hours_answers(store, start) == before
    restarted = make_store(**KEEP)
    end = to_ms(start + timedelta(hours=60 + 52)) + FOLD_AFTER_MS
    assert await restarted.analytics.fold_ended(end) >= 30
    assert await hours_answers(store, start) == before
    assert await hour_keys(redis, "hcoh") == []


async def test_rows_folded_whole_by_the_earlier_schedule_read_and_fold_on(
    make_store: StoreFactory, redis: Redis
) -> None:
    """A deployment upgraded mid-day: the hours folded by the earlier schedule, 54 hours after
    their end, each with its cohort's whole row and no list, answer as before, and the hours
    after them, left as bitmaps, fold on around them."""
    store = make_store(**KEEP)
    reference = Reference(ZONE)
    day, start = five_days_ago()
    before = await make_hours(store, reference, start)
    # The earlier schedule folded the first 20 hours, each row whole: as the reference has it.
    assert await store.analytics.fold_ended(to_ms(start + timedelta(hours=20)) + FOLD_AFTER_MS)
    rows = reference.retention(day, 20, 52, "HOUR", datetime.now(UTC))
    for at, size, kept in rows:
        figures = reference.activity(at, "HOUR")
        row = [figures["activeUsers"], figures["returningUsers"], size, *kept[1:]]
        while len(row) > 3 and row[-1] == 0:
            row.pop()
        label = at.astimezone(ZONE).date().isoformat()
        [record] = [k async for k in redis.scan_iter(match=f"*:hfold:{label}")]
        await redis.hset(record, str(to_ms(at)), " ".join(map(str, row)))
    await redis.delete(*[k async for k in redis.scan_iter(match="*:hcoh:*")])
    assert await hours_answers(store, start) == before
    end = to_ms(start + timedelta(hours=60 + 52)) + FOLD_AFTER_MS
    assert await store.analytics.fold_ended(end) > 0
    assert await hours_answers(store, start) == before
    assert await hour_keys(redis, "hcoh") == []


class PassesCounted(Metrics):
    """Metrics that count the sweeper's passes: it refreshes them at the end of each."""

    passes = 0

    def refresh(self) -> None:
        super().refresh()
        self.passes += 1


async def test_the_sweeper_folds_at_its_start_what_ended_while_no_process_ran(
    make_store: StoreFactory, redis: Redis
) -> None:
    """A process's sweeper folds, at its start, the hours that ended two hours ago or more and
    were not folded (while no process ran); the next process's finds nothing left to fold."""
    reference = Reference(ZONE)
    now = datetime.now(UTC)
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=64)
    first = make_store(**KEEP)
    before = await make_hours(first, reference, start)
    due = to_ms(now) - FOLD_AFTER_MS - 3_600_000

    async def folded() -> bool:
        return all(s >= due for s in await hour_keys(redis, "hour"))

    assert not await folded()
    metrics = PassesCounted()
    sweeper = asyncio.create_task(sweep_forever(first, 0.05, metrics))
    # Its first pass folds, those with a bitmap and the hours after them with none alike.
    await eventually(lambda: metrics.passes > 0, what="the sweeper's first pass")
    sweeper.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sweeper
    assert await folded(), "the hours ended two hours ago folded"
    assert await hours_answers(first, start) == before
    assert await hour_keys(redis, "hcoh")
    state = await kept_state(redis)
    assert await make_store(**KEEP).analytics.fold_ended() == 0  # the process after a restart
    assert await kept_state(redis) == state


async def turn_days_into_lists(store: PresenceStore, days: list[date]) -> None:
    """The sweeper's compaction of each day, an hour after the next one began."""
    for day in days:
        await store.analytics.compact_ended(to_ms(local(day + DAY, 1, 30)))


async def first_day_forms(redis: Redis) -> dict[str, str]:
    return {key: str(await redis.type(key)) async for key in redis.scan_iter(match="*:first:*")}


def asked_activity(earliest: datetime, now: datetime) -> list[tuple[datetime, datetime, str]]:
    change = last_dst_change(now)
    return [
        (earliest - 2 * DAY, now, "DAY"),
        (earliest - 8 * DAY, now, "WEEK"),
        (change - timedelta(hours=30), change + timedelta(hours=30), "HOUR"),
        (now - timedelta(hours=72), now, "HOUR"),
    ]


async def every_answer(store: PresenceStore, earliest: datetime, now: datetime) -> list[object]:
    """activity by day, week and hour, retention by day and hour, and stickiness."""
    found: list[object] = []
    for start, end, granularity in asked_activity(earliest, now):
        found.append(as_rows(await store.analytics.activity(start, end, Granularity(granularity))))
    first_day = earliest.astimezone(ZONE).date()
    for day, cohorts, periods, granularity in (
        (first_day, 40, 30, Granularity.DAY),
        (last_dst_change(now).astimezone(ZONE).date(), 30, 4, Granularity.HOUR),
    ):
        rows = await store.analytics.retention(day, cohorts, periods, granularity)
        found.append([(r.start, r.size, list(r.retained)) for r in rows])
    sticky = await store.analytics.stickiness(None, 90)
    found.append((sticky.active_users, list(sticky.active_days)))
    return found


def expected_answers(reference: Reference, earliest: datetime, now: datetime) -> list[object]:
    """every_answer's figures as the reference computes them."""
    found: list[object] = []
    for start, end, granularity in asked_activity(earliest, now):
        starts = reference.periods(start, end, granularity)
        found.append([reference.activity(s, granularity) for s in starts])
    first_day = earliest.astimezone(ZONE).date()
    found.append(reference.retention(first_day, 40, 30, "DAY", now))
    found.append(
        reference.retention(last_dst_change(now).astimezone(ZONE).date(), 30, 4, "HOUR", now)
    )
    active, _, histogram = reference.stickiness(now.astimezone(ZONE).date(), 90)
    found.append((active, histogram))
    return found


async def test_days_turned_into_lists_answer_as_their_bitmaps_did(
    make_store: StoreFactory, redis: Redis, shards: int
) -> None:
    """Ended days' first-timers kept as lists, some days and then all (as after an upgrade,
    which leaves the days ended before it as bitmaps), and hours folded after that, give the
    answers the bitmaps gave, as the reference computes them."""
    store = make_store(shards=shards, **KEEP)
    reference = Reference(ZONE)
    now = datetime.now(UTC)
    earliest = await backfill(store, reference, now)
    now = datetime.now(UTC)
    before = await every_answer(store, earliest, now)
    assert before == expected_answers(reference, earliest, now)
    today = now.astimezone(ZONE).date()
    days = [today - timedelta(days=n) for n in range(1, (today - earliest.date()).days + 2)]
    assert set((await first_day_forms(redis)).values()) == {"string"}
    await turn_days_into_lists(store, days[::2])
    forms = await first_day_forms(redis)
    assert sorted(set(forms.values())) == ["hash", "string"]
    assert await every_answer(store, earliest, now) == before
    await turn_days_into_lists(store, days)
    forms = await first_day_forms(redis)
    assert [k for k, form in forms.items() if form != "hash"] == [
        k for k in forms if k.endswith(today.isoformat())
    ]
    assert await every_answer(store, earliest, now) == before
    assert await store.analytics.fold_ended() > 0  # folds that read the lists
    assert await every_answer(store, earliest, now) == before


async def test_a_backfill_into_a_day_kept_as_a_list_counts(
    make_store: StoreFactory, redis: Redis
) -> None:
    """A backfill that makes a user new on a day kept as a list, or moves a user's first day
    from it to an earlier one, counts as it did on the bitmap, which the day is again."""
    store = make_store(**KEEP)
    reference = Reference(ZONE)
    now = datetime.now(UTC)
    day = (now - 6 * DAY).astimezone(ZONE).date()
    for at, who in (
        (local(day - 3 * DAY, 10), [f"u{i}" for i in range(0, 40)]),
        (local(day, 9), [f"u{i}" for i in range(20, 300)]),
        (local(day + DAY, 9), [f"u{i}" for i in range(250, 400)]),
    ):
        await store.touch_many(who, at=at)
        reference.add(who, at)
    await turn_days_into_lists(store, [day - 3 * DAY, day, day + DAY])
    [key] = [k async for k in redis.scan_iter(match=f"*:first:{day.isoformat()}")]
    assert await redis.type(key) == "hash"
    expiry = await redis.pttl(key)
    for at, who in (
        (local(day, 20), ["new-1", "u350", "u2"]),  # new; first day moved here; known before
        (local(day - 2 * DAY, 8), ["u100", "u101", "new-2"]),  # first day moved from it
    ):
        await store.touch_many(who, at=at)
        reference.add(who, at)
    assert await redis.type(key) == "string"
    assert expiry - 1000 < await redis.pttl(key) <= expiry
    now = datetime.now(UTC)
    earliest = local(day - 3 * DAY)
    assert await every_answer(store, earliest, now) == expected_answers(reference, earliest, now)
    await turn_days_into_lists(store, [day])
    assert await redis.type(key) == "hash"
    assert await every_answer(store, earliest, now) == expected_answers(reference, earliest, now)


async def test_a_day_kept_as_a_list_is_smaller_than_its_bitmap(
    make_store: StoreFactory, redis: Redis
) -> None:
    """Consecutive indexes make a list of a few bytes; days whose first-timers lie scattered
    (every other index) keep their bitmaps, rewritten to their size."""
    store = make_store(**KEEP)
    now = datetime.now(UTC)
    days = [(now - n * DAY).astimezone(ZONE).date() for n in (6, 5, 4)]
    await store.touch_many([f"u{i}" for i in range(8000)], at=local(days[1], 9))
    # Every other one of them first active a day earlier: each day holds every other index.
    await store.touch_many([f"u{i}" for i in range(0, 8000, 2)], at=local(days[0], 9))
    await store.touch_many([f"v{i}" for i in range(4000)], at=local(days[2], 9))
    await turn_days_into_lists(store, days)
    keys = [f"gqlp:{{0}}:first:{d.isoformat()}" for d in days]
    forms = await first_day_forms(redis)
    assert [forms[k] for k in keys] == ["string", "string", "hash"]
    assert (await redis.memory_usage(keys[2]) or 0) < 120  # where the bitmap is 1.5 kB
    new = await store.analytics.activity(local(days[0]), local(days[2]), Granularity.DAY)
    assert [p.new_users for p in new] == [4000, 4000, 4000]
