"""The feed: every announced change kept for a while, with versions, read a page at a time."""

from __future__ import annotations

import time

import pytest
from redis.asyncio import Redis

from gql_presence.store import PresenceStore, feed
from gql_presence.store.errors import BadInputError, CursorExpiredError
from gql_presence.store.keys import Keys
from gql_presence.store.wire import PublishedEvent, PublishedPlaceEvent
from tests.conftest import TEST_SETTINGS, StoreFactory
from tests.helpers import counted_calls, eventually

KEYS = Keys()


def kinds_of(nodes: tuple[PublishedEvent | PublishedPlaceEvent, ...]) -> list[tuple[str, str]]:
    return [(n.kind, n.user_id) for n in nodes]


async def test_changes_come_oldest_first_with_their_versions(store: PresenceStore) -> None:
    await store.touch("ann", "phone")
    await store.kick("ann")
    await store.touch("bob", "web")
    page = await store.changes(None, 10)
    assert kinds_of(page.nodes) == [("ONLINE", "ann"), ("KICKED", "ann"), ("ONLINE", "bob")]
    assert [n.version for n in page.nodes if isinstance(n, PublishedEvent)] == [1, 2, 1]
    assert not page.has_more
    # Nothing new after the end: the same position again.
    assert (await store.changes(page.end_cursor, 10)).nodes == ()


async def test_changes_page_without_losing_or_repeating(store: PresenceStore) -> None:
    users = [f"user{i}" for i in range(7)]
    await store.touch_many(users)
    seen: list[str] = []
    after = None
    for _ in range(4):
        page = await store.changes(after, 3)
        seen += [n.user_id for n in page.nodes]
        after = page.end_cursor
        if not page.has_more:
            break
    assert seen == users


async def test_changes_keep_the_kinds_asked_for(store: PresenceStore) -> None:
    await store.touch("ann", "phone")
    await store.kick("ann")
    page = await store.changes(None, 10, kinds=["KICKED"])
    assert kinds_of(page.nodes) == [("KICKED", "ann")]
    assert (await store.changes(page.end_cursor, 10, kinds=["ONLINE"])).nodes == ()


async def test_feed_cursor_is_the_present(store: PresenceStore) -> None:
    await store.touch("ann", "phone")
    now = await store.feed_cursor()
    assert (await store.changes(now, 10)).nodes == ()
    await store.kick("ann")
    assert kinds_of((await store.changes(now, 10)).nodes) == [("KICKED", "ann")]


