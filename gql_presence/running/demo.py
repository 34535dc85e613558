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
from collections.abc import AsyncIterator, Awaitable, Callable
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


async def listening(port: int, service: subprocess.Popen[bytes]) -> None:
    """Waits until the demo's service accepts connections on its port, so that the address
    the demo then prints answers at once; raises RedisStartError when it stops first."""
    while service.poll() is None:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
        else:
            writer.close()
            await writer.wait_closed()
            return
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
    # own until they drift away (most within two weeks), and now and then after that, so
    # that activity, retention and stickiness have cohorts, returns, breaks and losses.
    first_day = min(HISTORY_DAYS, settings.retention_ms // DAY_MS - 1)
    arrival = {u: first_day if u in regulars else rng.randint(1, first_day) for u in ids}
    chance = {u: 1.0 if u in regulars else 0.2 + 0.7 * rng.random() ** 2 for u in ids}
    leaving = {u: -1 if u in regulars else arrival[u] - rng.expovariate(1 / 12) for u in ids}

    def comes(user: str, days_ago: int) -> bool:
        """Whether the user is active on that day: on the day they arrive, they are."""
        if days_ago >= arrival[user]:
            return days_ago == arrival[user]
        return rng.random() < (chance[user] if days_ago > leaving[user] else 0.03)

    touches = await history(
        store, comes=comes, ids=ids, days=first_day, today=today, settings=settings, rng=rng
    )
    # The last week and today, one touch at a time, at any hour.
    window_s = settings.window_ms / 1000
    since_midnight = now - datetime.combine(today, time(0), settings.stats_zone)
    week: list[Awaitable[object]] = []
    peaks: list[Awaitable[object]] = []
    for days_ago in range(6, -1, -1):
        midnight = datetime.combine(today - timedelta(days=days_ago), time(0), settings.stats_zone)
        # Today's touches end before the window, which the users online now fill.
        latest_s = 86_399.0 if days_ago else since_midnight.total_seconds() - window_s
        if latest_s <= 0:
            continue
        moments = []
        for user in (u for u in ids if comes(u, days_ago)):
            at = midnight + timedelta(seconds=rng.uniform(0, latest_s))
            moments.append(at)
            week.append(store.touch(user, rng.choice(DEVICES), at=at))
        peaks.append(store.analytics.record_peak(*peak_of(moments, settings.window_ms)))
    touches += len(week)
    await _bounded(week + peaks)

    online_now = regulars | set(rng.sample(ids, k=users // 7))
    # Within the window, and today: just after midnight the regulars are still active today.
    latest_ago_s = min(window_s * 0.8, since_midnight.total_seconds())
    now_calls: list[Awaitable[object]] = []
    for user in online_now:
        for device in rng.sample(DEVICES, k=rng.randint(1, 3)):
            seconds_ago = rng.uniform(0, latest_ago_s)
            now_calls.append(store.touch(user, device, at=now - timedelta(seconds=seconds_ago)))
    # Online periods that just ended, mostly short, a few as long as the window allows: a
    # period can only begin within the window, and ends here with a kick.
    gone = rng.sample(sorted(set(ids) - online_now), k=min(users // 5, users - len(online_now)))
    for user in gone:
        seconds_ago = latest_ago_s * rng.random() ** 3
        now_calls.append(
            brief(store, user, rng.choice(DEVICES), now - timedelta(seconds=seconds_ago))
        )
    touches += len(now_calls)
    await _bounded(now_calls)
    return {"users": users, "touches": touches, "online": len(online_now), "days": first_day + 1}


async def brief(store: PresenceStore, user: str, device: str, since: datetime) -> None:
    """An online period from `since` to now."""
    await store.touch(user, device, at=since)
    await store.kick(user)


async def history(
    store: PresenceStore,
    *,
    comes: Callable[[str, int], bool],
    ids: list[str],
    days: int,
    today: date,
    settings: Settings,
    rng: random.Random,
) -> int:
    """The days before the last week, from `days` ago: each user who `comes` that day is
    active in one of its waking hours, backfilled by touchMany (one call an hour); returns how
    many activities it wrote."""
    written = 0
    for days_ago in range(days, 6, -1):
        midnight = datetime.combine(today - timedelta(days=days_ago), time(0), settings.stats_zone)
        hours: dict[int, list[str]] = {}
        for user in ids:
            if comes(user, days_ago):
                hours.setdefault(rng.randint(7, 22), []).append(user)
        for hour, users in hours.items():
            at = midnight + timedelta(hours=hour, seconds=rng.uniform(0, 3599))
            written += await store.touch_many(users, at=at)
        # The day's peak as if each had come at a moment of their hour, as in the last week.
        moments = [
            midnight + timedelta(hours=hour, seconds=rng.uniform(0, 3599))
            for hour, users in hours.items()
            for _ in users
        ]
        await store.analytics.record_peak(*peak_of(moments, settings.window_ms))
    return written


def peak_of(moments: list[datetime], window_ms: int) -> tuple[int, datetime]:
    """The most of these touches (one a user) within one window of each other, and when:
    the users online at once, as the sweeper would have counted them."""
    ordered = sorted(moments)
    window = timedelta(milliseconds=window_ms)
    most, when, first = 0, datetime.now(UTC), 0
    for last, moment in enumerate(ordered):
        while ordered[first] <= moment - window:
            first += 1
        if last - first + 1 > most:
            most, when = last - first + 1, moment
    return most, when


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
