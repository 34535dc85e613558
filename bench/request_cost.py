"""What the largest requests cost the server: `python -m bench.request_cost [runs]`.

The service runs in this process on a private Redis, with a backend token configured, and
each request's body is encoded before it is timed. The figure is this process's CPU time per
request (Redis's own time is not in it), the median of a few runs, beside the same
`touchMany` through a bare aiohttp handler calling the same store: the floor of this stack.
A second table splits the largest valid request into the steps of its path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import sys
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from graphql import parse
from graphql.execution.values import get_variable_values

from bench.harness import cpu_ms
from gql_presence.app import create_app
from gql_presence.graphql.schema import build_schema
from gql_presence.http.app_keys import STORE
from gql_presence.policy.limits import MAX_BODY_BYTES
from gql_presence.running.redis_server import free_port, start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import MAX_ID_LENGTH, MAX_IDS_PER_CALL, PresenceStore, check_ids

TOKEN = "b" * 40
TOUCH_MANY = "mutation($ids: [ID!]!) { touchMany(userIds: $ids) }"
# The largest valid request: 10,000 ids of 128 characters; ASCII, and 4 bytes of UTF-8 each.
LARGEST_IDS = [f"{i:06}".ljust(MAX_ID_LENGTH, "x") for i in range(MAX_IDS_PER_CALL)]
EMOJI_IDS = [f"{i:06}".ljust(MAX_ID_LENGTH, "\U0001f600") for i in range(MAX_IDS_PER_CALL)]


def body(ids: list[str] | list[int]) -> bytes:
    request = {"query": TOUCH_MANY, "variables": {"ids": ids}}
    return json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()


LARGEST = body(LARGEST_IDS)
# As many one-character ids as the body limit lets through: about 2.6 million.
FLOOD = body([1] * ((MAX_BODY_BYTES - 200) // 2))
BACKEND = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
ANONYMOUS = {"Content-Type": "application/json"}


async def bare_handler(request: web.Request) -> web.Response:
    """The floor: decode the body and call the store, nothing else."""
    ids = json.loads(await request.read())["variables"]["ids"]
    return web.json_response({"touchMany": await request.app[STORE].touch_many(ids)})


def path_steps(store: PresenceStore) -> dict[str, Callable[[], Awaitable[object]]]:
    """Each step the largest valid request goes through, alone."""
    schema = build_schema()._schema
    (operation,) = parse(TOUCH_MANY).definitions
    definitions = operation.variable_definitions  # type: ignore[attr-defined]
    variables = json.loads(LARGEST)["variables"]

    async def done(value: object) -> object:
        return value

    return {
        "JSON decode of the body": lambda: done(json.loads(LARGEST)),
        "GraphQL coercion of the variables": lambda: done(
            get_variable_values(schema, definitions, variables)
        ),
        "the ids' validation": lambda: done(check_ids(LARGEST_IDS, "userIds")),
        "the ids' validation, emoji": lambda: done(check_ids(EMOJI_IDS, "userIds")),
        "the store's touchMany (its Python part)": lambda: store.touch_many(LARGEST_IDS),
    }


async def main(runs: int) -> None:
    redis_server = start_redis_server()
    settings = dataclasses.replace(
        Settings(), redis_url=redis_server.url, backend_tokens=(("bench", TOKEN),)
    )
    try:
        app = create_app(settings)
        app.router.add_post("/bare", bare_handler)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as session:

            async def post(path: str, data: bytes, headers: dict[str, str]) -> object:
                async with session.post(url + path, data=data, headers=headers) as response:
                    return await response.read()

            cases = {
                "touchMany, 10,000 ids of 128 chars (backend)": ("/graphql", LARGEST, BACKEND),
                "the same, bare aiohttp handler, same store": ("/bare", LARGEST, BACKEND),
                "touchMany, 10,000 ids of 128 emoji (backend)": (
                    "/graphql",
                    body(EMOJI_IDS),
                    BACKEND,
                ),
                "2.6 M one-char ids, 5.2 MB, no credentials": ("/graphql", FLOOD, ANONYMOUS),
                "2.6 M one-char ids, 5.2 MB, backend token": ("/graphql", FLOOD, BACKEND),
            }
            print(f"{'request':52} {'bytes':>10} {'server CPU ms':>14}")
            for name, (path, data, headers) in cases.items():
                measure = cpu_ms(functools.partial(post, path, data, headers), runs)
                print(f"{name:52} {len(data):>10,} {await measure():>14.1f}")
        print(f"\n{'step of the largest valid request':52} {'CPU ms':>25}")
        for name, step in path_steps(app[STORE]).items():
            print(f"{name:52} {await cpu_ms(step, runs)():>25.1f}")
        await runner.cleanup()
    finally:
        redis_server.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5))
