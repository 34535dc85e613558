"""The presence store: one facade, PresenceStore, over shards that each run one Lua script
per operation. Callers use what this module exports; the rest is the store's own."""

from gql_presence.store.keys import Keys
from gql_presence.store.models import (
    DailyActiveUsers,
    HeldPlaceSession,
    HeldSession,
    KickResult,
    Lease,
    ListedUser,
    OpenedPlaceSession,
    OpenedSession,
    Page,
    PlaceCount,
    PlaceMember,
    PlacePage,
    Presence,
    Session,
    SweepResult,
    WeeklyStats,
)
from gql_presence.store.presence import (
    MAX_PERSISTED_DOCUMENTS,
    REFRESH_BATCH,
    SWEEP_BATCH,
    PresenceStore,
    shard_of,
)
from gql_presence.store.validation import (
    MAX_DOCUMENT_BYTES,
    MAX_ID_LENGTH,
    MAX_IDS_PER_CALL,
    check_id,
    check_ids,
    utf8_bytes,
)
from gql_presence.store.wire import EventKind, PublishedEvent, read_events

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_IDS_PER_CALL",
    "MAX_ID_LENGTH",
    "MAX_PERSISTED_DOCUMENTS",
    "REFRESH_BATCH",
    "SWEEP_BATCH",
    "DailyActiveUsers",
    "EventKind",
    "HeldPlaceSession",
    "HeldSession",
    "Keys",
    "KickResult",
    "Lease",
    "ListedUser",
    "OpenedPlaceSession",
    "OpenedSession",
    "Page",
    "PlaceCount",
    "PlaceMember",
    "PlacePage",
    "Presence",
    "PresenceStore",
    "PublishedEvent",
    "Session",
    "SweepResult",
    "WeeklyStats",
    "check_id",
    "check_ids",
    "read_events",
    "shard_of",
    "utf8_bytes",
]
