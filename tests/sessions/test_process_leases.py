"""Held sessions under real faults of real processes: `gql-presence serve` killed (SIGKILL) or
stood still (SIGSTOP) while it holds presenceSession subscriptions, watched through a second
process on the same Redis. Each process holds its sessions under one lease per shard; what
another process shows and announces of them when that lease lapses is what is checked here."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis, RedisCluster

from gql_presence.running.redis_server import RedisServer
from gql_presence.store import shard_of
from gql_presence.store.keys import Keys
from tests.helpers import (
    BACKEND_TOKEN,
    FIELDS,
    HoldingSocket,
    Running,
    Subscriber,
    end_services,
    eventually,
    holding_socket,
    post,
    received,
    start_services,
    subscribed,
    until_following,
)
from tests.redis_cluster import LocalCluster, fail_over

# Every test runs processes of its own and waits for leases to lapse.
pytestmark = pytest.mark.slow

TTL_S = 1
# The process that watches renews its own lease on a longer TTL: a stall of the machine under
# it (a busy runner) must not end its sessions while the test looks at the other's lapse.
WATCHER_TTL_S = 4
# A failover holds up writes to its shard for a moment; a lease is renewed every TTL/3.
FAILOVER_TTL_S = 2
SHARDS = 3
BACKEND = f"Bearer {BACKEND_TOKEN}"
EVERYONE = f"subscription {{ presenceChanged(all: true) {{ {FIELDS} }} }}"
# Held by the process that fails only, and by it and the other one (spread over the shards).
ALONE = [f"solo-{i}" for i in range(6)]
SHARED = [f"both-{i}" for i in range(3)]


@pytest.fixture
async def services(
    flushed_redis: Redis, redis_server: RedisServer, tmp_path: Path
) -> AsyncIterator[list[Running]]:
    """Two processes on one Redis with three shards: the first holds sessions on a lease TTL
    of TTL_S and fails, the second watches (and holds some sessions too)."""
    started = await start_services(
        2,
        tmp_path,
        [
            {"PRESENCE_CONNECTION_TTL_SECONDS": str(TTL_S)},
            {"PRESENCE_CONNECTION_TTL_SECONDS": str(WATCHER_TTL_S)},
        ],
        REDIS_URL=redis_server.url,
        PRESENCE_SHARDS=str(SHARDS),
        PRESENCE_BACKEND_TOKENS=f"chat:{BACKEND_TOKEN}",
        PRESENCE_LOG_LEVEL="warning",
    )
    try:
        yield started
    finally:
        await asyncio.to_thread(end_services, started)


def read_presence(port: int, users: list[str]) -> dict[str, Any]:
    """Each user's presence and the list of online users, in one read through the service."""
    fields = " ".join(
        f'u{i}: presence(userId: "{user}") {{ userId online sessions {{ sessionId }} }}'
        for i, user in enumerate(users)
    )
    listed = "onlineUsers(first: 1000) { totalCount nodes { userId } }"
    body = post(port, f"{{ {fields} {listed} }}", BACKEND)
    assert "errors" not in body, body
    data: dict[str, Any] = body["data"]
    return data


def online_of(read: dict[str, Any]) -> dict[str, bool]:
    return {v["userId"]: v["online"] for k, v in read.items() if k.startswith("u")}


def listed_of(read: dict[str, Any]) -> set[str]:
    listing = read["onlineUsers"]
    users = {node["userId"] for node in listing["nodes"]}
    assert listing["totalCount"] == len(users), listing
    return users


def changes_by_user(events: list[dict[str, Any]]) -> dict[str, list[str]]:
    by_user: dict[str, list[str]] = {}
    for event in events:
        by_user.setdefault(event["userId"], []).append(event["kind"])
    return by_user


async def hold_everyone(on_failing: HoldingSocket, on_other: HoldingSocket) -> None:
    """ALONE and SHARED held on the failing process ("tab"), SHARED also on the other
    ("phone")."""
    for user in ALONE + SHARED:
        await on_failing.hold(user, "tab")
    for user in SHARED:
        await on_other.hold(user, "phone")


