"""onlineUsers(filter:) in the store, on Redis 6.2 and Valkey 9: every field alone and
together against a reference made from what each user's presence says, paging, cursors, who
an end user finds, and indexes that hold nobody offline."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from gql_presence.store import ChosenStatus, Page, PresenceStore, Visibility
from gql_presence.store.errors import BadInputError
from gql_presence.store.keys import Keys
from gql_presence.store.models import OnlineFilter, Presence, Status
from tests.conftest import StoreFactory
from tests.helpers import eventually

NOW = datetime.now(UTC)
END_USER = "reader"
# The sweep's cursor in its pass that indexes users online with no index entry.
SCAN_KEY = Keys().index_scan


def ago(seconds: float) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds)


async def make_users(store: PresenceStore) -> None:
    """Users of every kind: devices, idle sessions, chosen statuses, hidden lastSeen,
    different onlineSince, one gone offline."""
    await store.touch("acme-1", "s1", at=ago(50), device="web")
    await store.touch("acme-1", "s2", at=ago(10), device="ios")
    await store.touch("acme-2", "s1", at=ago(40), device="ios", idle=True)
    await store.touch("acme-3", at=ago(30))
    await store.set_status("acme-3", ChosenStatus.BUSY)
    await store.touch("acme-4", "s1", at=ago(20), device="web")
    await store.set_status("acme-4", ChosenStatus.INVISIBLE)
    await store.touch("beta-1", "s1", at=ago(45), device="web")
    await store.set_last_seen_visibility("beta-1", Visibility.NOBODY)
    await store.touch("beta-2", "s1", at=ago(5), device="android")
    await store.set_status("beta-2", ChosenStatus.AWAY)
    await store.touch("beta-3")
    await store.touch_many(["gamma-1", "gamma-2", "acme-10"])
    await store.touch("gone", "s1", device="web")
    await store.kick("gone")


FILTERS = [
    OnlineFilter(user_id_prefix="acme-"),
    OnlineFilter(user_id_prefix="acme-1"),
    OnlineFilter(user_id_prefix="zzz"),
    OnlineFilter(device="web"),
    OnlineFilter(device="ios"),
    OnlineFilter(device="none"),
    OnlineFilter(statuses=(Status.ONLINE,)),
    OnlineFilter(statuses=(Status.AWAY, Status.BUSY)),
    OnlineFilter(statuses=(Status.INVISIBLE,)),
    OnlineFilter(statuses=(Status.OFFLINE,)),
    OnlineFilter(statuses=()),
    OnlineFilter(online_since_from=ago(35)),
    OnlineFilter(online_since_to=ago(35)),
    OnlineFilter(online_since_from=ago(60), online_since_to=ago(25)),
    OnlineFilter(user_id_prefix="acme-", device="web"),
    OnlineFilter(user_id_prefix="acme-", statuses=(Status.ONLINE, Status.INVISIBLE)),
    OnlineFilter(device="web", online_since_to=ago(25)),
    OnlineFilter(statuses=(Status.ONLINE,), online_since_from=ago(35), user_id_prefix="a"),
]


def matches(kept: OnlineFilter, truth: Presence, seen: Presence) -> bool:
    """The contract's rule, from the user's presence as backends see it (`truth`) and as the
    reader does (`seen`)."""
    since = seen.online_since
    by_since = kept.online_since_from is not None or kept.online_since_to is not None
    checks = [
        seen.online,
        kept.user_id_prefix is None or truth.user_id.startswith(kept.user_id_prefix),
        kept.device is None or kept.device in {s.device for s in truth.sessions},
        kept.statuses is None or seen.status in kept.statuses,
        not by_since or since is not None,
        since is None or kept.online_since_from is None or since >= kept.online_since_from,
        since is None or kept.online_since_to is None or since <= kept.online_since_to,
    ]
    return all(checks)


async def every_page(
    store: PresenceStore, first: int, reader: str | None, **options: object
) -> tuple[list[str], list[int]]:
    """The ids of every page in order, and each page's totalCount."""
    ids: list[str] = []
    totals: list[int] = []
    after = None
    while True:
        page: Page = await store.online_users(first, after, reader, **options)  # type: ignore[arg-type]
        ids += [n.user_id for n in page.nodes]
        totals.append(page.total_count)
        if not page.has_next_page:
            return ids, totals
        after = page.end_cursor


async def expected(
    store: PresenceStore, kept: OnlineFilter, reader: str | None, *, by_since: bool
) -> list[str]:
    listed, _ = await every_page(store, 1000, reader, by_online_since=by_since)
    truths = await store.presence_many(listed)
    seen = await store.presence_many(listed, reader) if reader else truths
    return [u for u, t, s in zip(listed, truths, seen, strict=True) if matches(kept, t, s)]


