"""This checkout against an earlier commit, or against other settings, in one run:
`python -m bench.compare [REV] [--then-env NAME=VALUE ...] [--seconds S] [--rounds N]
[--production]`.

The service is served from this checkout ("now") and from REV ("then", exported to a temporary
folder; default HEAD, with --then-env to compare settings instead), one process each on one
private Redis, beside the bare handler of `python -m bench`. Each operation of its HTTP rows
loads the three in turn, round after round, so that other work on the machine falls on all
alike; the table gives the median of each and the ratios now/then. With --production, both
services run with the production settings (harness.PRODUCTION_ENV: a backend's credentials,
rate limits, metrics, JSON logs) and every request carries the backend's token, the bare
handler's too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from bench.harness import (
    OPERATIONS,
    PRODUCTION_ENV,
    PRODUCTION_HEADERS,
    Figures,
    Row,
    export,
    figures,
    fmt,
    load,
    measured,
    median_figures,
    one_redis,
    print_table,
    seed_http,
    start_bare,
    wait_for,
)
from gql_presence.running.redis_server import free_port

CONCURRENCY = 50


def serve_from(folder: str, env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """One service process of the code in `folder`."""
    return subprocess.Popen(
        [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)],
        cwd=folder,
        env={**os.environ, **env, "PYTHONPATH": folder, "PRESENCE_WORKERS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def compare(
    then_folder: str, then_env: dict[str, str], seconds: float, rounds: int, production: bool
) -> list[Row]:
    headers = PRODUCTION_HEADERS if production else None
    async with one_redis() as (_, target):
        await seed_http(target)
        ports = [free_port() for _ in range(3)]
        env = {**target.env, **PRODUCTION_ENV} if production else target.env
        now = [serve_from(os.getcwd(), env, ports[0])]
        then = [serve_from(then_folder, {**env, **then_env}, ports[1])]
        bare = start_bare(target.env, ports[2], 1)
        now_url, then_url = (f"http://127.0.0.1:{port}/graphql" for port in ports[:2])
        bare_url = f"http://127.0.0.1:{ports[2]}"
        taken: dict[str, list[Figures]] = defaultdict(list)
        try:
            for url in (now_url, then_url, bare_url + "/touch"):
                await wait_for(url)
            for op in OPERATIONS:  # warm-up
                for url in (now_url, then_url):
                    await load(url, op.query, 1, CONCURRENCY, users=op.users, headers=headers)
            for _ in range(rounds):
                for op in OPERATIONS:
                    for side, servers, url in (
                        ("now", now, now_url),
                        ("then", then, then_url),
                        ("bare", bare, bare_url + op.path),
                    ):
                        figures_ = await measured(
                            servers, url, op, seconds, CONCURRENCY, headers=headers
                        )
                        taken[f"{side} {op.name}"].append(figures_)
        finally:
            for process in (*now, *then, *bare):
                process.send_signal(signal.SIGTERM)
                process.wait(20)
    median = {name: median_figures(rounds_) for name, rounds_ in taken.items()}
    rows: list[Row] = []
    for op in OPERATIONS:
        new, old, floor = (median[f"{side} {op.name}"] for side in ("now", "then", "bare"))
        rows += [
            (
                f"{op.name}, 1 process, {CONCURRENCY} connections",
                f"now {figures(new)}",
                f"then {figures(old)}",
                f"now/then {new[0] / old[0]:.2f}x req/s; now {new[0] / floor[0]:.2f}x "
                f"and then {old[0] / floor[0]:.2f}x the bare handler's",
            ),
            (
                "",
                f"now {fmt(new[3], ' µs')} CPU per request",
                f"then {fmt(old[3], ' µs')}; bare {fmt(floor[3], ' µs')}",
                f"now/then {new[3] / old[3]:.2f}x CPU",
            ),
        ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("rev", nargs="?", default="HEAD", help="the commit to serve as 'then'")
    parser.add_argument(
        "--then-env", action="append", default=[], help="NAME=VALUE for 'then' only"
    )
    parser.add_argument("--seconds", type=float, default=2, help="length of one load")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--production", action="store_true", help="serve both with the production settings"
    )
    args = parser.parse_args()
    then_env = dict(item.split("=", 1) for item in args.then_env)
    with tempfile.TemporaryDirectory(prefix="gqlp-then-") as then_folder:
        export(args.rev, then_folder)
        rows = asyncio.run(
            compare(then_folder, then_env, args.seconds, args.rounds, args.production)
        )
    settings = "production settings" if args.production else "default settings"
    print(
        f"now: {Path.cwd()}; then: {args.rev} {then_env or ''}; {settings}; "
        f"load average {os.getloadavg()}"
    )
    print_table(rows)


if __name__ == "__main__":
    main()
