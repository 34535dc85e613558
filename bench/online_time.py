"""Online time and online periods: what reading them costs, what keeping them costs in memory,
and what keeping them adds to the write path, this checkout against earlier commits, in one
run: `python -m bench.online_time [--baseline REV ...] [--rounds R]`.

Each version (this checkout, then each REV exported to a temporary folder) runs in a process
of its own on a private Redis 6.2 of its own, the versions taking turns round after round.
Redis time is the scripts' from INFO commandstats (µs per call): a touch that brings a new user
online (ONLINE), a kick that ends their period (KICKED), and a presenceSession's open and close
(the close ends the period: OFFLINE). Then, where the version has them:
- 92 days of online time of 100,000 users with a bit index, each active on a day with a rate
  of their own, 15% a day on average (6.6 indexes per daily active user), each active day's
  time a random count of 2-second units; written as the version keeps the counters of open
  days, and where the version folds closed days, every day but yesterday and today folded by
  the store (the fold's Redis time per day, median);
- onlineTime of 1,000 of them over the 92 days (ms of Redis time);
- onlinePeriods over 30 days, each hour's buckets holding 60 lengths (and each day's their
  sum);
- bytes kept per active user-day: MEMORY USAGE of every online time key over the user-days
  with time, of the folded days alone and of all 92 days (with yesterday's and today's dense
  counters).

`python -m bench.online_time --breakdown` writes and folds the same 92 days on this checkout
alone and prints those bytes by kind of key.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import struct
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, date, datetime, timedelta
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
            figures += ["-"] * 5
        print(" ".join(figures))
        await redis.aclose()
    finally:
        server.stop()


def spread(rng: random.Random) -> list[dict[int, int]]:
    """Each day's 2-second units by index: every index active with a rate of its own, 15% a
    day on average."""
    rates = [min(1.0, rng.expovariate(1 / 0.15)) for _ in range(INDEXED)]
    return [
        {i: rng.randint(1, 43_199) for i in range(INDEXED) if rng.random() < rates[i]}
        for _ in range(DAYS)
    ]


async def reads_and_memory(
    r: Any, store: PresenceStore, redis_us: Callable[[], Awaitable[float]]
) -> list[str]:
    """onlineTime's Redis time (ms), onlinePeriods' (µs), bytes per active user-day of the
    folded days and of all, and the fold's Redis time a day (ms)."""
    from gql_presence.store.days import day_number  # noqa: PLC0415 - this checkout's only
    from gql_presence.store.keys import Keys  # noqa: PLC0415

    k = Keys()
    await r.flushall()
    mapping = {f"u{i}": i for i in range(INDEXED)}
    await r.hset(k.user_index, mapping=mapping)
    await r.set(k.next_index, INDEXED)
    today = datetime.now(UTC).date()
    first = today - timedelta(days=DAYS - 1)
    rng = random.Random(1)
    days = spread(rng)
    folds = hasattr(k, "online_day")
    if folds:
        fold_ms = await write_and_fold(r, store, first, days)
    else:
        await write_spans(r, k, day_number(first), days)
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
    found = await store.online_time.online_time(asked, first, today)
    for user in found:
        index = mapping[user.user_id]
        if [d.seconds for d in user.days] != [2 * days[d].get(index, 0) for d in range(DAYS)]:
            raise SystemExit(f"onlineTime of {user.user_id} differs from what was written")
    await r.config_resetstat()
    for _ in range(20):
        await store.online_time.online_time(asked, first, today)
    read_ms = await redis_us() / 1000
    start = datetime.fromtimestamp(hour0 * 3600, UTC)
    await r.config_resetstat()
    for _ in range(20):
        await store.online_time.online_periods(start, start + timedelta(days=PERIOD_DAYS))
    periods_us = await redis_us()

    sizes: dict[str, int] = {}
    async for key in r.scan_iter(k.prefix + "ot:*", count=1000):
        sizes[key] = int(await r.memory_usage(key, samples=0) or 0)
    active = sum(len(d) for d in days)
    every = sum(sizes.values()) / active
    if not folds:
        return [f"{read_ms:.1f}", f"{periods_us:.0f}", f"{every:.2f}", f"{every:.2f}", "-"]
    closed = range(day_number(first), day_number(first) + DAYS - 2)
    folded = sum(sum(sizes.get(key, 0) for key in k.online_folded(day)) for day in closed)
    per_folded = folded / sum(len(d) for d in days[:-2])
    return [
        f"{read_ms:.1f}",
        f"{periods_us:.0f}",
        f"{per_folded:.2f}",
        f"{every:.2f}",
        f"{fold_ms:.1f}",
    ]


