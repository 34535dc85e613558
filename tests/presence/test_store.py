"""The store against real Redis 6.2 and Valkey 9: each rule of docs/semantics.md."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import sys
import zlib
from collections.abc import Awaitable, Sequence
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.client import PubSub
from redis.crc import key_slot

from gql_presence.running.redis_server import RedisServer
from gql_presence.settings import Settings
from gql_presence.store import (
    MAX_ID_LENGTH,
    MAX_IDS_PER_CALL,
    ChosenStatus,
    EventKind,
    Granularity,
    Page,
    PresenceStore,
    PublishedEvent,
    Visibility,
    read_events,
    shard_of,
)
from gql_presence.store.client import AnyRedis
from gql_presence.store.days import from_ms, to_ms
from gql_presence.store.errors import BadInputError, SessionRevokedError
from gql_presence.store.keys import Keys
from gql_presence.store.models import OnlineFilter
from gql_presence.store.presence import TOUCH_MANY_BATCH
from gql_presence.store.scripts import ScriptCall, ScriptName, Scripts
from gql_presence.store.shard import unpack_options
from tests import racer
from tests.conftest import StoreFactory
from tests.helpers import call_every_script, call_every_webhook_script, put_old_online_time

KEYS = Keys()


def ago(**delta: float) -> datetime:
    return datetime.now(UTC) - timedelta(**delta)


async def all_pages(read: object, first: int) -> list[str]:
    """Follows endCursor until hasNextPage is false; returns the user ids in order."""
    seen: list[str] = []
    after = None
    while True:
        page: Page = await read(first=first, after=after)  # type: ignore[operator]
        seen += [n.user_id for n in page.nodes]
        if not page.has_next_page:
            return seen
        after = page.end_cursor


# --- touch and presence -----------------------------------------------------------------


async def test_unknown_user_is_offline_with_nothing_kept(store: PresenceStore) -> None:
    presence = await store.presence("nobody")
    assert (presence.online, presence.last_seen, presence.sessions) == (False, None, ())


async def test_touch_makes_a_user_online_in_the_default_session(store: PresenceStore) -> None:
    before = datetime.now(UTC)
    touched = await store.touch("alice")
    assert touched.online
    assert touched.last_seen is not None
    assert (
        before - timedelta(seconds=1)
        <= touched.last_seen
        <= datetime.now(UTC) + timedelta(seconds=1)
    )
    assert [s.session_id for s in touched.sessions] == ["default"]
    assert await store.presence("alice") == touched.presence()


async def test_a_touch_answers_each_field_as_the_users_presence(store: PresenceStore) -> None:
    await store.touch("alice", "laptop", at=ago(seconds=30), device="desktop")
    await store.set_status("alice", ChosenStatus.BUSY)
    await store.set_custom_status("alice", "Lunch", "🥪", expires_at=ago(seconds=-600))
    await store.set_last_seen_visibility("alice", Visibility.FRIENDS)
    touched = await store.touch("alice", "phone", device="ios", idle=True)
    assert touched.presence() == await store.presence("alice")
    # Each field read alone, first of its reply's fields, as an answer that asks for one.
    for field in dataclasses.fields(touched.presence()):
        alone = await store.touch("alice", "phone", device="ios", idle=True)
        assert getattr(alone, field.name) == getattr(alone.presence(), field.name), field.name
    assert [s.session_id for s in touched.sessions] == ["phone", "laptop"]
    assert touched.custom is not None
    assert touched.custom.emoji == "🥪"


async def test_sessions_are_listed_most_recent_first(store: PresenceStore) -> None:
    await store.touch("alice", "laptop", at=ago(seconds=30))
    await store.touch("alice", "phone", at=ago(seconds=10))
    await store.touch("alice", "tablet", at=ago(seconds=20))
    presence = await store.presence("alice")
    assert [s.session_id for s in presence.sessions] == ["phone", "tablet", "laptop"]
    assert presence.last_seen == presence.sessions[0].last_seen


async def test_times_are_kept_to_the_millisecond(store: PresenceStore) -> None:
    at = datetime(2000, 1, 1, tzinfo=UTC) + (ago(seconds=5) - datetime(2000, 1, 1, tzinfo=UTC))
    at = at.replace(microsecond=at.microsecond // 1000 * 1000 + 999)
    touched = await store.touch("alice", at=at)
    assert touched.last_seen == at.replace(microsecond=at.microsecond // 1000 * 1000)


async def test_backfill_never_moves_times_backwards(store: PresenceStore) -> None:
    recent = await store.touch("alice", "phone", at=ago(seconds=5))
    older = await store.touch("alice", "phone", at=ago(seconds=40))
    assert older.last_seen == recent.last_seen
    assert older.sessions == recent.sessions


async def test_backfill_older_than_the_window_records_history_but_not_presence(
    store: PresenceStore,
) -> None:
    at = ago(hours=3)
    touched = await store.touch("alice", at=at)
    assert not touched.online
    assert touched.last_seen == from_ms(to_ms(at))
    assert (await store.online_users()).total_count == 0


async def test_at_bounds_are_refused_and_nothing_is_written(
    store: PresenceStore, redis: Redis
) -> None:
    with pytest.raises(BadInputError, match="5 seconds"):
        await store.touch("alice", at=datetime.now(UTC) + timedelta(seconds=30))
    with pytest.raises(BadInputError, match="retention"):
        await store.touch("alice", at=ago(days=36))
    assert await redis.dbsize() == 0


async def test_at_a_few_seconds_ahead_is_accepted_as_clock_skew(store: PresenceStore) -> None:
    at = datetime.now(UTC) + timedelta(seconds=3)
    assert (await store.touch("alice", at=at)).last_seen == from_ms(to_ms(at))


@pytest.mark.parametrize("bad", ["", "x" * 129, "tab\there", "new\nline", "nul\x00", "del\x7f"])
async def test_bad_ids_are_refused_and_nothing_is_written(
    store: PresenceStore, redis: Redis, bad: str
) -> None:
    with pytest.raises(BadInputError, match="userId"):
        await store.touch(bad)
    with pytest.raises(BadInputError, match="sessionId"):
        await store.touch("alice", bad)
    with pytest.raises(BadInputError, match="userIds"):
        await store.touch_many(["ok", bad])
    with pytest.raises(BadInputError, match="friendIds"):
        await store.add_friends("alice", ["ok", bad])
    assert await redis.dbsize() == 0


async def test_ids_may_hold_any_printable_characters(store: PresenceStore) -> None:
    odd = "{0}:é 用户 ☃ " + "x" * 110
    await store.touch(odd, odd)
    assert [n.user_id for n in (await store.online_users()).nodes] == [odd]
    assert (await store.presence(odd)).sessions[0].session_id == odd


# --- expiry -------------------------------------------------------------------------------


async def test_a_session_expires_when_the_window_passes(store: PresenceStore) -> None:
    # The window is 60 s: activity backfilled to 59.7 s ago expires 0.3 s from now.
    await store.touch("alice", "old", at=ago(seconds=59.7))
    await store.touch("bob", at=ago(seconds=59.7))
    await store.touch("bob", "fresh")
    assert (await store.presence("alice")).online
    await asyncio.sleep(0.4)
    alice = await store.presence("alice")
    assert (alice.online, alice.sessions) == (False, ())
    assert alice.last_seen is not None
    bob = await store.presence("bob")
    assert [s.session_id for s in bob.sessions] == ["fresh"]
    online = await store.online_users()
    assert (online.total_count, [n.user_id for n in online.nodes]) == (1, ["bob"])


async def test_expired_users_are_offline_before_any_sweep(store: PresenceStore) -> None:
    await store.touch("alice", "a", at=ago(seconds=59.7))
    await store.touch("carol")
    await store.add_friends("carol", ["alice"])
    await asyncio.sleep(0.4)
    assert (await store.online_users()).total_count == 1
    assert (await store.online_friends("carol")).total_count == 0
    in_range = await store.active_in_range(ago(minutes=5), datetime.now(UTC))
    assert {n.user_id: n.online for n in in_range.nodes} == {"carol": True, "alice": False}


# --- kick and revocation ------------------------------------------------------------------


async def test_kick_ends_every_session_at_once(store: PresenceStore) -> None:
    await store.touch("alice", "phone")
    await store.touch("alice", "laptop")
    result = await store.kick("alice")
    assert (result.kicked_sessions, result.online) == (2, False)
    presence = await store.presence("alice")
    assert (presence.online, presence.sessions) == (False, ())
    assert presence.last_seen is not None, "kick does not erase history"
    assert (await store.online_users()).total_count == 0


async def test_what_is_kept_beside_sessions_goes_with_the_last_one(
    store: PresenceStore, redis: Redis
) -> None:
    for i in range(3):
        await store.touch("alice", f"s{i}", device="web")
    await store.kick("alice", "s0")
    assert await redis.hkeys(KEYS.session_extras("alice")) == ["s1", "s2"]
    assert await redis.pttl(KEYS.session_extras("alice")) > 0
    await store.kick("alice")
    assert not await redis.exists(KEYS.session_extras("alice"))
    await store.touch("alice", "s3", device="web")
    assert (await store.presence("alice")).sessions[0].device == "web"


async def test_what_is_kept_beside_held_sessions_goes_when_the_last_one_closes(
    store: PresenceStore, redis: Redis
) -> None:
    phone = (await store.open_session("alice", "phone", device="ios")).held
    tab = (await store.open_session("alice", "tab", device="web")).held
    assert sorted(await redis.hkeys(KEYS.session_extras("alice"))) == ["phone", "tab"]
    await store.close_session(phone)
    assert await redis.hkeys(KEYS.session_extras("alice")) == ["tab"]
    assert [s.device for s in (await store.presence("alice")).sessions] == ["web"]
    await store.close_session(tab)
    assert not (await store.presence("alice")).online
    assert not await redis.exists(KEYS.session_extras("alice"))


async def test_kick_of_one_session_keeps_the_others(store: PresenceStore) -> None:
    await store.touch("alice", "laptop", at=ago(seconds=59.7))
    phone = await store.touch("alice", "phone")
    result = await store.kick("alice", "phone")
    assert (result.kicked_sessions, result.online) == (1, True)
    presence = await store.presence("alice")
    assert [s.session_id for s in presence.sessions] == ["laptop"]
    assert presence.last_seen == phone.last_seen, "lastSeen is history"
    # The remaining session is old: the user goes offline when it expires, not when the
    # kicked, newer one would have.
    await asyncio.sleep(0.4)
    assert not (await store.presence("alice")).online
    assert (await store.online_users()).total_count == 0
    assert (await store.online_users()).nodes == ()


async def test_kicked_session_is_revoked_but_a_new_one_comes_online(
    store: PresenceStore, redis: Redis
) -> None:
    await store.touch("alice", "phone")
    await store.kick("alice")
    before = await redis.zrange(KEYS.last_seen, 0, -1, withscores=True)
    with pytest.raises(SessionRevokedError):
        await store.touch("alice", "phone")
    assert await redis.zrange(KEYS.last_seen, 0, -1, withscores=True) == before
    assert not (await store.presence("alice")).online
    assert (await store.touch("alice", "laptop")).online


async def test_revocation_ends_after_its_period(make_store: StoreFactory) -> None:
    store = make_store(revoke_ms=300)
    await store.touch("alice", "phone")
    await store.kick("alice", "phone")
    with pytest.raises(SessionRevokedError):
        await store.touch("alice", "phone")
    await asyncio.sleep(0.4)
    assert (await store.touch("alice", "phone")).online


async def test_kick_all_revokes_the_default_session_for_touch_many(store: PresenceStore) -> None:
    await store.touch_many(["alice", "bob"])
    await store.kick("alice")
    assert await store.touch_many(["alice", "bob", "carol"]) == 2
    assert not (await store.presence("alice")).online


async def test_kicking_what_is_not_live_succeeds_with_nothing_kicked(store: PresenceStore) -> None:
    assert (await store.kick("nobody")).kicked_sessions == 0
    await store.touch("alice", "phone")
    result = await store.kick("alice", "laptop")
    assert (result.kicked_sessions, result.online) == (0, True)


# --- onlineUsers and paging ---------------------------------------------------------------


async def test_online_users_are_ordered_newest_first_ties_by_id(store: PresenceStore) -> None:
    await store.touch("old", at=ago(seconds=30))
    await store.touch_many(["tie-b", "tie-a", "tie-c"])  # one moment for all three
    await store.touch("older", at=ago(seconds=40))
    page = await store.online_users()
    assert [n.user_id for n in page.nodes] == ["tie-a", "tie-b", "tie-c", "old", "older"]
    assert page.total_count == 5
    assert all(n.online for n in page.nodes)


async def test_paging_over_ties_lists_every_user_once_in_order(store: PresenceStore) -> None:
    users = [f"u{i:03}" for i in range(120)]
    await store.touch_many(users[:70])
    await store.touch_many(users[70:])
    whole = await store.online_users(first=1000)
    assert whole.total_count == 120
    expected = [n.user_id for n in whole.nodes]
    assert sorted(expected) == users
    for size in (1, 7, 50, 119, 120):
        assert await all_pages(store.online_users, size) == expected


async def test_a_page_of_zero_says_whether_there_is_more(store: PresenceStore) -> None:
    empty = await store.online_users(first=0)
    assert (empty.has_next_page, empty.end_cursor) == (False, None)
    await store.touch("alice")
    page = await store.online_users(first=0)
    assert (page.total_count, page.nodes, page.has_next_page, page.end_cursor) == (
        1,
        (),
        True,
        None,
    )


async def test_paging_while_users_change_never_repeats_and_stays_in_order(
    store: PresenceStore,
) -> None:
    for i in range(30):
        await store.touch(f"u{i:02}", at=ago(seconds=50 - i))
    first = await store.online_users(first=10)
    listed = [n.user_id for n in first.nodes]
    # Between pages: a listed user is touched again (moves to the front), an unlisted one is
    # kicked, and a new one appears.
    await store.touch(listed[3])
    await store.kick("u05")
    await store.touch("newcomer")
    after = first.end_cursor
    while after is not None:
        page = await store.online_users(first=10, after=after)
        nodes = [(n.last_seen, n.user_id) for n in page.nodes]
        assert nodes == sorted(nodes, key=lambda n: (-to_ms(n[0]), n[1]))
        listed += [n.user_id for n in page.nodes]
        after = page.end_cursor if page.has_next_page else None
    assert len(listed) == len(set(listed))
    assert "u05" not in listed
    assert set(listed) == {f"u{i:02}" for i in range(30)} - {"u05"}


async def test_cursors_made_or_altered_by_hand_are_refused(store: PresenceStore) -> None:
    await store.touch_many(["a", "b"])
    cursor = (await store.online_users(first=1)).end_cursor
    assert cursor is not None
    payload = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))[8:]
    altered = base64.urlsafe_b64encode(bytes(8) + payload).decode()
    hand_made = base64.urlsafe_b64encode(b'[-1,"a"]').decode()
    for bad in ("junk", "", "W10", hand_made, altered, cursor[:-2]):
        with pytest.raises(BadInputError, match="endCursor"):
            await store.online_users(after=bad)
    assert [n.user_id for n in (await store.online_users(after=cursor)).nodes] == ["b"]


@pytest.mark.parametrize("first", [-1, 1001])
async def test_page_size_is_bounded(store: PresenceStore, first: int) -> None:
    with pytest.raises(BadInputError, match="0 and 1000"):
        await store.online_users(first=first)


# --- the sessions' maximum ------------------------------------------------------------------


async def test_a_user_has_at_most_the_maximum_of_live_sessions_and_one_past_it_writes_nothing(
    make_store: StoreFactory,
) -> None:
    store = make_store(max_sessions=2)
    await store.touch("ann", "phone")
    await store.touch("ann", "tab", device="firefox")
    await store.touch("ann", "tab")  # live already: no new session
    await store.touch("ann", "long-gone", at=ago(hours=2))  # never live: none either
    before = await store.presence("ann")
    with pytest.raises(BadInputError, match=r"at most 2 live sessions \(PRESENCE_MAX_SESSIONS\)"):
        await store.touch("ann", "laptop", device="laptop")
    with pytest.raises(BadInputError, match="at most 2 live sessions"):
        await store.open_session("ann", "socket")
    assert await store.presence("ann") == before
    await store.kick("ann", "phone")
    await store.open_session("ann", "socket")
    sessions = (await store.presence("ann")).sessions
    assert sorted(s.session_id for s in sessions) == ["socket", "tab"]
    # The default session kept by the online entry alone counts as one.
    single = make_store(max_sessions=1)
    await single.touch("bob")
    with pytest.raises(BadInputError, match="at most 1 live sessions"):
        await single.touch("bob", "phone")


# --- the friend set's maximum --------------------------------------------------------------


@pytest.mark.parametrize("shards", [1, 3])
async def test_a_friend_set_holds_at_most_its_maximum_and_a_change_past_it_writes_nothing(
    make_store: StoreFactory, shards: int
) -> None:
    store = make_store(max_friends=4, shards=shards)
    assert await store.add_friends("me", ["a", "b", "c"]) == 3
    # Friends already in the set take no room: adding them again is no change.
    assert await store.add_friends("me", ["a", "b", "c", "d"]) == 1
    with pytest.raises(BadInputError, match=r"at most 4 friends \(PRESENCE_MAX_FRIENDS\)"):
        await store.add_friends("me", ["a", "e"])
    assert await store.friends("me") == ["a", "b", "c", "d"]
    assert await store.friends("e") == []
    # Mutual links count in the friend's set too: a full one refuses the whole change.
    await store.add_friends("full", ["p", "q", "r", "s"], mutual=False)
    with pytest.raises(BadInputError, match="at most 4 friends"):
        await store.add_friends("new", ["x", "full"])
    assert (await store.friends("new"), await store.friends("x")) == ([], [])
    assert await store.remove_friends("me", ["a"]) == 1
    assert await store.add_friends("me", ["e"]) == 1


# --- onlineFriends ------------------------------------------------------------------------


async def test_online_friends_lists_only_online_friends(store: PresenceStore) -> None:
    await store.add_friends("me", ["a", "b", "c", "d"])
    await store.touch("a", at=ago(seconds=10))
    await store.touch("b", at=ago(seconds=5))
    await store.touch("c", at=ago(hours=2))  # seen, but not online
    await store.touch("stranger")
    page = await store.online_friends("me")
    assert (page.total_count, [n.user_id for n in page.nodes]) == (2, ["b", "a"])
    await store.kick("b")
    assert [n.user_id for n in (await store.online_friends("me")).nodes] == ["a"]


async def test_online_friends_pages_over_ties(store: PresenceStore) -> None:
    friends = [f"f{i:02}" for i in range(25)]
    await store.add_friends("me", friends)
    await store.touch_many(friends)
    assert await all_pages(lambda **kw: store.online_friends("me", **kw), 4) == friends


@pytest.mark.parametrize("expired_unswept", [3, 1500])
async def test_online_friends_leave_out_expired_entries_the_sweep_has_not_reached(
    make_store: StoreFactory, expired_unswept: int
) -> None:
    store = make_store(window_ms=300)
    gone = [f"gone{i}" for i in range(expired_unswept)]
    await store.touch_many(gone)
    await store.add_friends("me", [*gone[:3], *gone[-3:], "here"], mutual=False)
    await asyncio.sleep(0.4)
    await store.touch("here")
    page = await store.online_friends("me")
    assert (page.total_count, [n.user_id for n in page.nodes]) == (1, ["here"])


async def test_an_end_users_online_friends_leave_out_those_who_chose_invisible(
    store: PresenceStore,
) -> None:
    friends = [f"f{i:02}" for i in range(12)]
    await store.add_friends("me", friends, mutual=False)
    await store.touch_many([*friends, "stranger"])
    for user in ("f01", "f05", "f06", "f11", "stranger", "away"):
        await store.set_status(user, ChosenStatus.INVISIBLE)
    await store.set_status("f06", ChosenStatus.AUTO)  # visible again
    await store.set_status("f02", ChosenStatus.BUSY)
    await store.kick("f11")  # invisible and offline
    await store.add_friends("me", ["away"], mutual=False)  # invisible, never online
    shown = [f for f in friends if f not in ("f01", "f05", "f11")]
    seen = await store.online_friends("me", first=50, reader="me")
    assert (seen.total_count, [n.user_id for n in seen.nodes]) == (len(shown), shown)
    assert await all_pages(lambda **kw: store.online_friends("me", reader="me", **kw), 4) == shown
    every = await store.online_friends("me", first=50)
    assert every.total_count == len(friends) - 1
    assert [n.user_id for n in every.nodes] == [f for f in friends if f != "f11"]


async def test_an_end_users_online_friends_run_no_command_per_friend(
    store: PresenceStore, redis: Redis
) -> None:
    # Leaving out the invisible friends costs Redis the same number of commands however many
    # friends are online: no look-up per friend from the script (each costs a few µs there,
    # which made an end user's page of 1,000 online friends cost 3-4x a backend's).
    async def commands_run(user_id: str) -> int:
        await redis.config_resetstat()
        await store.online_friends(user_id, first=5, reader=user_id)
        stats = await redis.info("commandstats")
        return sum(int(e["calls"]) for name, e in stats.items() if name != "cmdstat_config")

    for user_id, count in (("few", 10), ("many", 300)):
        friends = [f"{user_id}{i}" for i in range(count)]
        await store.add_friends(user_id, friends, mutual=False)
        await store.touch_many(friends)
        await store.set_status(friends[3], ChosenStatus.INVISIBLE)
    await commands_run("few")  # the first page's cursor makes the cursor secret
    assert await commands_run("many") == await commands_run("few")


async def test_online_friends_of_a_user_without_friends_is_empty(store: PresenceStore) -> None:
    await store.touch("a")
    page = await store.online_friends("loner")
    assert (page.total_count, page.nodes, page.has_next_page) == (0, (), False)


# --- activeInRange ------------------------------------------------------------------------


async def test_active_in_range_includes_both_ends(store: PresenceStore) -> None:
    start, end = ago(minutes=30), ago(minutes=10)
    await store.touch("at-start", at=start)
    await store.touch("at-end", at=end)
    await store.touch("before", at=start - timedelta(milliseconds=1))
    await store.touch("after", at=end + timedelta(milliseconds=1))
    page = await store.active_in_range(start, end)
    assert [n.user_id for n in page.nodes] == ["at-end", "at-start"]
    assert page.total_count == 2


async def test_a_user_active_again_after_the_range_is_not_in_it(store: PresenceStore) -> None:
    await store.touch("alice", at=ago(minutes=20))
    await store.touch("alice")
    assert (await store.active_in_range(ago(minutes=30), ago(minutes=10))).total_count == 0


async def test_active_in_range_pages(store: PresenceStore) -> None:
    for i in range(23):
        await store.touch(f"u{i:02}", at=ago(minutes=i + 1))
    expected = [f"u{i:02}" for i in range(23)]
    read = lambda **kw: store.active_in_range(ago(hours=1), datetime.now(UTC), **kw)  # noqa: E731
    assert await all_pages(read, 5) == expected


async def test_from_later_than_to_is_refused(store: PresenceStore) -> None:
    with pytest.raises(BadInputError, match="from"):
        await store.active_in_range(ago(minutes=1), ago(minutes=2))


# --- friends ------------------------------------------------------------------------------


async def test_friends_both_ways(store: PresenceStore) -> None:
    assert await store.add_friends("a", ["b", "c", "a", "b"]) == 2
    assert await store.friends("a") == ["b", "c"]
    assert await store.friends("b") == ["a"]
    assert await store.add_friends("a", ["c", "d"], mutual=False) == 1
    assert await store.friends("d") == []
    assert await store.remove_friends("a", ["b", "x"]) == 1
    assert (await store.friends("a"), await store.friends("b")) == (["c", "d"], [])
    assert await store.remove_friends("c", ["a"], mutual=False) == 1
    assert await store.friends("a") == ["c", "d"]


async def test_a_user_is_never_their_own_friend(store: PresenceStore) -> None:
    assert await store.add_friends("a", ["a"]) == 0
    assert await store.friends("a") == []


async def test_ten_thousand_ids_per_call_and_no_more(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(max_friends=10_000)  # the largest call's friends in one set
    many = [f"f{i}" for i in range(10_000)]
    assert await store.add_friends("a", many) == 10_000
    assert await redis.scard(KEYS.friends("f9999")) == 1
    assert await store.touch_many(many) == 10_000
    with pytest.raises(BadInputError, match="10,000"):
        await store.add_friends("b", [*many, "one-more"])
    with pytest.raises(BadInputError, match="10,000"):
        await store.touch_many([*many, "one-more"])
    assert not await redis.exists(KEYS.friends("b"))


async def test_a_touch_many_of_several_batches_loads_its_script_again_after_a_flush(
    store: PresenceStore, redis: Redis
) -> None:
    users = [f"flushed-{i}" for i in range(3 * TOUCH_MANY_BATCH)]
    await redis.script_flush()  # as after a restart of Redis: every batch meets NOSCRIPT
    assert await store.touch_many(users) == len(users)
    assert await redis.zcard(KEYS.online) == len(users)


async def test_the_largest_touch_many_holds_redis_in_no_script_for_200_ms(
    store: PresenceStore, redis: Redis
) -> None:
    # 10,000 ids of 128 emoji that differ only in their first bytes, which Redis 6.2's Lua
    # leaves out of a long string's hash: read by one script they took it seconds.
    ids = [f"{i:06}".ljust(MAX_ID_LENGTH, "\U0001f600") for i in range(MAX_IDS_PER_CALL)]
    threshold = "slowlog-log-slower-than"  # microseconds
    default_threshold = str((await redis.config_get(threshold))[threshold])
    await redis.config_set(threshold, 200_000)
    await redis.slowlog_reset()
    try:
        assert await store.touch_many(ids) == MAX_IDS_PER_CALL
        slow = await redis.slowlog_get()
    finally:
        await redis.config_set(threshold, default_threshold)
    assert [entry["command"][:40] for entry in slow] == []


# --- consistency under concurrency --------------------------------------------------------


async def test_concurrent_touches_and_kicks_of_one_user_stay_consistent(
    store: PresenceStore, redis: Redis
) -> None:
    async def touch(session: str) -> None:
        with contextlib.suppress(SessionRevokedError):
            await store.touch("alice", session)

    calls: list[Awaitable[object]] = []
    for i in range(200):
        calls.append(touch(f"s{i % 20}"))
        if i % 7 == 0:
            calls.append(store.kick("alice", f"s{i % 20}"))
        if i % 50 == 0:
            calls.append(store.kick("alice"))
    await asyncio.gather(*calls)
    presence = await store.presence("alice")
    expiry = await redis.zscore(KEYS.online, "alice")
    if presence.sessions:
        assert expiry == to_ms(presence.sessions[0].last_seen) + 60_000
    else:
        assert expiry is None
    online = await store.online_users()
    assert online.total_count == int(presence.online)
    assert [n.user_id for n in online.nodes] == (["alice"] if presence.online else [])


async def race_from_processes(redis_url: str, processes: int) -> list[dict[str, Any]]:
    """`processes` runs of tests/racer.py on the Redis at once: each started, ready, then
    told to go together. Returns what each reported."""
    racers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.racer",
            redis_url,
            str(seed),
            cwd=Path(__file__).parents[2],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for seed in range(processes)
    ]
    try:
        for racer in racers:
            assert racer.stdout is not None
            assert await asyncio.wait_for(racer.stdout.readline(), 30) == b"ready\n"
        for racer in racers:
            assert racer.stdin is not None
            racer.stdin.write(b"go\n")
        outputs = [await asyncio.wait_for(racer.communicate(), 60) for racer in racers]
    finally:
        for racer in racers:
            if racer.returncode is None:
                racer.kill()
                await racer.wait()
    assert [racer.returncode for racer in racers] == [0] * processes
    return [json.loads(stdout) for stdout, _ in outputs]


@pytest.mark.slow
async def test_two_processes_racing_on_the_same_users_announce_each_change_once(
    store: PresenceStore, redis: Redis, any_server: RedisServer, channel: PubSub
) -> None:
    events: list[PublishedEvent] = []
    raced = asyncio.Event()

    async def listen() -> None:
        """Every event, until none has come for half a second after the race."""
        while (message := await channel.get_message(timeout=0.5)) or not raced.is_set():
            if message is not None:
                events.extend(read_events(message["data"]))

    listener = asyncio.create_task(listen())
    try:
        reports = await race_from_processes(any_server.url, 2)
    finally:
        raced.set()
        await listener
    # The two raced: each was still calling when the other began, and both changed things.
    first, second = reports
    assert first["began"] < second["ended"], reports
    assert second["began"] < first["ended"], reports
    for report in reports:
        assert min(report["calls"][kind] for kind in ("touch", "kick session", "open")) > 0

    # Each user's events, in order, are the changes of one presence: ONLINE only while
    # offline, OFFLINE or a KICKED only while online, so that none is missing or repeated.
    online: dict[str, bool] = {}
    for event in events:
        was = online.get(event.user_id, False)
        if event.kind == EventKind.ONLINE:
            assert not was, f"ONLINE of {event.user_id}, online already"
        elif event.kind in (EventKind.OFFLINE, EventKind.KICKED):
            assert was, f"{event.kind} of {event.user_id}, offline already"
        elif event.kind == EventKind.STATUS:
            assert bool(event.online_or_generation) == was, event
        if event.kind in (EventKind.ONLINE, EventKind.OFFLINE, EventKind.KICKED):
            online[event.user_id] = bool(event.online_or_generation)
    assert sum(event.kind == EventKind.ONLINE for event in events) > 4, events
    # What the events say is what every read says now: one online count.
    for user in racer.USERS:
        assert (await store.presence(user)).online == online.get(user, False), user
    listed = await store.online_users()
    assert sorted(n.user_id for n in listed.nodes) == sorted(u for u, on in online.items() if on)
    assert listed.total_count == sum(online.values()) == (await store.sweep()).online


# --- memory stays bounded -----------------------------------------------------------------


async def test_sessions_and_revocations_leave_no_keys_behind(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(window_ms=300, revoke_ms=300)
    for i in range(200):
        for session in ("phone", "laptop", "tablet"):
            await store.touch(f"u{i}", session)
        if i % 2:
            await store.kick(f"u{i}", "phone")
    await store.touch_many([f"v{i}" for i in range(500)])
    await asyncio.sleep(0.45)
    assert (await store.sweep()).offline == 500 + 200
    per_user = [k async for k in redis.scan_iter(match="*:sess:*")]
    per_user += [k async for k in redis.scan_iter(match="*:revoked:*")]
    assert per_user == []
    assert await redis.zcard(KEYS.online) == 0
    day_keys = [k async for k in redis.scan_iter(match="*:day:*")]
    assert day_keys
    for key in day_keys:
        assert await redis.pttl(key) > 0


async def test_users_past_the_retention_are_forgotten_and_their_index_reused(
    store: PresenceStore, redis: Redis
) -> None:
    await store.touch_many(["gone", "kept"])
    index_of_gone = await redis.hget(KEYS.user_index, "gone")
    assert index_of_gone is not None
    # As if "gone" was last seen 40 days ago: past the 35-day retention and its slack.
    await redis.zadd(KEYS.last_seen, {"gone": -to_ms(ago(days=40))})
    assert (await store.presence("gone")).last_seen is None
    assert (await store.sweep()).purged == 1
    assert await redis.zrange(KEYS.last_seen, 0, -1) == ["kept"]
    assert await redis.hget(KEYS.versions, "gone") is None
    assert await redis.hget(KEYS.versions, "kept") is not None
    assert await redis.hgetall(KEYS.user_index) == {
        "kept": await redis.hget(KEYS.user_index, "kept")
    }
    # Its bit may still be in a kept week's or month's bitmap: not handed out yet.
    await store.touch("early")
    assert await redis.hget(KEYS.user_index, "early") not in {index_of_gone, None}
    # Once those have expired (as if the cooling had passed), it is, as never active.
    await redis.zadd(KEYS.cooling_indexes, {str(index_of_gone): 0})
    await store.sweep()
    await store.touch("newcomer")
    assert await redis.hget(KEYS.user_index, "newcomer") == index_of_gone
    today = (await store.analytics.activity(ago(days=1), ago(), Granularity.DAY))[-1]
    assert today.new_users == 3  # kept, early, newcomer: not "gone" again


async def test_sweep_work_is_bounded_per_call(make_store: StoreFactory, redis: Redis) -> None:
    store = make_store(window_ms=200)
    await store.touch_many([f"u{i}" for i in range(250)])
    await asyncio.sleep(0.3)
    assert (await store.sweep(batch=100)).offline == 100
    assert await redis.zcard(KEYS.online) == 150


# --- shards, and one slot per script call -------------------------------------------------


def test_a_users_shard_is_a_stable_hash_of_their_id() -> None:
    # Data placement must never change between processes or releases: crc32 of the UTF-8 id.
    assert [shard_of(user, 3) for user in ("a", "b", "alice", "用户")] == [0, 2, 2, 1]
    assert shard_of("alice", 7) == zlib.crc32(b"alice") % 7
    assert {shard_of(f"u{i}", 1) for i in range(100)} == {0}
    assert {shard_of(f"u{i}", 3) for i in range(100)} == {0, 1, 2}


async def test_every_script_call_touches_one_cluster_slot(
    store: PresenceStore, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    slots_of_calls: dict[str, set[int]] = {}
    run = Scripts.run

    async def recording_run(
        self: Scripts, name: ScriptName, keys: list[str], args: list[str | int | bytes]
    ) -> Any:
        slots_of_calls.setdefault(name, set()).update(key_slot(k.encode()) for k in keys)
        return await run(self, name, keys, args)

    run_each = Scripts.run_each

    async def recording_run_each(
        self: Scripts, client: AnyRedis, name: ScriptName, calls: Sequence[ScriptCall]
    ) -> list[Any]:
        for keys, _ in calls:
            slots_of_calls.setdefault(name, set()).update(key_slot(k.encode()) for k in keys)
        return await run_each(self, client, name, calls)

    monkeypatch.setattr(Scripts, "run", recording_run)
    monkeypatch.setattr(Scripts, "run_each", recording_run_each)
    await store.add_friends("a", ["b", "c"])
    await store.touch("a", "s")
    await store.touch_many(["b", "c"])
    await store.kick("a", "s")
    await store.kick("b")
    await store.presence("c")
    await store.set_status("c", ChosenStatus.BUSY)
    await store.set_last_seen_visibility("c", Visibility.FRIENDS)
    await store.presence("c", reader="a")
    await store.online_users()
    await store.online_users(by_online_since=True)
    await store.online_users(kept=OnlineFilter(device="web"))
    await store.online_friends("a")
    await store.active_in_range(ago(hours=1), datetime.now(UTC))
    await store.weekly_stats()
    await store.online_time.online_time(["a", "b"], date(2026, 11, 1), date(2026, 11, 30))
    await put_old_online_time(redis)
    await store.online_time.carry_over()
    await store.online_time.fold_closed()
    await store.online_time.online_periods(ago(hours=30), datetime.now(UTC))
    await store.remove_friends("a", ["b"])
    await store.sweep()
    await store.take_token("backend:chat", 10, 10)
    await store.persist_document("0" * 64, "{ __typename }")
    await store.persisted_document("0" * 64)
    await store.refresh_documents(["0" * 64])
    opened = await store.open_session("c", "tab")
    assert await store.renew_leases() == []
    assert await store.check_sessions([opened.held]) == []
    await store.session_revoked(opened.held)
    await store.close_session(opened.held)
    in_place = await store.open_place_session("doc", "c", "tab", {"x": 1})
    assert await store.check_sessions([in_place.held]) == []
    for x in range(2, 6):  # within 50 ms of the first: the last announced at the interval's end
        await store.set_place_state("doc", "c", "tab", {"x": x})
    await store.flush_planned()
    await store.place_members("doc")
    await store.place_counts(["doc", "other"])
    await store.close_place_session(in_place.held)
    await store.changes((await store.changes(None, 5)).end_cursor, 5)
    await store.feed.shard_look(0, await store.feed.shard_start(0), 10)
    await call_every_webhook_script(store)
    await store.analytics.record_peak(2)
    await store.analytics.activity(ago(days=2), datetime.now(UTC), Granularity.HOUR)
    await store.analytics.activity(ago(days=40), datetime.now(UTC), Granularity.MONTH)
    await store.analytics.retention(ago(days=20).date(), 3, 3, Granularity.WEEK)
    await store.analytics.stickiness(None, 28)
    await store.analytics.compact_ended()
    await store.analytics.fold_ended()
    # choose_publish runs on a Redis Cluster only, friend_counts with several shards only
    # (the test below).
    assert set(slots_of_calls) == set(ScriptName) - {
        ScriptName.CHOOSE_PUBLISH,
        ScriptName.FRIEND_COUNTS,
    }
    assert all(len(slots) == 1 for slots in slots_of_calls.values()), slots_of_calls


@pytest.mark.parametrize(
    "deployment", ["three-shards", "cluster", "sharded-cluster"], indirect=True
)
async def test_every_script_call_of_three_shards_touches_one_slot(
    http_redis: AnyRedis,
    deployment: Settings,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    # On the cluster, a call whose keys spanned slots would fail with CROSSSLOT. With sharded
    # pub/sub, each channel a script publishes on must hash to its slot as well: a node
    # refuses one of another node's slot, but Valkey takes one of another slot of its own,
    # which would break once that slot moved. The channels (and key prefixes) are the
    # arguments named like keys.
    slots_of_each_call: list[set[int]] = []
    names: set[str] = set()
    sharded = False
    run = Scripts.run

    def slots(keys: Sequence[str], args: Sequence[str | int | bytes]) -> set[int]:
        # The `shard` argument (Shard.options) holds the shard's names, packed.
        texts: list[str | int] = [a for a in args if isinstance(a, str)]
        texts += [v for a in args if isinstance(a, bytes) for v in unpack_options(a).values()]
        named = [a for a in texts if isinstance(a, str) and a.startswith("gqlp:{")]
        return {key_slot(k.encode()) for k in [*keys, *(named if sharded else [])]}

    async def recording_run(
        self: Scripts, name: ScriptName, keys: list[str], args: list[str | int | bytes]
    ) -> Any:
        names.add(name)
        slots_of_each_call.append(slots(keys, args))
        return await run(self, name, keys, args)

    run_each = Scripts.run_each

    async def recording_run_each(
        self: Scripts, client: AnyRedis, name: ScriptName, calls: Sequence[ScriptCall]
    ) -> list[Any]:
        names.add(name)
        # The calls sent together go to one node: their keys share one slot.
        slots_of_each_call.append(set().union(*(slots(keys, args) for keys, args in calls)))
        return await run_each(self, client, name, calls)

    monkeypatch.setattr(Scripts, "run", recording_run)
    monkeypatch.setattr(Scripts, "run_each", recording_run_each)
    store = PresenceStore(http_redis, deployment)
    await store.choose_publish()
    sharded = store.sharded_events
    assert sharded == (request.node.callspec.params["deployment"] == "sharded-cluster")
    await call_every_script(store, http_redis)
    on_cluster = bool(deployment.redis_cluster_nodes)
    assert names == set(ScriptName) - (set() if on_cluster else {ScriptName.CHOOSE_PUBLISH})
    assert all(len(slots) == 1 for slots in slots_of_each_call)
    shard_slots = {key_slot(f"{{{i}}}".encode()) for i in range(3)}
    assert set().union(*slots_of_each_call) == shard_slots


async def test_a_session_touched_at_the_edge_of_the_window_is_live_until_it_passes(
    make_store: StoreFactory, redis: Redis
) -> None:
    # Activity exactly window_ms before the script's now is still live: the user is online and
    # the session listed, not an online entry left without its session.
    store = make_store(window_ms=1000)
    for attempt in range(40):
        seconds, micros = await redis.time()
        server_now_ms = seconds * 1000 + micros // 1000
        touched = await store.touch(f"u{attempt}", "s", at=from_ms(server_now_ms - 999))
        listed = await redis.zscore(KEYS.online, f"u{attempt}") is not None
        assert touched.online == listed
        assert bool(touched.sessions) == listed


async def test_a_touch_that_outlasts_the_window_answers_the_session_it_recorded(
    make_store: StoreFactory, redis: Redis
) -> None:
    # Clearing many ended sessions keeps the script busy for longer than this window, so the
    # server's clock passes the new session's end before the script answers: the answer is
    # still the one of the script's now, and agrees with the online entry it wrote. (A kick
    # leaves a key whose sessions have all ended until the kicked session's expiry.)
    store = make_store(window_ms=5)
    sessions_key = KEYS.sessions("u")
    for first in range(0, 100_000, 10_000):
        await redis.zadd(sessions_key, {f"ended{i}": 1 for i in range(first, first + 10_000)})
    await redis.pexpire(sessions_key, 60_000)
    touched = await store.touch("u", "s")
    assert [session.session_id for session in touched.sessions] == ["s"]
    assert touched.online
    assert await redis.zscore(KEYS.online, "u") is not None
