"""The store agrees with a simple in-memory model of docs/semantics.md, whatever the order of
touches (now and backfilled), held sessions (opened, closed, replaced, held by a holder
cancelled at any point of its opening), processes that renew their leases late, stand still
past the TTL or die, kicks, sweeps and friend changes: a hypothesis state machine on real
Redis, with two processes, checking every read after every step.

Time passing is modelled by backfilled times: a touch at 0, 20 or 40 s ago is live, one at
90 s or 2 h ago is not (the window is 60 s); a lease renewed 0 or 20 s ago is live, one
renewed 40 or 90 s ago has lapsed (the TTL is 30 s). Every edge is far enough away that the
test's own running time does not matter. While a session is held its user's lastSeen is the
present: the model checks it against the server's clock around the read.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from gql_presence.realtime.held import HeldSessions
from gql_presence.running.connection import client_for, redis_client
from gql_presence.running.redis_server import RedisServer
from gql_presence.settings import Settings
from gql_presence.store import HeldSession, Lease, ListedUser, OpenedSession, Page, shard_of
from gql_presence.store.client import AnyRedis
from gql_presence.store.days import from_ms, to_ms
from gql_presence.store.errors import SessionRevokedError
from tests.conftest import TEST_SETTINGS
from tests.helpers import OPENING_POINTS, PausingStore, cancel_hold_at

USERS = ["ann", "bob", "cy", "dee"]
SESSIONS = ["default", "phone", "web"]
AGES_S = [0, 20, 40, 90, 7200]
RENEWAL_AGES_S = [0, 20, 40, 90]
PROCESSES = [0, 1]
MODEL_SETTINGS = dataclasses.replace(TEST_SETTINGS, connection_ttl_ms=30_000)
WINDOW_MS = MODEL_SETTINGS.window_ms
TTL_MS = MODEL_SETTINGS.connection_ttl_ms
T = TypeVar("T")
# Hundreds of steps on real Redis.
pytestmark = pytest.mark.slow


@dataclasses.dataclass
class ModelSession:
    activity_ms: int = 0  # a touched session's last activity
    expiry_ms: int = 0  # a touched session is live through this moment
    held: HeldSession | None = None  # a held session's holder, and its lease


@dataclasses.dataclass
class ModelUser:
    last_seen: int | None = None  # the last activity, while no session holds the user
    sessions: dict[str, ModelSession] = dataclasses.field(default_factory=dict)
    revoked: set[str] = dataclasses.field(default_factory=set)


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
        self.run(self.redis.aclose())
        self.loop.close()

    @initialize()
    def empty_store(self) -> None:
        self.run(self.redis.flushall())

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
            model.last_seen = max(self.lapse[one.held.lease] for one in lapsed.values() if one.held)

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

    def record_touch(self, user: str, session: str, at_ms: int) -> None:
        """A touch moves a session's activity, unless the session is held."""
        self.record_activity(user, at_ms)
        old = self.users[user].sessions.get(session)
        if at_ms < self.now_ms() - WINDOW_MS or (old is not None and old.held is not None):
            return
        if old is not None:
            at_ms = max(at_ms, old.activity_ms)
        self.users[user].sessions[session] = ModelSession(at_ms, at_ms + WINDOW_MS)

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
        model.sessions[opened.held.session_id] = ModelSession(held=opened.held)
        if old is not None and old.held is not None:
            self.forget_bit(user, old.held.lease)
        self.bits[lease].add(user)

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
        user=st.sampled_from(USERS), session=st.sampled_from(SESSIONS), age=st.sampled_from(AGES_S)
    )
    def touch(self, user: str, session: str, age: int) -> None:
        at = datetime.now(UTC) - timedelta(seconds=age)
        at_ms = to_ms(at)
        model = self.users[user]
        if session in model.revoked:
            try:
                self.run(self.store.touch(user, session, at))
            except SessionRevokedError:
                return
            raise AssertionError("a revoked session was accepted")
        self.run(self.store.touch(user, session, at))
        self.settle(user)
        self.record_touch(user, session, at_ms)

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
        if session in self.users[user].revoked:
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

    # --- every read agrees with the model after every step ---

    @invariant()
    def presence_agrees(self) -> None:
        for user in USERS:
            before = self.server_ms()
            presence = self.run(self.store.presence(user))
            after = self.server_ms()
            live = self.live(user)
            assert presence.online == bool(live)
            assert {s.session_id for s in presence.sessions} == set(live)
            for one in presence.sessions:
                activity = live[one.session_id]
                if activity is None:
                    assert before <= to_ms(one.last_seen) <= after
                else:
                    assert to_ms(one.last_seen) == activity
            held = self.held_sessions(user)
            if self.held_live(user):
                assert presence.last_seen is not None
                assert before <= to_ms(presence.last_seen) <= after
            elif held:
                lapsed = max(self.lapse[one.held.lease] for one in held if one.held)
                assert presence.last_seen == from_ms(lapsed)
            else:
                last_seen = self.users[user].last_seen
                assert presence.last_seen == (None if last_seen is None else from_ms(last_seen))

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
        for user in USERS:
            friends_online = self.run(self.store.online_friends(user, first=1000))
            self.agrees(friends_online.nodes, online & self.friends[user])
            assert friends_online.total_count == len(online & self.friends[user])
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


def runs(max_examples: int) -> settings:
    """max_examples runs of 20 steps each, however long a step on real Redis takes."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=20,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def test_store_agrees_with_the_model(redis_server: RedisServer) -> None:
    PresenceModel.redis_url = redis_server.url
    run_state_machine_as_test(
        PresenceModel,
        settings=runs(max_examples=40),
    )


# --- the same model, with users spread over three shards ----------------------------------


class ShardedModel(PresenceModel):
    deployment = MODEL_SETTINGS

    def connect(self) -> AnyRedis:
        return client_for(self.deployment)

    def settings(self) -> Settings:
        return dataclasses.replace(self.deployment, connection_ttl_ms=TTL_MS)


@pytest.mark.parametrize(
    "deployment", ["three-shards", "cluster", "sharded-cluster"], indirect=True
)
def test_sharded_store_agrees_with_the_model(deployment: Settings) -> None:
    # "ann" lives in shard 0, "bob", "cy" and "dee" in shard 2.
    assert {shard_of(user, 3) for user in USERS} == {0, 2}
    ShardedModel.deployment = deployment
    run_state_machine_as_test(
        ShardedModel,
        settings=runs(max_examples=20),
    )