async def test_a_cursor_not_of_the_feed_is_bad_input(store: PresenceStore) -> None:
    for cursor in ["", "garbage", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"]:
        with pytest.raises(BadInputError, match="cursor of this service's feed"):
            await store.changes(cursor, 10)
    with pytest.raises(BadInputError, match="first must be 1 to 1,000"):
        await store.changes(None, 0)


async def test_a_cursor_past_the_retention_has_expired(make_store: StoreFactory) -> None:
    store = make_store(feed_retention_ms=300)
    await store.touch("ann", "phone")
    cursor = (await store.changes(None, 10)).end_cursor

    async def expired() -> bool:
        await store.touch("bob", "web")  # a change that trims the feed
        try:
            await store.changes(cursor, 10)
        except CursorExpiredError:
            return True
        return False

    await eventually(expired)


async def test_a_cursor_trimmed_by_length_has_expired(
    make_store: StoreFactory, redis: Redis
) -> None:
    store = make_store(feed_max_changes=100)
    await store.touch("first", "phone")
    cursor = (await store.changes(None, 1)).end_cursor
    await store.touch_many([f"user{i}" for i in range(400)])
    assert await redis.xlen(Keys.of_shard(0).feed) < 400
    with pytest.raises(CursorExpiredError, match="older than what the feed keeps"):
        await store.changes(cursor, 10)


async def test_an_events_cursor_resumes_after_it(store: PresenceStore) -> None:
    await store.touch("ann", "phone")
    online = (await store.changes(None, 10)).nodes[0]
    cursor = await store.event_cursor("ann", online.feed_id)
    await store.kick("ann")
    assert kinds_of((await store.changes(cursor, 10)).nodes) == [("KICKED", "ann")]


async def test_a_replay_reads_what_it_follows_up_to_its_limit(
    store: PresenceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed, "RESUME_MAX_CHANGES", 5)
    cursor = await store.feed_cursor()
    await store.touch_many(["ann", "bob", "cy"])
    await store.kick("bob")
    await store.touch("dee", "phone")
    replay = await store.feed_replay(cursor, users={"ann", "bob"})
    assert kinds_of(replay.changes) == [("ONLINE", "ann"), ("ONLINE", "bob"), ("KICKED", "bob")]
    assert replay.passed("bob", replay.changes[-1].feed_id)
    assert len((await store.feed_replay(cursor)).changes) == 5  # every user's
    await store.touch("eve", "phone")  # a sixth change to read
    with pytest.raises(CursorExpiredError, match="More than 5 changes"):
        await store.feed_replay(cursor, users={"ann"})


async def test_a_page_filtered_by_many_places_costs_about_what_one_place_costs(
    store: PresenceStore,
) -> None:
    """A page matches each change it examines against `places`: with the most entries
    allowed, that must not cost a pass over them per change (1,000 changes examined against
    1,000 entries were a million comparisons, a quarter of a second of the process)."""
    for i in range(feed.EXAMINED_PER_SHARD):
        await store.open_place_session(f"doc:{i}", "ann", "tab")
    one = ["room:none"]
    many = [f"room:{i}*" for i in range(feed.MAX_PLACE_FILTERS // 2)]
    many += [f"room:{i}" for i in range(feed.MAX_PLACE_FILTERS // 2)]

    async def fastest(places: list[str]) -> float:
        times = []
        for _ in range(3):
            started = time.perf_counter()
            page = await store.changes(None, 250, places=places)
            times.append(time.perf_counter() - started)
            assert page.nodes == ()
        return min(times)

    assert await fastest(many) < 3 * await fastest(one)
    matched = await store.changes(None, 1000, places=["doc:1*", "doc:20"])
    assert sorted(
        n.place_id for n in matched.nodes if isinstance(n, PublishedPlaceEvent)
    ) == sorted([f"doc:{i}" for i in range(1000) if str(i).startswith("1")] + ["doc:20"])


async def test_a_look_and_every_page_of_the_same_entries_decode_each_once(
    store: PresenceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process's look at a shard and each webhook's page read the same new entries.
    for user in ("ann", "bob", "cyd", "dee"):
        await store.touch(user, "web")
    decoded = counted_calls(monkeypatch, feed, "change_of")
    read = []
    for shard in range(store.feed.shards):
        start = await store.feed.shard_start(shard)
        _, looked = await store.feed.shard_look(shard, start, 10)
        for _ in range(10):
            assert await store.feed.shard_page(shard, start, 10) == looked
        read += looked
    assert sorted(change.user_id for _, change in read if change) == ["ann", "bob", "cyd", "dee"]
    assert len(decoded) == 4


async def test_versions_kept_by_earlier_code_are_read_and_counted_on(
    store: PresenceStore, redis: Redis
) -> None:
    # A shard as code that kept each version in a key of its own left it: its feed there, and
    # no hash of versions.
    await store.touch("ann", "phone")
    await redis.delete(KEYS.versions)
    await redis.set(KEYS.version("ann"), 5, px=60_000)
    await redis.set(KEYS.version("bob"), 7, px=60_000)
    assert (await store.presence("ann")).version == 5
    await store.kick("ann")
    await store.touch_many(["bob", "cat"])
    assert [(await store.presence(u)).version for u in ("ann", "bob", "cat")] == [6, 8, 1]
    page = await store.changes(None, 10)
    assert [(n.kind, n.user_id, n.version) for n in page.nodes][-3:] == [
        ("KICKED", "ann", 6),
        ("ONLINE", "bob", 8),
        ("ONLINE", "cat", 1),
    ]


async def test_a_version_lasts_the_retention_after_its_change(
    store: PresenceStore, redis: Redis
) -> None:
    before_ms = time.time_ns() // 1_000_000
    await store.touch("ann", "phone")
    assert (await store.presence("ann")).version == 1
    value = await redis.hget(KEYS.versions, "ann")
    assert value is not None
    expiry_ms = int(value.split()[1])
    retention_ms = TEST_SETTINGS.retention_ms
    assert before_ms + retention_ms <= expiry_ms <= before_ms + retention_ms + 60_000
    # Once past its expiry it is gone, as a key with that expiry would be: the user's changes
    # are counted again from nothing, and the sweep removes it.
    await redis.hset(KEYS.versions, "ann", f"1 {before_ms - 1}")
    assert (await store.presence("ann")).version == 0
    await store.sweep()
    assert await redis.hget(KEYS.versions, "ann") is None
    await store.kick("ann")
    assert (await store.presence("ann")).version == 1
