"""Online time and online periods: what reading them costs, what keeping them costs in memory,
and what keeping them adds to the write path, this checkout against earlier commits, in one
run: `python -m bench.online_time [--baseline REV ...] [--rounds R]`.

Each version (this checkout, then each REV exported to a temporary folder) runs in a process
of its own on a private Redis 6.2 of its own, the versions taking turns round after round.
Redis time is the scripts' from INFO commandstats (µs per call): a touch that brings a new user
online (ONLINE), a kick that ends their period (KICKED), and a presenceSession's open and close
(the close ends the period: OFFLINE). Then, where the version has them:
- onlineTime of 1,000 users over 92 days, among 100,000 users with a bit index, every day's
  counters as long as if all of them had been online every day (BITFIELD SET);
- onlinePeriods over 30 days, each hour's buckets holding 60 lengths (and each day's their
  sum);
- bytes kept per indexed user per day: MEMORY USAGE of a block's counters over a span of days,
  after 20,000 users' periods ended today (as the write path lays them out), over the users
  and days it covers.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore

CALLS = 2000  # touches, kicks, opens and closes measured per version and round
INDEXED = 100_000  # users with a bit index, for the reads
ASKED = 1000
DAYS = 92
PERIOD_DAYS = 30
ACTIVE = 20_000  # users whose periods end on the day measured


async def measure() -> None:
    """Prints one line of figures for the code on sys.path: run in each version's process."""
    server = start_redis_server()
    try:
        redis = redis_client(server.url)
        store = PresenceStore(redis, Settings(redis_url=server.url))
        await store.load_scripts()

        async def redis_us() -> float:
            stats = await redis.info("commandstats")
            evals = [v for k, v in stats.items() if k.startswith("cmdstat_eval")]
            return float(sum(v["usec"] for v in evals) / max(1, sum(v["calls"] for v in evals)))

        async def per_call(calls: Iterable[Awaitable[object]]) -> float:
            await redis.config_resetstat()
            for call in calls:
                await call
            return await redis_us()

        users = [f"t{i}" for i in range(CALLS)]
        online = await per_call(store.touch(u, "tab") for u in users)
        kick = await per_call(store.kick(u) for u in users)
        held = [f"h{i}" for i in range(CALLS)]
        await store.open_session("warm", "tab")  # the lease taken before measuring
        await redis.config_resetstat()
        opened = [await store.open_session(u, "tab") for u in held]
        open_us = await redis_us()
        close = await per_call(store.close_session(o.held) for o in opened)
        figures = [f"{online:.1f}", f"{kick:.1f}", f"{open_us:.1f}", f"{close:.1f}"]
        if hasattr(store, "online_time"):
            figures += await reads_and_memory(redis, store, redis_us)
        else:
            figures += ["-"] * 3
        print(" ".join(figures))
        await redis.aclose()
    finally:
        server.stop()


async def reads_and_memory(
    r: Any, store: PresenceStore, redis_us: Callable[[], Awaitable[float]]
) -> list[str]:
    """onlineTime's and onlinePeriods' Redis time (µs), and bytes per active user per day."""
    from gql_presence.store.days import day_number  # noqa: PLC0415 - this checkout's only
    from gql_presence.store.keys import Keys  # noqa: PLC0415

    # As lua/includes/online_time.lua lays the counters out.
    SPAN_DAYS, BLOCK_USERS = 32, 1024  # noqa: N806

    k = Keys()
    await r.flushall()
    mapping = {f"u{i}": i for i in range(INDEXED)}
    await r.hset(k.user_index, mapping=mapping)
    await r.set(k.next_index, INDEXED)
    today = datetime.now(UTC).date()
    first = today - timedelta(days=DAYS - 1)
    spans = range(day_number(first) // SPAN_DAYS, day_number(today) // SPAN_DAYS + 1)
    rng = random.Random(1)
    for span in spans:
        for block in range(INDEXED // BLOCK_USERS + 1):
            # Every user's counters as long as a full span's, some of them set.
            ops: list[object] = ["SET", "u16", f"#{BLOCK_USERS * SPAN_DAYS - 1}", 1]
            for _ in range(200):
                ops += ["SET", "u16", f"#{rng.randrange(BLOCK_USERS * SPAN_DAYS)}", 1800]
            await r.execute_command("BITFIELD", k.online_time(span, block), *ops)
    day0 = int(datetime.now(UTC).timestamp()) // 86400 - PERIOD_DAYS
    hour0 = day0 * 24
    for day in range(PERIOD_DAYS):
        daily: dict[str, int] = {}
        for h in range(24):
            fields: dict[str, int] = {"n": 60, "ms": 60 * 1_800_000}
            for _ in range(60):
                bucket = str(rng.randint(80, 170))
                fields[bucket] = fields.get(bucket, 0) + 1
            await r.hset(k.period_lengths(hour0 + day * 24 + h), mapping=fields)
            for field, value in fields.items():
                daily[field] = daily.get(field, 0) + value
        await r.hset(k.period_lengths_by_day(day0 + day), mapping=daily)
    asked = rng.sample(sorted(mapping), ASKED)
    await r.config_resetstat()
    for _ in range(20):
        await store.online_time.online_time(asked, first, today)
    read_us = await redis_us()
    start = datetime.fromtimestamp(hour0 * 3600, UTC)
    await r.config_resetstat()
    for _ in range(20):
        await store.online_time.online_periods(start, start + timedelta(days=PERIOD_DAYS))
    periods_us = await redis_us()

    # Memory: periods of ACTIVE users ended today, each with a bit index of their own; then
    # what a span's key of a block holds once every day of it has passed, per user and day.
    await r.flushall()
    fresh = [f"a{i}" for i in range(ACTIVE)]
    for i in range(0, ACTIVE, 10_000):
        await store.touch_many(fresh[i : i + 10_000])
    for u in fresh:
        await store.kick(u)
    full = k.online_time(day_number(today) // SPAN_DAYS, 0)
    await r.execute_command("BITFIELD", full, "SET", "u16", f"#{BLOCK_USERS * SPAN_DAYS - 1}", 1)
    used = await r.memory_usage(full, samples=0) or 0
    per_user_day = used / (BLOCK_USERS * SPAN_DAYS)
    return [f"{read_us:.0f}", f"{periods_us:.0f}", f"{per_user_day:.2f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", action="append", default=[], metavar="REV")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        asyncio.run(measure())
        return
    # Here, not above: a version's process runs this file with only that version on its path.
    from bench.harness import median_cells, side_by_side  # noqa: PLC0415

    print(
        f"Redis time, median of {args.rounds} rounds\n"
        "| version | touch, ONLINE (µs) | kick, ends the period (µs) | presenceSession open (µs) "
        f"| close, ends the period (µs) | onlineTime {ASKED:,} users x {DAYS} days (µs) "
        f"| onlinePeriods {PERIOD_DAYS} days (µs) | bytes per indexed user per day |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    for name, rows in side_by_side(__file__, ["--measure"], args.baseline, args.rounds).items():
        print(f"| {name} | " + " | ".join(median_cells(rows)) + " |")


if __name__ == "__main__":
    main()
