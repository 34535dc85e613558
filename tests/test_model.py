"""The store agrees with a simple in-memory model of docs/semantics.md, whatever the order of
touches (now and backfilled), connection-bound sessions (opened, renewed, closed, replaced,
left to expire when their process crashes, and held by a holder cancelled at any point of
its opening), kicks, and friend changes: a hypothesis state
machine on real Redis, checking every read after every step.

Time passing is modelled by backfilled activity: a touch at 0, 20 or 40 s ago is live, one at
90 s or 2 h ago is not (the window is 60 s); a connection-bound session opened or renewed 0 or
20 s ago is live, one 40 or 90 s ago is not (its TTL is 30 s). Every edge is far enough away
that the test's own running time does not matter.
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
from gql_presence.store import HeldSession, Page, shard_of
from gql_presence.store.client import AnyRedis
from gql_presence.store.days import from_ms, to_ms
from gql_presence.store.errors import SessionRevokedError
from tests.conftest import TEST_SETTINGS
from tests.helpers import OPENING_POINTS, PausingStore, cancel_hold_at

USERS = ["ann", "bob", "cy", "dee"]
SESSIONS = ["default", "phone", "web"]
AGES_S = [0, 20, 40, 90, 7200]
CONNECTION_AGES_S = [0, 20, 40, 90]
MODEL_SETTINGS = dataclasses.replace(TEST_SETTINGS, connection_ttl_ms=30_000)
WINDOW_MS = MODEL_SETTINGS.window_ms
TTL_MS = MODEL_SETTINGS.connection_ttl_ms
T = TypeVar("T")
# Hundreds of steps on real Redis.
pytestmark = pytest.mark.slow


@dataclasses.dataclass
class ModelSession:
    activity_ms: int  # the last touch, or the last renewal of a connection-bound session
    expiry_ms: int  # live through this moment
    generation: int | None = None  # the holder of a connection-bound session


@dataclasses.dataclass
class ModelUser:
    last_seen: int | None = None
    sessions: dict[str, ModelSession] = dataclasses.field(default_factory=dict)
    revoked: set[str] = dataclasses.field(default_factory=set)


class PresenceModel(RuleBasedStateMachine):
    redis_url = ""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.redis, self.store = self.connect()
        self.users: dict[str, ModelUser] = {u: ModelUser() for u in USERS}
        self.friends: dict[str, set[str]] = {u: set() for u in USERS}
        self.active_days: dict[str, set[str]] = {}
        # The connection-bound sessions a running process holds and renews.
        self.held: list[HeldSession] = []
        # Holds as presenceSession makes them, for holders cancelled while they open.
        self.sessions = HeldSessions(self.store, TTL_MS)

    def connect(self) -> tuple[AnyRedis, PausingStore]:
        """The client and the store under test: one shard of redis_url (ShardedModel below
        checks shards against this model too). The store is a real one that a step can stop
        at a point of a call."""
        redis = redis_client(self.redis_url)
        return redis, PausingStore(redis, MODEL_SETTINGS)

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

    def live(self, user: str) -> dict[str, int]:
        """The user's live sessions and their activity."""
        now = self.now_ms()
        sessions = self.users[user].sessions.items()
        return {s: one.activity_ms for s, one in sessions if one.expiry_ms >= now}

    def live_connection(self, user: str, session: str) -> ModelSession | None:
        one = self.users[user].sessions.get(session)
        if one is None or one.generation is None or one.expiry_ms < self.now_ms():
            return None
        return one

    def record_activity(self, user: str, at_ms: int) -> None:
        model = self.users[user]
        model.last_seen = max(model.last_seen or at_ms, at_ms)
        self.active_days.setdefault(from_ms(at_ms).date().isoformat(), set()).add(user)

    def record_touch(self, user: str, session: str, at_ms: int) -> None:
        """A touch moves a session's activity, unless the session is connection-bound."""
        self.record_activity(user, at_ms)
        if at_ms < self.now_ms() - WINDOW_MS or self.live_connection(user, session):
            return
        old = self.users[user].sessions.get(session)
        if old is not None and old.generation is None:
            at_ms = max(at_ms, old.activity_ms)
        self.users[user].sessions[session] = ModelSession(at_ms, at_ms + WINDOW_MS)

    def listing(self, users: set[str]) -> list[str]:
        seen = [(self.users[u].last_seen, u) for u in users if self.users[u].last_seen is not None]
        return [u for t, u in sorted(seen, key=lambda p: (-(p[0] or 0), p[1]))]

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
        self.record_touch(user, session, at_ms)

    @rule(users=st.lists(st.sampled_from(USERS), max_size=4))
    def touch_many(self, users: list[str]) -> None:
        before = self.server_ms()
        recorded = self.run(self.store.touch_many(users))
        after = self.server_ms()
        accepted = [u for u in dict.fromkeys(users) if "default" not in self.users[u].revoked]
        assert recorded == len(accepted)
        if not accepted:
            return
        # The server's clock chose the moment (one per shard, each its own script): learn it
        # from each user, and check it.
        for user in accepted:
            last_seen = self.run(self.store.presence(user)).last_seen
            assert last_seen is not None
            at_ms = to_ms(last_seen)
            assert before <= at_ms <= after
            self.record_touch(user, "default", at_ms)

    def server_ms(self) -> int:
        seconds, micros = self.run(self.redis.time())
        return int(seconds) * 1000 + int(micros) // 1000

    @rule(
        user=st.sampled_from(USERS),
        session=st.sampled_from(SESSIONS),
        age=st.sampled_from(CONNECTION_AGES_S),
    )
    def open_session(self, user: str, session: str, age: int) -> None:
        at = datetime.now(UTC) - timedelta(seconds=age)
        model = self.users[user]
        if session in model.revoked:
            try:
                self.run(self.store.open_session(user, session, at))
            except SessionRevokedError:
                return
            raise AssertionError("a revoked session was opened")
        opened = self.run(self.store.open_session(user, session, at))
        at_ms = to_ms(opened.at)
        assert at_ms == to_ms(at)
        self.record_activity(user, at_ms)
        if at_ms + TTL_MS < self.now_ms():
            assert opened.held is None
            return
        assert opened.held is not None
        # A holder of the same session is replaced: its renewals and close find it gone.
        model.sessions[session] = ModelSession(at_ms, at_ms + TTL_MS, opened.held.generation)
        self.held.append(opened.held)

    @rule(age=st.sampled_from(CONNECTION_AGES_S))
    def renew_sessions(self, age: int) -> None:
        at_ms = to_ms(datetime.now(UTC) - timedelta(seconds=age))
        lost = self.run(self.store.renew_sessions(self.held, from_ms(at_ms)))
        expected_lost = []
        for held in self.held:
            one = self.live_connection(held.user_id, held.session_id)
            if one is None or one.generation != held.generation:
                expected_lost.append(held)
                continue
            self.record_activity(held.user_id, at_ms)
            if at_ms + TTL_MS > one.expiry_ms:
                one.activity_ms, one.expiry_ms = at_ms, at_ms + TTL_MS
        assert lost == expected_lost
        self.held = [held for held in self.held if held not in lost]

    @rule(data=st.data())
    def close_session(self, data: st.DataObject) -> None:
        if not self.held:
            return
        held = data.draw(st.sampled_from(self.held))
        self.held.remove(held)
        one = self.users[held.user_id].sessions.get(held.session_id)
        live = self.live_connection(held.user_id, held.session_id)
        closed = self.run(self.store.close_session(held))
        assert closed == (live is not None and live.generation == held.generation)
        if one is not None and one.generation == held.generation:
            del self.users[held.user_id].sessions[held.session_id]

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
        before = len(self.store.opened)
        self.run(cancel_hold_at(self.sessions, self.store, user, session, point))
        assert self.sessions.count == 0
        for opened in self.store.opened[before:]:
            self.record_activity(user, to_ms(opened.at))
            # Bound to the opening's holder, replacing any other, then closed with it.
            self.users[user].sessions.pop(session, None)
            if point == "catching up":
                # The holder renewed its session to learn whether the kick ended it, at a
                # moment of the server's clock: learn it, and check it.
                last_seen = self.run(self.store.presence(user)).last_seen
                assert last_seen is not None
                assert to_ms(opened.at) <= to_ms(last_seen) <= self.server_ms()
                self.record_activity(user, to_ms(last_seen))

    @rule()
    def crash(self) -> None:
        """The process holding the sessions dies: nobody renews or closes them."""
        self.held.clear()

    @rule(user=st.sampled_from(USERS), session=st.none() | st.sampled_from(SESSIONS))
    def kick(self, user: str, session: str | None) -> None:
        live = self.live(user)
        result = self.run(self.store.kick(user, session))
        model = self.users[user]
        if session is None:
            assert result.kicked_sessions == len(live)
            model.revoked |= set(live)
            model.sessions.clear()
        else:
            assert result.kicked_sessions == int(session in live)
            model.revoked.add(session)
            model.sessions.pop(session, None)
        assert result.online == bool(self.live(user))

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
        self.run(self.store.sweep())

    # --- every read agrees with the model after every step ---

    @invariant()
    def presence_agrees(self) -> None:
        for user in USERS:
            presence = self.run(self.store.presence(user))
            model = self.users[user]
            live = self.live(user)
            assert presence.online == bool(live)
            assert presence.last_seen == (
                None if model.last_seen is None else from_ms(model.last_seen)
            )
            expected = sorted(live.items(), key=lambda p: (-p[1], p[0]))
            assert [(s.session_id, to_ms(s.last_seen)) for s in presence.sessions] == expected

    @invariant()
    def lists_agree(self) -> None:
        online = {u for u in USERS if self.live(u)}
        page: Page = self.run(self.store.online_users(first=2))
        listed = [n.user_id for n in page.nodes]
        while page.has_next_page:
            page = self.run(self.store.online_users(first=2, after=page.end_cursor))
            listed += [n.user_id for n in page.nodes]
        assert listed == self.listing(online)
        assert page.total_count == len(online)
        for user in USERS:
            friends_online = self.run(self.store.online_friends(user, first=1000))
            assert [n.user_id for n in friends_online.nodes] == self.listing(
                online & self.friends[user]
            )
            assert self.run(self.store.friends(user)) == sorted(self.friends[user])
        recent = self.run(
            self.store.active_in_range(datetime.now(UTC) - timedelta(minutes=5), datetime.now(UTC))
        )
        cutoff = self.now_ms() - 5 * 60_000
        in_range = {u for u in USERS if (self.users[u].last_seen or 0) >= cutoff}
        assert [(n.user_id, n.online) for n in recent.nodes] == [
            (u, u in online) for u in self.listing(in_range)
        ]

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
    deployment = TEST_SETTINGS

    def connect(self) -> tuple[AnyRedis, PausingStore]:
        redis = client_for(self.deployment)
        return redis, PausingStore(redis, self.deployment)


@pytest.mark.parametrize("deployment", ["three-shards", "cluster"], indirect=True)
def test_sharded_store_agrees_with_the_model(deployment: Settings) -> None:
    # "ann" lives in shard 0, "bob", "cy" and "dee" in shard 2.
    assert {shard_of(user, 3) for user in USERS} == {0, 2}
    ShardedModel.deployment = deployment
    run_state_machine_as_test(
        ShardedModel,
        settings=runs(max_examples=20),
    )