@pytest.mark.parametrize("reader", [None, END_USER])
@pytest.mark.parametrize("by_since", [False, True])
@pytest.mark.usefixtures("looked_at")
async def test_each_field_alone_and_together_finds_what_presence_says(
    store: PresenceStore, reader: str | None, by_since: bool
) -> None:
    await make_users(store)
    assert "gone" not in (await every_page(store, 1000, None))[0]
    for kept in FILTERS:
        want = await expected(store, kept, reader, by_since=by_since)
        for first in (1000, 2):
            got, totals = await every_page(
                store, first, reader, by_online_since=by_since, kept=kept
            )
            assert got == want, (kept, first)
            assert set(totals) == {len(want)}, (kept, first)


async def test_an_end_user_never_finds_an_invisible_user(store: PresenceStore) -> None:
    await store.touch("ghost", "s1", device="web")
    await store.set_status("ghost", ChosenStatus.INVISIBLE)
    await store.touch("plain", "s1", device="web")
    for kept in [
        OnlineFilter(statuses=(Status.INVISIBLE,)),
        OnlineFilter(statuses=tuple(Status)),
        OnlineFilter(user_id_prefix="ghost"),
        OnlineFilter(device="web"),
        OnlineFilter(online_since_from=ago(60)),
    ]:
        for by_since in (False, True):
            page = await store.online_users(50, None, END_USER, by_online_since=by_since, kept=kept)
            assert "ghost" not in [n.user_id for n in page.nodes]
            assert page.total_count == len(page.nodes)
            backend = await store.online_users(50, None, by_online_since=by_since, kept=kept)
            assert "ghost" in [n.user_id for n in backend.nodes], kept


async def test_a_cursor_of_one_filter_is_refused_with_another(store: PresenceStore) -> None:
    for user in ("a1", "a2", "a3"):
        await store.touch(user, device="web")
    page = await store.online_users(1, None, kept=OnlineFilter(user_id_prefix="a"))
    assert page.end_cursor
    for other in [OnlineFilter(user_id_prefix="a1"), OnlineFilter(device="web"), None]:
        with pytest.raises(BadInputError, match="same filter"):
            await store.online_users(1, page.end_cursor, kept=other)
    with pytest.raises(BadInputError, match="same order"):
        await store.online_users(
            1, page.end_cursor, kept=OnlineFilter(user_id_prefix="a"), by_online_since=True
        )
    plain = await store.online_users(1, None)
    with pytest.raises(BadInputError, match="same filter"):
        await store.online_users(1, plain.end_cursor, kept=OnlineFilter(user_id_prefix="a"))
    # The same filter given with its statuses in another order is the same filter.
    both = OnlineFilter(statuses=(Status.ONLINE, Status.AWAY))
    page = await store.online_users(1, None, kept=both)
    again = OnlineFilter(statuses=(Status.AWAY, Status.ONLINE, Status.AWAY))
    assert (await store.online_users(5, page.end_cursor, kept=again)).nodes


@pytest.mark.parametrize(
    ("kept", "message"),
    [
        (OnlineFilter(user_id_prefix=""), "filter.userIdPrefix must be 1 to 128"),
        (OnlineFilter(user_id_prefix="x" * 129), "filter.userIdPrefix must be 1 to 128"),
        (OnlineFilter(user_id_prefix="a\n"), "filter.userIdPrefix must not contain control"),
        (OnlineFilter(device=""), "filter.device must be 1 to 32"),
        (OnlineFilter(device="d" * 33), "filter.device must be 1 to 32"),
        (
            OnlineFilter(online_since_from=NOW, online_since_to=NOW - timedelta(seconds=1)),
            "filter.onlineSinceTo must not be before filter.onlineSinceFrom",
        ),
    ],
)
async def test_bad_filters_are_refused_saying_what_is_allowed(
    store: PresenceStore, kept: OnlineFilter, message: str
) -> None:
    with pytest.raises(BadInputError, match=message):
        await store.online_users(10, None, kept=kept)


async def index_keys(redis: Redis) -> Sequence[str]:
    return sorted(str(key) for key in await redis.keys("*:ix:*"))


async def test_indexes_hold_nobody_once_everyone_is_offline(
    store: PresenceStore, redis: Redis
) -> None:
    await make_users(store)
    assert await index_keys(redis)
    for user in ("acme-1", "acme-2", "acme-3", "acme-4", "acme-10", "beta-1", "beta-2"):
        await store.kick(user)
    for user in ("beta-3", "gamma-1", "gamma-2"):
        await store.kick(user)
    assert await index_keys(redis) == []


