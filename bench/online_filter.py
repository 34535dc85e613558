"""What a filter of the online list costs: `python -m bench.online_filter [--online N]
[--baseline REV] [--write-rounds R] [--clustered]`.

1. Reads: a private Redis 6.2 is filled with N users online (default 1,000,000) by
   `touchMany`; then a tenth of them (u<i>, i % 10 == 0) get a session on device "ios", a
   twentieth choose BUSY (i % 20 == 5), and the users u<i> with i % 100 == 7 come online
   again (kicked, then touched in a new session) later than the others. Redis's own time
   (INFO commandstats, median of ROUNDS, calls interleaved) of `onlineUsers(first: 50)` for a
   backend, unfiltered and with each filter field alone, in both orders; the target: each
   within 2x the unfiltered page of the same order.
2. Writes: each version (this checkout, and REV, by default main's merge base: the code before
   the indexes) in a process of its own on a private Redis: the Redis time of a touch that
   announces (a new user), of a touch of an online user, of `touchMany` of 10,000 new users,
   and of a presenceSession's opening and closing (open_session, close_session), medians of
   R rounds, the versions taking turns; the target: at most 1.15x REV.
3. With `--clustered`, only this: N users online, the oldest tenth matching a prefix (half of
   them on device "ios") that the others do not; a first page of them, with and without the
   device and totalCount, read with script calls that each look at the store's bound of users
   and with no bound (one call): the longest call's Redis time and all calls' together.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import statistics
import subprocess
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from redis.asyncio import Redis

from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import ChosenStatus, PresenceStore

ROUNDS = 30
PAGE = 50
WINDOW_MS = 3_600_000
FILL_BATCH = 10_000
TOUCHES = 1000
SESSIONS = 500


def user(i: int) -> str:
    return f"u{i}"


async def redis_us(client: Redis, call: Callable[[], Awaitable[object]]) -> float:
    """Redis's own time for the script calls that `call` makes, µs."""
    await client.config_resetstat()
    await call()
    stats = await client.info("commandstats")
    return float(sum(v["usec"] for k, v in stats.items() if k.startswith("cmdstat_eval")))


async def in_flight(calls: list[Callable[[], Awaitable[object]]], at_once: int = 50) -> None:
    semaphore = asyncio.Semaphore(at_once)

    async def one(call: Callable[[], Awaitable[object]]) -> None:
        async with semaphore:
            await call()

    await asyncio.gather(*(one(c) for c in calls))


async def fill(store: PresenceStore, online: int) -> datetime:
    """Fills the store; returns a moment after every user came online but the late ones."""
    started = time.perf_counter()
    for start in range(0, online, FILL_BATCH):
        await store.touch_many([user(i) for i in range(start, min(start + FILL_BATCH, online))])
    print(f"filled {online:,} online in {time.perf_counter() - started:.0f} s", flush=True)
    await in_flight(
        [
            lambda i=i: store.touch(user(i), "phone", device="ios")  # type: ignore[misc]
            for i in range(0, online, 10)
        ]
    )
    await in_flight(
        [
            lambda i=i: store.set_status(user(i), ChosenStatus.BUSY)  # type: ignore[misc]
            for i in range(5, online, 20)
        ]
    )
    late = [user(i) for i in range(7, online, 100)]
    await in_flight([lambda u=u: store.kick(u) for u in late])  # type: ignore[misc]
    await asyncio.sleep(0.05)
    late_from = datetime.now(UTC)
    # A new session: the kick revoked the ones it ended.
    await in_flight([lambda u=u: store.touch(u, "late") for u in late])  # type: ignore[misc]
    print(f"set up in {time.perf_counter() - started:.0f} s", flush=True)
    return late_from


