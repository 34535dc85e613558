"""Users spread over shards: the store the service uses.

Shard i is a PresenceStore whose keys carry the hash tag `{i}`, so each of its script calls
touches one Redis Cluster slot. A user lives in shard `crc32(UTF-8 id) % PRESENCE_SHARDS`, with
all of their own data. The friends of a user U are split by the friend's shard: those who live
in shard j are kept in shard j's `friends:U`, next to their presence, so that onlineFriends is
one single-shard script per shard.

This store routes each operation to the shards of its users, runs the shards' scripts in
parallel, and merges what they answer. Each script call is atomic in its shard; an operation
over several shards is one script per shard, not one atomic step.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta

from redis.asyncio import RedisCluster

from gql_presence.connection import AnyRedis, connections_in_use
from gql_presence.cursor import encode_cursor
from gql_presence.keys import Keys
from gql_presence.settings import Settings
from gql_presence.store import (
    SWEEP_BATCH,
    DailyActiveUsers,
    KickResult,
    ListedUser,
    Page,
    Presence,
    PresenceStore,
    SweepResult,
    WeeklyStats,
)
from gql_presence.timeline import to_ms
from gql_presence.validation import check_id, check_ids

ChangeLinks = Callable[[PresenceStore, Mapping[str, Sequence[str]]], Awaitable[dict[str, int]]]


def shard_of(user_id: str, shards: int) -> int:
    """The shard a user lives in: a hash of the id that every process and release agrees on
    (never Python's hash(), which differs between processes). An id that is not valid text
    still hashes, so that the shard's own check refuses it with its usual message."""
    return zlib.crc32(user_id.encode("utf-8", "surrogatepass")) % shards


class ShardedStore:
    """The presence store over PRESENCE_SHARDS shards, with the methods of PresenceStore.

    With one shard every call goes straight to it, so the results are those of PresenceStore."""

    def __init__(
        self,
        redis: AnyRedis,
        settings: Settings,
        observe_script: Callable[[str, float], None] | None = None,
    ) -> None:
        self._redis = redis
        self.shards = tuple(
            PresenceStore(redis, settings, Keys.of_shard(i), observe_script)
            for i in range(settings.shards)
        )

    def shard(self, user_id: str) -> PresenceStore:
        """The shard that holds the user's own data."""
        return self.shards[shard_of(user_id, len(self.shards))]

    def connections_in_use(self) -> int:
        return connections_in_use(self._redis)

    @property
    def events_channel(self) -> str:
        """The one pub/sub channel of every shard's events (a channel is not a key: on Redis
        Cluster, a classic PUBLISH reaches the subscribers of every node)."""
        return self.shards[0].events_channel

    async def load_scripts(self) -> None:
        """Every shard runs the same scripts, which Redis (each primary of a cluster) holds
        once: loading them for one shard loads them for all."""
        await self.shards[0].load_scripts()

    async def takes_changes(self) -> bool:
        return await self.shards[0].takes_changes()

    def placement(self) -> dict[str, list[int]]:
        """Which shards each master of a Redis Cluster serves, by the slot of their hash tag
        (empty on a single Redis). Call once the client knows the cluster (after a call)."""
        if not isinstance(self._redis, RedisCluster):
            return {}
        placement: dict[str, list[int]] = {n.name: [] for n in self._redis.get_primaries()}
        for i in range(len(self.shards)):
            node = self._redis.get_node_from_key(Keys.of_shard(i).online)
            if node is not None:
                placement.setdefault(node.name, []).append(i)
        return placement

    # --- one user: their shard ----------------------------------------------------------

    async def touch(
        self, user_id: str, session_id: str | None = None, at: datetime | None = None
    ) -> Presence:
        return await self.shard(user_id).touch(user_id, session_id, at)

    async def kick(self, user_id: str, session_id: str | None = None) -> KickResult:
        return await self.shard(user_id).kick(user_id, session_id)

    async def presence(self, user_id: str) -> Presence:
        return await self.shard(user_id).presence(user_id)

    async def take_token(self, caller: str, rate: float, burst: int) -> int:
        """Rate-limit buckets are not users' data: they all live in shard 0."""
        return await self.shards[0].take_token(caller, rate, burst)

    # --- many users: grouped by shard -------------------------------------------------------

    async def touch_many(self, user_ids: Sequence[str]) -> int:
        """One script per shard that holds any of the users, in parallel."""
        users = check_ids(user_ids, "userIds")
        groups = self._by_shard(users)
        recorded = await asyncio.gather(*(self.shards[i].touch_many(g) for i, g in groups.items()))
        return sum(recorded)

    async def presence_many(self, user_ids: Sequence[str]) -> list[Presence]:
        """The presence of each user, in the order given: one read per shard."""
        groups = self._by_shard(user_ids)
        answers = await asyncio.gather(
            *(self.shards[i].presence_many(g) for i, g in groups.items())
        )
        found = {p.user_id: p for answer in answers for p in answer}
        return [found[user_id] for user_id in user_ids]

    def _by_shard(self, user_ids: Iterable[str]) -> dict[int, list[str]]:
        groups: dict[int, list[str]] = {}
        for user_id in dict.fromkeys(user_ids):
            groups.setdefault(shard_of(user_id, len(self.shards)), []).append(user_id)
        return groups

    # --- lists: a page from every shard, merged ---------------------------------------------

    async def online_users(self, first: int = 50, after: str | None = None) -> Page:
        return await self._merged(lambda shard: shard.online_users(first, after), first)

    async def online_friends(self, user_id: str, first: int = 50, after: str | None = None) -> Page:
        """Each shard pages the friends who live in it (an empty set answers at once)."""
        return await self._merged(lambda shard: shard.online_friends(user_id, first, after), first)

    async def active_in_range(
        self, start: datetime, end: datetime, first: int = 50, after: str | None = None
    ) -> Page:
        return await self._merged(
            lambda shard: shard.active_in_range(start, end, first, after), first
        )

    async def _merged(
        self, page_of: Callable[[PresenceStore], Awaitable[Page]], first: int
    ) -> Page:
        """Every shard pages its users from the same cursor position, (lastSeen, userId): as
        a user lives in one shard, the first `first` users after that position over all shards
        are among the first `first` of some shard. The cursor stays the position of the last
        user listed, so it means the same whatever shard that user lives in."""
        if len(self.shards) == 1:
            return await page_of(self.shards[0])
        pages = await asyncio.gather(*map(page_of, self.shards))
        rows = sorted((node for page in pages for node in page.nodes), key=_position)
        nodes = tuple(rows[:first])
        return Page(
            total_count=sum(page.total_count for page in pages),
            nodes=nodes,
            has_next_page=len(rows) > first or any(page.has_next_page for page in pages),
            end_cursor=encode_cursor(*_position(nodes[-1])) if nodes else None,
        )

    async def weekly_stats(self, end_date: date | None = None) -> WeeklyStats:
        """The sum of every shard's figures: exact, as each user is counted in one shard."""
        if len(self.shards) == 1:
            return await self.shards[0].weekly_stats(end_date)
        if end_date is None:
            end_date = await self.shards[0].today()
        parts = await asyncio.gather(*(shard.weekly_stats(end_date) for shard in self.shards))
        start_date = end_date - timedelta(days=6)
        return WeeklyStats(
            start_date=start_date,
            end_date=end_date,
            days=tuple(
                DailyActiveUsers(
                    start_date + timedelta(days=i), sum(p.days[i].active_users for p in parts)
                )
                for i in range(7)
            ),
            unique_users=sum(p.unique_users for p in parts),
            active_every_day=sum(p.active_every_day for p in parts),
            new_on_end_date=sum(p.new_on_end_date for p in parts),
        )

    # --- friends: each link kept in the friend's shard --------------------------------------

    async def friends(self, user_id: str) -> list[str]:
        parts = await asyncio.gather(*(shard.friends(user_id) for shard in self.shards))
        return sorted({friend for part in parts for friend in part})

    async def add_friends(
        self, user_id: str, friend_ids: Sequence[str], mutual: bool = True
    ) -> int:
        return await self._change_friends(
            PresenceStore.add_friend_links, user_id, friend_ids, mutual
        )

    async def remove_friends(
        self, user_id: str, friend_ids: Sequence[str], mutual: bool = True
    ) -> int:
        return await self._change_friends(
            PresenceStore.remove_friend_links, user_id, friend_ids, mutual
        )

    async def _change_friends(
        self, change: ChangeLinks, user_id: str, friend_ids: Sequence[str], mutual: bool
    ) -> int:
        """The link user → f goes to f's shard, as friends:user; with mutual, f → user goes to
        the user's shard, as friends:f. One script per shard written, in parallel."""
        check_id(user_id, "userId")
        others = [f for f in check_ids(friend_ids, "friendIds") if f != user_id]
        if not others:
            return 0
        count = len(self.shards)
        links: dict[int, dict[str, list[str]]] = {}
        if mutual:
            home = links.setdefault(shard_of(user_id, count), {})
            for other in others:
                home[other] = [user_id]
        for other in others:
            # After the reverse links: in one shard, the user's FRIENDS event comes last.
            owners = links.setdefault(shard_of(other, count), {})
            owners.setdefault(user_id, []).append(other)
        changed = await asyncio.gather(
            *(change(self.shards[i], owners) for i, owners in links.items())
        )
        return sum(part.get(user_id, 0) for part in changed)

    # --- upkeep ------------------------------------------------------------------------------

    async def sweep(self, batch: int = SWEEP_BATCH) -> SweepResult:
        """Sweeps every shard, summing what they did: a sum of a full batch or more makes the
        sweeper sweep again at once, as it may be one shard's full batch."""
        parts = await asyncio.gather(*(shard.sweep(batch) for shard in self.shards))
        return SweepResult(
            offline=sum(p.offline for p in parts),
            purged=sum(p.purged for p in parts),
            online=sum(p.online for p in parts),
        )


def _position(node: ListedUser) -> tuple[int, str]:
    """Where a user stands in every list: the score of the shards' sorted sets, -(lastSeen ms),
    then the id, whose order as text is Redis's order of its UTF-8 bytes."""
    return -to_ms(node.last_seen), node.user_id
