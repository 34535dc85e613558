"""weeklyStats: exact figures over days of the stats time zone, on Redis 6.2 and Valkey 9."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from gql_presence.store import PresenceStore
from gql_presence.store.days import from_ms, to_ms
from tests.conftest import StoreFactory

DAY_MS = 86_400_000


def local(day: date, hour: int, minute: int, zone: str, ms: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), ZoneInfo(zone)) + timedelta(milliseconds=ms)


def today(zone: str) -> date:
    return datetime.now(ZoneInfo(zone)).date()


async def test_days_split_at_local_midnight_in_a_non_utc_zone(make_store: StoreFactory) -> None:
    zone = "Asia/Kolkata"  # UTC+05:30: local midnight is 18:30 UTC the day before
    store = make_store(stats_timezone=zone)
    end = today(zone) - timedelta(days=1)
    await store.touch("late", at=local(end - timedelta(days=1), 23, 59, zone, ms=59_999))
    await store.touch("early", at=local(end, 0, 0, zone))
    stats = await store.weekly_stats(end)
    assert (stats.start_date, stats.end_date) == (end - timedelta(days=6), end)
    assert [d.day for d in stats.days] == [end - timedelta(days=6 - i) for i in range(7)]
    assert [d.active_users for d in stats.days] == [0, 0, 0, 0, 0, 1, 1]
    assert (stats.unique_users, stats.active_every_day, stats.new_on_end_date) == (2, 0, 1)


async def test_unique_every_day_and_new_users_are_exact(make_store: StoreFactory) -> None:
    zone = "America/Sao_Paulo"
    store = make_store(stats_timezone=zone)
    end = today(zone) - timedelta(days=2)
    week = [end - timedelta(days=6 - i) for i in range(7)]
    for i, day in enumerate(week):
        at = local(day, 12, 0, zone)
        await store.touch("daily", at=at)  # every day
        await store.touch("daily", "second-device", at=at)  # counted once a day all the same
        if i % 2 == 0:
            await store.touch("alternate", at=at)  # days 0, 2, 4, 6
    await store.touch("returning", at=local(week[5], 9, 0, zone))
    await store.touch("returning", at=local(week[6], 9, 0, zone))
    stats = await store.weekly_stats(end)
    assert [d.active_users for d in stats.days] == [2, 1, 2, 1, 2, 2, 3]
    assert stats.unique_users == 3
    assert stats.active_every_day == 1
    assert stats.new_on_end_date == 1  # "alternate" was not active the day before; the rest were


async def test_default_end_date_is_today_in_the_stats_zone(make_store: StoreFactory) -> None:
    zone = "Pacific/Kiritimati"  # UTC+14: often a day ahead of UTC
    store = make_store(stats_timezone=zone)
    await store.touch("alice")
    stats = await store.weekly_stats()
    assert stats.end_date == today(zone)
    assert stats.days[-1].active_users == 1
    assert stats.new_on_end_date == 1


async def test_future_days_and_days_past_the_retention_count_zero(make_store: StoreFactory) -> None:
    keeping = make_store(retention_ms=3 * DAY_MS)
    old = datetime.now(UTC) - timedelta(days=2, hours=12)
    await keeping.touch("alice", at=old)
    await keeping.touch("bob")
    old_day = old.date()
    assert (await keeping.weekly_stats(old_day)).days[-1].active_users == 1
    # Read with a one-day retention, the same stored day is outside it and counts 0.
    shorter = make_store(retention_ms=DAY_MS)
    stats = await shorter.weekly_stats(old_day + timedelta(days=3))
    counted = {d.day: d.active_users for d in stats.days}
    assert counted[old_day] == 0
    assert counted[datetime.now(UTC).date()] == 1
    assert stats.unique_users == 1
    future = await keeping.weekly_stats(datetime.now(UTC).date() + timedelta(days=10))
    assert [d.active_users for d in future.days] == [0] * 7
    assert (future.unique_users, future.active_every_day, future.new_on_end_date) == (0, 0, 0)


async def test_a_25_hour_day_at_the_end_of_daylight_saving(make_store: StoreFactory) -> None:
    zone = "America/New_York"
    store = make_store(stats_timezone=zone, retention_ms=400 * DAY_MS)
    # The last first-Sunday-of-November before today: clocks go back at 02:00, so the day
    # lasts 25 hours and 23:30 local is 04:30 UTC the next day.
    year = today(zone).year
    while (dst_end := _first_sunday_of_november(year)) >= today(zone):
        year -= 1
    await store.touch("evening", at=local(dst_end, 23, 30, zone))
    await store.touch("after-midnight", at=local(dst_end + timedelta(days=1), 0, 30, zone))
    stats = await store.weekly_stats(dst_end + timedelta(days=1))
    assert [d.active_users for d in stats.days][-2:] == [1, 1]
    assert stats.new_on_end_date == 1


async def test_a_backfilled_touch_counts_for_its_day_without_moving_last_seen(
    store: PresenceStore,
) -> None:
    now = await store.touch("alice")
    yesterday = datetime.now(UTC) - timedelta(days=1)
    again = await store.touch("alice", at=yesterday)
    assert again.last_seen == now.last_seen
    stats = await store.weekly_stats(datetime.now(UTC).date())
    assert [d.active_users for d in stats.days][-2:] == [1, 1]
    assert stats.active_every_day == 0


def _first_sunday_of_november(year: int) -> date:
    first = date(year, 11, 1)
    return first + timedelta(days=(6 - first.weekday()) % 7)


async def test_the_last_and_first_representable_weeks_count_zero(store: PresenceStore) -> None:
    for end in (date.max - timedelta(days=1), date.min + timedelta(days=6)):
        stats = await store.weekly_stats(end)
        assert [d.active_users for d in stats.days] == [0] * 7
        assert stats.end_date == end


@given(st.datetimes(timezones=st.just(UTC)))
def test_a_time_in_milliseconds_reads_back_as_the_same_moment(moment: datetime) -> None:
    """What the store keeps of a time (whole milliseconds) reads back as that moment, in UTC."""
    kept = moment.replace(microsecond=moment.microsecond // 1000 * 1000)
    read = from_ms(to_ms(moment))
    assert read == kept
    assert read.tzinfo is UTC
    assert read.isoformat() == kept.isoformat()
