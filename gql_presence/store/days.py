"""Milliseconds on the server's clock, and the calendar days of the stats time zone."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from time import time_ns
from zoneinfo import ZoneInfo

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DAY_MS = 86_400_000
_ONE_MS = timedelta(milliseconds=1)


def to_ms(moment: datetime) -> int:
    """Whole milliseconds since the epoch (finer digits are dropped)."""
    return (moment - EPOCH) // _ONE_MS


def from_ms(ms: int) -> datetime:
    # Whole microseconds, given by position: twice as quick as `milliseconds=ms`, the same
    # moment (every read of a list converts two or three times a user).
    return EPOCH + timedelta(0, 0, ms * 1000)


def day_start_ms(day: date, zone: ZoneInfo) -> int:
    return to_ms(datetime.combine(day, time(0), zone))


def local_date(ms: int, zone: ZoneInfo) -> date:
    return from_ms(ms).astimezone(zone).date()


def days(first: date, count: int, zone: ZoneInfo) -> tuple[list[str], list[int]]:
    """`count` consecutive days from `first`: their labels, and count + 1 boundaries in ms
    (the start of each day, then the end of the last)."""
    dates = [first + timedelta(days=i) for i in range(count + 1)]
    return [d.isoformat() for d in dates[:count]], [day_start_ms(d, zone) for d in dates]


def days_around(ms: int, zone: ZoneInfo) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The day holding `ms` with its neighbours, so that a script can pick the day of its
    own clock even when this process's clock differs from the server's by some seconds."""
    return _days_around(local_date(ms, zone), zone)


@lru_cache(maxsize=64)
def _days_around(day: date, zone: ZoneInfo) -> tuple[tuple[str, ...], tuple[int, ...]]:
    # Every touch asks for today's; working the boundaries out takes longer than the rest
    # of the call's arguments together.
    labels, boundaries = days(day - timedelta(days=1), 3, zone)
    return tuple(labels), tuple(boundaries)


def local_now_ms() -> int:
    """This process's clock: only good for guessing which day the server's clock is in."""
    return time_ns() // 1_000_000


def day_number(day: date) -> int:
    """Days since 1970-01-01: how lua/includes/online_time.lua names a day of the stats time
    zone."""
    return (day - EPOCH.date()).days


# How far around the moment the options are made the stats time zone's changes are given to
# the scripts: back to the oldest day kept, and ahead for as long as a process runs.
_ZONE_BACK_DAYS, _ZONE_AHEAD_DAYS = 420, 4 * 366
# A name in the scripts' options is at most 255 bytes (lua/includes/options.lua).
_ZONE_MAX_BYTES = 255


def packed_zone(zone: ZoneInfo, now_ms: int) -> str:
    """The zone's UTC offsets around now_ms as lua/includes/online_time.lua reads them (zone_of):
    the offset (min) before the first change, then each change as "instant (s) offset (min)"."""
    return _packed_zone(zone, now_ms // DAY_MS)


@lru_cache(maxsize=16)
def _packed_zone(zone: ZoneInfo, today: int) -> str:
    def offset_min(second: int) -> int:
        offset = from_ms(second * 1000).astimezone(zone).utcoffset()
        return 0 if offset is None else round(offset.total_seconds() / 60)

    day_s = DAY_MS // 1000
    first = (today - _ZONE_BACK_DAYS) * day_s
    parts = [str(offset_min(first))]
    before = offset_min(first)
    for day in range(today - _ZONE_BACK_DAYS + 1, today + _ZONE_AHEAD_DAYS):
        after = offset_min(day * day_s)
        if after == before:
            continue
        # The change lies in the day before: found to the second.
        low, high = (day - 1) * day_s, day * day_s
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if offset_min(middle) == before else (low, middle)
        change = f"{high} {after}"
        if len(" ".join([*parts, change])) > _ZONE_MAX_BYTES:
            break
        parts.append(change)
        before = after
    return " ".join(parts)
