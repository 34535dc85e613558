"""touchMany's and touch's Redis time, this checkout against earlier commits, in one run:
`python -m bench.touch_many [--baseline REV ...] [--users N] [--rounds R]`.

Each version (this checkout, then each REV exported to a temporary folder) runs in a process of
its own on a private Redis 6.2 of its own: `touchMany` of N new users through the store (250 a
script call, as the service sends them), then once more with the same users, online already;
R rounds, the versions taking turns in each. Redis time is the scripts' from INFO
commandstats; wall time is the store call's. Then TOUCHES touches, one call each, of new users
with a session id and of the same again: the Redis time of one touch (µs).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore

# Touches measured per version and round.
TOUCHES = 2000


async def measure(users: int, rounds: int) -> None:
    """Prints one line of figures (medians of `rounds`) for the code on sys.path: run in each
    version's process."""
    server = start_redis_server()
    try:
        redis = redis_client(server.url)
        store = PresenceStore(redis, Settings(redis_url=server.url))
        await store.load_scripts()

        async def one(ids: list[str]) -> tuple[float, float]:
            await redis.config_resetstat()
            started = time.perf_counter()
            await store.touch_many(ids)
            wall_ms = (time.perf_counter() - started) * 1000
            stats = await redis.info("commandstats")
            redis_ms = sum(v["usec"] for k, v in stats.items() if k.startswith("cmdstat_eval"))
            return wall_ms, redis_ms / 1000

        async def touches(ids: list[str]) -> float:
            await redis.config_resetstat()
            for user_id in ids:
                await store.touch(user_id, "tab")
            stats = await redis.info("commandstats")
            evals = [v for k, v in stats.items() if k.startswith("cmdstat_eval")]
            return float(sum(v["usec"] for v in evals) / sum(v["calls"] for v in evals))

        new = [await one([f"r{r}-u{i}" for i in range(users)]) for r in range(rounds)]
        again = await one([f"r{rounds - 1}-u{i}" for i in range(users)])
        touched = [f"t{i}" for i in range(TOUCHES)]
        print(
            f"{statistics.median(r for _, r in new):.0f}",
            f"{statistics.median(w for w, _ in new):.0f}",
            f"{again[1]:.0f}",
            f"{again[0]:.0f}",
            f"{await touches(touched):.1f}",
            f"{await touches(touched):.1f}",
        )
        await redis.aclose()
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", action="append", default=[], metavar="REV")
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--measure", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        asyncio.run(measure(*args.measure))
        return
    # Here, not above: a version's process runs this file with only that version on its path.
    from bench.harness import median_cells, side_by_side  # noqa: PLC0415

    print(
        f"touchMany of {args.users:,} users, median of {args.rounds} rounds (ms)\n"
        "| version | Redis, new users | wall, new users | Redis, online already "
        "| wall, online already | Redis per touch, new (µs) | Redis per touch, again (µs) |\n"
        "|---|---|---|---|---|---|---|"
    )
    run_args = ["--measure", str(args.users), "1"]
    for name, rows in side_by_side(__file__, run_args, args.baseline, args.rounds).items():
        print(f"| {name} | " + " | ".join(median_cells(rows, "{:.0f}")) + " |")


if __name__ == "__main__":
    main()