async def bench_reads(online: int) -> None:
    from gql_presence.store.models import OnlineFilter, Status  # noqa: PLC0415

    server = start_redis_server()
    try:
        client = redis_client(server.url)
        store = PresenceStore(client, dataclasses.replace(Settings(), window_ms=WINDOW_MS))
        await store.load_scripts()
        late_from = await fill(store, online)
        filters = {
            "none": None,
            "userIdPrefix u12 (1.1%)": OnlineFilter(user_id_prefix="u12"),
            "userIdPrefix u1234 (0.01%)": OnlineFilter(user_id_prefix="u1234"),
            "userIdPrefix u (all)": OnlineFilter(user_id_prefix="u"),
            "device ios (10%)": OnlineFilter(device="ios"),
            "statuses [BUSY] (5%)": OnlineFilter(statuses=(Status.BUSY,)),
            "statuses [ONLINE] (95%)": OnlineFilter(statuses=(Status.ONLINE,)),
            "onlineSinceFrom, the last (1%)": OnlineFilter(online_since_from=late_from),
            "onlineSinceTo, all but the last (99%)": OnlineFilter(online_since_to=late_from),
        }
        times: dict[tuple[str, bool], list[float]] = defaultdict(list)
        counts: dict[str, int] = {}
        for _ in range(ROUNDS):
            for by_since in (False, True):
                for name, kept in filters.items():

                    async def page(
                        kept: OnlineFilter | None = kept, s: bool = by_since, name: str = name
                    ) -> None:
                        found = await store.online_users(PAGE, None, by_online_since=s, kept=kept)
                        counts[name] = found.total_count

                    times[name, by_since].append(await redis_us(client, page))
        print(f"\nonlineUsers(first: {PAGE}) of a backend, {online:,} online: Redis µs per page")
        print("| filter | matches | LAST_SEEN | x unfiltered | ONLINE_SINCE | x unfiltered |")
        print("|---|---|---|---|---|---|")
        base = {s: statistics.median(times["none", s]) for s in (False, True)}
        for name in filters:
            cells = []
            for s in (False, True):
                median = statistics.median(times[name, s])
                cells += [f"{median:.0f}", f"{median / base[s]:.2f}"]
            print(f"| {name} | {counts[name]:,} | " + " | ".join(cells) + " |")
        await client.aclose()
    finally:
        server.stop()


async def longest_call_us(client: Redis, call: Callable[[], Awaitable[object]]) -> list[int]:
    """The Redis time of each script call `call` makes, µs (from the slow log)."""
    await client.config_set("slowlog-log-slower-than", 0)
    await client.config_set("slowlog-max-len", 100_000)
    await client.slowlog_reset()
    await call()
    entries = await client.slowlog_get(100_000)
    await client.config_set("slowlog-log-slower-than", 10_000)
    return [
        int(e["duration"])
        for e in entries
        if e["command"].split(b" ")[0].lower() in (b"evalsha", b"eval")
    ]


