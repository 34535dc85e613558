"""What the store answers: plain frozen dataclasses, for the schema and every other caller."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from enum import StrEnum

# A caller's payment for work that grows past its first script call (a filtered page's walk,
# a resume's read of the feed): awaited before each further call of a shard, with the most
# entries that call may look at.
PayFor = Callable[[int], Awaitable[None]]


class Status(StrEnum):
    """How a user appears to the one who reads it (SEMANTICS, "Status")."""

    ONLINE = "ONLINE"
    AWAY = "AWAY"
    BUSY = "BUSY"
    INVISIBLE = "INVISIBLE"
    OFFLINE = "OFFLINE"


class ChosenStatus(StrEnum):
    AUTO = "AUTO"
    AWAY = "AWAY"
    BUSY = "BUSY"
    INVISIBLE = "INVISIBLE"


class Visibility(StrEnum):
    """Who may see a user's lastSeen and their sessions' times."""

    EVERYONE = "EVERYONE"
    FRIENDS = "FRIENDS"
    NOBODY = "NOBODY"


@dataclass(frozen=True)
class Session:
    """A live session: its id, its last activity, when it became live, and what its client
    said of itself and of its user (idle: away from it)."""

    session_id: str
    last_seen: datetime
    started_at: datetime | None = None
    idle: bool = False
    device: str | None = None


@dataclass(frozen=True)
class CustomStatus:
    text: str
    emoji: str | None
    expires_at: datetime | None


@dataclass(frozen=True)
class Presence:
    """A user's presence as one reader may see it: online while a session is live;
    last_seen is None once their last activity lies further back than the retention (or for
    a user never seen), or for a reader who may not see it. `chosen` and `visible_to` are
    None for a reader who may not see them (anyone but the user and backends)."""

    user_id: str
    online: bool
    last_seen: datetime | None
    sessions: tuple[Session, ...]
    status: Status = Status.OFFLINE
    custom: CustomStatus | None = None
    chosen: ChosenStatus | None = None
    visible_to: Visibility | None = None
    online_since: datetime | None = None
    # The lastSeen other end users see while the user is invisible: their last activity
    # before they chose it. None in what a reader other than the user sees.
    hidden_last_seen: datetime | None = None
    # How many of the user's changes were announced (lua/includes/feed.lua); None for a
    # reader other than the user and backends.
    version: int | None = 0

    def seen_by(self, reader: str | None, *, reader_is_friend: bool = False) -> Presence:
        """What `reader` (an end user's id; None for a backend) may see of this presence,
        as backends see it (SEMANTICS, "Status": invisibility, last-seen visibility);
        `reader_is_friend`: whether the reader is in this user's friend set."""
        if reader is None or reader == self.user_id:
            return self
        visible = self.visible_to
        may_see = visible is Visibility.EVERYONE or (
            visible is Visibility.FRIENDS and reader_is_friend
        )
        if self.chosen is ChosenStatus.INVISIBLE:
            shown = self.hidden_last_seen if may_see else None
            return Presence(self.user_id, online=False, last_seen=shown, sessions=(), version=None)
        hidden = {"chosen": None, "visible_to": None, "hidden_last_seen": None, "version": None}
        if may_see:
            return replace(self, **hidden)  # type: ignore[arg-type]
        return replace(self, last_seen=None, sessions=(), online_since=None, **hidden)  # type: ignore[arg-type]


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
class OnlineFilter:
    """Which online users a list keeps: those that match every field given (None: any)."""

    user_id_prefix: str | None = None
    device: str | None = None
    statuses: tuple[Status, ...] | None = None
    online_since_from: datetime | None = None
    online_since_to: datetime | None = None

    @property
    def given(self) -> bool:
        return any(
            value is not None
            for value in (
                self.user_id_prefix,
                self.device,
                self.statuses,
                self.online_since_from,
                self.online_since_to,
            )
        )

    @property
    def by_online_since(self) -> bool:
        return self.online_since_from is not None or self.online_since_to is not None


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
    """What one sweep did: users gone offline, users forgotten, users online now, users
    whose sessions under a lapsed lease were ended, custom statuses that ended, and waiting
    place states it took over from a process that did not announce them in time."""

    offline: int
    purged: int
    online: int
    lapsed: int = 0
    ended_statuses: int = 0
    flushed: int = 0


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
    # The place's version then: its events since its sequence began (lua/includes/places.lua).
    version: int = 0


@dataclass(frozen=True)
class PlaceCount:
    place_id: str
    sessions: int
    users: int


class ChangeKind(StrEnum):
    """Every kind of change the feed keeps: presence events, then place events."""

    ONLINE = "ONLINE"
    OFFLINE = "OFFLINE"
    KICKED = "KICKED"
    STATUS = "STATUS"
    JOINED = "JOINED"
    UPDATED = "UPDATED"
    LEFT = "LEFT"


@dataclass(frozen=True)
class WebhookAttempt:
    """One request to a webhook's URL, as it went."""

    at: datetime
    # The request's webhook-id: the same for every attempt of one batch.
    delivery_id: str
    changes: int
    # The HTTP status answered; None when no answer came.
    status: int | None
    # At most 1 KiB of the answer, or the connection's error; None when all went well.
    error: str | None
    duration_ms: float


@dataclass(frozen=True)
class Webhook:
    """A webhook of the deployment: where it delivers, what, and how far it has come."""

    id: str
    url: str
    kinds: tuple[ChangeKind, ...]
    # Place ids and prefixes ending in `*` whose place events it delivers; None: every place.
    places: tuple[str, ...] | None
    debounce_seconds: int
    enabled: bool
    # Why the service disabled it; None while enabled or when a backend disabled it.
    disabled_reason: str | None
    created_at: datetime
    # The cursor of the last change it acknowledged; None before the first.
    delivered_up_to: str | None
    # The last replay asked for (replay_id): the cursor after which to deliver again ("":
    # from the oldest retained change); None: none asked for.
    replay_after: str | None
    # Since when its requests have failed with no success between; None: not failing.
    failing_since: datetime | None
    # The most recent attempts, newest first.
    attempts: tuple[WebhookAttempt, ...]
    # Its signing secrets, newest first: the current one, and the one it had while that one
    # still signs beside it. Never shown after it is made, never logged.
    secrets: tuple[str, ...] = field(repr=False)
    # Its delivery in each shard of the feed, in the shards' order.
    progress: tuple[ShardProgress, ...] = ()
    # The id of the last replay asked for, which each shard's delivery takes once; "": none.
    replay_id: str = ""
    # Its settings as its HASH kept them when read (secrets among them), as
    # lua/advance_webhook.lua checks them: a delivery goes on from what it read only while
    # they are unchanged.
    settings_read: str = field(default="", repr=False, compare=False)

    @property
    def backlog(self) -> int:
        """Changes for it that wait to be delivered, as its deliveries last counted them."""
        return sum(shard.backlog for shard in self.progress)


@dataclass(frozen=True)
class ShardProgress:
    """A webhook's delivery of one shard's feed, as its deliveries keep it."""

    # The id of the last entry of the shard's feed that it has delivered (or passed over).
    position: str
    # Whether its delivery has moved `position` from where the webhook was made.
    moved: bool = False
    # The last entry of the batch being sent, which is sent again until acknowledged; "":
    # none is being sent.
    pending: str = ""
    # What the next batch says was missed (`{"after": c, "until": c}`, JSON); "": nothing.
    gap: str = ""
    # Entries after `position` that the debounce has decided about: "<id>" not sent, "<id>!"
    # sent as UPDATED.
    decided: tuple[str, ...] = ()
    # The replay (Webhook.replay_id) this shard's delivery last took.
    replay_id: str = ""
    # Changes waiting after `position`, as last counted (at most EXAMINED_PER_SHARD), and
    # the time of the oldest of them, ms (0: none).
    backlog: int = 0
    oldest_ms: int = 0
