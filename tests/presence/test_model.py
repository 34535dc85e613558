"""The store agrees with a simple in-memory model of docs/semantics.md, whatever the order of
touches (now and backfilled, idle or active, with a device), held sessions (opened, closed,
replaced, held by a holder cancelled at any point of its opening), processes that renew their
leases late, stand still past the TTL or die, kicks, sweeps, friend changes and statuses
(chosen, custom with or without an end, who may see lastSeen, sessions marked idle): a
hypothesis state machine on real Redis, with two processes, checking every read after every
step as each kind of reader sees it (a backend, the user themself, an end user in the user's
friend set, any other end user), and the events every kind of reader is told.

Time passing is modelled by backfilled times: a touch at 0, 20 or 40 s ago is live, one at
90 s or 2 h ago is not (the window is 60 s); a lease renewed 0 or 20 s ago is live, one
renewed 40 or 90 s ago has lapsed (the TTL is 30 s). Every edge is far enough away that the
test's own running time does not matter. While a session is held its user's lastSeen is the
present: the model checks it against the server's clock around the read. A session touched
59.8 s ago, and a custom status that ends 0.2 s ahead, end within their step: the step waits
for that moment, so that every later read is sure of it.

Events: every event a script publishes is read from the channel of every user, as backends
(and the user) see it, and as other end users see it (PresenceChange.seen_by_others); each
must follow from what that kind of reader was told before (ONLINE only after offline, OFFLINE
only after online, STATUS a change of status or custom status), and once the sweep has
announced what time ended, what each was told is what they read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)
from redis.asyncio import Redis, RedisCluster
from redis.asyncio.client import PubSub

from gql_presence.realtime.delivery import PresenceChange
from gql_presence.realtime.held import HeldSessions
from gql_presence.running.connection import (
    ShardedSubscriber,
    client_for,
    cluster_subscriber,
    redis_client,
    subscriber_client,
)
from gql_presence.running.redis_server import RedisServer
from gql_presence.settings import Settings
from gql_presence.store import (
    ChosenStatus,
    CustomStatus,
    EventKind,
    HeldSession,
    Lease,
    ListedUser,
    OpenedSession,
    Page,
    Presence,
    PublishedEvent,
    Status,
    Visibility,
    read_events,
    shard_of,
)
from gql_presence.store.client import AnyRedis
from gql_presence.store.days import from_ms, to_ms
from gql_presence.store.errors import BadInputError, SessionRevokedError
from gql_presence.store.keys import Keys
from gql_presence.store.models import OnlineFilter
from gql_presence.store.replies import text
from gql_presence.store.wire import FEED_KINDS
from tests.conftest import TEST_SETTINGS
from tests.helpers import OPENING_POINTS, PausingStore, cancel_hold_at, model_runs

USERS = ["ann", "bob", "cy", "dee"]
SESSIONS = ["default", "phone", "web"]
# Bounds the steps reach: a user may have two of the three sessions live, and two of the
# three other users as friends.
MAX_SESSIONS = 2
MAX_FRIENDS = 2
MODEL_SETTINGS = dataclasses.replace(
    TEST_SETTINGS, connection_ttl_ms=30_000, max_sessions=MAX_SESSIONS, max_friends=MAX_FRIENDS
)
WINDOW_MS = MODEL_SETTINGS.window_ms
TTL_MS = MODEL_SETTINGS.connection_ttl_ms
# A touch this old is live for a moment only: its step waits until it has expired.
EXPIRING_AGE_S = WINDOW_MS / 1000 - 0.2
AGES_S = [0, 20, 40, 90, 7200, EXPIRING_AGE_S]
RENEWAL_AGES_S = [0, 20, 40, 90]
PROCESSES = [0, 1]
DEVICES = [None, "web", "ios"]
# A custom status's end: none, far ahead, or 0.2 s ahead (its step waits until it has passed).
ENDS = [None, "later", "soon"]
# The kinds of reader of a user's presence: backends (and the user themself, who sees what
# backends see), an end user in the user's friend set, any other end user.
READER_KINDS = ("backend", "friend", "other")
# What a reader was told of a user: online, status, custom status.
Told = tuple[bool, Status, CustomStatus | None]
NEVER_SEEN: Told = (False, Status.OFFLINE, None)
LOOKED = {EventKind.ONLINE, EventKind.OFFLINE, EventKind.KICKED, EventKind.STATUS}
T = TypeVar("T")
# Hundreds of steps on real Redis.
pytestmark = pytest.mark.slow


@dataclasses.dataclass
class ModelSession:
    activity_ms: int = 0  # a touched session's last activity
    expiry_ms: int = 0  # a touched session is live through this moment
    held: HeldSession | None = None  # a held session's holder, and its lease
    idle: bool = False  # its client said its user is away from it
    device: str | None = None


@dataclasses.dataclass
class ModelUser:
    last_seen: int | None = None  # the last activity, while no session holds the user
    sessions: dict[str, ModelSession] = dataclasses.field(default_factory=dict)
    revoked: set[str] = dataclasses.field(default_factory=set)
    chosen: ChosenStatus = ChosenStatus.AUTO
    custom: CustomStatus | None = None
    visible: Visibility = Visibility.EVERYONE
    # The lastSeen other end users see while the user is invisible: the one when they chose it.
    hidden_seen: int | None = None


class EventTap:
    """Every event the scripts publish, as they publish it on the channel of every user (one
    per shard with sharded pub/sub). `heard()` returns those published so far: it publishes
    a mark after them, on each route, through every node that may have published one, and
    reads up to the marks."""

    def __init__(self) -> None:
        # Each route: its connection, and what publishes its marks (returning how many).
        self.routes: list[tuple[PubSub, Callable[[str], Awaitable[int]]]] = []
        self.clients: list[Redis] = []  # the pub/sub clients to close

    async def add(
        self, pubsub: PubSub, channel: str, mark: Callable[[str], Awaitable[int]], *, sharded: bool
    ) -> None:
        if sharded:
            await pubsub.ssubscribe(channel)
        else:
            await pubsub.subscribe(channel)
        confirmed = await pubsub.get_message(timeout=5)
        assert confirmed is not None, "the events channel's subscription was not confirmed"
        self.routes.append((pubsub, mark))

    async def heard(self) -> list[PublishedEvent]:
        events: list[PublishedEvent] = []
        for pubsub, mark in self.routes:
            token = f"mark-{uuid.uuid4().hex}"
            left = await mark(token)
            while left:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
                assert message is not None, "a mark published on the events channel never came"
                data = message["data"]
                text = data.decode() if isinstance(data, bytes) else data
                if text == token:
                    left -= 1
                else:
                    events += read_events(text)
        return events

    async def close(self) -> None:
        for pubsub, _ in self.routes:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
        for client in self.clients:
            await client.aclose()


class PresenceModel(RuleBasedStateMachine):
    redis_url = ""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.redis = self.connect()
        self.procs = [self.new_process() for _ in PROCESSES]
        self.users: dict[str, ModelUser] = {u: ModelUser() for u in USERS}
        self.friends: dict[str, set[str]] = {u: set() for u in USERS}
        self.active_days: dict[str, set[str]] = {}
        # Every lease taken: when it lapses; those the sweep has ended; the users with a bit
        # in it; and the leases each process holds now.
        self.lapse: dict[Lease, int] = {}
        self.swept: set[Lease] = set()
        self.bits: dict[Lease, set[str]] = {}
        self.proc_leases: list[set[Lease]] = [set() for _ in PROCESSES]
        # The sessions each process holds and would close.
        self.held: list[tuple[int, HeldSession]] = []
        # Holds as presenceSession makes them, in process 0, for holders cancelled while
        # they open.
        self.sessions = HeldSessions(self.procs[0], TTL_MS)
        # What each kind of reader was told of each user by the events so far; the users
        # whose presence time changed (an expiry, a lapse) since the last sweep, which may
        # not have been announced yet.
        self.told: dict[str, dict[str, Told]] = {
            k: dict.fromkeys(USERS, NEVER_SEEN) for k in READER_KINDS
        }
        self.pending: set[str] = set()
        self.tap = EventTap()
        # Each user's version as the events told it; each shard's last feed entry checked.
        self.versions: dict[str, int] = dict.fromkeys(USERS, 0)
        self.feed_read: dict[int, str] = {}

    def connect(self) -> AnyRedis:
        """The client of the store under test: one shard of redis_url (ShardedModel below
        checks shards against this model too)."""
        return redis_client(self.redis_url)

    def settings(self) -> Settings:
        return MODEL_SETTINGS

    def new_process(self) -> PausingStore:
        """A process's store: its own leases, on the shared Redis; a real store that a step
        can stop at a point of a call."""
        return PausingStore(self.redis, self.settings())

    @property
    def store(self) -> PausingStore:
        return self.procs[0]

    def run(self, call: Awaitable[T]) -> T:
        return self.loop.run_until_complete(call)

    def teardown(self) -> None:
        self.run(self.tap.close())
        self.run(self.redis.aclose())
        self.loop.close()

    @initialize()
    def empty_store(self) -> None:
        self.run(self.redis.flushall())
        self.run(self.store.choose_publish())
        self.run(self.listen())

    async def listen(self) -> None:
        """Reads the events of one Redis: the channel of every user, marked through it."""
        channel = self.store.every_user_channel(0)
        subscriber = subscriber_client(self.redis_url)
        self.tap.clients.append(subscriber)

        async def mark(token: str) -> int:
            await self.redis.publish(channel, token)
            return 1

        await self.tap.add(subscriber.pubsub(), channel, mark, sharded=False)

    # --- what the model says ---

    def now_ms(self) -> int:
        return to_ms(datetime.now(UTC))

    def server_ms(self) -> int:
        seconds, micros = self.run(self.redis.time())
        return int(seconds) * 1000 + int(micros) // 1000

    def lease_live(self, lease: Lease) -> bool:
        return lease not in self.swept and self.lapse[lease] >= self.now_ms()

    def session_live(self, one: ModelSession) -> bool:
        if one.held is not None:
            return self.lease_live(one.held.lease)
        return one.expiry_ms >= self.now_ms()

    def live(self, user: str) -> dict[str, int | None]:
        """The user's live sessions and their activity (None for a held one: the present)."""
        return {
            s: (None if one.held else one.activity_ms)
            for s, one in self.users[user].sessions.items()
            if self.session_live(one)
        }

    def sessions_full(self, user: str, session: str) -> bool:
        """Whether a session not live yet would give the user more live ones than allowed."""
        live = self.live(user)
        return session not in live and len(live) >= MAX_SESSIONS

    def held_sessions(self, user: str) -> list[ModelSession]:
        return [one for one in self.users[user].sessions.values() if one.held is not None]

    def held_live(self, user: str) -> bool:
        return any(self.session_live(one) for one in self.held_sessions(user))

    def doubtful(self, user: str) -> bool:
        """A user held only under leases that lapsed, whose sessions no sweep or write has
        ended yet: counted in onlineUsers' totalCount and left out of activeInRange until
        then (docs/design.md)."""
        return bool(self.held_sessions(user)) and not self.held_live(user)

    def record_activity(self, user: str, at_ms: int) -> None:
        model = self.users[user]
        model.last_seen = max(model.last_seen or at_ms, at_ms)
        self.active_days.setdefault(from_ms(at_ms).date().isoformat(), set()).add(user)

    def forget_bit(self, user: str, lease: Lease) -> None:
        """The lease keeps the user's bit while it holds a session of theirs."""
        if not any(one.held.lease == lease for one in self.held_sessions(user) if one.held):
            self.bits[lease].discard(user)

    def settle(self, user: str) -> None:
        """What a write to the user does first: end their sessions whose lease lapsed; last
        seen when the latest of those lapsed, if none is held any more."""
        model = self.users[user]
        lapsed = {
            s: one
            for s, one in model.sessions.items()
            if one.held is not None and not self.lease_live(one.held.lease)
        }
        if not lapsed:
            return
        for s in lapsed:
            del model.sessions[s]
        if not self.held_sessions(user):
            # When the last lapsed, or the latest activity of a live touched session if later.
            ends = [self.lapse[one.held.lease] for one in lapsed.values() if one.held]
            ends += [one.activity_ms for one in model.sessions.values() if self.session_live(one)]
            model.last_seen = max(ends)

    def learn_end(self, user: str, before: int) -> None:
        """A held session of the user ended at a moment of the server's clock: if it was
        their last, their lastSeen is that moment; learn it, and check it."""
        if self.held_sessions(user):
            return
        last_seen = self.run(self.store.presence(user)).last_seen
        assert last_seen is not None
        assert before <= to_ms(last_seen) <= self.server_ms()
        self.record_activity(user, to_ms(last_seen))
        self.users[user].last_seen = to_ms(last_seen)

    def record_touch(
        self, user: str, session: str, at_ms: int, *, idle: bool = False, device: str | None = None
    ) -> None:
        """A touch moves a session's activity, unless the session is held; it says whether its
        user is idle on a live session, and replaces its device when it names one."""
        self.record_activity(user, at_ms)
        old = self.users[user].sessions.get(session)
        live = old is not None and self.session_live(old)
        if old is not None and live:
            old.idle = idle
            old.device = device or old.device
        if (at_ms < self.now_ms() - WINDOW_MS and not live) or (old and old.held):
            return
        if old is not None and live:
            at_ms = max(at_ms, old.activity_ms)
            device = device or old.device
        self.users[user].sessions[session] = ModelSession(
            at_ms, at_ms + WINDOW_MS, idle=idle, device=device
        )

    def take_opening(self, proc: int, user: str, opened: OpenedSession) -> None:
        """An opening the store made: its lease, the holder it replaced."""
        lease = opened.held.lease
        if lease not in self.lapse:
            self.lapse[lease] = self.now_ms() + TTL_MS
            self.bits[lease] = set()
            self.proc_leases[proc] = {
                one for one in self.proc_leases[proc] if one.shard != lease.shard
            }
            self.proc_leases[proc].add(lease)
        self.record_activity(user, to_ms(opened.at))
        model = self.users[user]
        old = model.sessions.get(opened.held.session_id)
        # It starts active, with no device (none given).
        model.sessions[opened.held.session_id] = ModelSession(held=opened.held)
        if old is not None and old.held is not None:
            self.forget_bit(user, old.held.lease)
        self.bits[lease].add(user)

    def pass_moment(self, moment_ms: int) -> None:
        """Waits until the server's clock is past the moment."""
        while (now := self.server_ms()) <= moment_ms:
            self.run(asyncio.sleep((moment_ms - now) / 1000 + 0.005))

    def status(self, user: str) -> Status:
        """SEMANTICS "Status": from the live sessions and the choice."""
        live = [one for one in self.users[user].sessions.values() if self.session_live(one)]
        chosen = self.users[user].chosen
        if not live:
            return Status.OFFLINE
        if chosen is not ChosenStatus.AUTO:
            return Status(chosen.value)
        return Status.AWAY if all(one.idle for one in live) else Status.ONLINE

    def custom(self, user: str) -> CustomStatus | None:
        """The custom status, until its end."""
        custom = self.users[user].custom
        if custom and custom.expires_at is not None and to_ms(custom.expires_at) <= self.now_ms():
            return None
        return custom

    def seen(self, user: str, kind: str) -> Told:
        """What a reader of this kind may see of the user's status: an invisible user is
        offline, with no custom status, to every end user but themself."""
        if kind != "backend" and self.users[user].chosen is ChosenStatus.INVISIBLE:
            return NEVER_SEEN
        return (bool(self.live(user)), self.status(user), self.custom(user))

    def may_see_last_seen(self, user: str, reader: str | None) -> bool:
        visible = self.users[user].visible
        return (
            reader in (None, user)
            or visible is Visibility.EVERYONE
            or (visible is Visibility.FRIENDS and reader in self.friends[user])
        )

    def check_last_seen(self, user: str, shown: datetime | None, before: int, after: int) -> None:
        """lastSeen as backends see it: the present while held, the last lapse of leases that
        lapsed unswept, else the last activity."""
        held = self.held_sessions(user)
        if self.held_live(user):
            assert shown is not None
            assert before <= to_ms(shown) <= after
        elif held:
            ends = [self.lapse[one.held.lease] for one in held if one.held]
            ends += [
                one.activity_ms
                for one in self.users[user].sessions.values()
                if one.held is None and self.session_live(one)
            ]
            assert shown == from_ms(max(ends))
        else:
            last_seen = self.users[user].last_seen
            assert shown == (None if last_seen is None else from_ms(last_seen)), (user, shown)

    def check_presence(
        self, presence: Presence, reader: str | None, before: int, after: int
    ) -> None:
        """A presence as `reader` (None: a backend) may see it, read between two moments."""
        user = presence.user_id
        model = self.users[user]
        kind = "backend" if reader in (None, user) else "other"
        online, status, custom = self.seen(user, kind)
        assert (presence.online, presence.status, presence.custom) == (online, status, custom), (
            user,
            reader,
            presence,
        )
        may_see = self.may_see_last_seen(user, reader)
        if kind == "backend":
            assert (presence.chosen, presence.visible_to) == (model.chosen, model.visible)
        else:
            assert (presence.chosen, presence.visible_to) == (None, None)
        if kind == "other" and model.chosen is ChosenStatus.INVISIBLE:
            assert presence.sessions == ()
            assert presence.online_since is None
            hidden = model.hidden_seen if may_see else None
            assert presence.last_seen == (None if hidden is None else from_ms(hidden))
            return
        if not may_see:
            assert (presence.last_seen, presence.sessions, presence.online_since) == (
                None,
                (),
                None,
            )
            return
        self.check_last_seen(user, presence.last_seen, before, after)
        live = self.live(user)
        assert {s.session_id for s in presence.sessions} == set(live)
        for one in presence.sessions:
            activity = live[one.session_id]
            if activity is None:
                assert before <= to_ms(one.last_seen) <= after
            else:
                assert to_ms(one.last_seen) == activity
            session = model.sessions[one.session_id]
            assert (one.idle, one.device) == (session.idle, session.device), (user, one)

    def ordered(self, users: set[str]) -> list[str]:
        """Users in list order: those held first (in an order of the store's own), then the
        others by last activity, newest first, ties by id."""
        seen = [(self.users[u].last_seen or 0, u) for u in users]
        return [u for t, u in sorted(seen, key=lambda p: (-p[0], p[1]))]

    def agrees(self, nodes: tuple[ListedUser, ...] | list[ListedUser], users: set[str]) -> None:
        held = {u for u in users if self.held_sessions(u)}
        listed = [n.user_id for n in nodes]
        assert set(listed[: len(held)]) == held, (listed, held)
        assert listed[len(held) :] == self.ordered(users - held)

    # --- steps ---

    @rule(
        user=st.sampled_from(USERS),
        session=st.sampled_from(SESSIONS),
        age=st.sampled_from(AGES_S),
        idle=st.sampled_from([False, False, True]),
        device=st.sampled_from(DEVICES),
    )
    def touch(self, user: str, session: str, age: float, idle: bool, device: str | None) -> None:
        at = datetime.now(UTC) - timedelta(seconds=age)
        at_ms = to_ms(at)
        model = self.users[user]
        if session in model.revoked:
            try:
                self.run(self.store.touch(user, session, at, device, idle=idle))
            except SessionRevokedError:
                return
            raise AssertionError("a revoked session was accepted")
        if age <= EXPIRING_AGE_S and self.sessions_full(user, session):
            with pytest.raises(BadInputError, match="PRESENCE_MAX_SESSIONS"):
                self.run(self.store.touch(user, session, at, device, idle=idle))
            return
        self.run(self.store.touch(user, session, at, device, idle=idle))
        self.settle(user)
        self.record_touch(user, session, at_ms, idle=idle, device=device)
        if age == EXPIRING_AGE_S:
            self.pass_moment(at_ms + WINDOW_MS)
            self.pending.add(user)

    @rule(users=st.lists(st.sampled_from(USERS), max_size=4))
    def touch_many(self, users: list[str]) -> None:
        before = self.server_ms()
        recorded = self.run(self.store.touch_many(users))
        after = self.server_ms()
        accepted = [u for u in dict.fromkeys(users) if "default" not in self.users[u].revoked]
        assert recorded == len(accepted)
        for user in accepted:
            self.settle(user)
            if self.held_sessions(user):
                # Held, lastSeen is the present: learn the moment from the default session's
                # activity if it is not held itself (else only its day is kept).
                sessions = self.run(self.store.presence(user)).sessions
                touched = [s for s in sessions if s.session_id == "default"]
                default = self.users[user].sessions.get("default")
                at_ms = before if default and default.held else to_ms(touched[0].last_seen)
                assert before <= at_ms <= after
                self.record_touch(user, "default", at_ms)
                continue
            # The server's clock chose the moment (one per shard, each its own script): learn
            # it from each user, and check it.
            last_seen = self.run(self.store.presence(user)).last_seen
            assert last_seen is not None
            at_ms = to_ms(last_seen)
            assert before <= at_ms <= after
            self.record_touch(user, "default", at_ms)

    @rule(
        proc=st.sampled_from(PROCESSES),
        user=st.sampled_from(USERS),
        session=st.sampled_from(SESSIONS),
    )
    def open_session(self, proc: int, user: str, session: str) -> None:
        model = self.users[user]
        if session in model.revoked:
            try:
                self.run(self.procs[proc].open_session(user, session))
            except SessionRevokedError:
                return
            raise AssertionError("a revoked session was opened")
        if self.sessions_full(user, session):
            with pytest.raises(BadInputError, match="PRESENCE_MAX_SESSIONS"):
                self.run(self.procs[proc].open_session(user, session))
            return
        before = self.server_ms()
        opened = self.run(self.procs[proc].open_session(user, session))
        assert before <= to_ms(opened.at) <= self.server_ms()
        self.settle(user)
        # A holder of the same session is replaced: its close finds it gone.
        self.take_opening(proc, user, opened)
        self.held.append((proc, opened.held))

    @rule(proc=st.sampled_from(PROCESSES), age=st.sampled_from(RENEWAL_AGES_S))
    def renew_leases(self, proc: int, age: int) -> None:
        """A process renews its leases, `age` ago: so late that they lapsed, if it is over
        the TTL, as when the process stood still (SIGSTOP) or lost Redis for that long."""
        at_ms = to_ms(datetime.now(UTC) - timedelta(seconds=age))
        for lease in set(self.procs[proc].leases) - self.proc_leases[proc]:
            # Taken by an opening whose holder left before it was sent.
            self.lapse[lease] = self.now_ms() + TTL_MS
            self.bits[lease] = set()
            self.proc_leases[proc].add(lease)
        expected_lost = {lease for lease in self.proc_leases[proc] if not self.lease_live(lease)}
        lost = self.run(self.procs[proc].renew_leases(from_ms(at_ms)))
        assert set(lost) == expected_lost
        self.proc_leases[proc] -= expected_lost
        for lease in self.proc_leases[proc]:
            self.lapse[lease] = at_ms + TTL_MS
            self.active_days.setdefault(from_ms(at_ms).date().isoformat(), set()).update(
                self.bits[lease]
            )

    @rule(proc=st.sampled_from(PROCESSES), age=st.sampled_from(RENEWAL_AGES_S))
    def crash(self, proc: int, age: int) -> None:
        """The process dies (SIGKILL) after renewing its leases `age` ago: nobody renews or
        closes its sessions; a new process takes its place."""
        self.renew_leases(proc, age)
        self.held = [(p, held) for p, held in self.held if p != proc]
        self.procs[proc] = self.new_process()
        self.proc_leases[proc] = set()
        if proc == 0:
            self.sessions = HeldSessions(self.procs[0], TTL_MS)

    @rule(data=st.data())
    def close_session(self, data: st.DataObject) -> None:
        if not self.held:
            return
        proc, held = data.draw(st.sampled_from(self.held))
        self.held.remove((proc, held))
        before = self.server_ms()
        closed = self.run(self.procs[proc].close_session(held))
        user = held.user_id
        self.settle(user)
        one = self.users[user].sessions.get(held.session_id)
        assert closed == (one is not None and one.held == held)
        if closed:
            del self.users[user].sessions[held.session_id]
            self.forget_bit(user, held.lease)
            self.learn_end(user, before)

    @rule(
        user=st.sampled_from(USERS),
        session=st.sampled_from(SESSIONS),
        point=st.sampled_from(OPENING_POINTS),
    )
    def cancel_an_opening(self, user: str, session: str, point: str) -> None:
        """A presenceSession whose client leaves at `point` of its opening: whatever the
        opening did is undone, but for the activity it recorded."""
        if session in self.users[user].revoked or self.sessions_full(user, session):
            return  # refused, as the open_session step checks
        first = len(self.store.opened)
        before = self.server_ms()
        self.run(cancel_hold_at(self.sessions, self.store, user, session, point))
        assert self.sessions.count == 0
        for opened in self.store.opened[first:]:
            self.settle(user)
            # Bound to the opening's holder, replacing any other, then closed with it.
            self.take_opening(0, user, opened)
            del self.users[user].sessions[session]
            self.forget_bit(user, opened.held.lease)
            self.learn_end(user, before)

    @rule(user=st.sampled_from(USERS), session=st.none() | st.sampled_from(SESSIONS))
    def kick(self, user: str, session: str | None) -> None:
        before = self.server_ms()
        result = self.run(self.store.kick(user, session))
        self.settle(user)
        live = self.live(user)
        model = self.users[user]
        going = list(model.sessions) if session is None else [session]
        if session is None:
            assert result.kicked_sessions == len(live)
            model.revoked |= set(live)
        else:
            assert result.kicked_sessions == int(session in live)
            model.revoked.add(session)
        was_held = bool(self.held_sessions(user))
        for s in going:
            one = model.sessions.pop(s, None)
            if one is not None and one.held is not None:
                self.forget_bit(user, one.held.lease)
        assert result.online == bool(self.live(user))
        if was_held:
            self.learn_end(user, before)

    @rule(
        user=st.sampled_from(USERS),
        others=st.lists(st.sampled_from(USERS), max_size=3),
        mutual=st.booleans(),
    )
    def add_friends(self, user: str, others: list[str], mutual: bool) -> None:
        linked = set(others) - {user}
        owners = {user} | (linked if mutual else set())
        after = {o: self.friends[o] | (linked if o == user else {user}) for o in owners}
        if any(len(friends) > MAX_FRIENDS for friends in after.values()):
            with pytest.raises(BadInputError, match="PRESENCE_MAX_FRIENDS"):
                self.run(self.store.add_friends(user, others, mutual))
            return  # and nothing changed: the next reads of friends check it
        added = self.run(self.store.add_friends(user, others, mutual))
        new = set(others) - {user} - self.friends[user]
        assert added == len(new)
        self.friends[user] |= set(others) - {user}
        if mutual:
            for other in set(others) - {user}:
                self.friends[other].add(user)

    @rule(
        user=st.sampled_from(USERS),
        others=st.lists(st.sampled_from(USERS), max_size=3),
        mutual=st.booleans(),
    )
    def remove_friends(self, user: str, others: list[str], mutual: bool) -> None:
        removed = self.run(self.store.remove_friends(user, others, mutual))
        assert removed == len(set(others) & self.friends[user])
        self.friends[user] -= set(others)
        if mutual:
            for other in set(others) - {user}:
                self.friends[other].discard(user)

    @rule()
    def sweep(self) -> None:
        """Every lapsed lease's sessions end (a sweep takes up to a batch of users: more than
        the model has), and its users count as active on the day it lapsed."""
        self.run(self.store.sweep())
        for lease, lapse in self.lapse.items():
            if lease in self.swept or lapse >= self.now_ms():
                continue
            for user in USERS:
                self.settle(user)
            self.swept.add(lease)
            self.active_days.setdefault(from_ms(lapse).date().isoformat(), set()).update(
                self.bits[lease]
            )
        # Whatever time ended is announced now.
        self.pending.clear()

    # --- statuses ---

    @rule(user=st.sampled_from(USERS), chosen=st.sampled_from(list(ChosenStatus)))
    def set_status(self, user: str, chosen: ChosenStatus) -> None:
        model = self.users[user]
        before = self.server_ms()
        presence = self.run(self.store.set_status(user, chosen))
        after = self.server_ms()
        self.settle(user)  # what lapsed is ended first
        if chosen is ChosenStatus.INVISIBLE and model.chosen is not ChosenStatus.INVISIBLE:
            # Others see the lastSeen of this moment while the user stays invisible.
            if self.held_live(user):
                assert presence.hidden_last_seen is not None
                model.hidden_seen = to_ms(presence.hidden_last_seen)
                assert before <= model.hidden_seen <= after
            else:
                model.hidden_seen = model.last_seen
        model.chosen = chosen
        self.check_presence(presence, None, before, after)

    @rule(
        user=st.sampled_from(USERS),
        text=st.sampled_from([None, "lunch", "in a call"]),
        emoji=st.sampled_from([None, "\N{HAMBURGER}"]),
        ends=st.sampled_from(ENDS),
    )
    def set_custom_status(
        self, user: str, text: str | None, emoji: str | None, ends: str | None
    ) -> None:
        ahead_ms = {None: None, "later": 3_600_000, "soon": 200}[ends]
        expires_ms = None if ahead_ms is None else self.server_ms() + ahead_ms
        expires = None if expires_ms is None else from_ms(expires_ms)
        before = self.server_ms()
        presence = self.run(self.store.set_custom_status(user, text, emoji, expires))
        after = self.server_ms()
        self.settle(user)
        self.users[user].custom = None if text is None else CustomStatus(text, emoji, expires)
        self.check_presence(presence, None, before, after)
        if text is not None and expires_ms is not None and ends == "soon":
            self.pass_moment(expires_ms)
            self.pending.add(user)

    @rule(user=st.sampled_from(USERS), visible=st.sampled_from(list(Visibility)))
    def set_last_seen_visibility(self, user: str, visible: Visibility) -> None:
        before = self.server_ms()
        presence = self.run(self.store.set_last_seen_visibility(user, visible))
        after = self.server_ms()
        self.settle(user)
        self.users[user].visible = visible
        self.check_presence(presence, None, before, after)

    @rule(user=st.sampled_from(USERS), session=st.sampled_from(SESSIONS), idle=st.booleans())
    def set_session_idle(self, user: str, session: str, idle: bool) -> None:
        model = self.users[user]
        one = model.sessions.get(session)
        if session in model.revoked or one is None or not self.session_live(one):
            refusal = SessionRevokedError if session in model.revoked else BadInputError
            try:
                self.run(self.store.set_session_idle(user, session, idle=idle))
            except refusal:
                return
            raise AssertionError("setSessionIdle of a session that is not live was accepted")
        before = self.server_ms()
        presence = self.run(self.store.set_session_idle(user, session, idle=idle))
        after = self.server_ms()
        self.settle(user)
        one.idle = idle
        self.check_presence(presence, None, before, after)

    # --- every read agrees with the model after every step ---

    @invariant()
    def presence_agrees(self) -> None:
        """presence and presences, as a backend and as each user reads them."""
        for user in USERS:
            before = self.server_ms()
            presence = self.run(self.store.presence(user))
            after = self.server_ms()
            self.check_presence(presence, None, before, after)
        for reader in USERS:
            before = self.server_ms()
            presences = self.run(self.store.presence_many(USERS, reader))
            after = self.server_ms()
            assert [p.user_id for p in presences] == USERS
            for presence in presences:
                self.check_presence(presence, reader, before, after)

    @invariant()
    def events_agree(self) -> None:
        """Each event follows from what each kind of reader was told before; once the sweep
        has announced what time ended, each was told what they read."""
        heard = self.run(self.tap.heard())
        self.feed_agrees(heard)
        for event in heard:
            others_only = PresenceChange.for_others_only(event)
            if event.kind not in LOOKED and not others_only:
                continue
            change = PresenceChange.of(event)
            views = {
                "backend": None if others_only else change,
                "friend": change.seen_by_others(event, in_friend_set=True),
                "other": change.seen_by_others(event, in_friend_set=False),
            }
            for kind, seen in views.items():
                if seen is None:
                    continue
                told = self.told[kind][event.user_id]
                now: Told = (seen.online, seen.status, seen.custom)
                assert follows(told, seen.kind, now), (kind, told, seen.kind, now)
                self.told[kind][event.user_id] = now
        for user in USERS:
            if user in self.pending or self.doubtful(user):
                continue
            for kind in READER_KINDS:
                assert self.told[kind][user] == self.seen(user, kind), (kind, user)
        self.versions_agree()

    def versions_agree(self) -> None:
        """A read and the last event of a user carry the same version; other end users see
        none. (After the checks above, which compare with the model at their moment.)"""
        for user in USERS:
            assert self.run(self.store.presence(user)).version == self.versions[user]
            assert self.run(self.store.presence(user, reader=user)).version == self.versions[user]
            other = next(u for u in USERS if u != user)
            assert self.run(self.store.presence(user, reader=other)).version is None

    def feed_agrees(self, heard: list[PublishedEvent]) -> None:
        """Each shard's feed holds, in order, one entry per change announced there and no
        other, each the event as published; a user's version counts their changes."""
        shards = self.settings().shards
        kept: dict[int, list[PublishedEvent]] = {}
        for event in heard:
            if event.kind in FEED_KINDS:
                self.versions[event.user_id] += 1
            if event.kind in FEED_KINDS or event.kind == "":
                assert event.version == self.versions[event.user_id], event
                kept.setdefault(shard_of(event.user_id, shards), []).append(event)
            else:
                assert (event.version, event.feed_id) == (0, ""), event
        for shard in range(shards):
            feed = Keys.of_shard(shard).feed
            after = self.feed_read.get(shard, "-")
            start = after if after == "-" else "(" + after
            entries: list[tuple[Any, dict[Any, Any]]] = self.run(
                self.redis.xrange(feed, start, "+")  # type: ignore[arg-type]
            )
            events = kept.get(shard, [])
            assert [text(i) for i, _ in entries] == [e.feed_id for e in events]
            for (_, fields), event in zip(entries, events, strict=True):
                assert {text(k): json.loads(v) for k, v in fields.items()} == {"u": [*event[:12]]}
            if entries:
                self.feed_read[shard] = text(entries[-1][0])

    @invariant()
    def lists_agree(self) -> None:
        online = {u for u in USERS if self.live(u)}
        page: Page = self.run(self.store.online_users(first=2))
        nodes = list(page.nodes)
        while page.has_next_page:
            page = self.run(self.store.online_users(first=2, after=page.end_cursor))
            nodes += page.nodes
        self.agrees(nodes, online)
        doubtful = {u for u in USERS if self.doubtful(u)}
        assert len(online) <= page.total_count <= len(online | doubtful)
        # End users do not see those who chose INVISIBLE.
        invisible = {u for u in USERS if self.users[u].chosen is ChosenStatus.INVISIBLE}
        page = self.run(self.store.online_users(first=1000, reader=USERS[0]))
        self.agrees(page.nodes, online - invisible)
        assert len(online - invisible) <= page.total_count <= len((online | doubtful) - invisible)
        for user in USERS:
            friends_online = self.run(self.store.online_friends(user, first=1000))
            self.agrees(friends_online.nodes, online & self.friends[user])
            assert friends_online.total_count == len(online & self.friends[user])
            to_user = self.run(self.store.online_friends(user, first=1000, reader=user))
            self.agrees(to_user.nodes, (online & self.friends[user]) - invisible)
            assert to_user.total_count == len((online & self.friends[user]) - invisible)
            assert self.run(self.store.friends(user)) == sorted(self.friends[user])
        recent = self.run(
            self.store.active_in_range(datetime.now(UTC) - timedelta(minutes=5), datetime.now(UTC))
        )
        cutoff = self.now_ms() - 5 * 60_000
        in_range = {
            u
            for u in USERS
            if self.held_live(u)
            or (not self.held_sessions(u) and (self.users[u].last_seen or 0) >= cutoff)
        }
        shown = [n for n in recent.nodes if n.user_id not in doubtful]
        self.agrees(shown, in_range)
        assert all(n.online == (n.user_id in online) for n in shown)

    def live_devices(self, user: str) -> set[str | None]:
        return {one.device for one in self.users[user].sessions.values() if self.session_live(one)}

    @invariant()
    def filtered_lists_agree(self) -> None:
        """onlineUsers(filter:) lists what the model says, whatever wrote the users last: the
        indexes follow every step. A user whose presence changed by time alone since the last
        sweep (or whose leases lapsed) may be found as they were until then."""
        online = {u for u in USERS if self.live(u)}
        unsure = self.pending | {u for u in USERS if self.doubtful(u)}
        invisible = {u for u in USERS if self.users[u].chosen is ChosenStatus.INVISIBLE}
        checks: list[tuple[OnlineFilter, str | None, Callable[[str], bool]]] = [
            (OnlineFilter(device="web"), None, lambda u: "web" in self.live_devices(u)),
            (OnlineFilter(device="ios"), USERS[0], lambda u: "ios" in self.live_devices(u)),
            (OnlineFilter(user_id_prefix="d"), None, lambda u: u.startswith("d")),
            (OnlineFilter(statuses=(Status.AWAY,)), None, lambda u: self.status(u) is Status.AWAY),
            (
                OnlineFilter(statuses=(Status.ONLINE, Status.INVISIBLE)),
                None,
                lambda u: self.status(u) in {Status.ONLINE, Status.INVISIBLE},
            ),
            (
                OnlineFilter(statuses=(Status.ONLINE, Status.INVISIBLE, Status.BUSY)),
                USERS[1],
                lambda u: self.status(u) in {Status.ONLINE, Status.BUSY},
            ),
            (
                OnlineFilter(statuses=(Status.BUSY, Status.AWAY), device="web"),
                None,
                lambda u: (
                    self.status(u) in {Status.BUSY, Status.AWAY} and "web" in self.live_devices(u)
                ),
            ),
        ]
        for kept, reader, keeps in checks:
            page: Page = self.run(self.store.online_users(2, None, reader, kept=kept))
            nodes = list(page.nodes)
            while page.has_next_page:
                page = self.run(self.store.online_users(2, page.end_cursor, reader, kept=kept))
                nodes += page.nodes
            hidden = invisible if reader else set()
            want = {u for u in online - unsure - hidden if keeps(u)}
            self.agrees([n for n in nodes if n.user_id not in unsure], want)
            assert len(want) <= page.total_count <= len(want | unsure), (kept, page)

    @invariant()
    def todays_stats_agree(self) -> None:
        today = datetime.now(UTC).date()
        stats = self.run(self.store.weekly_stats(today))
        days = [(today - timedelta(days=6 - i)).isoformat() for i in range(7)]
        assert [d.active_users for d in stats.days] == [
            len(self.active_days.get(d, ())) for d in days
        ]
        assert stats.unique_users == len(
            set().union(*(self.active_days.get(d, set()) for d in days))
        )


