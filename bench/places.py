"""What a place's size costs its reads: `python -m bench.places [--members N]`.

On a private Redis, one place of N members (default 100,000) beside places of 10 members and
one of 100, and side by side, interleaved, Redis's own time of each script call (its slow log,
median of 50 calls each): `placeMembers(first: 50)` of the large place and of a small one,
the second page of each (from a cursor), and `placeCounts` of 1,000 places, once with the
large place among them and once with 1,000 small ones. The target: the large place's figures
within 2x the small one's. A page of a place of 10 holds 10 members where the large place's
holds 50, so the page of the place of 100 is measured too: the same page, the same work.

Then what a client sees: the same first pages read over HTTP from one service process on that
Redis (`gql-presence serve`, PRESENCE_WORKERS=1), the time from request to answer, median of
HTTP_ROUNDS requests each, interleaved.

Last, what the large place's sessions cost Redis while idle: the commands Redis runs (INFO
commandstats, those the scripts run included) over IDLE_S seconds in which this process does
what a serving process does (as it does all along), renewing its lease every TTL/3, and
sweeping every second, per session per second (the target: at most 0.01).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from redis.asyncio import Redis

from bench.harness import serve_ours, wait_for
from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import free_port, start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore

ROUNDS = 50
HTTP_ROUNDS = 300
PAGE = """query($p: ID!) { placeMembers(placeId: $p, first: 50) { totalCount users
  nodes { userId sessionId joinedAt state } pageInfo { endCursor hasNextPage } } }"""
FILL_CONCURRENCY = 200
IDLE_S = 30
RENEW_EVERY_S = Settings().connection_ttl_ms / 1000 / 3


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        server = start_redis_server(data_dir=Path(folder))
        client = redis_client(server.url)
        try:
            await measure(client, server.url, args.members)
        finally:
            await client.aclose()
            server.stop()


async def measure(client: Redis, redis_url: str, members: int) -> None:
    store = PresenceStore(client, Settings())
    await store.load_scripts()
    # As a serving process does: its lease renewed every TTL/3, its sessions live meanwhile.
    renewals = asyncio.create_task(renew_forever(store))
    try:
        await measure_with(client, store, members)
        await measure_http(redis_url)
        await measure_idle(client, store, members)
    finally:
        renewals.cancel()


async def renew_forever(store: PresenceStore) -> None:
    while True:
        await asyncio.sleep(RENEW_EVERY_S)
        assert await store.renew_leases() == []


async def measure_with(client: Redis, store: PresenceStore, members: int) -> None:
    print(f"filling a place of {members:,} members and 1,000 places of 10 ...", flush=True)
    await fill(store, "big", members)
    small = [f"small-{i}" for i in range(1000)]
    for place in small:
        await fill(store, place, 10)
    await fill(store, "hundred", 100)
    hundred_first = await store.place_members("hundred", first=50)
    big_first = await store.place_members("big", first=50)
    small_first = await store.place_members(small[0], first=5)
    with_big = ["big", *small[1:]]
    calls: dict[str, tuple[Callable[[], Awaitable[object]], Callable[[], Awaitable[object]]]] = {
        "placeMembers(first: 50), first page": (
            lambda: store.place_members("big", first=50),
            lambda: store.place_members(small[0], first=50),
        ),
        "placeMembers(first: 50), from a cursor": (
            lambda: store.place_members("big", first=50, after=big_first.end_cursor),
            lambda: store.place_members(small[0], first=50, after=small_first.end_cursor),
        ),
        "placeMembers(first: 50), against a place of 100": (
            lambda: store.place_members("big", first=50),
            lambda: store.place_members("hundred", first=50),
        ),
        "placeMembers(first: 50), cursor, against 100": (
            lambda: store.place_members("big", first=50, after=big_first.end_cursor),
            lambda: store.place_members("hundred", first=50, after=hundred_first.end_cursor),
        ),
        "placeCounts of 1,000 places": (
            lambda: store.place_counts(with_big),
            lambda: store.place_counts(small),
        ),
    }
    await client.config_set("slowlog-log-slower-than", 0)
    await client.config_set("slowlog-max-len", 10 * ROUNDS)
    print(f"\nRedis time per call, median of {ROUNDS}, µs        large    small   large/small")
    for name, (large, little) in calls.items():
        times: dict[str, list[int]] = {"large": [], "small": []}
        for _ in range(ROUNDS):  # interleaved, so both see the same machine
            for kind, call in (("large", large), ("small", little)):
                await client.slowlog_reset()
                await call()
                times[kind] += await script_times_us(client)
        big_us, small_us = statistics.median(times["large"]), statistics.median(times["small"])
        print(f"{name:<50} {big_us:7.0f}  {small_us:7.0f}   {big_us / small_us:5.2f}x")
    await client.config_set("slowlog-log-slower-than", 10_000)


async def measure_http(redis_url: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/graphql"
    process = serve_ours({**os.environ, "REDIS_URL": redis_url}, port, 1)
    try:
        await wait_for(url)
        times: dict[str, list[float]] = {"big": [], "small-0": [], "hundred": []}
        async with aiohttp.ClientSession() as http:
            for _ in range(HTTP_ROUNDS):  # interleaved, so all see the same machine
                for place, taken in times.items():
                    started = time.perf_counter()
                    async with http.post(url, json={"query": PAGE, "variables": {"p": place}}) as r:
                        body = await r.json()
                    taken.append((time.perf_counter() - started) * 1000)
                    assert "errors" not in body, body
        big, small, hundred = (statistics.median(t) for t in times.values())
        heading = f"placeMembers(first: 50) over HTTP, median of {HTTP_ROUNDS}, ms"
        print(f"\n{heading:<50}   large    small   large/small")
        print(f"{'against a place of 10':<50} {big:7.2f}  {small:7.2f}   {big / small:5.2f}x")
        print(f"{'against a place of 100':<50} {big:7.2f}  {hundred:7.2f}   {big / hundred:5.2f}x")
    finally:
        process.terminate()
        process.wait()


async def measure_idle(client: Redis, store: PresenceStore, members: int) -> None:
    before = await commands(client)
    started = time.perf_counter()
    while time.perf_counter() < started + IDLE_S:
        await store.sweep()
        await asyncio.sleep(1)
    sessions = members + 1000 * 10 + 100
    per_session = (await commands(client) - before) / (time.perf_counter() - started) / sessions
    print(
        f"\nidle: Redis commands per second per place session ({sessions:,} held) {per_session:.6f}"
    )


async def commands(client: Redis) -> int:
    """Every command Redis has run, those of scripts included."""
    stats = await client.info("commandstats")
    return sum(int(entry["calls"]) for entry in stats.values())


async def fill(store: PresenceStore, place: str, members: int) -> None:
    """`members` sessions in the place, of as many users, under this process's lease."""
    semaphore = asyncio.Semaphore(FILL_CONCURRENCY)

    async def join(i: int) -> None:
        async with semaphore:
            await store.open_place_session(place, f"user-{i}", "tab", {"x": i % 800, "y": i % 600})

    await asyncio.gather(*(join(i) for i in range(members)))


async def script_times_us(client: Redis) -> list[int]:
    """How long each script call since the last reset took in Redis, in µs."""
    entries = await client.slowlog_get(100)
    return [int(e["duration"]) for e in entries if "evalsha" in str(e["command"]).lower()]


if __name__ == "__main__":
    asyncio.run(main())
