"""The feed's cost on the write path, this checkout against earlier commits, in one run:
`python -m bench.feed [--without-feed] [--baseline REV ...] [--rounds R]`.

`--without-feed` measures beside it this checkout with the feed left out of its scripts as
the bench copies them (bench/harness.py, without_feed: no entry, version or trim), and with
its entries alone left out (versions kept), and prints each figure's ratio to those: the
feed's own cost, where a baseline commit measures with the feed everything else added since.

Each version (this checkout, then each REV exported to a temporary folder) runs in a process
of its own on a private Redis 6.2 of its own, the versions taking turns round after round.
Redis time is the scripts' from INFO commandstats (µs per call, or ms for touchMany): a touch
that brings a new user online (ONLINE), the same touch again (no event), a kick (KICKED), a
place join (JOINED), a presenceSession's opening and closing (open_session, close_session),
and touchMany of 10,000 new users (250 a script call, as the service sends them). Then, where
the version keeps a feed, its memory per retained change (MEMORY USAGE of the stream over its
length, after the touchMany's 10,000 changes and the others).

`--commands` prints instead, for this checkout and each REV, the Redis commands each of those
script calls makes (INFO commandstats, which counts the commands called from scripts), per
call: the write path's cost on Redis 6.2 is mostly the number of `redis.call`s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore

CALLS = 2000  # touches, kicks and joins measured per version and round
MANY = 10_000  # users of the touchMany


async def measure(commands: bool) -> None:
    """Prints the figures for the code on sys.path, one line (or with `commands`, one line per
    scenario: its name, then each command and how many a call made): run in each version's
    process."""
    server = start_redis_server()
    try:
        redis = redis_client(server.url)
        store = PresenceStore(redis, Settings(redis_url=server.url))
        await store.load_scripts()

        async def redis_us() -> float:
            stats = await redis.info("commandstats")
            evals = [v for k, v in stats.items() if k.startswith("cmdstat_eval")]
            return float(sum(v["usec"] for v in evals) / max(1, sum(v["calls"] for v in evals)))

        async def called(name: str, calls: int) -> None:
            stats = await redis.info("commandstats")
            counts = sorted(
                (k.removeprefix("cmdstat_"), v["calls"] / calls)
                for k, v in stats.items()
                if not k.startswith(("cmdstat_eval", "cmdstat_config", "cmdstat_info"))
            )
            total = sum(n for _, n in counts)
            print(name, f"total={total:g}", *(f"{k}={n:g}" for k, n in counts))

        async def per_call(calls: object, name: str = "") -> float:
            await redis.config_resetstat()
            n = 0
            for call in calls:  # type: ignore[attr-defined]
                await call
                n += 1
            if commands:
                await called(name, n)
            return await redis_us()

        users = [f"t{i}" for i in range(CALLS)]
        online = await per_call((store.touch(u, "tab") for u in users), "touch-online")
        again = await per_call((store.touch(u, "tab") for u in users), "touch-again")
        kick = await per_call((store.kick(u) for u in users), "kick")
        await store.renew_leases()
        join = await per_call(
            (store.open_place_session(f"room{i}", u, "place") for i, u in enumerate(users)),
            "place-join",
        )
        await store.open_session("warm", "tab")  # the lease taken before measuring
        opened = []

        async def open_one(user_id: str) -> None:
            opened.append((await store.open_session(user_id, "tab", "web")).held)

        opening = await per_call((open_one(f"h{i}") for i in range(CALLS)), "session-open")
        closing = await per_call((store.close_session(h) for h in opened), "session-close")
        await redis.config_resetstat()
        await store.touch_many([f"m{i}" for i in range(MANY)])
        stats = await redis.info("commandstats")
        many_ms = sum(v["usec"] for k, v in stats.items() if k.startswith("cmdstat_eval")) / 1000
        if commands:
            await called(f"touch-many-per-user-of-{MANY}", MANY)
            return
        per_change = "-"
        length = await redis.xlen("gqlp:{0}:feed") if await redis.exists("gqlp:{0}:feed") else 0
        if length:
            used = await redis.memory_usage("gqlp:{0}:feed", samples=0)
            per_change = f"{(used or 0) / length:.0f}"
        print(
            f"{online:.1f} {again:.1f} {kick:.1f} {join:.1f} {opening:.1f} {closing:.1f} "
            f"{many_ms:.0f} {per_change}"
        )
        await redis.aclose()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", action="append", default=[], metavar="REV")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commands", action="store_true", help="commands per script call")
    parser.add_argument("--without-feed", action="store_true", help="and with the feed left out")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        asyncio.run(measure(args.commands))
        return
    # Here, not above: a version's process runs this file with only that version on its path.
    from bench.harness import (  # noqa: PLC0415
        checkout,
        median_cells,
        run_in,
        side_by_side,
        without_feed,
    )

    made: list[tuple[str, Callable[[Path], None]]] = []
    if args.without_feed:
        made = [
            ("without the feed", without_feed),
            ("without its entries", partial(without_feed, entries_only=True)),
        ]
    if args.commands:
        for name, write in made:
            with tempfile.TemporaryDirectory() as folder:
                write(Path(folder))
                print(f"{name}:")
                for line in run_in(folder, __file__, ["--measure", "--commands"]).splitlines():
                    print("  " + line)
        for rev in [None, *args.baseline]:
            with checkout(rev) as folder:
                print(f"{rev or 'this checkout'}:")
                lines = run_in(str(folder or os.getcwd()), __file__, ["--measure", "--commands"])
                for line in lines.splitlines():
                    print("  " + line)
        return

    print(
        f"Redis time, median (and minimum) of {args.rounds} rounds\n"
        "| version | touch, ONLINE (µs) | touch again, no event (µs) | kick (µs) "
        "| place join (µs) | presenceSession open (µs) | presenceSession close (µs) "
        f"| touchMany of {MANY:,} new (ms) | bytes per retained change |\n"
        "|---|---|---|---|---|---|---|---|---|"
    )
    figures = side_by_side(__file__, ["--measure"], args.baseline, args.rounds, made)
    for name, rows in figures.items():
        print(f"| {name} | " + " | ".join(median_cells(rows, minimum=True)) + " |")
    if args.without_feed:
        print(
            "\nThis checkout over each, median (least)\n"
            "| over | touch, ONLINE | touch again | kick | place join | open | close "
            "| touchMany |\n|---|---|---|---|---|---|---|---|"
        )
        ours = figures["this checkout"]
        for name, _ in made:
            cells = []
            # Each column but the last (memory, which has no ratio).
            for column in range(7):
                with_ = [float(row[column]) for row in ours]
                without = [float(row[column]) for row in figures[name]]
                median = statistics.median(with_) / statistics.median(without)
                cells.append(f"{median:.2f} ({min(with_) / min(without):.2f})")
            print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
