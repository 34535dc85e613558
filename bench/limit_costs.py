"""What the largest requests the limits allow cost the server: `python -m bench.limit_costs`.

Starts `gql-presence serve` (one process, open mode on loopback) on a private Redis, sends each
kind of request one after another, and reads the server's CPU time from /proc before and after:
the figure is CPU per request, parsing, validation, execution and Redis round trips included
(Redis's own time is not: it runs in its own process). Every document is made unique by a
comment, so no request is served from the parser's or the validator's cache, as an attacker
would ensure. `{ __typename }` is the floor: what any request costs.
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import subprocess
import tempfile
from collections.abc import Callable
from typing import Any

import aiohttp
from graphql import get_introspection_query

from bench.harness import cpu_seconds, serve_ours, wait_for
from gql_presence.policy.limits import MAX_ALIASES, MAX_DOCUMENT_BYTES
from gql_presence.running.redis_server import free_port, start_redis_server
from gql_presence.store import MAX_ID_LENGTH, MAX_IDS_PER_CALL

_unique = itertools.count()
Request = Callable[[], dict[str, Any]]


def typename() -> dict[str, Any]:
    return {"query": f"{{ __typename }} # {next(_unique)}"}


def largest_document() -> dict[str, Any]:
    """MAX_ALIASES aliases, each reading a user's whole presence, padded by a comment to
    MAX_DOCUMENT_BYTES."""
    user = "u" * MAX_ID_LENGTH
    fields = " ".join(
        f'a{i}: presence(userId: "{user}") {{ userId online lastSeen '
        "sessions { sessionId lastSeen } }"
        for i in range(MAX_ALIASES)
    )
    text = f"{{ {fields} }}\n# {next(_unique)} "
    return {"query": text + "x" * (MAX_DOCUMENT_BYTES - len(text))}


def touch_many(id_length: int) -> Request:
    """A touchMany of MAX_IDS_PER_CALL ids never seen before, each id_length characters."""

    def request() -> dict[str, Any]:
        batch = next(_unique)
        ids = [f"{batch}-{i}".rjust(id_length, "u") for i in range(MAX_IDS_PER_CALL)]
        return {
            "query": f"mutation($ids: [ID!]!) {{ touchMany(userIds: $ids) }} # {next(_unique)}",
            "variables": {"ids": ids},
        }

    return request


def introspection() -> dict[str, Any]:
    return {"query": f"{get_introspection_query()}\n# {next(_unique)}"}


CASES: dict[str, tuple[Request, int]] = {
    "{ __typename } (the floor)": (typename, 400),
    f"document of {MAX_DOCUMENT_BYTES // 1024} KiB, {MAX_ALIASES} aliases": (largest_document, 200),
    f"touchMany of {MAX_IDS_PER_CALL:,} ids of 8 characters": (touch_many(8), 20),
    f"touchMany of {MAX_IDS_PER_CALL:,} ids of {MAX_ID_LENGTH} characters": (
        touch_many(MAX_ID_LENGTH),
        20,
    ),
    "the introspection query": (introspection, 100),
}
ROUNDS = 3


async def cost_ms(
    session: aiohttp.ClientSession,
    url: str,
    server: subprocess.Popen[bytes],
    request: Request,
    count: int,
) -> tuple[float, float]:
    """Server CPU and wall time per request, ms, over `count` requests one after another."""
    bodies = [request() for _ in range(count)]
    loop = asyncio.get_running_loop()
    cpu_before, wall_before = cpu_seconds([server]), loop.time()
    for body in bodies:
        async with session.post(url, json=body) as response:
            answer = await response.json()
            if response.status != 200 or answer.get("errors"):
                raise RuntimeError(f"refused: {str(answer)[:300]}")
    count_s = count / 1000
    return (cpu_seconds([server]) - cpu_before) / count_s, (loop.time() - wall_before) / count_s


async def main() -> None:
    redis = start_redis_server()
    port = free_port()
    with tempfile.TemporaryDirectory() as data_dir:
        env = {"REDIS_URL": redis.url, "PRESENCE_DATA_DIR": data_dir, "PRESENCE_SHARDS": "1"}
        server = serve_ours(env, port, workers=1)
        url = f"http://127.0.0.1:{port}/graphql"
        try:
            await wait_for(url)
            print(f"{'request':44} {'server CPU ms':>14} {'wall ms':>8}")
            async with aiohttp.ClientSession() as session:
                for name, (request, count) in CASES.items():
                    rounds = [
                        await cost_ms(session, url, server, request, count) for _ in range(ROUNDS)
                    ]
                    cpu = statistics.median(r[0] for r in rounds)
                    wall = statistics.median(r[1] for r in rounds)
                    print(f"{name:44} {cpu:>14.2f} {wall:>8.2f}")
        finally:
            server.terminate()
            server.wait(timeout=20)
            redis.stop()


if __name__ == "__main__":
    asyncio.run(main())
