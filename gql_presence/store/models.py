"""What the store answers: plain frozen dataclasses, for the schema and every other caller."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime


@dataclass(frozen=True)
class Session:
    session_id: str
    last_seen: datetime


@dataclass(frozen=True)
class Presence:
    user_id: str
    online: bool
    last_seen: datetime | None
    sessions: tuple[Session, ...]


@dataclass(frozen=True)
class ListedUser:
    """A user on a page of a list; their sessions are read separately, when asked for."""

    user_id: str
    online: bool
    last_seen: datetime


@dataclass(frozen=True)
class Page:
    total_count: int
    nodes: tuple[ListedUser, ...]
    has_next_page: bool
    end_cursor: str | None


@dataclass(frozen=True)
class KickResult:
    user_id: str
    kicked_sessions: int
    online: bool


@dataclass(frozen=True)
class DailyActiveUsers:
    day: date
    active_users: int


@dataclass(frozen=True)
class WeeklyStats:
    start_date: date
    end_date: date
    days: tuple[DailyActiveUsers, ...]
    unique_users: int
    active_every_day: int
    new_on_end_date: int


@dataclass(frozen=True)
class SweepResult:
    offline: int
    purged: int
    online: int
