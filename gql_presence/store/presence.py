"""The presence store the service uses: users spread over shards, behind one facade.

Shard i's keys carry the hash tag `{i}`, so each of its script calls touches one Redis
Cluster slot. A user lives in shard `crc32(UTF-8 id) % PRESENCE_SHARDS`, with all of their own
data (keys.shard_of); a place lives in the shard of its id.

The store checks every input once, routes each operation to the shards of its users, runs
the shards' scripts in parallel, and merges what they answer. Each script call is atomic in
its shard; an operation over several shards is one script per shard, not one atomic step.
It knows Redis and the rules of docs/semantics.md, and nothing of GraphQL.

This module holds presence and statuses itself, and hands the rest to the modules named for
what they hold: friends.py, places.py, sessions.py (held presence sessions), leases.py (this
process's leases), lists.py (paged lists and weekly stats, merged over shards), upkeep.py
(the sweep), deployment.py (the deployment's singletons) and channels.py (pub/sub channels).
Each builds its script calls by the names of the scripts' headers (shard.py) and reads the
replies (replies.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import date, datetime

from redis.asyncio import RedisCluster

from gql_presence.store.analytics import Analytics
from gql_presence.store.channels import Routes
from gql_presence.store.client import AnyRedis, connections_in_use
from gql_presence.store.config import StoreSettings
from gql_presence.store.days import local_now_ms, to_ms
from gql_presence.store.deployment import Deployment
from gql_presence.store.errors import BadInputError
from gql_presence.store.feed import ChangePage, EventCursors, Feed, Replay
from gql_presence.store.friends import Friends
from gql_presence.store.keys import shard_of
from gql_presence.store.leases import Leases
from gql_presence.store.lists import Lists
from gql_presence.store.models import (
    ChosenStatus,
    HeldPlaceSession,
    HeldSession,
    KickResult,
    Lease,
    OnlineFilter,
    OpenedPlaceSession,
    OpenedSession,
    Page,
    PayFor,
    PlaceCount,
    PlaceMember,
    PlacePage,
    Presence,
    SweepResult,
    Visibility,
    WeeklyStats,
)
from gql_presence.store.online_time import OnlineTime
from gql_presence.store.places import Places
from gql_presence.store.publishing import Publish
from gql_presence.store.replies import PresenceReply, presence_of
from gql_presence.store.scripts import ScriptName, Scripts
from gql_presence.store.sessions import Sessions
from gql_presence.store.shard import Shard, by_shard, guarded, named
from gql_presence.store.statuses import change_status
from gql_presence.store.upkeep import sweep
from gql_presence.store.validation import (
    EXPIRES_NOT_AHEAD,
    MAX_EMOJI,
    MAX_FUTURE_MS,
    MAX_STATUS_TEXT,
    check_at,
    check_device,
    check_id,
    check_ids,
    check_shown_text,
)
from gql_presence.store.webhooks import Webhooks

DEFAULT_SESSION = "default"
SWEEP_BATCH = 1000
# Users and place sessions of lapsed leases ended per sweep call: ending one takes about a
# dozen commands (some 60 µs of Redis time), so a call of 100 holds Redis for a few ms, where
# 1,000 held it for 60 to 170 ms (bench/RESULTS.md, "Sessions under process leases").
LAPSED_BATCH = 100
# The most users one touch_many script call records. Redis 6.2's Lua hashes only about 32
# bytes of a longer string when it makes it, so ids of 128 characters that differ only in the
# bytes it skips share one chain of its string table, and each id the script reads walks
# every id read before it: 10,000 such ids held Redis for a second and more. A few hundred per
# call keep a call within a few milliseconds, and other clients are served between calls.
TOUCH_MANY_BATCH = 250


class PresenceStore:
    """The presence store over PRESENCE_SHARDS shards. With one shard every call goes to it.
    It holds presence, statuses and friends itself, and hands the rest to the modules named
    for what they hold: places, held sessions, this process's leases, lists, and the
    deployment's singletons."""

    def __init__(
        self,
        redis: AnyRedis,
        settings: StoreSettings,
        observe_script: Callable[[str, int, float], None] | None = None,
    ) -> None:
        self._redis = redis
        self._retention_ms = settings.retention_ms
        self._scripts = Scripts.register(redis)
        on_cluster = isinstance(redis, RedisCluster)
        self._shards = tuple(
            Shard(
                redis,
                settings,
                i,
                self._scripts,
                observe_script,
                learn_publish=self.choose_publish if on_cluster else None,
            )
            for i in range(settings.shards)
        )
        self._deployment = Deployment(self._shards, settings.cursor_secret)
        self._leases = Leases(self._shards)
        self._places = Places(self._shards, self._leases, self._deployment)
        self._sessions = Sessions(self._shards, self._leases, self._places)
        self._lists = Lists(self._shards, self._deployment)
        self._friends = Friends(self._shards)
        self._feed = Feed(self._shards, self._deployment)
        # The deployment's webhooks, kept with its other singletons in shard 0.
        self.webhooks = Webhooks(self._shards[0], self._feed)
        self.analytics = Analytics(self._shards)
        self.online_time = OnlineTime(self._shards)

    @property
    def feed(self) -> Feed:
        """The feed of every shard, as the webhooks' deliveries read it."""
        return self._feed

    def _shard(self, user_id: str) -> Shard:
        """The shard that holds the user's own data."""
        return self._shards[shard_of(user_id, len(self._shards))]

    def connections_in_use(self) -> int:
        return connections_in_use(self._redis)

    async def choose_publish(self) -> None:
        """At start-up: how events are published (Deployment.choose_publish)."""
        await self._deployment.choose_publish()

    @property
    def sharded_events(self) -> bool:
        """Whether events are published with sharded pub/sub (once choose_publish returned)."""
        if self._deployment.publish is None:
            raise RuntimeError("choose_publish() tells how events are published on a cluster")
        return self._deployment.publish is Publish.SHARDED

    # --- the channels a process subscribes to (channels.Routes) ------------------------------

    @property
    def _routes(self) -> Routes:
        return Routes(len(self._shards), self.sharded_events)

    @property
    def event_routes(self) -> int:
        return self._routes.count

    def route_of(self, user_or_place_id: str) -> int:
        return self._routes.route_of(user_or_place_id)

    def route_of_channel(self, channel: bytes) -> int:
        return self._routes.route_of_channel(channel)

    @property
    def events_channel(self) -> str:
        """The channel of every user's events, of every shard, with classic PUBLISH."""
        return self._shards[0].channels.events

    def every_user_channel(self, route: int) -> str:
        return self._routes.every_user(route)

    def quiet_channel(self, route: int) -> str:
        return self._routes.quiet(route)

    def user_events_channel(self, user_id: str) -> str:
        return self._shard(user_id).channels.user_events(user_id)

    def friend_set_channels(self, user_id: str) -> list[str]:
        return self._routes.friend_set(user_id)

    def place_events_channel(self, place_id: str) -> str:
        return self._shard(place_id).channels.place_events(place_id)

    # --- the store's Redis ---------------------------------------------------------------------

    async def load_scripts(self) -> None:
        """Makes sure Redis holds every script, loading what it lacks: at start-up, so that a
        broken script fails the boot, and for readiness. Every shard runs the same scripts,
        which Redis (each primary of a cluster) holds once. Raises StoreUnavailableError when
        Redis cannot be reached."""
        await guarded(self._scripts.load(self._redis))

    async def make_cursor_secret(self) -> None:
        await self._deployment.make_cursor_secret()

    async def takes_changes(self) -> bool:
        """Whether the Redis answering is a primary (a replica refuses every change); on Redis
        Cluster, whose client sends changes to primaries only, whether every slot is served."""
        if isinstance(self._redis, RedisCluster):
            cluster = await guarded(self._redis.cluster_info())
            return bool(cluster.get("cluster_state") == "ok")
        replication = await guarded(self._redis.info("replication"))
        return bool(replication.get("role") == "master")

    async def today(self) -> date:
        """Today in the stats time zone, by the Redis server's clock."""
        return await self._lists.today()

    def placement(self) -> dict[str, list[int]]:
        """Which shards each master of a Redis Cluster serves, by the slot of their hash tag
        (empty on a single Redis). Call once the client knows the cluster (after a call)."""
        if not isinstance(self._redis, RedisCluster):
            return {}
        placement: dict[str, list[int]] = {n.name: [] for n in self._redis.get_primaries()}
        for shard in self._shards:
            node = self._redis.get_node_from_key(shard.keys.online)
            if node is not None:
                placement.setdefault(node.name, []).append(shard.index)
        return placement

    # --- one user: their shard ----------------------------------------------------------

    async def touch(
        self,
        user_id: str,
        session_id: str | None = None,
        at: datetime | None = None,
        device: str | None = None,
        *,
        idle: bool = False,
    ) -> PresenceReply:
        """Activity of one session (`idle`: of a user away from it); `device`, if given,
        replaces what the session said it is. The presence after it, decoded as it is read."""
        check_id(user_id, "userId")
        session = DEFAULT_SESSION if session_id is None else check_id(session_id, "sessionId")
        check_device(device)
        at_ms = None if at is None else check_at(to_ms(at), local_now_ms(), self._retention_ms)
        shard = self._shard(user_id)
        k = shard.keys
        days, boundaries = shard.days_around(at_ms)
        await shard.announcing()
        reply = await shard.run(
            ScriptName.TOUCH,
            named(
                last_seen=k.last_seen,
                online=k.online,
                sessions=k.sessions(user_id),
                revoked=k.revoked(user_id),
                user_index=k.user_index,
                next_index=k.next_index,
                free_indexes=k.free_indexes,
                days=days,
                conn=k.conn(user_id),
                leases=k.leases,
            ),
            named(
                user_id=user_id,
                session_id=session,
                at_ms="" if at_ms is None else at_ms,
                shard=shard.options,
                max_future_ms=MAX_FUTURE_MS,
                boundaries=boundaries,
                device=device or "",
                idle=int(idle),
            ),
        )
        return PresenceReply(user_id, reply[1])

    async def touch_many(self, user_ids: Sequence[str], at: datetime | None = None) -> int:
        """One script per shard of the users, in parallel; `at` backfills activity alone."""
        at_ms = None if at is None else check_at(to_ms(at), local_now_ms(), self._retention_ms)
        groups = by_shard(check_ids(user_ids, "userIds"), len(self._shards))
        recorded = await asyncio.gather(
            *(self._touch_many(self._shards[i], g, at_ms) for i, g in groups.items())
        )
        return sum(recorded)

    async def _touch_many(self, shard: Shard, user_ids: Sequence[str], at_ms: int | None) -> int:
        """One script call per TOUCH_MANY_BATCH users, all sent at once."""
        k = shard.keys
        days, boundaries = shard.days_around(at_ms)
        await shard.announcing()
        keys = named(
            last_seen=k.last_seen,
            online=k.online,
            user_index=k.user_index,
            next_index=k.next_index,
            free_indexes=k.free_indexes,
            days=days,
            leases=k.leases,
        )
        # Sorted, the users' sorted-set entries are written next to each other, which takes
        # Redis a third less time than in the caller's order.
        ordered = sorted(user_ids)
        calls = [
            (
                keys,
                # The script derives each user's keys from the prefixes: passing 2 keys per
                # user cost more than the rest of the call.
                named(
                    shard=shard.options,
                    boundaries=boundaries,
                    # One argument instead of one per user: ids hold no control characters.
                    user_ids="\n".join(ordered[first : first + TOUCH_MANY_BATCH]),
                    at_ms="" if at_ms is None else at_ms,
                ),
            )
            for first in range(0, len(ordered), TOUCH_MANY_BATCH)
        ]
        replies = await shard.run_each(ScriptName.TOUCH_MANY, calls)
        return sum(int(recorded) for recorded in replies)

    async def kick(self, user_id: str, session_id: str | None = None) -> KickResult:
        check_id(user_id, "userId")
        if session_id is not None:
            check_id(session_id, "sessionId")
        shard = self._shard(user_id)
        k = shard.keys
        await shard.announcing()
        kicked, online = await shard.run(
            ScriptName.KICK,
            named(
                online=k.online,
                sessions=k.sessions(user_id),
                revoked=k.revoked(user_id),
                conn=k.conn(user_id),
                last_seen=k.last_seen,
                user_index=k.user_index,
                leases=k.leases,
            ),
            named(
                user_id=user_id,
                session_id=session_id or "",
                shard=shard.options,
            ),
        )
        return KickResult(user_id, int(kicked), bool(online))

    # --- held sessions (sessions.py) and this process's leases (leases.py) --------------------

    async def open_session(
        self, user_id: str, session_id: str, device: str | None = None
    ) -> OpenedSession:
        return await self._sessions.open(user_id, session_id, device)

    async def close_session(self, held: HeldSession) -> bool:
        return await self._sessions.close(held)

    async def check_sessions(
        self, held: Sequence[HeldSession | HeldPlaceSession]
    ) -> list[HeldSession | HeldPlaceSession]:
        return await self._sessions.check(held)

    async def session_revoked(self, held: HeldSession | HeldPlaceSession) -> bool:
        return await self._sessions.revoked(held)

    @property
    def leases(self) -> tuple[Lease, ...]:
        """The leases this process holds now, one per shard it has held sessions in."""
        return self._leases.held

    async def renew_leases(self, at: datetime | None = None) -> list[Lease]:
        """Renews every lease of this process (Leases.renew); `at` backfills the renewal."""
        at_ms = None if at is None else check_at(to_ms(at), local_now_ms(), self._retention_ms)
        return await self._leases.renew(at_ms)

    async def release_leases(self) -> None:
        await self._leases.release()

    # --- places (places.py) ----------------------------------------------------------------

    async def open_place_session(
        self, place_id: str, user_id: str, session_id: str, state: object = None
    ) -> OpenedPlaceSession:
        return await self._places.open_session(place_id, user_id, session_id, state)

    async def close_place_session(self, held: HeldPlaceSession) -> bool:
        return await self._places.close_session(held)

    async def set_place_state(
        self, place_id: str, user_id: str, session_id: str, state: object
    ) -> PlaceMember:
        return await self._places.set_state(place_id, user_id, session_id, state)

    async def flush_planned(self) -> None:
        await self._places.flush_planned()

    async def place_members(
        self, place_id: str, first: int = 50, after: str | None = None
    ) -> PlacePage:
        return await self._places.members(place_id, first, after)

    async def place_counts(self, place_ids: Sequence[str]) -> list[PlaceCount]:
        return await self._places.counts(place_ids)

    # --- the feed (lua/feed_page.lua) --------------------------------------------------------

    async def changes(
        self,
        after: str | None,
        first: int,
        kinds: Sequence[str] | None = None,
        places: Sequence[str] | None = None,
    ) -> ChangePage:
        return await self._feed.changes(after, first, kinds, places)

    async def feed_cursor(self) -> str:
        return await self._feed.cursor()

    async def feed_replay(
        self,
        after: str,
        users: Collection[str] | None = None,
        place_id: str | None = None,
        reading_on: PayFor | None = None,
    ) -> Replay:
        """The changes after `after` of these users (every user's when None) or of the
        place, for a resume (store/feed.py Feed.replay); `reading_on` paid before each page
        read after a shard's first."""
        return await self._feed.replay(after, users, place_id, reading_on)

    async def event_cursors(self) -> EventCursors:
        """What seals events' cursors synchronously, each event's once."""
        return await self._feed.event_cursors()

    async def feed_present(self, user_or_place_id: str) -> str:
        """The feed's present in the shard of this user or place (an entry id): taken
        before a read, no change the read misses is before it."""
        return await self._feed.present(user_or_place_id)

    async def event_cursor(self, user_or_place_id: str, feed_id: str) -> str:
        """The cursor of an event of this user or place, from its entry's id."""
        return await self._feed.event_cursor(shard_of(user_or_place_id, len(self._shards)), feed_id)

    # --- how users appear: statuses (lua/set_status.lua) -------------------------------------

    async def set_status(self, user_id: str, chosen: ChosenStatus) -> Presence:
        """The user's choice of status; their custom status is left as it is."""
        check_id(user_id, "userId")
        return await change_status(self._shard(user_id), user_id, "chosen", ChosenStatus(chosen))

    async def set_custom_status(
        self,
        user_id: str,
        text: str | None,
        emoji: str | None = None,
        expires_at: datetime | None = None,
    ) -> Presence:
        """Sets the user's custom status; text None clears it (and takes no emoji or end)."""
        check_id(user_id, "userId")
        if text is None:
            return await change_status(self._shard(user_id), user_id, "custom", "", "", "")
        check_shown_text(text, "text", MAX_STATUS_TEXT)
        if emoji is not None:
            check_shown_text(emoji, "emoji", MAX_EMOJI)
        expires_ms = None if expires_at is None else to_ms(expires_at)
        if expires_ms is not None and not (
            local_now_ms() < expires_ms <= local_now_ms() + self._retention_ms
        ):
            raise BadInputError(EXPIRES_NOT_AHEAD)
        return await change_status(
            self._shard(user_id),
            user_id,
            "custom",
            text,
            emoji or "",
            "" if expires_ms is None else expires_ms,
        )

    async def set_last_seen_visibility(self, user_id: str, visible_to: Visibility) -> Presence:
        check_id(user_id, "userId")
        return await change_status(self._shard(user_id), user_id, "visible", Visibility(visible_to))

    async def set_session_idle(self, user_id: str, session_id: str, *, idle: bool) -> Presence:
        """Marks one live session idle (its user away from it) or active again."""
        check_id(user_id, "userId")
        check_id(session_id, "sessionId")
        return await change_status(self._shard(user_id), user_id, "idle", session_id, int(idle))

    # --- reading presence --------------------------------------------------------------------

    async def presence(self, user_id: str, reader: str | None = None) -> Presence:
        """The user's presence as `reader` (an end user's id; None for a backend) may see it."""
        check_id(user_id, "userId")
        (found,) = await self._presence_of(self._shard(user_id), [user_id])
        if reader is None or reader == user_id:
            return found
        return (await self._seen_by([found], reader))[0]

    async def presence_many(
        self, user_ids: Sequence[str], reader: str | None = None
    ) -> list[Presence]:
        """The presence of each user, in the order given, as `reader` may see it: one read
        per shard, each read at one moment."""
        groups = by_shard(user_ids, len(self._shards))
        answers = await asyncio.gather(
            *(self._presence_of(self._shards[i], g) for i, g in groups.items())
        )
        found = {p.user_id: p for answer in answers for p in answer}
        if reader is not None:
            seen = await self._seen_by(list(found.values()), reader)
            found = {p.user_id: p for p in seen}
        return [found[user_id] for user_id in user_ids]

    async def _presence_of(self, shard: Shard, user_ids: Sequence[str]) -> list[Presence]:
        """The presence of each user of the shard, in the order given, read at one moment, as
        backends and the user see it."""
        k = shard.keys
        reply = await shard.run(
            ScriptName.PRESENCE,
            named(last_seen=k.last_seen, online=k.online, leases=k.leases),
            named(
                shard=shard.options,
                user_ids=list(user_ids),
            ),
        )
        return [presence_of(user_id, e) for user_id, e in zip(user_ids, reply, strict=True)]

    async def _seen_by(self, found: Sequence[Presence], reader: str) -> list[Presence]:
        """What the end user `reader` may see of each presence (Presence.seen_by)."""
        # Those who let their friends see lastSeen: is the reader one of them?
        owners = [
            p.user_id for p in found if p.visible_to is Visibility.FRIENDS and p.user_id != reader
        ]
        friend_of = await self.in_friend_sets_of(reader, owners)
        return [p.seen_by(reader, reader_is_friend=p.user_id in friend_of) for p in found]

    # --- the deployment's singletons (deployment.py) ------------------------------------------

    async def take_token(
        self, caller: str, rate: float, burst: int, cost: int = 1, *, owed: bool = False
    ) -> int:
        return await self._deployment.take_token(caller, rate, burst, cost, owed=owed)

    async def take_tokens(
        self, caller: str, rate: float, burst: int, admissions: int
    ) -> tuple[int, int]:
        """Admits `admissions` operations of the caller at once, each taking one token in
        turn while one is there: how many were granted (the first ones), and how many ms
        until a token is there for the others (0 when none is left out)."""
        return await self._deployment.take_tokens(caller, rate, burst, admissions=admissions)

    async def persist_document(self, sha256: str, document: str) -> None:
        await self._deployment.persist_document(sha256, document)

    async def persisted_document(self, sha256: str) -> str | None:
        return await self._deployment.persisted_document(sha256)

    async def refresh_documents(self, sha256s: Sequence[str]) -> int:
        return await self._deployment.refresh_documents(sha256s)

    # --- lists (lists.py) ----------------------------------------------------------------------

    async def online_users(
        self,
        first: int = 50,
        after: str | None = None,
        reader: str | None = None,
        *,
        by_online_since: bool = False,
        kept: OnlineFilter | None = None,
        count: bool = True,
        walking_on: PayFor | None = None,
    ) -> Page:
        """The online users, most recent activity first, or (by_online_since) most recently
        come online first; for an end user `reader`, without those who chose INVISIBLE. With
        `kept`, only those who match it (totalCount counted only when `count`; `walking_on`
        paid before each further call its walk takes)."""
        seers: Sequence[str] = ()
        if reader is not None and kept is not None and kept.by_online_since:
            # Who may show the reader their onlineSince: the reader's friends (a bounded set)
            # who have the reader in their own friend set.
            seers = sorted(await self.in_friend_sets_of(reader, await self.friends(reader)))
        return await self._lists.online_users(
            first,
            after,
            hide=reader is not None,
            by_online_since=by_online_since,
            kept=kept,
            count=count,
            seers=seers,
            walking_on=walking_on,
        )

    async def online_friends(
        self, user_id: str, first: int = 50, after: str | None = None, reader: str | None = None
    ) -> Page:
        """The user's friends online; for an end user `reader`, without those who chose
        INVISIBLE."""
        return await self._lists.online_friends(user_id, first, after, hide=reader is not None)

    async def active_in_range(
        self,
        start: datetime,
        end: datetime,
        first: int = 50,
        after: str | None = None,
        reader: str | None = None,
    ) -> Page:
        """Users by last activity in [start, end]; to an end user `reader`, those who chose
        INVISIBLE are listed (their activity counts) but offline."""
        return await self._lists.active_in_range(start, end, first, after, hide=reader is not None)

    async def weekly_stats(self, end_date: date | None = None) -> WeeklyStats:
        return await self._lists.weekly_stats(end_date)

    # --- friends (friends.py) --------------------------------------------------------------

    async def friends(self, user_id: str) -> list[str]:
        return await self._friends.of(user_id)

    async def in_friend_sets_of(self, user_id: str, owners: Iterable[str]) -> frozenset[str]:
        return await self._friends.in_sets_of(user_id, owners)

    async def friends_among(self, user_id: str, user_ids: Iterable[str]) -> set[str]:
        return await self._friends.among(user_id, user_ids)

    async def add_friends(
        self, user_id: str, friend_ids: Sequence[str], mutual: bool = True
    ) -> int:
        return await self._friends.change("SADD", user_id, friend_ids, mutual=mutual)

    async def remove_friends(
        self, user_id: str, friend_ids: Sequence[str], mutual: bool = True
    ) -> int:
        return await self._friends.change("SREM", user_id, friend_ids, mutual=mutual)

    # --- upkeep (upkeep.py) --------------------------------------------------------------------

    async def sweep(
        self, batch: int = SWEEP_BATCH, lapsed_batch: int = LAPSED_BATCH
    ) -> SweepResult:
        """Removes up to `batch` expired online entries and `batch` users past the retention,
        ends the sessions of up to `lapsed_batch` users and place sessions of lapsed leases,
        and announces up to `lapsed_batch` waiting place states a process did not announce in
        time, in each shard, summing what they did: a sum of a full batch or more makes the
        sweeper sweep again at once, as it may be one shard's full batch."""
        return await sweep(self._shards, batch, lapsed_batch)
