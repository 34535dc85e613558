"""The places of the store agree with a simple in-memory model of docs/semantics.md, whatever
the order of joins, leaves, replacements, state updates, kicks, processes that stand still or
die, and sweeps: a hypothesis state machine on real Redis, with two processes, checking every
place's members and counts after every step.

Time passing is modelled as in tests/presence/test_model.py: a lease renewed 0 or 20 s ago is live, one
renewed 40 or 90 s ago has lapsed (the TTL is 30 s)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from gql_presence.running.connection import client_for, redis_client
from gql_presence.running.redis_server import RedisServer
from gql_presence.settings import Settings
from gql_presence.store import HeldPlaceSession, Lease, PresenceStore
from gql_presence.store.client import AnyRedis
from gql_presence.store.days import to_ms
from gql_presence.store.errors import BadInputError, SessionRevokedError
from tests.conftest import TEST_SETTINGS
from tests.helpers import model_runs

PLACES = ["doc", "lobby"]
USERS = ["ann", "bob", "cy"]
SESSIONS = ["tab", "phone"]
PROCESSES = [0, 1]
RENEWAL_AGES_S = [0, 20, 40, 90]
MODEL_SETTINGS = dataclasses.replace(TEST_SETTINGS, connection_ttl_ms=30_000)
TTL_MS = MODEL_SETTINGS.connection_ttl_ms
STATES = st.none() | st.fixed_dictionaries({"x": st.integers(0, 3)})
T = TypeVar("T")
pytestmark = pytest.mark.slow


@dataclasses.dataclass
class Member:
    held: HeldPlaceSession
    joined_ms: int
    state: dict[str, int] | None


class PlacesModel(RuleBasedStateMachine):
    redis_url = ""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.redis = self.connect()
        self.procs = [PresenceStore(self.redis, self.settings()) for _ in PROCESSES]
        # Per place, its members by (user, session).
        self.places: dict[str, dict[tuple[str, str], Member]] = {p: {} for p in PLACES}
        self.revoked: set[tuple[str, str]] = set()
        self.lapse: dict[Lease, int] = {}
        self.swept: set[Lease] = set()

    def connect(self) -> AnyRedis:
        return redis_client(self.redis_url)

    def settings(self) -> Settings:
        return MODEL_SETTINGS

    def run(self, call: Awaitable[T]) -> T:
        return self.loop.run_until_complete(call)

    def teardown(self) -> None:
        self.run(self.redis.aclose())
        self.loop.close()

    @initialize()
    def empty_store(self) -> None:
        self.run(self.redis.flushall())

    def now_ms(self) -> int:
        return to_ms(datetime.now(UTC))

    def live(self, lease: Lease) -> bool:
        return lease not in self.swept and self.lapse[lease] >= self.now_ms()

    def end_lapsed(self, place: str) -> None:
        """What a write to a member, or the sweep, does first: members of lapsed leases go."""
        members = self.places[place]
        for key in [k for k, m in members.items() if not self.live(m.held.lease)]:
            del members[key]

    # --- steps ---

    @rule(
        proc=st.sampled_from(PROCESSES),
        place=st.sampled_from(PLACES),
        user=st.sampled_from(USERS),
        session=st.sampled_from(SESSIONS),
        state=STATES,
    )
    def join(
        self, proc: int, place: str, user: str, session: str, state: dict[str, int] | None
    ) -> None:
        if (user, session) in self.revoked:
            with pytest.raises(SessionRevokedError):
                self.run(self.procs[proc].open_place_session(place, user, session, state))
            return
        opened = self.run(self.procs[proc].open_place_session(place, user, session, state))
        self.lapse.setdefault(opened.held.lease, self.now_ms() + TTL_MS)
        old = self.places[place].get((user, session))
        if old is not None and self.live(old.held.lease):
            # A replacement keeps the moment it joined.
            assert to_ms(opened.joined_at) == old.joined_ms
        self.places[place][(user, session)] = Member(opened.held, to_ms(opened.joined_at), state)

    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        held = [m.held for members in self.places.values() for m in members.values()]
        if not held:
            return
        one = data.draw(st.sampled_from(held))
        key = (one.user_id, one.session_id)
        member = self.places[one.place_id].get(key)
        left = self.run(self.procs[0].close_place_session(one))
        assert left == (member is not None and member.held == one and self.live(one.lease))
        # Its own session leaves; one a newer holder holds stays, unless its lease lapsed.
        if member is not None and (member.held == one or not self.live(member.held.lease)):
            del self.places[one.place_id][key]

    @rule(
        place=st.sampled_from(PLACES),
        user=st.sampled_from(USERS),
        session=st.sampled_from(SESSIONS),
        x=st.integers(0, 3),
    )
    def set_state(self, place: str, user: str, session: str, x: int) -> None:
        member = self.places[place].get((user, session))
        if member is None or not self.live(member.held.lease):
            with pytest.raises(BadInputError):
                self.run(self.procs[0].set_place_state(place, user, session, {"x": x}))
            return
        self.run(self.procs[0].set_place_state(place, user, session, {"x": x}))
        member.state = {"x": x}

    @rule(user=st.sampled_from(USERS), session=st.none() | st.sampled_from(SESSIONS))
    def kick(self, user: str, session: str | None) -> None:
        """A kick revokes the ids; the processes holding place sessions of them take them out
        of their places, as they do when they hear of it."""
        self.run(self.procs[0].kick(user, session))
        sessions = SESSIONS if session is None else [session]
        self.revoked |= {(user, s) for s in sessions if session is not None}
        for members in self.places.values():
            for key in [k for k in members if k[0] == user and k[1] in sessions]:
                self.run(self.procs[0].close_place_session(members[key].held))
                del members[key]

    @rule(proc=st.sampled_from(PROCESSES), age=st.sampled_from(RENEWAL_AGES_S))
    def renew(self, proc: int, age: int) -> None:
        """A process renews its leases `age` ago: lapsed past the TTL, as one that stood still."""
        at = datetime.now(UTC) - timedelta(seconds=age)
        store = self.procs[proc]
        expected_lost = {lease for lease in store.leases if not self.live(lease)}
        live = set(store.leases) - expected_lost
        assert set(self.run(store.renew_leases(at))) == expected_lost
        for lease in live:
            self.lapse[lease] = to_ms(at) + TTL_MS

    @rule(proc=st.sampled_from(PROCESSES))
    def crash(self, proc: int) -> None:
        """The process dies: its leases are renewed by nobody; a new process takes its place."""
        self.procs[proc] = PresenceStore(self.redis, self.settings())

    @rule()
    def sweep(self) -> None:
        self.run(self.procs[0].sweep())
        for place in PLACES:
            self.end_lapsed(place)
        self.swept |= {lease for lease, lapse in self.lapse.items() if lapse < self.now_ms()}

    # --- every read agrees with the model ---

    @invariant()
    def members_agree(self) -> None:
        counts = self.run(self.procs[0].place_counts(PLACES))
        for place, count in zip(PLACES, counts, strict=True):
            live = {k: m for k, m in self.places[place].items() if self.live(m.held.lease)}
            page = self.run(self.procs[0].place_members(place, first=2))
            nodes = list(page.nodes)
            while page.has_next_page:
                page = self.run(self.procs[0].place_members(place, first=2, after=page.end_cursor))
                nodes += page.nodes
            expected = sorted(live.items(), key=lambda kv: (-kv[1].joined_ms, kv[0]))
            assert [(n.user_id, n.session_id) for n in nodes] == [k for k, _ in expected]
            assert [None if n.state is None else json.loads(n.state) for n in nodes] == [
                m.state for _, m in expected
            ]
            assert page.total_count == count.sessions == len(live)
            users = {u for u, _ in live}
            doubtful = {u for (u, _), m in self.places[place].items()} - users
            assert len(users) <= page.users <= len(users | doubtful)
            assert count.users == page.users


def test_places_agree_with_the_model(redis_server: RedisServer) -> None:
    PlacesModel.redis_url = redis_server.url
    run_state_machine_as_test(PlacesModel, settings=model_runs(max_examples=40))


class ShardedPlacesModel(PlacesModel):
    deployment = MODEL_SETTINGS

    def connect(self) -> AnyRedis:
        return client_for(self.deployment)

    def settings(self) -> Settings:
        return dataclasses.replace(self.deployment, connection_ttl_ms=TTL_MS)


@pytest.mark.parametrize(
    "deployment", ["three-shards", "cluster", "sharded-cluster"], indirect=True
)
def test_sharded_places_agree_with_the_model(deployment: Settings) -> None:
    ShardedPlacesModel.deployment = deployment
    run_state_machine_as_test(ShardedPlacesModel, settings=model_runs(max_examples=15))
