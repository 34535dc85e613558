"""Connection-bound sessions in the store, on Redis 6.2 and Valkey 9: live while their
process's lease is renewed, until closed, kicked or replaced; not live the moment that lease
lapses, and ended by the sweep then; and every rule of touched sessions (events, kicks,
revocation) kept. A lease renewal backfilled past the TTL stands for a process that stopped."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from gql_presence.realtime.held import EndReason, HeldSessions
from gql_presence.store import HeldSession, OpenedSession, PresenceStore, PublishedEvent
from gql_presence.store.days import to_ms
from gql_presence.store.errors import SessionRevokedError, StoreUnavailableError
from gql_presence.store.keys import Keys
from tests.conftest import TEST_SETTINGS, StoreFactory
from tests.helpers import (
    OPENING_POINTS,
    PausingStore,
    cancel_hold_at,
    eventually,
    kinds,
    published,
    published_in_full,
)

TTL_S = TEST_SETTINGS.connection_ttl_ms / 1000
KEYS = Keys()


def ago(**delta: float) -> datetime:
    return datetime.now(UTC) - timedelta(**delta)


async def opened(store: PresenceStore, user: str, session: str) -> HeldSession:
    return (await store.open_session(user, session)).held


async def online(store: PresenceStore, user: str) -> bool:
    return (await store.presence(user)).online


async def lapse(store: PresenceStore) -> None:
    """Makes the store's leases lapse a second ago: as if its process stopped renewing them
    a TTL and a second ago."""
    assert await store.renew_leases(at=ago(seconds=TTL_S + 1)) == []


async def test_an_open_session_is_live_and_its_activity_is_the_present(
    store: PresenceStore, channel: PubSub
) -> None:
    result = await store.open_session("ann", "tab")
    presence = await store.presence("ann")
    assert presence.online
    assert [s.session_id for s in presence.sessions] == ["tab"]
    assert presence.sessions[0].last_seen >= result.at
    assert presence.last_seen == presence.sessions[0].last_seen
    assert kinds(await published(channel)) == [("ONLINE", "ann", "", 1)]


async def test_closing_the_last_session_is_offline_at_once_and_announced(
    store: PresenceStore, channel: PubSub
) -> None:
    held = await opened(store, "ann", "tab")
    assert await store.close_session(held)
    closed_at = datetime.now(UTC)
    assert not await online(store, "ann")
    assert kinds(await published(channel)) == [("ONLINE", "ann", "", 1), ("OFFLINE", "ann", "", 0)]
    # History stays, last seen when the session ended; a second close changes nothing.
    last_seen = (await store.presence("ann")).last_seen
    assert last_seen is not None
    assert to_ms(last_seen) >= to_ms(closed_at) - 1_000
    assert not await store.close_session(held)
    assert await published(channel) == []


async def test_closing_one_of_two_sessions_keeps_the_user_online(
    store: PresenceStore, channel: PubSub
) -> None:
    held = await opened(store, "ann", "tab")
    await store.touch("ann", "phone")
    await store.close_session(held)
    presence = await store.presence("ann")
    assert presence.online
    assert [s.session_id for s in presence.sessions] == ["phone"]
    assert kinds(await published(channel)) == [("ONLINE", "ann", "", 1)]


async def test_a_renewed_lease_keeps_its_sessions_live_and_last_seen_the_present(
    store: PresenceStore,
) -> None:
    held = await opened(store, "ann", "tab")
    assert await store.renew_leases(at=ago(seconds=TTL_S - 5)) == []
    presence = await store.presence("ann")
    assert presence.online
    assert presence.last_seen is not None
    assert to_ms(presence.last_seen) >= to_ms(ago(seconds=1))
    assert await store.check_sessions([held]) == []


async def test_sessions_of_a_lapsed_lease_are_not_live_at_once_and_end_once_by_the_sweep(
    store: PresenceStore, channel: PubSub
) -> None:
    await opened(store, "ann", "tab")
    await store.add_friends("bob", ["ann"])
    await published(channel)
    await lapse(store)
    lapsed_at = ago(seconds=1)
    # Before any sweep, no reader shows the session.
    presence = await store.presence("ann")
    assert not presence.online
    assert presence.sessions == ()
    assert presence.last_seen is not None
    assert abs(to_ms(presence.last_seen) - to_ms(lapsed_at)) < 1_000
    assert (await store.online_users()).total_count == 0
    assert (await store.online_users()).nodes == ()
    assert (await store.online_friends("bob")).total_count == 0
    assert await published(channel) == []
    result = await store.sweep()
    assert result.lapsed == 1
    events = await published(channel)
    assert kinds(events) == [("OFFLINE", "ann", "", 0)]
    assert abs(events[0][2] - to_ms(lapsed_at)) < 1_000
    await store.sweep()
    assert await published(channel) == []
    assert (await store.presence("ann")).last_seen == presence.last_seen


async def test_a_process_that_finds_its_lease_lapsed_holds_anew_under_a_new_one(
    store: PresenceStore, channel: PubSub
) -> None:
    held = await opened(store, "ann", "tab")
    await lapse(store)
    assert [lease.slot for lease in await store.renew_leases()] == [held.lease.slot]
    assert await store.check_sessions([held]) == [held]
    again = await opened(store, "ann", "tab")
    assert again.lease != held.lease
    assert await online(store, "ann")
    # The user came back before the sweep ended the lapsed session: OFFLINE at the lapse,
    # then ONLINE, each once; the sweep finds nothing more to announce.
    await store.sweep()
    assert kinds(await published(channel)) == [
        ("ONLINE", "ann", "", 1),
        ("OFFLINE", "ann", "", 0),
        ("ONLINE", "ann", "", 1),
    ]
    assert await online(store, "ann")


async def test_a_user_held_by_two_processes_stays_online_when_one_lapses(
    make_store: StoreFactory, channel: PubSub
) -> None:
    first, second = make_store(), make_store()
    await opened(first, "ann", "tab")
    await opened(second, "ann", "phone")
    await lapse(first)
    presence = await second.presence("ann")
    assert presence.online
    assert [s.session_id for s in presence.sessions] == ["phone"]
    assert (await second.online_users()).total_count == 1
    await second.sweep()
    assert (await second.presence("ann")).online
    assert kinds(await published(channel)) == [("ONLINE", "ann", "", 1)]


async def test_a_user_held_by_two_processes_that_both_lapse_shows_no_session(
    make_store: StoreFactory, channel: PubSub
) -> None:
    first, second = make_store(), make_store()
    await opened(first, "ann", "tab")
    await opened(second, "ann", "phone")
    await first.add_friends("bob", ["ann"])
    await published(channel)
    await lapse(first)
    await lapse(second)
    presence = await first.presence("ann")
    assert (presence.online, presence.sessions) == (False, ())
    assert presence.last_seen is not None
    assert to_ms(presence.last_seen) <= to_ms(ago(seconds=1))
    assert (await first.online_users()).nodes == ()
    friends = await first.online_friends("bob")
    assert (friends.total_count, friends.nodes) == (0, ())
    await first.sweep()
    assert kinds(await published(channel)) == [("OFFLINE", "ann", "", 0)]
    assert (await first.online_users()).total_count == 0


async def test_lists_leave_out_the_users_of_a_lapsed_lease_whatever_their_number(
    make_store: StoreFactory,
) -> None:
    dead, alive = make_store(), make_store()
    for i in range(300):
        await opened(dead, f"d{i:03}", "tab")
    for i in range(3):
        await opened(alive, f"a{i}", "tab")
    await dead.touch("t")
    await lapse(dead)
    page = await alive.online_users(first=2)
    assert page.total_count == 4
    assert [node.user_id for node in page.nodes] == ["a0", "a1"]
    rest = await alive.online_users(first=5, after=page.end_cursor)
    assert [node.user_id for node in rest.nodes] == ["a2", "t"]
    assert not rest.has_next_page
    active = await alive.active_in_range(ago(minutes=5), datetime.now(UTC), first=10)
    assert [node.user_id for node in active.nodes] == ["a0", "a1", "a2", "t"]


async def test_a_held_user_is_active_in_a_range_that_ends_within_half_the_ttl(
    store: PresenceStore,
) -> None:
    await opened(store, "ann", "tab")
    window = await store.active_in_range(ago(hours=1), ago(seconds=TTL_S / 2 - 2))
    assert [node.user_id for node in window.nodes] == ["ann"]
    assert window.total_count == 1
    assert not (await store.active_in_range(ago(hours=1), ago(seconds=TTL_S))).nodes


async def test_a_lease_renewed_in_a_day_counts_its_users_active_that_day(
    store: PresenceStore,
) -> None:
    await opened(store, "ann", "tab")
    await store.renew_leases(at=ago(days=1))  # as a renewal made yesterday would have
    stats = await store.weekly_stats()
    assert [day.active_users for day in stats.days[-2:]] == [1, 1]


async def test_a_touch_of_a_held_session_moves_last_seen_only(store: PresenceStore) -> None:
    await opened(store, "ann", "tab")
    touched = await store.touch("ann", "tab")
    assert [s.session_id for s in touched.sessions] == ["tab"]
    await lapse(store)
    assert not await online(store, "ann")


async def test_touch_many_of_a_held_default_session_keeps_it_held(store: PresenceStore) -> None:
    await opened(store, "ann", "default")
    await store.touch_many(["ann"])
    await lapse(store)
    assert not await online(store, "ann")


async def test_a_second_opening_replaces_the_first_holder(
    store: PresenceStore, channel: PubSub
) -> None:
    first = await opened(store, "ann", "tab")
    second = await opened(store, "ann", "tab")
    assert second.generation != first.generation
    events = await published(channel)
    assert kinds(events) == [
        ("ONLINE", "ann", "", 1),
        ("REPLACED", "ann", "tab", second.generation),
    ]
    # The first holder holds it no more, and cannot close it.
    assert await store.check_sessions([first, second]) == [first]
    assert not await store.close_session(first)
    assert await online(store, "ann")
    assert await store.close_session(second)
    assert not await online(store, "ann")


async def test_a_kick_ends_the_holding_and_revokes_the_id(
    store: PresenceStore, channel: PubSub
) -> None:
    tab = await opened(store, "ann", "tab")
    phone = await opened(store, "ann", "phone")
    assert (await store.kick("ann", "tab")).kicked_sessions == 1
    assert await store.check_sessions([tab, phone]) == [tab]
    with pytest.raises(SessionRevokedError):
        await store.open_session("ann", "tab")
    assert (await store.kick("ann")).kicked_sessions == 1
    assert await store.check_sessions([phone]) == [phone]
    assert not await store.close_session(phone)
    assert kinds(await published(channel)) == [
        ("ONLINE", "ann", "", 1),
        ("KICKED", "ann", "tab", 1),
        ("KICKED", "ann", "", 0),
    ]


async def test_a_touched_session_opened_on_a_connection_is_bound_to_it(
    store: PresenceStore,
) -> None:
    await store.touch("ann", "tab")
    await opened(store, "ann", "tab")
    await lapse(store)
    assert not await online(store, "ann")


async def test_closed_sessions_and_given_up_leases_leave_no_keys_behind(
    store: PresenceStore, redis: Redis
) -> None:
    held = [await opened(store, "ann", session) for session in ("a", "b", "default")]
    for one in held:
        await store.close_session(one)
    await store.release_leases()
    keys = set(await redis.keys("*"))
    # The slot counter stays, so that no slot is handed out twice.
    left = {key for key in keys if ":sess:" in key or ":conn:" in key or ":leases" in key}
    assert left == {KEYS.leases + ":next"}


async def test_a_lease_given_up_with_sessions_left_ends_them_at_the_next_sweep(
    store: PresenceStore, channel: PubSub
) -> None:
    await opened(store, "ann", "tab")
    await store.release_leases()
    assert not await online(store, "ann")
    await store.sweep()
    assert kinds(await published(channel)) == [("ONLINE", "ann", "", 1), ("OFFLINE", "ann", "", 0)]


async def test_many_sessions_are_checked_in_batches(store: PresenceStore) -> None:
    held = [await opened(store, f"u{i}", "tab") for i in range(1500)]
    assert await store.check_sessions(held) == []
    await store.kick("u7")
    assert await store.check_sessions(held) == [held[7]]


def open_then(
    monkeypatch: pytest.MonkeyPatch,
    store: PresenceStore,
    channel: PubSub,
    sessions: HeldSessions,
    *,
    before: bool,
    kick: tuple[str, str | None],
) -> None:
    """Makes the store's openings kick (before or after the opening), then hand the events
    published meanwhile to `sessions`, all before the opening returns: as when a kick's event
    reaches the process before the reply of an opening."""
    open_session = store.open_session

    async def opening(user: str, session: str, device: str | None) -> OpenedSession:
        if before:
            await store.kick(*kick)
        result = await open_session(user, session, device)
        if not before:
            await store.kick(*kick)
        for event in await published_in_full(channel):
            sessions.on_event(event)
        return result

    monkeypatch.setattr(store, "open_session", opening)


async def test_a_kick_announced_before_the_opening_returned_ends_the_holding(
    monkeypatch: pytest.MonkeyPatch, store: PresenceStore, channel: PubSub
) -> None:
    sessions = HeldSessions(store, ttl_ms=30_000)
    open_then(monkeypatch, store, channel, sessions, before=False, kick=("ann", "tab"))
    async with sessions.hold("ann", "tab") as hold:
        ended = await asyncio.wait_for(hold.ended(), 1)
    assert ended.reason is EndReason.KICKED
    assert sessions.count == 0


async def test_a_kick_of_every_session_just_before_an_opening_leaves_it_held(
    monkeypatch: pytest.MonkeyPatch, store: PresenceStore, channel: PubSub
) -> None:
    await store.touch("ann", "phone")
    sessions = HeldSessions(store, ttl_ms=30_000)
    open_then(monkeypatch, store, channel, sessions, before=True, kick=("ann", None))
    async with sessions.hold("ann", "tab") as hold:
        assert not hold.ended_by_service
        assert await online(store, "ann")


async def test_a_check_after_missed_events_ends_a_session_kicked_unheard_as_kicked(
    store: PresenceStore,
) -> None:
    # Nothing hands this process the events channel: the kick is never announced to it.
    sessions = HeldSessions(store, ttl_ms=30_000)
    async with sessions.hold("ann", "tab") as kicked, sessions.hold("bob", "tab") as closed:
        await store.kick("ann", "tab")
        assert isinstance(closed.held, HeldSession)
        await store.close_session(closed.held)
        await sessions.renew()
        assert not kicked.ended_by_service  # no check until events may have been missed
        sessions.missed_events()
        await sessions.renew()
        ended = await asyncio.wait_for(kicked.ended(), 1)
        assert ended.reason is EndReason.KICKED
        with pytest.raises(StoreUnavailableError):
            await asyncio.wait_for(closed.ended(), 1)


async def test_holds_under_a_lease_found_lapsed_end_and_say_why(
    store: PresenceStore, channel: PubSub
) -> None:
    sessions = HeldSessions(store, ttl_ms=TEST_SETTINGS.connection_ttl_ms)
    async with sessions.hold("ann", "tab") as hold:
        await sessions.renew(at=ago(seconds=TTL_S + 1))  # as a process stopped for a TTL
        assert not await online(store, "ann")
        await sessions.renew()
        with pytest.raises(StoreUnavailableError, match="subscribe again"):
            await asyncio.wait_for(hold.ended(), 1)
    await store.sweep()
    assert kinds(await published(channel)) == [("ONLINE", "ann", "", 1), ("OFFLINE", "ann", "", 0)]


async def test_holds_under_a_lease_an_opening_found_lapsed_end_at_the_next_renewal(
    store: PresenceStore, channel: PubSub
) -> None:
    sessions = HeldSessions(store, ttl_ms=TEST_SETTINGS.connection_ttl_ms)
    async with sessions.hold("ann", "tab") as old:
        await sessions.renew(at=ago(seconds=TTL_S + 1))  # as a process stopped for a TTL
        # The next opening in the shard, before the next renewal, finds the lease lapsed
        # and holds under a new one; the holds under the lapsed one are just as dead.
        async with sessions.hold("bob", "tab") as new:
            assert new.held.lease != old.held.lease
            await sessions.renew()
            with pytest.raises(StoreUnavailableError, match="subscribe again"):
                await asyncio.wait_for(old.ended(), 1)
            assert not new.ended_by_service
            assert await online(store, "bob")
            assert not await online(store, "ann")
    await store.sweep()
    assert kinds(await published(channel)) == [
        ("ONLINE", "ann", "", 1),
        ("ONLINE", "bob", "", 1),
        ("OFFLINE", "bob", "", 0),
        ("OFFLINE", "ann", "", 0),  # by the sweep
    ]


@pytest.mark.parametrize("point", OPENING_POINTS)
async def test_a_holder_cancelled_while_its_session_opens_leaves_nothing_live(
    redis: Redis, channel: PubSub, point: str
) -> None:
    store = PausingStore(redis, TEST_SETTINGS)
    sessions = HeldSessions(store, ttl_ms=30_000)
    await cancel_hold_at(sessions, store, "ann", "tab", point)
    assert not await online(store, "ann")
    assert sessions.count == 0
    assert kinds(await published(channel)) in (
        [],  # the opening was never sent
        [("ONLINE", "ann", "", 1), ("OFFLINE", "ann", "", 0)],
    )


@pytest.mark.parametrize("point", OPENING_POINTS)
async def test_a_cancelled_opening_leaves_the_users_other_sessions_alone(
    redis: Redis, channel: PubSub, point: str
) -> None:
    store = PausingStore(redis, TEST_SETTINGS)
    sessions = HeldSessions(store, ttl_ms=30_000)
    await store.touch("ann", "phone")
    async with sessions.hold("ann", "web"):
        await cancel_hold_at(sessions, store, "ann", "tab", point)
        presence = await store.presence("ann")
        assert {s.session_id for s in presence.sessions} == {"web", "phone"}
        assert sessions.count == 1
    assert kinds(await published(channel)) == [("ONLINE", "ann", "", 1)]


async def test_a_cancelled_opening_never_closes_a_newer_holders_session(
    redis: Redis, channel: PubSub
) -> None:
    store = PausingStore(redis, TEST_SETTINGS)
    sessions = HeldSessions(store, ttl_ms=30_000)

    async def holder() -> None:
        async with sessions.hold("ann", "tab"):
            await asyncio.Event().wait()

    store.pause_at = "open"
    first = asyncio.create_task(holder())
    await asyncio.wait_for(store.paused.wait(), 1)
    first.cancel()
    # The same session opened again before the first opening's reply is read.
    async with sessions.hold("ann", "tab") as newer:
        store.resume.set()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        await eventually(
            lambda: store.opened[0].held in store.closed, within_s=1, what="the first to be closed"
        )
        assert await online(store, "ann")
        assert not newer.ended_by_service
        assert isinstance(newer.held, HeldSession)
        assert await store.check_sessions([newer.held]) == []
    assert not await online(store, "ann")
    assert kinds(await published(channel)) == [
        ("ONLINE", "ann", "", 1),
        ("REPLACED", "ann", "tab", newer.held.generation),
        ("OFFLINE", "ann", "", 0),
    ]


async def test_a_lapsed_lease_is_ended_a_batch_at_a_time_each_user_announced_once(
    store: PresenceStore, channel: PubSub
) -> None:
    for i in range(25):
        await opened(store, f"u{i:02}", "tab")
    await published(channel)
    await lapse(store)
    ended = [(await store.sweep(lapsed_batch=10)).lapsed for _ in range(4)]
    assert ended == [10, 10, 5, 0]
    offline = [user for kind, user, *_ in await published(channel) if kind == "OFFLINE"]
    assert sorted(offline) == [f"u{i:02}" for i in range(25)]


async def test_a_replacement_announced_while_two_openings_of_the_user_wait_reaches_its_own(
    redis: Redis,
) -> None:
    store = PausingStore(redis, TEST_SETTINGS)
    sessions = HeldSessions(store, ttl_ms=30_000)
    # The first opening's reply waits; a second opening of the same session is made and
    # announces that it replaced the first before that reply is read.
    store.pause_at = "open"
    first = asyncio.create_task(sessions.open("ann", "tab"))
    await asyncio.wait_for(store.paused.wait(), 1)
    second = await sessions.open("ann", "tab")
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    generation = second.held.generation
    replaced = ("REPLACED", "ann", now_ms, "tab", generation, "ONLINE", False, "")
    sessions.on_event(PublishedEvent(*replaced, "EVERYONE", 0, now_ms, 0, ""))
    store.resume.set()

    replaced_hold = await asyncio.wait_for(first, 1)
    assert (await replaced_hold.ended()).reason is EndReason.REPLACED
    assert second.outcome is None
    sessions.release(replaced_hold)
    sessions.release(second)
    await sessions.settle()
    assert not await online(store, "ann")
