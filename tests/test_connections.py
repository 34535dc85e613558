"""Connection-bound sessions in the store, on Redis 6.2 and Valkey 9: live until closed or
until their TTL passes without a renewal, one holder at a time, and every rule of touched
sessions (events, kicks, revocation) kept."""

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
from tests.conftest import TEST_SETTINGS, StoreFactory
from tests.helpers import (
    OPENING_POINTS,
    PausingStore,
    cancel_hold_at,
    eventually,
    kinds,
    published,
)


def ago(**delta: float) -> datetime:
    return datetime.now(UTC) - timedelta(**delta)


async def opened(
    store: PresenceStore, user: str, session: str, at: datetime | None = None
) -> HeldSession:
    result = await store.open_session(user, session, at)
    assert result.held is not None
    return result.held


async def online(store: PresenceStore, user: str) -> bool:
    return (await store.presence(user)).online


async def test_an_open_session_is_live_and_lists_its_opening_as_activity(
    store: PresenceStore, channel: PubSub
) -> None:
    result = await store.open_session("ann", "tab")
    presence = await store.presence("ann")
    assert presence.online
    assert [(s.session_id, s.last_seen) for s in presence.sessions] == [("tab", result.at)]
    assert presence.last_seen == result.at
    assert kinds(await published(channel)) == [("ONLINE", "ann", "", 1)]


async def test_closing_the_last_session_is_offline_at_once_and_announced(
    store: PresenceStore, channel: PubSub
) -> None:
    held = await opened(store, "ann", "tab")
    assert await store.close_session(held)
    assert not await online(store, "ann")
    assert kinds(await published(channel)) == [("ONLINE", "ann", "", 1), ("OFFLINE", "ann", "", 0)]
    # History stays; a second close changes nothing and says so.
    assert (await store.presence("ann")).last_seen is not None
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


async def test_a_session_not_renewed_expires_after_its_ttl_not_the_window(
    make_store: StoreFactory, channel: PubSub
) -> None:
    store = make_store(connection_ttl_ms=300)  # the window is a minute
    await opened(store, "ann", "tab")
    assert await online(store, "ann")
    await eventually(lambda: _offline(store, "ann"), within_s=1.5, what="the TTL to pass")
    await store.sweep()
    events = await published(channel)
    assert kinds(events) == [("ONLINE", "ann", "", 1), ("OFFLINE", "ann", "", 0)]


async def _offline(store: PresenceStore, user: str) -> bool:
    return not await online(store, user)


async def test_renewals_keep_a_session_live_and_move_last_seen(make_store: StoreFactory) -> None:
    store = make_store(connection_ttl_ms=30_000)
    held = await opened(store, "ann", "tab", at=ago(seconds=20))
    assert await store.renew_sessions([held], at=ago(seconds=10)) == []
    presence = await store.presence("ann")
    assert presence.online
    assert presence.last_seen is not None
    assert to_ms(presence.last_seen) >= to_ms(ago(seconds=11))
    assert to_ms(presence.sessions[0].last_seen) == to_ms(presence.last_seen)


async def test_a_renewal_never_moves_an_expiry_backwards(make_store: StoreFactory) -> None:
    store = make_store(connection_ttl_ms=30_000)
    held = await opened(store, "ann", "tab")
    assert await store.renew_sessions([held], at=ago(seconds=40)) == []
    assert await online(store, "ann")


async def test_an_opening_backfilled_past_its_ttl_records_history_only(
    make_store: StoreFactory, channel: PubSub
) -> None:
    store = make_store(connection_ttl_ms=30_000)
    result = await store.open_session("ann", "tab", ago(seconds=40))
    assert result.held is None
    presence = await store.presence("ann")
    assert not presence.online
    assert presence.last_seen == result.at
    assert await published(channel) == []


async def test_a_touch_of_a_connection_bound_session_moves_last_seen_only(
    make_store: StoreFactory,
) -> None:
    store = make_store(connection_ttl_ms=300)  # the window is a minute
    opening = await store.open_session("ann", "tab")
    touched = await store.touch("ann", "tab")
    assert touched.last_seen is not None
    assert touched.last_seen >= opening.at
    assert [(s.session_id, s.last_seen) for s in touched.sessions] == [("tab", opening.at)]
    await eventually(lambda: _offline(store, "ann"), within_s=1.5, what="the TTL to pass")


