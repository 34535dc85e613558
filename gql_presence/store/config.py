"""What the store needs to know of the deployment's settings.

The service's Settings (gql_presence/settings/) has all of these; the store asks only for
this shape, so that it depends on nothing above itself."""

from __future__ import annotations

from typing import Protocol
from zoneinfo import ZoneInfo


class StoreSettings(Protocol):
    @property
    def shards(self) -> int: ...  # PRESENCE_SHARDS
    @property
    def window_ms(self) -> int: ...  # how long a touch keeps a session online
    @property
    def retention_ms(self) -> int: ...  # how long last-seen times and activity are kept
    @property
    def analytics_ms(self) -> int: ...  # how long online time, weeks and months are kept
    @property
    def revoke_ms(self) -> int: ...  # how long a kicked session id stays refused
    @property
    def feed_retention_ms(self) -> int: ...  # how long the feed keeps a change
    @property
    def feed_max_changes(self) -> int: ...  # how many changes the feed keeps per shard
    @property
    def connection_ttl_ms(self) -> int: ...  # how long a held session lives unrenewed
    @property
    def stats_zone(self) -> ZoneInfo: ...  # the time zone whose days weeklyStats counts
    @property
    def hourly_ms(self) -> int: ...  # how long hourly activity is kept
    @property
    def cursor_secret(self) -> str | None: ...  # keys page cursors' tags; None: Redis's
    @property
    def empty_place_ttl_ms(self) -> int: ...  # how long an emptied place's sequence is kept
    @property
    def max_sessions(self) -> int: ...  # the most live sessions of one user, and in one place
    @property
    def max_friends(self) -> int: ...  # the most friends one user's friend set may hold
