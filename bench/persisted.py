"""What a persisted document saves per request: `python -m bench.persisted`.

A frontend's query of typical size (fragments, variables) is sent over HTTP to the whole
service in this process, one request at a time: as text, as text with a hash the service
keeps, and by hash alone (automatic persisted queries, after their first use). Rounds of
each kind are interleaved so that all see the same machine; the figures are the median
round's mean time per request, in ms.
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

from gql_presence.app import create_app
from gql_presence.running.redis_server import free_port, start_redis_server
from gql_presence.settings import Settings

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
    finally:
        await runner.cleanup()
        redis.stop()


if __name__ == "__main__":
    asyncio.run(main())