async def bench_clustered(online: int) -> None:
    """A tenth of the users online (old-<i>) came online before all the others and match a
    filter that the others do not: a page of them walks past every other user. Each page
    read with each script call looking at MOST_EXAMINED users at most, and with no bound
    (one call, as before the bound)."""
    from gql_presence.store import lists  # noqa: PLC0415
    from gql_presence.store.models import OnlineFilter  # noqa: PLC0415

    server = start_redis_server()
    try:
        client = redis_client(server.url)
        store = PresenceStore(client, dataclasses.replace(Settings(), window_ms=WINDOW_MS))
        await store.load_scripts()
        old = [f"old-{i}" for i in range(online // 10)]
        for start in range(0, len(old), FILL_BATCH):
            await store.touch_many(old[start : start + FILL_BATCH])
        await in_flight(
            [lambda u=u: store.touch(u, "phone", device="ios") for u in old[::2]]  # type: ignore[misc]
        )
        await asyncio.sleep(0.05)
        for start in range(len(old), online, FILL_BATCH):
            end = min(start + FILL_BATCH, online)
            await store.touch_many([f"new-{i}" for i in range(start, end)])
        cases = {
            "userIdPrefix old- (a tenth, the oldest)": (OnlineFilter(user_id_prefix="old-"), False),
            "the same and device ios, with totalCount": (
                OnlineFilter(user_id_prefix="old-", device="ios"),
                True,
            ),
        }
        bound = lists.MOST_EXAMINED
        print(f"\nonlineUsers(first: {PAGE}), {online:,} online, the matches the oldest tenth")
        print("| filter | calls look at | calls | longest call (µs) | all calls (µs) | total |")
        print("|---|---|---|---|---|---|")
        for name, (kept, count) in cases.items():
            for most in (10**9, bound):
                lists.MOST_EXAMINED = most
                found: list[int] = []

                async def page(
                    kept: OnlineFilter = kept, count: bool = count, found: list[int] = found
                ) -> None:
                    read = await store.online_users(PAGE, None, kept=kept, count=count)
                    found.append(read.total_count if count else len(read.nodes))

                calls = await longest_call_us(client, page)
                said = "any number" if most == 10**9 else f"{most:,}"
                print(
                    f"| {name} | {said} | {len(calls)} | {max(calls):,} | {sum(calls):,} "
                    f"| {found[0]:,} |"
                )
        lists.MOST_EXAMINED = bound
        await client.aclose()
    finally:
        server.stop()


async def measure_writes() -> None:
    """One line of figures for the code on sys.path (µs of Redis time per call)."""
    server = start_redis_server()
    try:
        client = redis_client(server.url)
        store = PresenceStore(client, Settings(redis_url=server.url))
        await store.load_scripts()
        await store.touch_many([f"warm{i}" for i in range(100)])

        async def touches(ids: list[str]) -> float:
            calls: list[Callable[[], Awaitable[object]]] = [
                functools.partial(store.touch, u, "tab") for u in ids
            ]
            return await redis_us(client, lambda: in_flight(calls)) / len(ids)

        announcing = await touches([f"t{i}" for i in range(TOUCHES)])
        again = await touches([f"t{i}" for i in range(TOUCHES)])
        many = await redis_us(client, lambda: store.touch_many([f"m{i}" for i in range(10_000)]))
        opened = []

        async def open_all() -> None:
            for i in range(SESSIONS):
                opened.append((await store.open_session(f"h{i}", "tab", "web")).held)  # noqa: PERF401 - one at a time

        async def close_all() -> None:
            for held in opened:
                await store.close_session(held)

        await store.open_session("warm", "tab")
        opening = await redis_us(client, open_all) / SESSIONS
        closing = await redis_us(client, close_all) / SESSIONS
        print(f"{announcing:.1f} {again:.1f} {many:.0f} {opening:.1f} {closing:.1f}")
        await client.aclose()
    finally:
        server.stop()


def bench_writes(baseline: str, rounds: int) -> None:
    from bench.harness import median_cells, side_by_side  # noqa: PLC0415

    figures = side_by_side(__file__, ["--measure-writes"], [baseline], rounds)
    medians = {name: [float(cell) for cell in median_cells(rows)] for name, rows in figures.items()}
    print(f"\nWrites: Redis µs per call, median of {rounds} rounds")
    print(
        "| version | touch, announcing | touch, online | touchMany of 10,000 "
        "| presenceSession open | presenceSession close |\n|---|---|---|---|---|---|"
    )
    for name, values in medians.items():
        print(f"| {name} | " + " | ".join(f"{v:.1f}" for v in values) + " |")
    ours, base = medians["this checkout"], medians[baseline]
    ratios = " | ".join(f"{o / b:.2f}" for o, b in zip(ours, base, strict=True))
    print(f"| ratio | {ratios} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--online", type=int, default=1_000_000)
    parser.add_argument("--baseline", default=None)
    parser.add_argument("--write-rounds", type=int, default=5)
    parser.add_argument(
        "--clustered", action="store_true", help="only pages whose matches are the oldest users"
    )
    parser.add_argument("--skip-reads", action="store_true")
    parser.add_argument("--skip-writes", action="store_true")
    parser.add_argument("--measure-writes", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_writes:
        asyncio.run(measure_writes())
        return
    if args.clustered:
        asyncio.run(bench_clustered(args.online))
        return
    if not args.skip_reads:
        asyncio.run(bench_reads(args.online))
    if not args.skip_writes:
        baseline = (
            args.baseline
            or subprocess.run(
                ["git", "merge-base", "HEAD", "main"],  # noqa: S607 - git from the PATH
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
        bench_writes(baseline, args.write_rounds)


if __name__ == "__main__":
    main()