def follows(told: Told, kind: EventKind, now: Told) -> bool:
    """Whether an event of this kind, leaving a reader with `now`, follows from what they
    were told before: ONLINE after offline, OFFLINE after online, KICKED of a user online,
    STATUS a change of status or custom status that leaves online as it was."""
    online, status, _ = now
    if (status is Status.OFFLINE) == online:
        return False
    if kind is EventKind.ONLINE:
        return not told[0] and online
    if kind is EventKind.OFFLINE:
        return told[0] and not online
    if kind is EventKind.KICKED:
        return told[0]
    return told[0] == online and told[1:] != now[1:]


def test_store_agrees_with_the_model(redis_server: RedisServer) -> None:
    PresenceModel.redis_url = redis_server.url
    run_state_machine_as_test(
        PresenceModel,
        settings=model_runs(max_examples=40),
    )


# --- the same model, with users spread over three shards ----------------------------------


class ShardedModel(PresenceModel):
    deployment = MODEL_SETTINGS

    def connect(self) -> AnyRedis:
        return client_for(self.deployment)

    def settings(self) -> Settings:
        return dataclasses.replace(
            self.deployment,
            connection_ttl_ms=TTL_MS,
            max_sessions=MAX_SESSIONS,
            max_friends=MAX_FRIENDS,
        )

    async def listen(self) -> None:
        """One Redis: as above. A cluster's classic PUBLISH reaches every node: one
        connection to one node hears every event, after which each master marks what it
        published. With sharded pub/sub, each shard's channel on its master."""
        client = self.redis
        if not isinstance(client, RedisCluster):
            assert isinstance(client, Redis)
            self.redis_url = str(self.deployment.redis_url)
            await super().listen()
            return
        if not self.store.sharded_events:
            channel = self.store.every_user_channel(0)
            subscriber = cluster_subscriber(client, self.deployment.redis_cluster_nodes)
            self.tap.clients.append(subscriber)

            async def mark_everywhere(token: str) -> int:
                masters = client.get_primaries()
                for node in masters:
                    await client.execute_command("PUBLISH", channel, token, target_nodes=node)
                return len(masters)

            await self.tap.add(subscriber.pubsub(), channel, mark_everywhere, sharded=False)
            return
        for route in range(self.store.event_routes):
            channel = self.store.every_user_channel(route)
            pubsub = await ShardedSubscriber(client).pubsub_for(channel, again=False)

            async def mark(token: str, channel: str = channel) -> int:
                node = client.get_node_from_key(channel)
                await client.execute_command("SPUBLISH", channel, token, target_nodes=node)
                return 1

            await self.tap.add(pubsub, channel, mark, sharded=True)


@pytest.mark.parametrize(
    "deployment", ["three-shards", "cluster", "sharded-cluster"], indirect=True
)
def test_sharded_store_agrees_with_the_model(deployment: Settings) -> None:
    # "ann" lives in shard 0, "bob", "cy" and "dee" in shard 2.
    assert {shard_of(user, 3) for user in USERS} == {0, 2}
    ShardedModel.deployment = deployment
    run_state_machine_as_test(
        ShardedModel,
        settings=model_runs(max_examples=20),
    )
