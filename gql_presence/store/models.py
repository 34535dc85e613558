"""What the store answers: plain frozen dataclasses, for the schema and every other caller."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime


@dataclass(frozen=True)
class Session:
    """A live session: its id and its last activity."""

    session_id: str
    last_seen: datetime


@dataclass(frozen=True)
class Presence:
    """A user's presence: online while a session is live; last_seen is None once their
    last activity lies further back than the retention (or for a user never seen)."""

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
    # Where the user stands in every list, with their id: -(lastSeen, ms), or for a held user
    # a score before every time (lua/includes/live.lua). Page cursors hold it.
    position: int


@dataclass(frozen=True)
class Page:
    """A page of a list, newest last activity first; end_cursor (None for an empty page)
    continues after its last user."""

    total_count: int
    nodes: tuple[ListedUser, ...]
    has_next_page: bool
    end_cursor: str | None


@dataclass(frozen=True)
class KickResult:
    """What a kick ended, and whether the user stays online through another session."""

    user_id: str
    kicked_sessions: int
    online: bool


@dataclass(frozen=True)
class DailyActiveUsers:
    """How many users were active on one day of the stats time zone."""

    day: date
    active_users: int


@dataclass(frozen=True)
class WeeklyStats:
    """Seven days ending on end_date: each day's active users, the users active on any
    day, on every day, and on end_date but not the day before."""

    start_date: date
    end_date: date
    days: tuple[DailyActiveUsers, ...]
    unique_users: int
    active_every_day: int
    new_on_end_date: int


@dataclass(frozen=True)
class Lease:
    """A process's lease in one shard: the sessions it holds there live while it renews it
    (lua/renew_lease.lua). `token` is the process's own, the same in every shard."""

    shard: int
    slot: int
    token: str


@dataclass(frozen=True)
class HeldSession:
    """A connection-bound session as its holder knows it: the generation tells this holder
    from one that replaced it; it lives under `lease`."""

    user_id: str
    session_id: str
    generation: int
    lease: Lease


@dataclass(frozen=True)
class OpenedSession:
    """A connection-bound session just opened: held since `at`."""

    held: HeldSession
    at: datetime


@dataclass(frozen=True)
class SweepResult:
    """What one sweep did: users gone offline, users forgotten, users online now, and users
    whose sessions under a lapsed lease were ended."""

    offline: int
    purged: int
    online: int
    lapsed: int = 0


@dataclass(frozen=True)
class HeldPlaceSession:
    """A place session as its holder knows it: the generation tells this holder from one that
    replaced it; it lives under `lease`."""

    place_id: str
    user_id: str
    session_id: str
    generation: int
    lease: Lease


@dataclass(frozen=True)
class OpenedPlaceSession:
    """A place session just opened (or taken over from another holder), in the place since
    `joined_at`."""

    held: HeldPlaceSession
    joined_at: datetime


@dataclass(frozen=True)
class PlaceMember:
    """A session in a place; `state` is its JSON text, None when it has none."""

    place_id: str
    user_id: str
    session_id: str
    joined_at: datetime
    state: str | None
    # Where it stands in the place's list (its cursor): -(joined, ms).
    position: int


@dataclass(frozen=True)
class PlacePage:
    """A page of a place's sessions, most recently joined first; end_cursor is None for an
    empty page."""

    total_count: int
    users: int
    nodes: tuple[PlaceMember, ...]
    has_next_page: bool
    end_cursor: str | None
    # The number of the place's last event that the page reflects (PublishedPlaceEvent).
    sequence: int = 0


@dataclass(frozen=True)
class PlaceCount:
    place_id: str
    sessions: int
    users: int
