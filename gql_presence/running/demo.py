"""Sample data for a newcomer: users with friends, weeks of activity, people online now.

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
from datetime import UTC, date, datetime, time, timedelta

from redis import exceptions as redis_errors

from gql_presence.running.connection import connect, redis_client
from gql_presence.running.redis_server import RedisStartError
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.errors import SessionRevokedError

DEVICES = ("web", "phone", "tablet")
_CONCURRENCY = 64
# Days of activity before today that the sample backfills (within the retention).
HISTORY_DAYS = 34
DAY_MS = 86_400_000


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
    regulars = set(rng.sample(ids, k=users // 10))  # active every day
    # Weeks of history: users arrive day after day, each coming back with a chance of their
    # own, so that activity, retention and stickiness have cohorts, returns and breaks.
    first_day = min(HISTORY_DAYS, settings.retention_ms // DAY_MS - 1)
    arrival = {u: first_day if u in regulars else rng.randint(1, first_day) for u in ids}
    chance = {u: 1.0 if u in regulars else 0.1 + 0.8 * rng.random() ** 2 for u in ids}
    touches = await history(
        store, arrival=arrival, chance=chance, today=today, settings=settings, rng=rng
    )
    week: list[Awaitable[object]] = []
    for days_ago in range(6, 0, -1):
        share = rng.uniform(0.3, 0.6)
        arrived = [u for u in ids if arrival[u] >= days_ago]
        active = regulars | {u for u in arrived if rng.random() < share}
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


async def history(
    store: PresenceStore,
    *,
    arrival: dict[str, int],
    chance: dict[str, float],
    today: date,
    settings: Settings,
    rng: random.Random,
) -> int:
    """The days before the last week: each user from the day they arrive (days ago) is active
    on a day with their chance, in one of its waking hours, backfilled by touchMany (one
    call an hour); returns how many activities it wrote."""
    written = 0
    for days_ago in range(max(arrival.values()), 6, -1):
        midnight = datetime.combine(today - timedelta(days=days_ago), time(0), settings.stats_zone)
        hours: dict[int, list[str]] = {}
        for user, arrived in arrival.items():
            if arrived >= days_ago and rng.random() < chance[user]:
                hours.setdefault(rng.randint(7, 22), []).append(user)
        for hour, users in hours.items():
            at = midnight + timedelta(hours=hour, seconds=rng.uniform(0, 3599))
            written += await store.touch_many(users, at=at)
    return written


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
