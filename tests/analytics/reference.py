"""A reference for the figures of who and when: the same figures computed in plain Python from
the list of activities a test made, with the periods worked out by zoneinfo alone."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

HOUR = timedelta(hours=1)


def period_start(moment: datetime, granularity: str, zone: ZoneInfo) -> datetime:
    """Where the period of the stats zone holding `moment` starts (UTC). Hours are whole
    hours of UTC: true of every zone these tests use."""
    if granularity == "HOUR":
        return moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    day = moment.astimezone(zone).date()
    if granularity == "WEEK":
        day -= timedelta(days=day.weekday())
    elif granularity == "MONTH":
        day = day.replace(day=1)
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


def following(start: datetime, granularity: str, zone: ZoneInfo) -> datetime:
    if granularity == "HOUR":
        return start + HOUR
    local = start.astimezone(zone).date()
    if granularity == "DAY":
        nxt = local + timedelta(days=1)
    elif granularity == "WEEK":
        nxt = local + timedelta(days=7)
    else:
        nxt = date(local.year + local.month // 12, local.month % 12 + 1, 1)
    return datetime(nxt.year, nxt.month, nxt.day, tzinfo=zone).astimezone(UTC)


def preceding(start: datetime, granularity: str, zone: ZoneInfo) -> datetime:
    return period_start(start - timedelta(milliseconds=1), granularity, zone)


@dataclass
class Reference:
    zone: ZoneInfo
    activities: list[tuple[str, datetime]] = field(default_factory=list)

    def add(self, users: Iterable[str], at: datetime) -> None:
        self.activities.extend((user, at) for user in users)

    def active(self, start: datetime, granularity: str) -> set[str]:
        end = following(start, granularity, self.zone)
        return {user for user, at in self.activities if start <= at < end}

    def first(self, user: str) -> datetime:
        return min(at for who, at in self.activities if who == user)

    def activity(self, start: datetime, granularity: str) -> dict[str, int]:
        active = self.active(start, granularity)
        before_start = preceding(start, granularity, self.zone)
        before = self.active(before_start, granularity)
        new = {u for u in active if self.first(u) >= start}
        resurrected = {u for u in active - before if self.first(u) < before_start}
        return {
            "activeUsers": len(active),
            "newUsers": len(new),
            "returningUsers": len(active & before),
            "resurrectedUsers": len(resurrected),
            "dormantUsers": len(before - active),
        }

    def periods(self, start: datetime, end: datetime, granularity: str) -> list[datetime]:
        first = period_start(start, granularity, self.zone)
        if first < start:
            first = following(first, granularity, self.zone)
        starts = []
        while first <= end:
            starts.append(first)
            first = following(first, granularity, self.zone)
        return starts

    def retention(
        self, start: date, cohorts: int, periods: int, granularity: str, now: datetime
    ) -> list[tuple[datetime, int, list[int]]]:
        head = period_start(
            datetime(start.year, start.month, start.day, tzinfo=self.zone), granularity, self.zone
        )
        rows = []
        for _ in range(cohorts):
            end = following(head, granularity, self.zone)
            users = {u for u, _ in self.activities if head <= self.first(u) < end}
            retained, at = [], head
            for _ in range(periods + 1):
                if at > now:
                    break
                retained.append(len(users & self.active(at, granularity)))
                at = following(at, granularity, self.zone)
            rows.append((head, len(users), retained))
            head = end
        return rows

    def stickiness(self, end_date: date, days: int) -> tuple[int, float, list[int]]:
        per_day: list[set[str]] = []
        for i in range(days):
            day = end_date - timedelta(days=days - 1 - i)
            start = datetime(day.year, day.month, day.day, tzinfo=self.zone).astimezone(UTC)
            per_day.append(self.active(start, "DAY"))
        union = set().union(*per_day)
        counts = [sum(u in day for day in per_day) for u in union]
        histogram = [counts.count(k) for k in range(1, days + 1)]
        ratio = sum(len(d) for d in per_day) / days / len(union) if union else 0.0
        return len(union), ratio, histogram


def as_rows(periods: Sequence[object]) -> list[dict[str, int]]:
    """The store's periods as the reference's rows."""
    names = {
        "activeUsers": "active_users",
        "newUsers": "new_users",
        "returningUsers": "returning_users",
        "resurrectedUsers": "resurrected_users",
        "dormantUsers": "dormant_users",
    }
    return [{k: getattr(p, v) for k, v in names.items()} for p in periods]