async def write_spans(r: Any, k: Any, first_day: int, days: list[dict[int, int]]) -> None:
    """The counters as the versions before the fold kept every day: a u16 per index and day
    for spans of 32 days and blocks of 1,024 indexes, a user's days side by side."""
    span_days, block_users = 32, 1024
    last_day = first_day + DAYS - 1
    for span in range(first_day // span_days, last_day // span_days + 1):
        for block in range(INDEXED // block_users + 1):
            counters = bytearray(2 * block_users * span_days)
            for day in range(
                max(first_day, span * span_days),
                min(last_day, span * span_days + span_days - 1) + 1,
            ):
                units = days[day - first_day]
                for i in range(block * block_users, min(INDEXED, (block + 1) * block_users)):
                    if i in units:
                        at = 2 * ((i % block_users) * span_days + day % span_days)
                        counters[at : at + 2] = struct.pack(">H", units[i])
            await r.set(k.online_time(span, block), bytes(counters))


async def write_and_fold(
    r: Any, store: PresenceStore, first: date, days: list[dict[int, int]]
) -> float:
    """The counters as an open day keeps them (a u16 per index, blocks of 4,096), every day
    but yesterday and today then folded by the store: the fold's Redis time a day, median."""
    from gql_presence.store.days import day_number  # noqa: PLC0415 - this checkout's only
    from gql_presence.store.keys import Keys  # noqa: PLC0415

    k, block_users = Keys(), 4096
    times = []
    for d, units in enumerate(days):
        day = first + timedelta(days=d)
        for block in range(INDEXED // block_users + 1):
            counters = bytearray(2 * block_users)
            for i in range(block * block_users, min(INDEXED, (block + 1) * block_users)):
                if i in units:
                    at = 2 * (i % block_users)
                    counters[at : at + 2] = struct.pack(">H", units[i])
            await r.set(k.online_day(day_number(day), block), bytes(counters))
        if d < DAYS - 2:
            await r.config_resetstat()
            await store.online_time.fold(day)
            stats = await r.info("commandstats")
            times.append(
                sum(v["usec"] for key, v in stats.items() if key.startswith("cmdstat_eval"))
            )
    return float(statistics.median(times)) / 1000


async def breakdown() -> None:
    """Prints the bytes of each kind of online time key (ot:<kind>...) per active user-day,
    over the folded days for the folded kinds and over all days for the rest."""
    from gql_presence.store.days import day_number  # noqa: PLC0415 - this checkout's only
    from gql_presence.store.keys import Keys  # noqa: PLC0415

    server = start_redis_server()
    try:
        r = redis_client(server.url)
        store = PresenceStore(r, Settings(redis_url=server.url))
        await store.load_scripts()
        k = Keys()
        await r.hset(k.user_index, mapping={f"u{i}": i for i in range(INDEXED)})
        await r.set(k.next_index, INDEXED)
        first = datetime.now(UTC).date() - timedelta(days=DAYS - 1)
        days = spread(random.Random(1))
        await write_and_fold(r, store, first, days)
        sizes: dict[str, int] = {}
        folded_days = {str(day_number(first) + d) for d in range(DAYS - 2)}
        folded_kinds = {"m", "b", "c", "r", "l"}
        async for key in r.scan_iter(k.online_time() + "*", count=1000):
            rest = key.removeprefix(k.online_time())
            kind = rest[0]
            if kind in folded_kinds and rest[1:] not in folded_days:
                kind += " (open days)"
            size = int(await r.memory_usage(key, samples=0) or 0)
            sizes[kind] = sizes.get(kind, 0) + size
        folded_users = sum(len(d) for d in days[:-2])
        print("| kind | bytes | bytes per active user-day |\n|---|---|---|")
        for kind, size in sorted(sizes.items()):
            over = folded_users if kind in folded_kinds else sum(len(d) for d in days)
            print(f"| ot:{kind} | {size:,} | {size / over:.3f} |")
        total = sum(v for kind, v in sizes.items() if kind in folded_kinds)
        print(f"folded days: {total / folded_users:.2f} bytes per active user-day")
        await r.aclose()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", action="append", default=[], metavar="REV")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--breakdown", action="store_true", help="bytes by kind of key")
    args = parser.parse_args()
    if args.breakdown:
        asyncio.run(breakdown())
        return
    if args.measure:
        asyncio.run(measure())
        return
    # Here, not above: a version's process runs this file with only that version on its path.
    from bench.harness import median_cells, side_by_side  # noqa: PLC0415

    print(
        f"Redis time, median of {args.rounds} rounds\n"
        "| version | touch, ONLINE (µs) | kick, ends the period (µs) | presenceSession open (µs) "
        f"| close, ends the period (µs) | onlineTime {ASKED:,} users x {DAYS} days (ms) "
        f"| onlinePeriods {PERIOD_DAYS} days (µs) | bytes per active user-day, folded days "
        f"| bytes per active user-day, all {DAYS} days | fold of a day (ms) |\n"
        "|---|---|---|---|---|---|---|---|---|---|"
    )
    for name, rows in side_by_side(__file__, ["--measure"], args.baseline, args.rounds).items():
        print(f"| {name} | " + " | ".join(median_cells(rows)) + " |")


if __name__ == "__main__":
    main()
