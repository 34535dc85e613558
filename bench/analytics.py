"""Who and when: the Redis time of `activity`, `retention` and `stickiness` over a million users'
60 days, the bytes their bitmaps keep, and the write path's Redis time against earlier commits:
`python -m bench.analytics [--users N] [--baseline REV ...] [--rounds R]`.

Reads: a private Redis 6.2 is filled by touchMany with `at` (250 users a script call, as the
service sends them), day by day over 60 days of the stats time zone (UTC): each user arrives on
a day drawn evenly from the 60 and is active on each later day with a chance of their own
(0.05 to 0.95, most users near the low end), in one or two hours of the day. Then each query
runs five times; its Redis time is the scripts' from INFO commandstats, the median printed.
The sweeper's hourly upkeep runs as the writes go, in their backfilled time: before each hour's
writes, the bitmaps of the periods ended by then are rewritten to their size (compact_ended) and
the hours ended two hours before it are folded (fold_ended), as a deployment's sweeper would
have done at that hour; once everything is written, the same runs at the present. What the
sweeper folds it folds only while the hour's day is kept (PRESENCE_HOURLY_DAYS, by the server's
clock): the hour bitmaps of the oldest day kept, from the hour of the run on, which a running
deployment folded and deleted 14 days ago, are still there here, unfolded: they are left out
of the bytes (and their number printed).
Bytes: MEMORY USAGE of every bitmap of the analytics over the user-days of activity made.

Writes: each version (this checkout, then each REV exported to a temporary folder) in a
process of its own on a private Redis of its own, taking turns round after round, as
bench/feed.py does: a touch that brings a user online, the same touch again (an online user),
touchMany of 10,000 new users and of the same users again, and presenceSession's open and close.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics
import time
from array import array
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore

DAYS = 60
CALLS = 2000
MANY = 10_000
BATCH = 250
DAY_MS = 86_400_000


def spread(users: int, seed: int = 7) -> list[list[array[int]]]:
    """For each of DAYS days and each hour, the users (by number) active then."""
    rng = random.Random(seed)
    hours: list[list[array[int]]] = [[array("I") for _ in range(24)] for _ in range(DAYS)]
    # Waking hours are busier: a day's activity falls in them four times as often.
    weights = [1 if h < 7 else 4 for h in range(24)]
    for user in range(users):
        day = rng.randrange(DAYS)
        chance = 0.05 + 0.9 * rng.random() ** 3
        while day < DAYS:
            for hour in set(rng.choices(range(24), weights, k=rng.randint(1, 2))):
                hours[day][hour].append(user)
            # The next active day: a geometric gap, with this user's chance.
            day += 1 + int(math.log(1 - rng.random()) / math.log(1 - chance))
    return hours


async def redis_ms(redis: Any) -> float:
    stats = await redis.info("commandstats")
    return float(sum(v["usec"] for k, v in stats.items() if k.startswith("cmdstat_eval"))) / 1000


async def reads(users: int) -> None:
    # Here: a version's process runs this file with only that version on its path, whose
    # store may know no Granularity.
    from gql_presence.store import Granularity  # noqa: PLC0415

    server = start_redis_server()
    try:
        redis = redis_client(server.url)
        settings = Settings(redis_url=server.url, retention_ms=(DAYS + 10) * DAY_MS)
        store = PresenceStore(redis, settings)
        await store.load_scripts()
        started = time.monotonic()
        hours = spread(users)
        made = time.monotonic() - started
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        first = today - timedelta(days=DAYS - 1)
        marks = 0
        started = time.monotonic()
        upkeep = Upkeep(redis, store)
        for day in range(DAYS):
            for hour in range(24):
                at = first + timedelta(days=day, hours=hour, minutes=30)
                if at > datetime.now(UTC) - timedelta(minutes=1):
                    continue
                await upkeep.run(int((at - timedelta(minutes=30)).timestamp() * 1000))
                ids = [f"user-{n}" for n in hours[day][hour]]
                marks += len(ids)
                batches = [ids[i : i + BATCH * 8] for i in range(0, len(ids), BATCH * 8)]
                for chunk in batches:
                    await store.touch_many(chunk, at=at)
        filled = time.monotonic() - started
        user_days = sum(len(set().union(*(set(h) for h in hours[d]))) for d in range(DAYS))
        print(
            f"{users:,} users; {marks:,} touches (user-hours) over {DAYS} days, "
            f"{user_days:,} user-days (a mean of {user_days / DAYS:,.0f} active a day); spread "
            f"made in {made:.0f} s, written in {filled:.0f} s"
        )
        now = datetime.now(UTC)
        queries: dict[str, Callable[[], Awaitable[object]]] = {
            "activity, 30 days": lambda: store.analytics.activity(
                now - timedelta(days=30), now, Granularity.DAY
            ),
            "activity, 168 hours": lambda: store.analytics.activity(
                now - timedelta(hours=168), now, Granularity.HOUR
            ),
            "retention, 12 weekly cohorts x 12 weeks": lambda: store.analytics.retention(
                (now - timedelta(weeks=11)).date(), 12, 12, Granularity.WEEK
            ),
            "retention, 12 hourly cohorts x 12 hours, 5 days ago": lambda: (
                store.analytics.retention(
                    (now - timedelta(days=5)).date(), 12, 12, Granularity.HOUR
                )
            ),
            "stickiness, 28 days": lambda: store.analytics.stickiness(None, 28),
        }
        await upkeep.run(int(now.timestamp() * 1000))
        upkeep.report()
        await bitmap_bytes(redis, hours, users, first, now)
        await time_queries(redis, queries)
        await redis.aclose()
    finally:
        server.stop()


class Upkeep:
    """The sweeper's hourly upkeep of the analytics at a given moment (a version without a
    step is measured without it), with the Redis time of its folds."""

    def __init__(self, redis: Any, store: PresenceStore) -> None:
        self.redis = redis
        self.compact = getattr(store.analytics, "compact_ended", None)
        self.fold = getattr(store.analytics, "fold_ended", None)
        self.folds: list[float] = []
        self.folded = 0

    async def run(self, at_ms: int) -> None:
        if self.compact is not None:
            await self.compact(at_ms)
        if self.fold is not None:
            before = await redis_ms(self.redis)
            folded = await self.fold(at_ms)
            if folded:
                self.folds.append(await redis_ms(self.redis) - before)
                self.folded += folded

    def report(self) -> None:
        print(
            f"Folded {self.folded} hours as the writes went ({sum(self.folds):.0f} ms of Redis "
            f"time, at most {max(self.folds, default=0):.1f} ms a run)"
        )


async def time_queries(redis: Any, queries: dict[str, Callable[[], Awaitable[object]]]) -> None:
    print("| query | Redis time, median of 5 (ms) | wall time (ms) |\n|---|---|---|")
    for name, query in queries.items():
        times, walls = [], []
        for _ in range(5):
            await redis.config_resetstat()
            started = time.monotonic()
            await query()
            walls.append((time.monotonic() - started) * 1000)
            times.append(await redis_ms(redis))
        print(f"| {name} | {statistics.median(times):.1f} | {statistics.median(walls):.0f} |")


async def bitmap_bytes(
    redis: Any, hours: list[list[array[int]]], users: int, first: datetime, now: datetime
) -> None:
    """Prints each kind of bitmap's bytes, per user index and per active user-day, leaving
    out the hour bitmaps a running sweeper would have folded and deleted: those of a day whose
    first hour began PRESENCE_HOURLY_DAYS or more ago (no fold counts them any more)."""
    # Each kind's bytes over the user-days of the days its kept keys cover: the hourly
    # figures (hour bitmaps, live or as folded, folded counts, the first-timers of folded
    # hours, the lists of hourly cohorts) the last PRESENCE_HOURLY_DAYS or so, the rest every
    # day made.
    daily = [len(set().union(*(set(h) for h in hours[d]))) for d in range(DAYS)]
    sizes: dict[str, int] = {}
    hour_days: set[int] = set()
    hourly = {"hour", "hourf", "hfold", "hseen", "hcoh"}
    kinds = {"day", "week", "month", "first", "firstw", "firstm", "firstdays", *hourly}
    now_ms, left_out = now.timestamp() * 1000, 0
    async for key in redis.scan_iter(match="gqlp:*", count=1000):
        kind = key.split(":")[2]
        # The stats time zone is UTC: an hour's day begins at a multiple of DAY_MS.
        if (
            kind == "hour"
            and int(key.split(":")[3]) // DAY_MS * DAY_MS + Settings.hourly_ms <= now_ms
        ):
            left_out += 1
            continue
        if kind in kinds:
            sizes[kind] = sizes.get(kind, 0) + (await redis.memory_usage(key, samples=0) or 0)
        if kind in {"hour", "hourf", "hcoh"}:
            start = datetime.fromtimestamp(int(key.split(":")[3]) / 1000, UTC)
            hour_days.add((start - first).days)
        if kind in {"hfold", "hseen"}:
            label = datetime.fromisoformat(key.split(":")[3]).replace(tzinfo=UTC)
            hour_days.add((label - first).days)
    print(
        "| bitmaps | bytes | bytes per user index | bytes per active user-day |\n|---|---|---|---|"
    )
    beyond = 0.0
    for kind, size in sorted(sizes.items()):
        covered = [daily[d] for d in hour_days if 0 <= d < DAYS] if kind in hourly else daily
        per_day = size / sum(covered)
        beyond += 0 if kind == "day" else per_day
        print(f"| {kind} | {size:,} | {size / users:.2f} | {per_day:.2f} |")
    print(f"beyond the day bitmaps: {beyond:.2f} bytes per active user-day")
    print(f"left out: {left_out} hour bitmaps of days a running sweeper folded")


async def writes() -> None:
    """Prints one line of write-path figures for the code on sys.path: run in each version's
    process."""
    server = start_redis_server()
    try:
        redis = redis_client(server.url)
        store = PresenceStore(redis, Settings(redis_url=server.url))
        await store.load_scripts()

        async def per_call(calls: Any) -> float:
            await redis.config_resetstat()
            count = 0
            for call in calls:
                await call
                count += 1
            return await redis_ms(redis) * 1000 / count

        users = [f"t{i}" for i in range(CALLS)]
        online = await per_call(store.touch(u, "tab") for u in users)
        again = await per_call(store.touch(u, "tab") for u in users)
        many = [f"m{i}" for i in range(MANY)]
        await redis.config_resetstat()
        await store.touch_many(many)
        many_new = await redis_ms(redis)
        await redis.config_resetstat()
        await store.touch_many(many)
        many_again = await redis_ms(redis)
        held = [f"h{i}" for i in range(CALLS)]
        await redis.config_resetstat()
        sessions = [(await store.open_session(u, "tab")).held for u in held]
        opened = await redis_ms(redis) * 1000 / CALLS
        closed = await per_call(store.close_session(s) for s in sessions)
        print(f"{online:.1f} {again:.1f} {many_new:.0f} {many_again:.0f} {opened:.1f} {closed:.1f}")
        await redis.aclose()
    finally:
        server.stop()


def compare(baselines: list[str], rounds: int) -> None:
    # Here: a version's process imports this file alone.
    from bench.harness import median_cells, side_by_side  # noqa: PLC0415

    print(
        f"Redis time, median of {rounds} rounds\n"
        "| version | touch, ONLINE (µs) | touch again, online (µs) "
        f"| touchMany of {MANY:,} new (ms) | touchMany of them again (ms) "
        "| presenceSession open (µs) | close (µs) |\n|---|---|---|---|---|---|---|"
    )
    for name, rows in side_by_side(__file__, ["--writes"], baselines, rounds).items():
        print(f"| {name} | " + " | ".join(median_cells(rows)) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=1_000_000)
    parser.add_argument("--baseline", action="append", default=[], metavar="REV")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=["reads", "writes"])
    parser.add_argument("--writes", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.writes:
        asyncio.run(writes())
        return
    if args.only != "writes":
        asyncio.run(reads(args.users))
    if args.only != "reads":
        compare(args.baseline, args.rounds)


if __name__ == "__main__":
    main()
