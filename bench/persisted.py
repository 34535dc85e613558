"""What a persisted document saves per request: `python -m bench.persisted`.

A frontend's query of typical size (fragments, variables) is sent over HTTP to the whole
service in this process, one request at a time: as text, as text with a hash the service
keeps, and by hash alone (automatic persisted queries, after their first use). Rounds of
each kind are interleaved so that all see the same machine; the figures are the median
round's mean time per request, in ms.

Then what persisted documents cost Redis, on the same server, as Redis's own time of each
script call (its slow log): registering one (the median of 1,000 calls, each a new document
of this size), and a refresh of documents' uses (a process sends one every 10 s, sooner only
when REFRESH_BATCH wait): of REFRESH_BATCH documents, the most one call carries, and of 20, a
small app's (the median of 20 calls each); and the memory Redis takes per document beyond
the document's own bytes (MEMORY USAGE of the two keys, 1,000 kept).
"""

from __future__ import annotations

import asyncio
import hashlib
import statistics
import time
from dataclasses import replace
from typing import Any

import aiohttp
from aiohttp import web
from redis.asyncio import Redis

from gql_presence.app import create_app
from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import free_port, start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import MAX_PERSISTED_DOCUMENTS, REFRESH_BATCH, Keys, PresenceStore

QUERY = """
query FriendsOnline($userId: ID!, $first: Int!) {
  onlineFriends(userId: $userId, first: $first) {
    totalCount
    pageInfo { hasNextPage endCursor }
    nodes { ...Friend }
  }
  presence(userId: $userId) { ...Presence }
}
fragment Friend on UserPresence { userId online lastSeen sessions { sessionId lastSeen } }
fragment Presence on UserPresence { userId online lastSeen }
"""
VARIABLES = {"userId": "alice", "first": 20}
HASH = {"persistedQuery": {"version": 1, "sha256Hash": hashlib.sha256(QUERY.encode()).hexdigest()}}
BODIES: dict[str, dict[str, Any]] = {
    "text": {"query": QUERY, "variables": VARIABLES},
    "text + hash": {"query": QUERY, "variables": VARIABLES, "extensions": HASH},
    "hash alone": {"variables": VARIABLES, "extensions": HASH},
}
ROUNDS, PER_ROUND = 15, 200


async def main() -> None:
    redis = start_redis_server()
    runner = web.AppRunner(create_app(replace(Settings(), redis_url=redis.url)))
    try:
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        url = f"http://127.0.0.1:{port}/graphql"
        async with aiohttp.ClientSession() as session:
            rounds: dict[str, list[float]] = {kind: [] for kind in BODIES}
            for _ in range(ROUNDS):
                for kind, body in BODIES.items():
                    started = time.perf_counter()
                    for _ in range(PER_ROUND):
                        async with session.post(url, json=body) as response:
                            answer = await response.json()
                            assert "errors" not in answer, answer
                    rounds[kind].append((time.perf_counter() - started) * 1000 / PER_ROUND)
        text = statistics.median(rounds["text"])
        print(f"{'document sent as':<14} {'ms/request':>10} {'saved':>7}")
        for kind, times in rounds.items():
            median = statistics.median(times)
            print(f"{kind:<14} {median:>10.3f} {text - median:>7.3f}")
        await redis_costs(redis.url)
    finally:
        await runner.cleanup()
        redis.stop()


async def redis_costs(url: str) -> None:
    client = redis_client(url)
    try:
        await client.flushall()
        store = PresenceStore(client, Settings())
        await store.load_scripts()
        documents = [f"{QUERY}# {i}" for i in range(MAX_PERSISTED_DOCUMENTS)]
        hashes = [hashlib.sha256(d.encode()).hexdigest() for d in documents]
        # Redis's own time of each call, from its slow log, which then logs every command.
        await client.config_set("slowlog-log-slower-than", 0)
        await client.config_set("slowlog-max-len", MAX_PERSISTED_DOCUMENTS)
        for sha256, document in zip(hashes, documents, strict=True):
            await store.persist_document(sha256, document)
        registering = await script_times_us(client)
        for _ in range(20):
            assert await store.refresh_documents(hashes[:REFRESH_BATCH]) == REFRESH_BATCH
        refreshing = await script_times_us(client)
        for _ in range(20):
            await store.refresh_documents(hashes[:20])
        refreshing_20 = await script_times_us(client)
        keys = Keys()
        used = await client.memory_usage(keys.persisted_documents_used) or 0
        kept = await client.memory_usage(keys.persisted_documents) or 0
        text_bytes = sum(len(d.encode()) for d in documents)
        beyond = (kept + used - text_bytes) / len(documents)
        print(
            f"\nRedis time, median, µs: register one document ({len(documents[0])} bytes) "
            f"{statistics.median(registering):.0f}; refresh the uses of {REFRESH_BATCH} "
            f"documents {statistics.median(refreshing):.0f}, of 20 "
            f"{statistics.median(refreshing_20):.0f}"
        )
        print(f"Redis memory per document beyond its text, bytes: {beyond:.0f}")
    finally:
        await client.aclose()


async def script_times_us(client: Redis) -> list[int]:
    """How long each script call since the last asked took in Redis, in µs."""
    entries = await client.slowlog_get(MAX_PERSISTED_DOCUMENTS)
    await client.slowlog_reset()
    return [int(e["duration"]) for e in entries if "evalsha" in str(e["command"]).lower()]


if __name__ == "__main__":
    asyncio.run(main())
