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
    return EPOCH + timedelta(milliseconds=ms)


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