async def test_indexes_are_emptied_by_the_sweep_when_presence_expires(
    make_store: object, redis: Redis
) -> None:
    store: PresenceStore = make_store(window_ms=300)  # type: ignore[operator]
    await store.touch("a", "s1", device="web")
    await store.touch("b", "s1", device="ios", idle=True)
    await store.set_status("b", ChosenStatus.BUSY)
    await store.touch_many(["c", "d"])
    assert await index_keys(redis)

    async def swept() -> bool:
        await store.sweep()
        return await index_keys(redis) == []

    await eventually(swept, what="the sweep to empty the indexes")


async def test_a_device_whose_session_expired_is_no_longer_found(
    make_store: object, redis: Redis
) -> None:
    store: PresenceStore = make_store(window_ms=1000)  # type: ignore[operator]
    await store.touch("a", "old", at=ago(0.7), device="web")
    await store.touch("a", "new", device="ios")
    web = OnlineFilter(device="web")
    assert [n.user_id for n in (await store.online_users(10, None, kept=web)).nodes] == ["a"]

    async def gone() -> bool:
        await store.sweep()
        page = await store.online_users(10, None, kept=web)
        return page.nodes == () and page.total_count == 0

    await eventually(gone, what="the expired session's device to be forgotten")
    ios = await store.online_users(10, None, kept=OnlineFilter(device="ios"))
    assert [n.user_id for n in ios.nodes] == ["a"]
    assert ios.total_count == 1


@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("by_since", [False, True])
@pytest.mark.usefixtures("looked_at")
async def test_a_friend_finds_by_online_since_whom_they_may_see_it_of(
    make_store: StoreFactory, by_since: bool, shards: int
) -> None:
    """A user who shows lastSeen to FRIENDS is found by onlineSince by a friend (merged in
    the list's order, across pages), not by a stranger; nobody invisible is found."""
    store = make_store(shards=shards)
    for user, at in [("pal", 40), ("e-1", 50), ("e-2", 30), ("e-3", 10), ("shy", 20)]:
        await store.touch(user, "s1", at=ago(at), device="web")
    await store.touch("ghost", "s1", at=ago(35), device="web")
    await store.touch(END_USER)
    await store.touch("stranger")
    await store.set_last_seen_visibility("pal", Visibility.FRIENDS)
    await store.set_last_seen_visibility("shy", Visibility.NOBODY)
    await store.set_last_seen_visibility("ghost", Visibility.FRIENDS)
    await store.set_status("ghost", ChosenStatus.INVISIBLE)
    await store.add_friends(END_USER, ["pal", "shy", "ghost"], mutual=True)
    for kept in [
        OnlineFilter(online_since_from=ago(60)),
        OnlineFilter(online_since_from=ago(45), online_since_to=ago(5)),
        OnlineFilter(online_since_to=ago(35), device="web"),
        OnlineFilter(online_since_from=ago(60), user_id_prefix="p"),
    ]:
        for reader in (END_USER, "stranger"):
            want = await expected(store, kept, reader, by_since=by_since)
            assert ("pal" in want) == (reader == END_USER), (kept, reader)
            assert "ghost" not in want
            assert "shy" not in want
            for first in (1000, 1):
                got, totals = await every_page(
                    store, first, reader, by_online_since=by_since, kept=kept
                )
                assert got == want, (kept, reader, first)
                assert set(totals) == {len(want)}, (kept, reader, first)


async def test_the_sweep_indexes_users_online_before_the_indexes_were_kept(
    store: PresenceStore, redis: Redis
) -> None:
    """Users online with no index entry, as before the indexes were kept, are found by the
    filters once the sweep's pass over the online list has come by, a chunk per call."""
    await make_users(store)
    await store.touch_many([f"many-{i}" for i in range(300)])
    await store.set_last_seen_visibility("many-7", Visibility.FRIENDS)
    for key in await index_keys(redis):
        await redis.delete(key)
    web = OnlineFilter(device="web")
    assert (await every_page(store, 1000, None, kept=web))[0] == []

    sweeps = 0
    while await redis.get(SCAN_KEY) != "done" and sweeps < 10:
        await store.sweep()
        sweeps += 1
    # A chunk per call: several calls for 310 users online, each bounded.
    assert 2 <= sweeps < 10
    for reader in (None, END_USER):
        for by_since in (False, True):
            for kept in [*FILTERS, OnlineFilter(user_id_prefix="many-1")]:
                want = await expected(store, kept, reader, by_since=by_since)
                got, totals = await every_page(
                    store, 7, reader, by_online_since=by_since, kept=kept
                )
                assert got == want, (kept, reader, by_since)
                assert set(totals) == {len(want)}, (kept, reader, by_since)