async def announced(
    changes: Subscriber,
    events: list[dict[str, Any]],
    wanted: Counter[tuple[str, str]],
    within_s: float,
) -> None:
    """Collects into `events` what the subscriber receives until it has received at least
    `wanted` (user, kind) pairs."""

    def enough() -> bool:
        events.extend(received(changes))
        have = Counter((e["userId"], e["kind"]) for e in events)
        return all(have[key] >= count for key, count in wanted.items())

    await eventually(enough, within_s=within_s, what=f"the events {dict(wanted)}")


def keys_of(user: str) -> Keys:
    return Keys.of_shard(shard_of(user, SHARDS))


async def redis_now_ms(redis: Redis | RedisCluster, user: str = "") -> int:
    """The Redis clock, ms: on a cluster, that of the master of the user's shard."""
    if isinstance(redis, RedisCluster):
        node = redis.get_node_from_key(keys_of(user).online)
        seconds, micros = await redis.execute_command("TIME", target_nodes=node)
    else:
        seconds, micros = await redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def holding_slot(redis: Redis | RedisCluster, user: str) -> str:
    """The slot of the lease under which the user's "tab" session is held."""
    holder = await redis.hget(keys_of(user).conn(user), "tab")
    assert isinstance(holder, str), user  # "generation slot"
    return holder.split()[1]


async def lapses_of_tabs(redis: Redis, users: list[str]) -> dict[str, int]:
    """When the lease that holds each user's "tab" session lapses, ms (a lease per shard)."""
    lapses = {}
    for user in users:
        lapse = await redis.zscore(keys_of(user).leases, await holding_slot(redis, user))
        assert lapse is not None
        lapses[user] = int(lapse)
    return lapses


async def tabs_left(redis: Redis, users: list[str]) -> list[bool]:
    """Whether each of the users' "tab" sessions is still recorded (no sweep ended it)."""
    return [await redis.zscore(keys_of(user).sessions(user), "tab") is not None for user in users]


async def any_left(redis: Redis, users: list[str]) -> bool:
    return any(await tabs_left(redis, users))


async def all_left(redis: Redis, users: list[str]) -> bool:
    return all(await tabs_left(redis, users))


async def test_a_killed_processs_users_go_offline_once_and_users_held_elsewhere_stay(
    services: list[Running],
) -> None:
    failing, other = services
    async with subscribed(other.ws_url, EVERYONE, authorization=BACKEND) as changes:
        probes = await until_following(changes, other.port, BACKEND)
        async with (
            holding_socket(failing.port, BACKEND) as on_failing,
            holding_socket(other.port, BACKEND) as on_other,
        ):
            await hold_everyone(on_failing, on_other)
            events: list[dict[str, Any]] = []
            await announced(changes, events, Counter((u, "ONLINE") for u in ALONE + SHARED), 3)

            failing.process.kill()  # SIGKILL: no close, no release of its leases
            await asyncio.to_thread(failing.process.wait, 5)
            events.clear()
            # Its lease lapses within TTL_S of its last renewal; the other's sweep, every
            # second, ends its sessions then.
            await announced(changes, events, Counter((u, "OFFLINE") for u in ALONE), TTL_S + 2)
            await asyncio.wait_for(on_failing.closed.wait(), 3)
            await changes.nothing_more(1.2)  # a sweep or more later: nothing announced again
            assert changes_by_user(events) == {user: ["OFFLINE"] for user in ALONE}

            read = await asyncio.to_thread(read_presence, other.port, ALONE + SHARED)
            assert online_of(read) == {user: user in SHARED for user in ALONE + SHARED}
            for i, user in enumerate(ALONE + SHARED):
                sessions = [s["sessionId"] for s in read[f"u{i}"]["sessions"]]
                assert sessions == (["phone"] if user in SHARED else []), (user, sessions)
            assert listed_of(read) == {*SHARED, *probes}
            # The other process's holds never noticed.
            assert all(len(messages) == 1 for messages in on_other.received.values())
            assert not on_other.closed.is_set()