async def test_touch_many_of_a_connection_bound_default_session_keeps_its_expiry(
    make_store: StoreFactory,
) -> None:
    store = make_store(connection_ttl_ms=300)
    await opened(store, "ann", "default")
    await store.touch_many(["ann"])
    await eventually(lambda: _offline(store, "ann"), within_s=1.5, what="the TTL to pass")


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
    # The first holder can neither renew nor close the session any more.
    assert await store.renew_sessions([first, second]) == [first]
    assert not await store.close_session(first)
    assert await online(store, "ann")
    assert await store.close_session(second)
    assert not await online(store, "ann")


async def test_a_kick_ends_the_holders_renewals_and_revokes_the_id(
    store: PresenceStore, channel: PubSub
) -> None:
    tab = await opened(store, "ann", "tab")
    phone = await opened(store, "ann", "phone")
    assert (await store.kick("ann", "tab")).kicked_sessions == 1
    assert await store.renew_sessions([tab, phone]) == [tab]
    with pytest.raises(SessionRevokedError):
        await store.open_session("ann", "tab")
    assert (await store.kick("ann")).kicked_sessions == 1
    assert await store.renew_sessions([phone]) == [phone]
    assert not await store.close_session(phone)
    assert kinds(await published(channel)) == [
        ("ONLINE", "ann", "", 1),
        ("KICKED", "ann", "tab", 1),
        ("KICKED", "ann", "", 0),
    ]


async def test_a_touched_session_opened_on_a_connection_is_bound_to_it(
    make_store: StoreFactory,
) -> None:
    store = make_store(connection_ttl_ms=300)
    await store.touch("ann", "tab")
    await opened(store, "ann", "tab")
    await eventually(lambda: _offline(store, "ann"), within_s=1.5, what="the TTL to pass")


async def test_closed_sessions_leave_no_keys_behind(store: PresenceStore, redis: Redis) -> None:
    held = [await opened(store, "ann", session) for session in ("a", "b", "default")]
    for one in held:
        await store.close_session(one)
    keys = set(await redis.keys("*"))
    assert not {key for key in keys if ":sess:" in key or ":conn:" in key}


async def test_many_sessions_are_renewed_in_batches(store: PresenceStore) -> None:
    held = [await opened(store, f"u{i}", "tab") for i in range(1500)]
    assert await store.renew_sessions(held) == []
    await store.kick("u7")
    assert await store.renew_sessions(held) == [held[7]]


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

    async def opening(user: str, session: str, at: datetime | None = None) -> OpenedSession:
        if before:
            await store.kick(*kick)
        result = await open_session(user, session, at)
        if not before:
            await store.kick(*kick)
        for event in await published(channel):
            sessions.on_event(PublishedEvent(*event))
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


async def test_a_renewal_that_finds_its_session_kicked_unannounced_ends_it_as_kicked(
    store: PresenceStore,
) -> None:
    # Nothing hands this process the events channel: the kick is never announced to it.
    sessions = HeldSessions(store, ttl_ms=300)
    renewals = asyncio.create_task(sessions.renew_forever())
    try:
        async with sessions.hold("ann", "tab") as kicked, sessions.hold("bob", "tab") as closed:
            await store.kick("ann", "tab")
            await store.close_session(closed.held)
            ended = await asyncio.wait_for(kicked.ended(), 1)
            assert ended.reason is EndReason.KICKED
            with pytest.raises(StoreUnavailableError):
                await asyncio.wait_for(closed.ended(), 1)
    finally:
        renewals.cancel()


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
        assert await store.renew_sessions([newer.held]) == []
    assert not await online(store, "ann")
    assert kinds(await published(channel)) == [
        ("ONLINE", "ann", "", 1),
        ("REPLACED", "ann", "tab", newer.held.generation),
        ("OFFLINE", "ann", "", 0),
    ]
