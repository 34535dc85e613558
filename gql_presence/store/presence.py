"""The presence store the service uses: users spread over shards, behind one facade.

Shard i's keys carry the hash tag `{i}`, so each of its script calls touches one Redis
Cluster slot. A user lives in shard `crc32(UTF-8 id) % PRESENCE_SHARDS`, with all of their own
data. The friends of a user U are split by the friend's shard: those who live in shard j are
kept in shard j's `friends:U`, next to their presence, so that onlineFriends is one
single-shard script per shard.

The store checks every input once, routes each operation to the shards of its users, runs
the shards' scripts in parallel, and merges what they answer; it alone reads and makes page
cursors. Each script call is atomic in its shard; an operation over several shards is one
script per shard, not one atomic step. It knows Redis and the rules of docs/semantics.md, and
nothing of GraphQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta

from redis.asyncio import RedisCluster

from gql_presence.store.client import AnyRedis, connections_in_use
from gql_presence.store.config import StoreSettings
from gql_presence.store.cursor import Cursors
from gql_presence.store.cursor_secret import new_secret
from gql_presence.store.days import local_date, local_now_ms, to_ms
from gql_presence.store.errors import (
    BadInputError,
    LeaseLostError,
    PresenceError,
    SessionRevokedError,
    WritesRefusedError,
)
from gql_presence.store.keys import Keys, shard_of_name
from gql_presence.store.models import (
    ChosenStatus,
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
    SweepResult,
    Visibility,
    WeeklyStats,
)
from gql_presence.store.publishing import Publish, sharded_everywhere
from gql_presence.store.scripts import Scripts
from gql_presence.store.shard import (
    REVOKED_SESSION,
    LinkChange,
    Position,
    Shard,
    ShardPage,
    friend_set_full,
    guarded,
)
from gql_presence.store.validation import (
    EXPIRES_NOT_AHEAD,
    MAX_EMOJI,
    MAX_STATUS_TEXT,
    check_at,
    check_device,
    check_document,
    check_end_date,
    check_id,
    check_ids,
    check_page_size,
    check_place_ids,
    check_place_state,
    check_range,
    check_sha256,
    check_shown_text,
)

log = logging.getLogger("gql_presence")

DEFAULT_SESSION = "default"
SWEEP_BATCH = 1000
# Users and place sessions of lapsed leases ended per sweep call: ending one takes about a
# dozen commands (some 60 µs of Redis time), so a call of 100 holds Redis for a few ms, where
# 1,000 held it for 60 to 170 ms (bench/RESULTS.md, "Sessions under process leases").
LAPSED_BATCH = 100
# Automatic persisted queries kept at most: an app has tens to hundreds of documents, a few
# versions of it a few times that; each is at most MAX_DOCUMENT_BYTES (32 KiB of UTF-8), so
# Redis holds 32 MiB of documents at the very worst and well under 1 MiB for real apps.
MAX_PERSISTED_DOCUMENTS = 1000
# A registration counts as a use this long before it (lua/persist_document.lua): any caller
# may register documents, so a flood of them must forget first what nobody has used, not the
# documents in use, whose uses reach Redis up to 10 s late. Ten minutes: any document used
# within them outranks every registration; a new one still outranks those unused for longer.
REGISTERED_AGE_MS = 10 * 60 * 1000
# Documents refreshed per script call (refresh_documents): one ZMSCORE and one ZADD of 250
# members, about a millisecond of Redis time (1,000 took 2 to 5 ms; bench/persisted.py).
REFRESH_BATCH = 250
# Held sessions checked per script call (check_sessions): about three reads each, so a call
# blocks Redis for a millisecond or two at most.
CHECK_BATCH = 1000
# A waiting place state is announced this long after it is due by Redis's clock, which counts
# whole ms: never before, which would find it not yet due.
FLUSH_SLACK_S = 0.002

# A place session: (place_id, user_id, session_id).
PlaceSessionKey = tuple[str, str, str]


def shard_of(user_id: str, shards: int) -> int:
    """The shard a user lives in: a hash of the id that every process and release agrees on
    (never Python's hash(), which differs between processes). An id that is not valid text
    still hashes, so that the id's check refuses it with its usual message."""
    return zlib.crc32(user_id.encode("utf-8", "surrogatepass")) % shards


class PresenceStore:
    """The presence store over PRESENCE_SHARDS shards. With one shard every call goes to it."""

    def __init__(
        self,
        redis: AnyRedis,
        settings: StoreSettings,
        observe_script: Callable[[str, int, float], None] | None = None,
    ) -> None:
        self._redis = redis
        self._zone = settings.stats_zone
        self._retention_ms = settings.retention_ms
        self._max_friends = settings.max_friends
        self._scripts = Scripts.register(redis)
        # Without PRESENCE_CURSOR_SECRET, the deployment's own, read from Redis when first used.
        secret = settings.cursor_secret
        self._cursors = None if secret is None else Cursors(secret)
        # On a Redis Cluster, events are published as the deployment chose: its record is read
        # at start-up (choose_publish), or by the first change of a store that did not ask.
        on_cluster = isinstance(redis, RedisCluster)
        self._publish: Publish | None = None if on_cluster else Publish.CLASSIC
        self._choosing = asyncio.Lock()
        self._shards = tuple(
            Shard(
                redis,
                settings,
                Keys.of_shard(i),
                self._scripts,
                observe_script,
                learn_publish=self.choose_publish if on_cluster else None,
            )
            for i in range(settings.shards)
        )
        # This process's leases, one per shard it holds sessions in, taken when first needed.
        self._token = uuid.uuid4().hex
        self._leases: dict[int, Lease] = {}
        self._lease_locks = tuple(asyncio.Lock() for _ in self._shards)
        # The announcements of place states this process's calls left waiting, each at the
        # end of its session's interval; should this process die first, the sweep makes them.
        self._flushes: dict[PlaceSessionKey, asyncio.TimerHandle] = {}
        self._flushing: set[asyncio.Task[None]] = set()

    def _shard(self, user_id: str) -> Shard:
        """The shard that holds the user's own data."""
        return self._shards[shard_of(user_id, len(self._shards))]

    def connections_in_use(self) -> int:
        return connections_in_use(self._redis)

    async def choose_publish(self) -> None:
        """At start-up: how events are published, the same for every process of the
        deployment. On a Redis Cluster whose every master has sharded pub/sub, with SPUBLISH
        on channels of the publishing shard, so that an event stays on its shard's master
        instead of crossing the cluster bus to every node; else with classic PUBLISH. The
        deployment's first process chooses, and every later one follows its record
        (lua/choose_publish.lua). One Redis keeps classic PUBLISH and records nothing."""
        if not isinstance(self._redis, RedisCluster):
            return
        async with self._choosing:
            if self._publish is None:
                await self._choose_publish(self._redis)

    async def _choose_publish(self, cluster: RedisCluster) -> None:
        able = await guarded(sharded_everywhere(cluster))
        chosen = await self._shards[0].choose_publish(Publish.SHARDED if able else Publish.CLASSIC)
        if chosen is Publish.SHARDED and not able:
            raise RuntimeError(
                "this deployment publishes events with SPUBLISH (sharded pub/sub), which a "
                "master of the cluster lacks (Redis before 7.0): upgrade it, or stop every "
                f"process, set {Keys().publish} to PUBLISH and start them again"
            )
        self._publish = chosen
        for shard in self._shards:
            shard.publish_with(chosen)

    @property
    def sharded_events(self) -> bool:
        """Whether events are published with sharded pub/sub (once choose_publish returned)."""
        if self._publish is None:
            raise RuntimeError("choose_publish() tells how events are published on a cluster")
        return self._publish is Publish.SHARDED

    # --- the channels a process subscribes to ------------------------------------------------
    # A process reads events over one connection per route: the only one with classic PUBLISH
    # (every node hears every event), one per shard with sharded pub/sub (to the master of the
    # shard's slot, which alone hears its channels' events). Route i's channels are those of
    # shard i then, all in the one slot of its hash tag.

    @property
    def event_routes(self) -> int:
        return len(self._shards) if self.sharded_events else 1

    def route_of(self, user_or_place_id: str) -> int:
        """The route of a user's (or a place's) events."""
        return shard_of(user_or_place_id, len(self._shards)) if self.sharded_events else 0

    def route_of_channel(self, channel: bytes) -> int:
        """The route of any channel named by the methods below."""
        return shard_of_name(channel) if self.sharded_events else 0

    @property
    def events_channel(self) -> str:
        """The pub/sub channel of every user's events, of every shard, with classic PUBLISH
        (a channel is not a key: on Redis Cluster, a classic PUBLISH reaches the subscribers
        of every node)."""
        return Keys().events

    def every_user_channel(self, route: int) -> str:
        """The channel of every user's events that the route carries: with sharded pub/sub,
        those of the route's shard."""
        return Keys.of_shard(route).shard_events if self.sharded_events else Keys().events

    def quiet_channel(self, route: int) -> str:
        """A channel nobody publishes on, of the route (see Keys.quiet)."""
        return Keys.of_shard(route).shard_quiet if self.sharded_events else Keys().quiet

    def user_events_channel(self, user_id: str) -> str:
        """The pub/sub channel of the user's events, and of their friend set's changes."""
        return self._user_channel_prefix(user_id) + user_id

    def friend_set_channels(self, user_id: str) -> list[str]:
        """The channels that announce changes of the user's friend set (FRIENDS): their own
        channel with classic PUBLISH; with sharded pub/sub, the user's channel in every shard,
        as each shard's script announces the links it changed on a channel of its own slot."""
        if not self.sharded_events:
            return [self.user_events_channel(user_id)]
        return [shard.user_channel_prefix + user_id for shard in self._shards]

    def _user_channel_prefix(self, user_id: str) -> str:
        return self._shard(user_id).user_channel_prefix

    def place_events_channel(self, place_id: str) -> str:
        """The channel of the place's events, in its shard."""
        return self._shard(place_id).place_events_channel(place_id)

    async def load_scripts(self) -> None:
        """Makes sure Redis holds every script, loading what it lacks: at start-up, so that a
        broken script fails the boot, and for readiness. Every shard runs the same scripts,
        which Redis (each primary of a cluster) holds once. Raises StoreUnavailableError when
        Redis cannot be reached."""
        await guarded(self._scripts.load(self._redis))

    async def make_cursor_secret(self) -> None:
        """At start-up: makes sure the deployment's cursor secret is in Redis (with no
        PRESENCE_CURSOR_SECRET), so that a replica holds it too when it serves reads during a
        failover. While Redis takes no writes, it is left to the first cursor made."""
        with contextlib.suppress(WritesRefusedError):
            await self._deployment_cursors(make=True)

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
        seconds, micros = await guarded(self._redis.time())
        return local_date(seconds * 1000 + micros // 1000, self._zone)

    def placement(self) -> dict[str, list[int]]:
        """Which shards each master of a Redis Cluster serves, by the slot of their hash tag
        (empty on a single Redis). Call once the client knows the cluster (after a call)."""
        if not isinstance(self._redis, RedisCluster):
            return {}
        placement: dict[str, list[int]] = {n.name: [] for n in self._redis.get_primaries()}
        for i in range(len(self._shards)):
            node = self._redis.get_node_from_key(Keys.of_shard(i).online)
            if node is not None:
                placement.setdefault(node.name, []).append(i)
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
    ) -> Presence:
        """Activity of one session (`idle`: of a user away from it); `device`, if given,
        replaces what the session said it is."""
        check_id(user_id, "userId")
        session = DEFAULT_SESSION if session_id is None else check_id(session_id, "sessionId")
        check_device(device)
        at_ms = None if at is None else check_at(to_ms(at), local_now_ms(), self._retention_ms)
        return await self._shard(user_id).touch(user_id, session, at_ms, device, idle=idle)

    async def kick(self, user_id: str, session_id: str | None = None) -> KickResult:
        check_id(user_id, "userId")
        if session_id is not None:
            check_id(session_id, "sessionId")
        return await self._shard(user_id).kick(user_id, session_id)

    async def open_session(
        self, user_id: str, session_id: str, device: str | None = None
    ) -> OpenedSession:
        """Holds the session under this process's lease in the user's shard: live while the
        lease is renewed (renew_leases), until closed or kicked; active, with `device` if
        given. A second opening of the same session replaces the first holder (announced as
        REPLACED). Raises SessionRevokedError for a kicked session id."""
        check_id(user_id, "userId")
        check_id(session_id, "sessionId")
        check_device(device)
        index = shard_of(user_id, len(self._shards))
        lease = await self._lease(index)
        try:
            return await self._shards[index].open_session(user_id, session_id, lease, device)
        except LeaseLostError:
            # It lapsed since the last renewal (this process stood still): a new one.
            self._forget_lease(lease)
            lease = await self._lease(index)
            return await self._shards[index].open_session(user_id, session_id, lease, device)

    @property
    def leases(self) -> tuple[Lease, ...]:
        """The leases this process holds now, one per shard it has held sessions in."""
        return tuple(self._leases.values())

    async def _lease(self, index: int) -> Lease:
        """This process's lease in shard `index`, taken now if it has none there."""
        async with self._lease_locks[index]:
            lease = self._leases.get(index)
            if lease is None:
                lease = await self._shards[index].acquire_lease(self._token)
                self._leases[index] = lease
            return lease

    def _forget_lease(self, lease: Lease) -> None:
        if self._leases.get(lease.shard) == lease:
            del self._leases[lease.shard]

    async def renew_leases(self, at: datetime | None = None) -> list[Lease]:
        """Renews every lease of this process, one script call per shard, all in parallel:
        whatever the number of sessions held, they are not touched. Returns the leases found
        lapsed (or no longer this process's): their sessions have ended, or are ending, and
        the next opening in their shard takes a new lease. `at` backfills the renewal."""
        at_ms = None if at is None else check_at(to_ms(at), local_now_ms(), self._retention_ms)
        leases = list(self._leases.values())
        renewed = await asyncio.gather(
            *(self._shards[lease.shard].renew_lease(lease, at_ms) for lease in leases)
        )
        lost = [lease for lease, ok in zip(leases, renewed, strict=True) if not ok]
        for lease in lost:
            self._forget_lease(lease)
        return lost

    async def release_leases(self) -> None:
        """Gives up every lease of this process, once it holds no session: the sweep ends
        whatever was left under them at once rather than after the TTL."""
        leases, self._leases = list(self._leases.values()), {}
        await asyncio.gather(
            *(self._shards[lease.shard].renew_lease(lease, None, give_up=True) for lease in leases)
        )

    async def close_session(self, held: HeldSession) -> bool:
        """Ends the session at once if `held` still holds it; OFFLINE goes out when it was
        the user's last live one. Returns whether a live session ended."""
        return await self._shard(held.user_id).close_session(held)

    async def check_sessions(
        self, held: Sequence[HeldSession | HeldPlaceSession]
    ) -> list[HeldSession | HeldPlaceSession]:
        """Of the sessions given (presence and place sessions), those their holder holds no
        more (kicked, replaced, closed, or their lease lapsed): for a holder that may have
        missed their announcement. CHECK_BATCH per script call, the calls of all shards in
        parallel."""
        presence: dict[int, list[HeldSession]] = {}
        places: dict[int, list[HeldPlaceSession]] = {}
        for one in held:
            if isinstance(one, HeldPlaceSession):
                places.setdefault(one.lease.shard, []).append(one)
            else:
                presence.setdefault(one.lease.shard, []).append(one)
        calls: list[Awaitable[Sequence[HeldSession | HeldPlaceSession]]] = [
            self._shards[i].check_sessions(group[start : start + CHECK_BATCH])
            for i, group in presence.items()
            for start in range(0, len(group), CHECK_BATCH)
        ]
        calls += [
            self._shards[i].check_place_sessions(group[start : start + CHECK_BATCH])
            for i, group in places.items()
            for start in range(0, len(group), CHECK_BATCH)
        ]
        lost = await asyncio.gather(*calls)
        return [one for part in lost for one in part]

    async def session_revoked(self, held: HeldSession | HeldPlaceSession) -> bool:
        """Whether the held session's id is revoked: it was kicked."""
        return await self._shard(held.user_id).session_revoked(held.user_id, held.session_id)

    # --- places: each in the shard of its id ---------------------------------------------

    async def open_place_session(
        self, place_id: str, user_id: str, session_id: str, state: object = None
    ) -> OpenedPlaceSession:
        """Holds the session in the place under this process's lease in the place's shard, with
        `state` (a JSON object, or None), until closed, kicked or replaced: as open_session
        holds a presence session. Raises SessionRevokedError for a kicked session id."""
        check_id(place_id, "placeId")
        check_id(user_id, "userId")
        check_id(session_id, "sessionId")
        text = None if state is None else check_place_state(state)
        if await self._shard(user_id).session_revoked(user_id, session_id):
            raise SessionRevokedError(REVOKED_SESSION)
        index = shard_of(place_id, len(self._shards))
        lease = await self._lease(index)
        shard = self._shards[index]
        try:
            return await shard.open_place_session(place_id, user_id, session_id, text, lease)
        except LeaseLostError:
            self._forget_lease(lease)
            lease = await self._lease(index)
            return await shard.open_place_session(place_id, user_id, session_id, text, lease)

    async def close_place_session(self, held: HeldPlaceSession) -> bool:
        """Takes the session out of the place at once if `held` still holds it (LEFT)."""
        return await self._shard(held.place_id).close_place_session(held)

    async def set_place_state(
        self, place_id: str, user_id: str, session_id: str, state: object
    ) -> PlaceMember:
        """Replaces the state of a session that is in the place, read so from now on; and
        announces it (UPDATED) at once, or, within PLACE_STATE_INTERVAL_MS of the session's
        last UPDATED, at the end of that interval, with whatever state is the latest then.
        BadInputError when the session is not in the place."""
        check_id(place_id, "placeId")
        check_id(user_id, "userId")
        check_id(session_id, "sessionId")
        text = check_place_state(state)
        shard = self._shard(place_id)
        member, flush_in_ms = await shard.set_place_state(place_id, user_id, session_id, text)
        if flush_in_ms > 0:
            self._plan_flush((place_id, user_id, session_id), flush_in_ms)
        return member

    def _plan_flush(self, key: PlaceSessionKey, in_ms: int) -> None:
        earlier = self._flushes.pop(key, None)
        if earlier is not None:
            earlier.cancel()  # an interval's that has passed: this one is the session's now
        loop = asyncio.get_running_loop()
        self._flushes[key] = loop.call_later(in_ms / 1000 + FLUSH_SLACK_S, self._flush_due, key)

    def _flush_due(self, key: PlaceSessionKey) -> None:
        del self._flushes[key]
        task = asyncio.get_running_loop().create_task(self._flush(key))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _flush(self, key: PlaceSessionKey) -> None:
        place_id, user_id, session_id = key
        try:
            due_in_ms = await self._shard(place_id).flush_place_state(place_id, user_id, session_id)
        except PresenceError as error:
            log.warning("a waiting place state is left to the sweep to announce: %s", error.message)
            return
        except Exception:
            # A fault of ours; the sweep still announces the state, a second or so late.
            log.exception("announcing a waiting place state failed")
            return
        if due_in_ms > 0 and key not in self._flushes:
            self._plan_flush(key, due_in_ms)

    async def flush_planned(self) -> None:
        """Announces at once every waiting place state this process planned to announce: at
        shutdown, rather than leave them to another process's sweep."""
        planned, self._flushes = self._flushes, {}
        for timer in planned.values():
            timer.cancel()
        await asyncio.gather(*map(self._flush, planned), *self._flushing)

    async def place_members(
        self, place_id: str, first: int = 50, after: str | None = None
    ) -> PlacePage:
        check_id(place_id, "placeId")
        check_page_size(first)
        position = None
        if after is not None:
            position = (await self._deployment_cursors(make=False)).decode(after)
        sessions, users, nodes, more, sequence = await self._shard(place_id).place_members(
            place_id, first, position
        )
        end_cursor = None
        if nodes:
            last = nodes[-1]
            end_cursor = (await self._deployment_cursors(make=True)).encode(
                last.position, f"{last.user_id}\0{last.session_id}"
            )
        return PlacePage(sessions, users, nodes, more, end_cursor, sequence)

    async def place_counts(self, place_ids: Sequence[str]) -> list[PlaceCount]:
        """Counts of up to 1,000 places, in the order given: one script call per shard."""
        given = check_place_ids(place_ids, "placeIds")
        by_shard: dict[int, list[str]] = {}
        for place_id in dict.fromkeys(given):
            by_shard.setdefault(shard_of(place_id, len(self._shards)), []).append(place_id)
        parts = await asyncio.gather(
            *(self._shards[i].place_counts(ids) for i, ids in by_shard.items())
        )
        counts: dict[str, tuple[int, int]] = {}
        for ids, part in zip(by_shard.values(), parts, strict=True):
            counts.update(zip(ids, part, strict=True))
        return [PlaceCount(place_id, *counts[place_id]) for place_id in given]

    # --- how users appear: statuses (lua/set_status.lua) -------------------------------------

    async def set_status(self, user_id: str, chosen: ChosenStatus) -> Presence:
        """The user's choice of status; their custom status is left as it is."""
        check_id(user_id, "userId")
        return await self._shard(user_id).set_status(user_id, "chosen", ChosenStatus(chosen))

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
            return await self._shard(user_id).set_status(user_id, "custom", "", "", "")
        check_shown_text(text, "text", MAX_STATUS_TEXT)
        if emoji is not None:
            check_shown_text(emoji, "emoji", MAX_EMOJI)
        expires_ms = None if expires_at is None else to_ms(expires_at)
        if expires_ms is not None and not (
            local_now_ms() < expires_ms <= local_now_ms() + self._retention_ms
        ):
            raise BadInputError(EXPIRES_NOT_AHEAD)
        return await self._shard(user_id).set_status(
            user_id, "custom", text, emoji or "", "" if expires_ms is None else expires_ms
        )

    async def set_last_seen_visibility(self, user_id: str, visible_to: Visibility) -> Presence:
        check_id(user_id, "userId")
        return await self._shard(user_id).set_status(user_id, "visible", Visibility(visible_to))

    async def set_session_idle(self, user_id: str, session_id: str, *, idle: bool) -> Presence:
        """Marks one live session idle (its user away from it) or active again."""
        check_id(user_id, "userId")
        check_id(session_id, "sessionId")
        return await self._shard(user_id).set_status(user_id, "idle", session_id, int(idle))

    async def presence(self, user_id: str, reader: str | None = None) -> Presence:
        """The user's presence as `reader` (an end user's id; None for a backend) may see it."""
        check_id(user_id, "userId")
        (found,) = await self._shard(user_id).presence_many([user_id])
        if reader is None or reader == user_id:
            return found
        return (await self._seen_by([found], reader))[0]

    async def take_token(
        self, caller: str, rate: float, burst: int, cost: int = 1, *, owed: bool = False
    ) -> int:
        """Takes `cost` tokens from the caller's bucket (rate per second, at most burst):
        while one is there, or, `owed`, whatever is left (lua/take_token.lua). Returns 0 when
        granted, else how many ms until a token is there. Rate-limit buckets are not users'
        data: they all live in shard 0."""
        return await self._shards[0].take_token(caller, rate, burst, cost, owed=owed)

    async def persist_document(self, sha256: str, document: str) -> None:
        """Keeps a GraphQL document (Unicode text of at most MAX_DOCUMENT_BYTES bytes of
        UTF-8) under its SHA-256 (lowercase hex; that it is the document's is the caller's
        to check) for every process of the deployment; beyond MAX_PERSISTED_DOCUMENTS the
        least recently used are forgotten, a registration counting as a use REGISTERED_AGE_MS
        before it. Like rate-limit buckets, they all live in shard 0."""
        check_sha256(sha256)
        check_document(document)
        await self._shards[0].persist_document(
            sha256, document, MAX_PERSISTED_DOCUMENTS, REGISTERED_AGE_MS
        )

    async def persisted_document(self, sha256: str) -> str | None:
        """The document kept under this SHA-256, or None (never kept, or forgotten)."""
        return await self._shards[0].persisted_document(check_sha256(sha256))

    async def refresh_documents(self, sha256s: Sequence[str]) -> int:
        """Marks the documents kept under these SHA-256s as just used, as reading one does, in
        one script call per REFRESH_BATCH of them; those no longer kept stay forgotten.
        Returns how many were still kept."""
        hashes = [check_sha256(sha256) for sha256 in dict.fromkeys(sha256s)]
        refreshed = 0
        for start in range(0, len(hashes), REFRESH_BATCH):
            batch = hashes[start : start + REFRESH_BATCH]
            refreshed += await self._shards[0].refresh_documents(batch)
        return refreshed

    # --- many users: grouped by shard -------------------------------------------------------

    async def touch_many(self, user_ids: Sequence[str]) -> int:
        """One script per shard that holds any of the users, in parallel."""
        groups = self._by_shard(check_ids(user_ids, "userIds"))
        recorded = await asyncio.gather(*(self._shards[i].touch_many(g) for i, g in groups.items()))
        return sum(recorded)

    async def presence_many(
        self, user_ids: Sequence[str], reader: str | None = None
    ) -> list[Presence]:
        """The presence of each user, in the order given, as `reader` may see it: one read
        per shard, each read at one moment."""
        groups = self._by_shard(user_ids)
        answers = await asyncio.gather(
            *(self._shards[i].presence_many(g) for i, g in groups.items())
        )
        found = {p.user_id: p for answer in answers for p in answer}
        if reader is not None:
            seen = await self._seen_by(list(found.values()), reader)
            found = {p.user_id: p for p in seen}
        return [found[user_id] for user_id in user_ids]

    async def _seen_by(self, found: Sequence[Presence], reader: str) -> list[Presence]:
        """What the end user `reader` may see of each presence (Presence.seen_by)."""
        # Those who let their friends see lastSeen: is the reader one of them?
        owners = [
            p.user_id for p in found if p.visible_to is Visibility.FRIENDS and p.user_id != reader
        ]
        friend_of = await self.in_friend_sets_of(reader, owners)
        return [p.seen_by(reader, reader_is_friend=p.user_id in friend_of) for p in found]

    def _by_shard(self, user_ids: Iterable[str]) -> dict[int, list[str]]:
        groups: dict[int, list[str]] = {}
        for user_id in dict.fromkeys(user_ids):
            groups.setdefault(shard_of(user_id, len(self._shards)), []).append(user_id)
        return groups

    # --- lists: a page from every shard, merged ---------------------------------------------

    async def online_users(
        self,
        first: int = 50,
        after: str | None = None,
        reader: str | None = None,
        *,
        by_online_since: bool = False,
    ) -> Page:
        """The online users, most recent activity first, or (by_online_since) most recently
        come online first; for an end user `reader`, without those who chose INVISIBLE."""
        check_page_size(first)
        hide = reader is not None
        if by_online_since:
            return await self._merged(
                lambda shard, at: shard.online_since(first, at, hide_invisible=hide),
                first,
                after,
                ONLINE_SINCE,
            )
        return await self._merged(
            lambda shard, at: shard.online_users(first, at, hide_invisible=hide), first, after
        )

    async def online_friends(
        self, user_id: str, first: int = 50, after: str | None = None, reader: str | None = None
    ) -> Page:
        """Each shard pages the friends who live in it (an empty set answers at once); for
        an end user `reader`, without those who chose INVISIBLE."""
        check_id(user_id, "userId")
        check_page_size(first)
        hide = reader is not None
        return await self._merged(
            lambda shard, at: shard.online_friends(user_id, first, at, hide_invisible=hide),
            first,
            after,
        )

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
        check_page_size(first)
        check_range(start, end)
        start_ms, end_ms = to_ms(start), to_ms(end)
        hide = reader is not None
        return await self._merged(
            lambda shard, at: shard.active_in_range(
                start_ms, end_ms, first, at, hide_invisible=hide
            ),
            first,
            after,
        )

    async def _merged(
        self,
        page_of: Callable[[Shard, Position | None], Awaitable[ShardPage]],
        first: int,
        after: str | None,
        order: str = "",
    ) -> Page:
        """Every shard pages its users from the same cursor position, (lastSeen, userId): as
        a user lives in one shard, the first `first` users after that position over all shards
        are among the first `first` of some shard. The cursor is the position of the last
        user listed, so it means the same whatever shard that user lives in."""
        position = None
        if after is not None:
            position = (await self._deployment_cursors(make=False)).decode(after, order)
        pages = await asyncio.gather(*(page_of(shard, position) for shard in self._shards))
        rows = sorted((node for page in pages for node in page.nodes), key=_position)
        nodes = tuple(rows[:first])
        return Page(
            total_count=sum(page.total_count for page in pages),
            nodes=nodes,
            has_next_page=len(rows) > first or any(page.has_next_page for page in pages),
            end_cursor=await self._end_cursor(nodes, order),
        )

    async def _end_cursor(self, nodes: Sequence[ListedUser], order: str = "") -> str | None:
        if not nodes:
            return None
        return (await self._deployment_cursors(make=True)).encode(*_position(nodes[-1]), order)

    async def _deployment_cursors(self, *, make: bool) -> Cursors:
        """What makes and reads this deployment's cursors. Without PRESENCE_CURSOR_SECRET, the
        secret kept in Redis, made by the first process that makes a cursor: every process
        reads the same, so a cursor from one is valid on all. Read once, then kept. Reading a
        cursor makes no secret (bad input changes nothing): with none yet, none is valid."""
        if self._cursors is not None:
            return self._cursors
        secret = await self._shards[0].cursor_secret(new_secret() if make else "")
        if not secret:
            return Cursors(new_secret())  # one that no cursor was made with
        self._cursors = Cursors(secret)
        return self._cursors

    async def weekly_stats(self, end_date: date | None = None) -> WeeklyStats:
        """The sum of every shard's figures: exact, as each user is counted in one shard."""
        end_date = check_end_date(await self.today() if end_date is None else end_date)
        parts = await asyncio.gather(*(shard.weekly_stats(end_date) for shard in self._shards))
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
        check_id(user_id, "userId")
        parts = await asyncio.gather(*(shard.friends(user_id) for shard in self._shards))
        return sorted({friend for part in parts for friend in part})

    async def in_friend_sets_of(self, user_id: str, owners: Iterable[str]) -> frozenset[str]:
        """Which of `owners` have user_id in their friend set: one script call on user_id's
        shard, which keeps each set's members that live there."""
        asked = list(owners)
        if not asked:
            return frozenset()
        flags = await self._shard(user_id).friend_of_each(user_id, asked)
        return frozenset(owner for owner, flag in zip(asked, flags, strict=True) if flag)

    async def friends_among(self, user_id: str, user_ids: Iterable[str]) -> set[str]:
        """Which of user_ids are in user_id's friend set (each shard keeps the part of it
        that lives there): one command per shard."""
        groups = self._by_shard(user_ids)
        answers = await asyncio.gather(
            *(self._shards[i].friends_among(user_id, g) for i, g in groups.items())
        )
        return set().union(*answers)

    async def add_friends(
        self, user_id: str, friend_ids: Sequence[str], mutual: bool = True
    ) -> int:
        return await self._change_friends("SADD", user_id, friend_ids, mutual)

    async def remove_friends(
        self, user_id: str, friend_ids: Sequence[str], mutual: bool = True
    ) -> int:
        return await self._change_friends("SREM", user_id, friend_ids, mutual)

    async def _change_friends(
        self, change: LinkChange, user_id: str, friend_ids: Sequence[str], mutual: bool
    ) -> int:
        """The link user → f goes to f's shard, as friends:user; with mutual, f → user goes to
        the user's shard, as friends:f. One script per shard written, in parallel."""
        check_id(user_id, "userId")
        others = [f for f in check_ids(friend_ids, "friendIds") if f != user_id]
        if not others:
            return 0
        count = len(self._shards)
        links: dict[int, dict[str, list[str]]] = {}
        if mutual:
            home = links.setdefault(shard_of(user_id, count), {})
            for other in others:
                home[other] = [user_id]
        for other in others:
            # After the reverse links: in one shard, the user's FRIENDS event comes last.
            owners = links.setdefault(shard_of(other, count), {})
            owners.setdefault(user_id, []).append(other)
        kept_elsewhere: dict[int, dict[str, int]] = {}
        if change == "SADD" and count > 1:
            kept_elsewhere = await self._friends_kept_elsewhere(links)
        changed = await asyncio.gather(
            *(
                self._shards[i].change_links(
                    change, owners, self._user_channel_prefix, kept_elsewhere.get(i)
                )
                for i, owners in links.items()
            )
        )
        return sum(part.get(user_id, 0) for part in changed)

    async def _friends_kept_elsewhere(
        self, links: Mapping[int, Mapping[str, Sequence[str]]]
    ) -> dict[int, dict[str, int]]:
        """For each shard to be written and each owner written there, how many friends the
        owner's set will keep in the other shards once the links are added: one script call
        per shard, and one more per shard written. A set that would pass max_friends is
        refused here, before anything is written; each shard's script checks its part again
        against the rest, atomically, so that changes made meanwhile cannot pass it either."""
        owners = sorted({owner for part in links.values() for owner in part})
        counts, added = await asyncio.gather(
            asyncio.gather(*(shard.friend_counts(owners) for shard in self._shards)),
            asyncio.gather(
                *(
                    self._shards[i].change_links("CHECK", part, self._user_channel_prefix)
                    for i, part in links.items()
                )
            ),
        )
        sizes = [dict(zip(owners, column, strict=True)) for column in counts]
        for i, after in zip(links, added, strict=True):
            sizes[i].update((owner, after[owner]) for owner in links[i] if links[i][owner])
        totals = {owner: sum(part[owner] for part in sizes) for owner in owners}
        most = self._max_friends
        if any(total > most for total in totals.values()):
            raise BadInputError(friend_set_full(most))
        return {i: {owner: totals[owner] - sizes[i][owner] for owner in links[i]} for i in links}

    # --- upkeep ------------------------------------------------------------------------------

    async def sweep(
        self, batch: int = SWEEP_BATCH, lapsed_batch: int = LAPSED_BATCH
    ) -> SweepResult:
        """Removes up to `batch` expired online entries and `batch` users past the retention,
        ends the sessions of up to `lapsed_batch` users and place sessions of lapsed leases,
        and announces up to `lapsed_batch` waiting place states a process did not announce in
        time, in each shard, summing what they did: a sum of a full batch or more makes the
        sweeper sweep again at once, as it may be one shard's full batch."""
        parts = await asyncio.gather(*(shard.sweep(batch, lapsed_batch) for shard in self._shards))
        return SweepResult(
            offline=sum(p.offline for p in parts),
            purged=sum(p.purged for p in parts),
            online=sum(p.online for p in parts),
            lapsed=sum(p.lapsed for p in parts),
            ended_statuses=sum(p.ended_statuses for p in parts),
            flushed=sum(p.flushed for p in parts),
        )


# The name of the order by onlineSince in its cursors.
ONLINE_SINCE = "since"


def _position(node: ListedUser) -> Position:
    """Where a user stands in every list: the score of the shards' sorted sets, -(lastSeen ms)
    or a held user's, then the id, whose order as text is Redis's order of its UTF-8 bytes."""
    return node.position, node.user_id