async def test_a_process_stood_still_past_the_ttl_loses_its_holds_for_good(
    services: list[Running], flushed_redis: Redis
) -> None:
    failing, other = services
    async with subscribed(other.ws_url, EVERYONE, authorization=BACKEND) as changes:
        probes = await until_following(changes, other.port, BACKEND)
        async with holding_socket(other.port, BACKEND) as on_other:
            for user in SHARED:
                await on_other.hold(user, "phone")
            # The reads between the lapse and the sweep are caught by looking often: should a
            # sweep come within milliseconds of the lapse, the next round catches them.
            before_sweep = 0
            for _ in range(3):
                reads = await stand_still_once(failing, changes, flushed_redis, other.port, probes)
                before_sweep += reads
                if before_sweep:
                    break
            assert before_sweep, "no read came between a lapse and its sweep in three rounds"
            assert all(len(messages) == 1 for messages in on_other.received.values())
            assert not on_other.closed.is_set()


async def stand_still_once(
    failing: Running, changes: Subscriber, redis: Redis, port: int, probes: list[str]
) -> int:
    """Holds ALONE and SHARED on `failing`, stops it for longer than the TTL, checks what
    `port` shows and announces meanwhile, continues it, and checks that each of its holds
    ends with the error that says to subscribe again and comes back to life nowhere.
    Returns how many reads came between the lapse and the sweep."""
    everyone = ALONE + SHARED
    async with holding_socket(failing.port, BACKEND) as on_failing:
        operations = [await on_failing.hold(user, "tab") for user in everyone]
        events: list[dict[str, Any]] = []
        await announced(changes, events, Counter((u, "ONLINE") for u in ALONE), 3)
        events.clear()

        os.kill(failing.process.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            # A renewal it sent just before it stopped may still be on its way to Redis.
            await asyncio.sleep(0.1)
            lapses = await lapses_of_tabs(redis, everyone)
            # Each read through the other process made after a lapse shows the users of the
            # lapsed lease offline, whether the sweep has ended their sessions or not.
            before_sweep = after_sweep = 0
            while not after_sweep:
                started_ms = await redis_now_ms(redis)
                swept = not await any_left(redis, everyone)
                read = await asyncio.to_thread(read_presence, port, everyone)
                online = online_of(read)
                lapsed = [user for user in ALONE if lapses[user] < started_ms]
                assert [user for user in lapsed if online[user]] == [], read
                assert all(online[user] for user in SHARED), read
                if len(lapsed) < len(ALONE):
                    continue  # some leases may not have lapsed yet
                assert listed_of(read) == {*SHARED, *probes}
                if swept:
                    after_sweep += 1
                elif await all_left(redis, everyone):
                    before_sweep += 1
            # The sweep has ended them: each announced once.
            await announced(changes, events, Counter((u, "OFFLINE") for u in ALONE), 3)
            # Stood still for longer than the TTL.
            await asyncio.sleep(max(0, stopped + TTL_S + 0.2 - time.monotonic()))
        finally:
            os.kill(failing.process.pid, signal.SIGCONT)

        # Its next renewal finds its leases lapsed: each hold ends with the error, then
        # completes, and the socket stays open.
        await eventually(
            lambda: all(on_failing.completed(o) for o in operations) or on_failing.closed.is_set(),
            within_s=3,
            what="every hold of the stopped process to end",
        )
        for operation in operations:
            messages = on_failing.received[operation]
            assert [m["type"] for m in messages] == ["next", "next", "complete"], messages
            [error] = messages[1]["payload"]["errors"]
            assert error["extensions"]["code"] == "UNAVAILABLE"
            assert "subscribe again" in error["message"]
        assert not on_failing.closed.is_set()

        # Nothing of them comes back: not live through the other process, nor announced.
        await changes.nothing_more(1.2)
        events.extend(received(changes))
        assert changes_by_user(events) == {user: ["OFFLINE"] for user in ALONE}
        read = await asyncio.to_thread(read_presence, port, everyone)
        assert online_of(read) == {user: user in SHARED for user in everyone}
        for i, user in enumerate(everyone):
            sessions = [s["sessionId"] for s in read[f"u{i}"]["sessions"]]
            assert sessions == (["phone"] if user in SHARED else []), (user, sessions)
        assert listed_of(read) == {*SHARED, *probes}
    return before_sweep


async def test_held_sessions_outlive_a_failover_of_their_shards_master(
    failover_cluster: tuple[LocalCluster, tuple[str, int]], tmp_path: Path
) -> None:
    cluster, replica = failover_cluster
    everyone = ALONE + SHARED
    on_failed_over = [user for user in everyone if shard_of(user, SHARDS) == 0]
    assert on_failed_over  # the shard of the master that fails over holds some of them
    holder, watcher = await start_services(
        2,
        tmp_path,
        REDIS_CLUSTER_NODES=",".join(f"{host}:{port}" for host, port in cluster.nodes),
        PRESENCE_SHARDS=str(SHARDS),
        PRESENCE_CONNECTION_TTL_SECONDS=str(FAILOVER_TTL_S),
        PRESENCE_BACKEND_TOKENS=f"chat:{BACKEND_TOKEN}",
        PRESENCE_LOG_LEVEL="warning",
    )
    redis = RedisCluster(*cluster.nodes[0], decode_responses=True)
    try:
        async with subscribed(watcher.ws_url, EVERYONE, authorization=BACKEND) as changes:
            probes = await until_following(changes, watcher.port, BACKEND)
            async with holding_socket(holder.port, BACKEND) as on_holder:
                operations = [await on_holder.hold(user, "tab") for user in everyone]
                events: list[dict[str, Any]] = []
                await announced(changes, events, Counter((u, "ONLINE") for u in everyone), 3)
                events.clear()
                [shard_0_lease] = {await holding_slot(redis, user) for user in on_failed_over}

                await asyncio.to_thread(fail_over, replica, cluster)
                failed_over_ms = await redis_now_ms(redis, on_failed_over[0])

                # Settled: the lease renewed on the new master more than a TTL after the
                # failover. A lease that had lapsed meanwhile is never renewed again.
                async def renewed_since() -> bool:
                    lapse = await redis.zscore(keys_of(on_failed_over[0]).leases, shard_0_lease)
                    return lapse is not None and lapse > failed_over_ms + 2 * FAILOVER_TTL_S * 1000

                await eventually(renewed_since, within_s=2 * FAILOVER_TTL_S + 2, what="a renewal")
                # None lost, none doubled: every hold as it was, nothing announced.
                await changes.nothing_more(0.5)
                assert all(on_holder.received[o] == on_holder.received[o][:1] for o in operations)
                assert not on_holder.closed.is_set()
                read = await asyncio.to_thread(read_presence, watcher.port, everyone)
                assert all(online_of(read).values()), read
                for i in range(len(everyone)):
                    assert [s["sessionId"] for s in read[f"u{i}"]["sessions"]] == ["tab"]
                assert listed_of(read) == {*everyone, *probes}

                # Writes go on through the new master: a hold completed ends at once, once.
                gone = on_failed_over[0]
                await on_holder.socket.send_json({"id": f"{gone}/tab", "type": "complete"})
                await announced(changes, events, Counter({(gone, "OFFLINE"): 1}), 3)
                await changes.nothing_more(1.2)
                events.extend(received(changes))
                assert changes_by_user(events) == {gone: ["OFFLINE"]}
                read = await asyncio.to_thread(read_presence, watcher.port, everyone)
                assert online_of(read) == {user: user != gone for user in everyone}
    finally:
        await redis.aclose()
        await asyncio.to_thread(end_services, [holder, watcher])
