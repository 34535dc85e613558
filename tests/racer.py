"""What one API process does to the store when many clients of the same users act at once,
run as a process of its own: `python -m tests.racer REDIS_URL SEED`. Several of them, started
together, race on the same users and sessions (tests/presence/test_store.py checks what they leave).

It connects and loads the scripts, prints `ready`, waits for a line on its standard input,
then runs its workers at once, each a random mix of touches, kicks of a session or of every
session, held sessions opened and closed, and sweeps, and prints one JSON line: when its first
call began and its last ended (time.time(), s), and how many calls of each kind it made."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
from collections import Counter

from gql_presence.running.connection import redis_client
from gql_presence.settings import Settings
from gql_presence.store import HeldSession, PresenceStore
from gql_presence.store.errors import SessionRevokedError

USERS = ("ann", "bob", "cat", "dan")
WORKERS = 4
CALLS_PER_WORKER = 150
# Few enough that both processes' calls meet on the same sessions, enough that a kick (which
# refuses its session id for a minute) leaves others to come back with.
SESSIONS = 40


async def worker(store: PresenceStore, chance: random.Random, calls: Counter[str]) -> None:
    held: list[HeldSession] = []
    for _ in range(CALLS_PER_WORKER):
        user = chance.choice(USERS)
        session = f"s{chance.randrange(SESSIONS)}"
        roll = chance.random()
        with contextlib.suppress(SessionRevokedError):
            if roll < 0.4:
                await store.touch(user, session)
                calls["touch"] += 1
            elif roll < 0.55:
                await store.kick(user, session)
                calls["kick session"] += 1
            elif roll < 0.6:
                await store.kick(user)
                calls["kick"] += 1
            elif roll < 0.8:
                held.append((await store.open_session(user, f"held-{session}")).held)
                calls["open"] += 1
            elif held:
                await store.close_session(held.pop(chance.randrange(len(held))))
                calls["close"] += 1
            else:
                await store.sweep()
                calls["sweep"] += 1
        await asyncio.sleep(0)  # let the other workers' calls in between
    for still_held in held:
        await store.close_session(still_held)
        calls["close"] += 1


async def race(redis_url: str, seed: int) -> None:
    redis = redis_client(redis_url)
    store = PresenceStore(redis, Settings(window_ms=60_000, revoke_ms=60_000))
    await store.load_scripts()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    calls: Counter[str] = Counter()
    began = time.time()
    await asyncio.gather(
        *(worker(store, random.Random(seed * 100 + i), calls) for i in range(WORKERS))  # noqa: S311
    )
    ended = time.time()
    await store.release_leases()
    await redis.aclose()
    print(json.dumps({"began": began, "ended": ended, "calls": calls}), flush=True)


if __name__ == "__main__":
    asyncio.run(race(sys.argv[1], int(sys.argv[2])))
