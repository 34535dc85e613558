"""Sample data for a newcomer: users with friends, a week of activity, people online now.

`gql-presence demo` serves the sample from a service of its own, on a data folder of its own
(the service's, with `-demo` after its name), so that it never mixes with the user's data. It
fills that service's embedded Redis through its socket, with the same store methods as the
API, so everything it writes obeys the same rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import subprocess
from collections.abc import AsyncIterator, Awaitable
from datetime import UTC, datetime, time, timedelta

from redis import exceptions as redis_errors

from gql_presence.running.connection import connect, redis_client
from gql_presence.running.redis_server import RedisStartError
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.errors import SessionRevokedError

DEVICES = ("web", "phone", "tablet")
_CONCURRENCY = 64


@contextlib.asynccontextmanager
async def demo_store(settings: Settings) -> AsyncIterator[PresenceStore]:
    """The store of REDIS_CLUSTER_NODES or REDIS_URL; else the running service's embedded
    Redis; else one started here for the time of the demo."""
    if settings.embedded_redis:
        running = f"unix://{settings.data_dir / 'redis.sock'}"
        probe = redis_client(running)
        try:
            await probe.ping()
        except (redis_errors.ConnectionError, OSError):
            pass  # no service runs: connect starts the embedded Redis
        else:
            settings = dataclasses.replace(settings, redis_url=running)
        finally:
            await probe.aclose()
    async with connect(settings) as redis:
        store = PresenceStore(redis.client, settings)
        await store.load_scripts()
        yield store


async def serving(settings: Settings, service: subprocess.Popen[bytes]) -> None:
    """Waits until the demo's service answers on its embedded Redis's socket (a start takes a
    second or two); raises RedisStartError when it stops first."""
    socket = redis_client(f"unix://{settings.data_dir / 'redis.sock'}")
    try:
        while service.poll() is None:
            try:
                await socket.ping()
            except (redis_errors.ConnectionError, OSError):
                await asyncio.sleep(0.1)
            else:
                return
    finally:
        await socket.aclose()
    raise RedisStartError(f"the demo's service stopped (status {service.returncode})")


async def _bounded(calls: list[Awaitable[object]]) -> None:
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def run(call: Awaitable[object]) -> None:
        async with gate:
            with contextlib.suppress(SessionRevokedError):
                await call

    await asyncio.gather(*(run(call) for call in calls))


async def fill(
    store: PresenceStore, users: int, settings: Settings, rng: random.Random
) -> dict[str, int]:
    """Writes the sample; returns what it wrote, for the command to report."""
    ids = [f"user-{i:05d}" for i in range(users)]
    friend_calls: list[Awaitable[object]] = [
        store.add_friends(user, rng.sample(ids, k=min(len(ids) - 1, rng.randint(5, 25))))
        for user in ids
    ]
    await _bounded(friend_calls)

    now = datetime.now(UTC)
    today = now.astimezone(settings.stats_zone).date()
    touches = 0
    week: list[Awaitable[object]] = []
    regulars = set(rng.sample(ids, k=users // 10))  # active every day
    for days_ago in range(6, 0, -1):
        share = rng.uniform(0.3, 0.6)
        active = regulars | {u for u in ids if rng.random() < share}
        midnight = datetime.combine(today - timedelta(days=days_ago), time(0), settings.stats_zone)
        for user in active:
            at = midnight + timedelta(seconds=rng.uniform(0, 86_399))
            week.append(store.touch(user, rng.choice(DEVICES), at=at))
    touches += len(week)
    await _bounded(week)

    online_now = regulars | set(rng.sample(ids, k=users // 7))
    # Within the window, and today: just after midnight the regulars are still active today.
    since_midnight = now - datetime.combine(today, time(0), settings.stats_zone)
    latest_ago_s = min(settings.window_ms / 1000 * 0.8, since_midnight.total_seconds())
    now_calls: list[Awaitable[object]] = []
    for user in online_now:
        for device in rng.sample(DEVICES, k=rng.randint(1, 3)):
            seconds_ago = rng.uniform(0, latest_ago_s)
            now_calls.append(store.touch(user, device, at=now - timedelta(seconds=seconds_ago)))
    touches += len(now_calls)
    await _bounded(now_calls)
    return {"users": users, "touches": touches, "online": len(online_now)}


async def keep_alive(store: PresenceStore, users: int, rng: random.Random) -> None:
    """Every second, some users come back and a few are kicked, until interrupted."""
    ids = [f"user-{i:05d}" for i in range(users)]
    while True:
        calls: list[Awaitable[object]] = [
            store.touch(user, rng.choice(DEVICES))
            for user in rng.sample(ids, k=max(1, users // 100))
        ]
        calls += [store.kick(user) for user in rng.sample(ids, k=max(1, users // 500))]
        await _bounded(calls)
        await asyncio.sleep(1)
