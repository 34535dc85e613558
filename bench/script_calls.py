"""What a script call costs the process that makes it, through the queue that sends calls
to Redis (gql_presence/store/auto_pipeline.py): `python -m bench.script_calls [--baseline
REV] [--rounds R]`.

One private Redis, its scripts and this process pinned to the first core (the calls' CPU is
this process's own: packing, writing, reading, handing the replies over, the event loop).
Each case makes calls of one script returning a reply of a given size, so many in each turn
of the event loop and so many turns one after the other before the first reply is awaited, as
requests of a busy process do; its figure is the process's CPU per call (time.process_time),
the least of R rounds. With --baseline, REV's auto_pipeline.py is loaded beside this
checkout's and the two take turns in each round, on the same connection pool.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import uvloop

from bench.harness import export
from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import start_redis_server
from gql_presence.store import auto_pipeline

CALLS = 2_000
# (reply bytes, calls in a turn, turns before the replies are awaited)
CASES = [(100, 1, 1), (100, 5, 4), (100, 50, 1), (15_000, 1, 1), (15_000, 10, 5), (15_000, 50, 1)]


def module_of(rev: str) -> ModuleType:
    """REV's auto_pipeline.py, loaded as a module of its own."""
    with tempfile.TemporaryDirectory(prefix="gqlp-pipeline-") as folder:
        export(rev, folder)
        path = Path(folder) / "gql_presence" / "store" / "auto_pipeline.py"
        spec = importlib.util.spec_from_file_location("auto_pipeline_then", path)
        if spec is None or spec.loader is None:
            raise SystemExit(f"{rev} has no gql_presence/store/auto_pipeline.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module


async def cpu_per_call(pipeline: Any, script: Any, size: int, per_turn: int, turns: int) -> float:
    async def burst() -> None:
        calls = []
        for _ in range(turns):
            calls += [
                asyncio.ensure_future(pipeline.run(script, ["{0}:k"], [size]))
                for _ in range(per_turn)
            ]
            await asyncio.sleep(0)
        await asyncio.gather(*calls)

    for _ in range(10):
        await burst()
    bursts = max(50, CALLS // (per_turn * turns))
    started = time.process_time()
    for _ in range(bursts):
        await burst()
    return (time.process_time() - started) / (bursts * per_turn * turns) * 1e6


async def main(options: argparse.Namespace) -> None:
    os.sched_setaffinity(0, {0})  # the Redis started below inherits it
    server = start_redis_server()
    try:
        client = redis_client(server.url)
        script = client.register_script("return string.rep('x', tonumber(ARGV[1]))")
        await client.script_load(script.script)
        kinds: dict[str, Any] = {"now": auto_pipeline.AutoPipeline(client)}
        if options.baseline:
            kinds["then"] = module_of(options.baseline).AutoPipeline(client)
        print(
            "| reply bytes | calls a turn | turns | "
            + " | ".join(f"{k}, µs a call" for k in kinds)
            + (" | now/then |" if len(kinds) > 1 else " |")
        )
        print("|---" * (3 + len(kinds) + (len(kinds) > 1)) + "|")
        for size, per_turn, turns in CASES:
            figures: dict[str, list[float]] = {k: [] for k in kinds}
            for _ in range(options.rounds):
                for name, pipeline in kinds.items():
                    figures[name].append(
                        await cpu_per_call(pipeline, script, size, per_turn, turns)
                    )
            least = {k: min(v) for k, v in figures.items()}
            cells = [f"{least[k]:.1f}" for k in kinds]
            if len(kinds) > 1:
                cells.append(f"{least['now'] / least['then']:.2f}x")
            print(f"| {size:,} | {per_turn} | {turns} | " + " | ".join(cells) + " |")
        await client.aclose()
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.script_calls", description=__doc__)
    parser.add_argument("--baseline", help="also measure this commit's auto_pipeline.py")
    parser.add_argument("--rounds", type=int, default=3)
    uvloop.run(main(parser.parse_args()))
