"""Connection-bound sessions benchmark: `python -m bench.sessions [--sessions N]`.

One API process (`gql-presence serve`, one worker, the default 30 s connection TTL) on a
private Redis holds N `presenceSession` subscriptions (default 10,000), one user each, over
WebSockets of 20 subscriptions each (the most one socket may carry), every socket read by a
task of its own so that it answers the service's pings. It measures:
- Redis commands per second while the sessions are idle (INFO commandstats, counting the
  commands the scripts run, over a whole number of renewal ticks), beside the same with no
  session held;
- the process's memory per session: its RSS with the sessions minus its RSS before, over N;
- the time from a socket's close to the OFFLINE event of each of its users at another
  socket's `presenceChanged(all: true)` (p50, p99), closing sockets one at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from redis.asyncio import Redis

from gql_presence.running.redis_server import free_port, start_redis_server

PER_SOCKET = 20  # gql_presence.limits.MAX_SUBSCRIPTIONS_PER_SOCKET
TTL_S = 30  # the default PRESENCE_CONNECTION_TTL_SECONDS
RENEW_EVERY_S = TTL_S / 3  # gql_presence.sessions.RENEWALS_PER_TTL
HOLD = 'subscription($user: ID!) { presenceSession(userId: $user, sessionId: "tab") { live } }'
EVERYONE = "subscription { presenceChanged(all: true) { userId kind } }"


@dataclass
class Socket:
    """One graphql-transport-ws connection and what it received."""

    ws: aiohttp.ClientWebSocketResponse
    users: list[str] = field(default_factory=list)
    live: int = 0  # presenceSession subscriptions that said they are live
    offline_at: dict[str, float] = field(default_factory=dict)  # presenceChanged: OFFLINE
    reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        async for message in self.ws:  # answers pings while it reads
            if message.type != aiohttp.WSMsgType.TEXT:
                return
            body = json.loads(message.data)
            if body["type"] != "next":
                continue
            data = body["payload"]["data"]
            if "presenceSession" in data:
                self.live += 1
            elif data["presenceChanged"]["kind"] == "OFFLINE":
                self.offline_at[data["presenceChanged"]["userId"]] = time.perf_counter()


async def connect(http: aiohttp.ClientSession, url: str) -> Socket:
    ws = await http.ws_connect(url, protocols=["graphql-transport-ws"], max_msg_size=0)
    await ws.send_json({"type": "connection_init"})
    assert (await ws.receive_json(timeout=10))["type"] == "connection_ack"
    socket = Socket(ws)
    socket.reader = asyncio.create_task(socket.read())
    return socket


async def subscribe(socket: Socket, operation_id: str, query: str, **variables: Any) -> None:
    payload = {"query": query, "variables": variables}
    await socket.ws.send_json({"id": operation_id, "type": "subscribe", "payload": payload})


async def until(condition: Any, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {within_s} s")
        await asyncio.sleep(0.01)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def commands(redis: Redis) -> dict[str, int]:
    """Calls per command so far, without the INFO calls of this benchmark."""
    stats = await redis.info("commandstats")
    return {name: int(value["calls"]) for name, value in stats.items() if name != "cmdstat_info"}


async def idle_rate(redis: Redis, ticks: int) -> tuple[float, float]:
    """Commands/s (those scripts run included) and script calls/s over `ticks` renewal ticks."""
    before = await commands(redis)
    await asyncio.sleep(ticks * RENEW_EVERY_S)
    after = await commands(redis)
    seconds = ticks * RENEW_EVERY_S
    total = sum(after.values()) - sum(before.values())
    scripts = sum(
        after[name] - before.get(name, 0) for name in after if name.startswith("cmdstat_evalsha")
    )
    return total / seconds, scripts / seconds


@asynccontextmanager
async def service() -> AsyncIterator[tuple[str, int, Redis]]:
    """A private Redis and one API process on it: the WebSocket URL, its pid, a client."""
    server = start_redis_server()
    port = free_port()
    env = {**os.environ, "REDIS_URL": server.url, "PRESENCE_WORKERS": "1"}
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, before any measurement
        [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    redis = Redis.from_url(server.url)
    try:
        yield f"ws://127.0.0.1:{port}/graphql", process.pid, redis
    finally:
        await redis.aclose()
        process.send_signal(signal.SIGTERM)
        process.wait(60)
        server.stop()


async def run(count: int, closes: int, ticks: int) -> None:
    async with (
        service() as (url, pid, redis),
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0)  # a socket per 20 sessions, all at once
        ) as http,
    ):
        watcher: Socket | None = None
        for _ in range(100):  # the process starts in a second or two
            try:
                watcher = await connect(http, url)
                break
            except aiohttp.ClientError:
                await asyncio.sleep(0.2)
        assert watcher is not None, "the service did not start"
        await subscribe(watcher, "all", EVERYONE)
        await asyncio.sleep(1)
        print(f"idle, no session: {ticks} renewal ticks of {RENEW_EVERY_S:.0f} s...", flush=True)
        base_total, base_scripts = await idle_rate(redis, ticks)
        rss_before = rss_bytes(pid)

        started = time.perf_counter()
        sockets: list[Socket] = []
        for first in range(0, count, PER_SOCKET):
            socket = await connect(http, url)
            socket.users = [f"user-{i}" for i in range(first, min(first + PER_SOCKET, count))]
            for user in socket.users:
                await subscribe(socket, user, HOLD, user=user)
            sockets.append(socket)
        await until(lambda: sum(s.live for s in sockets) == count, 300, "every session live")
        opened_s = time.perf_counter() - started
        print(f"{count} sessions live in {opened_s:.1f} s; idle, {ticks} ticks...", flush=True)
        await asyncio.sleep(2)  # the openings' garbage collected, the renewals begun
        held_total, held_scripts = await idle_rate(redis, ticks)
        rss_after = rss_bytes(pid)

        delays_ms: list[float] = []
        for socket in sockets[:closes]:
            closed_at = time.perf_counter()
            await socket.ws.close()
            await until(
                lambda s=socket: all(u in watcher.offline_at for u in s.users),
                10,
                "OFFLINE of a closed socket's users",
            )
            delays_ms += [(watcher.offline_at[u] - closed_at) * 1000 for u in socket.users]
        for socket in sockets[closes:]:
            await socket.ws.close()

    per_session = (rss_after - rss_before) / count
    cuts = statistics.quantiles(delays_ms, n=100)
    print()
    print(f"sessions held: {count:,} over {len(sockets)} sockets; opened in {opened_s:.1f} s")
    print(
        f"Redis commands/s, idle, no session:  {base_total:.1f} ({base_scripts:.2f} script calls/s)"
    )
    print(f"Redis commands/s, idle, {count:,} held: {held_total:.1f}", end=" ")
    print(f"({held_scripts:.2f} script calls/s)")
    print(f"process RSS: {rss_before / 2**20:.1f} MiB -> {rss_after / 2**20:.1f} MiB,", end=" ")
    print(f"{per_session / 1024:.1f} KiB per session")
    print(
        f"socket close -> OFFLINE at another socket, {len(delays_ms)} sessions "
        f"({closes} closes of {PER_SOCKET}): p50 {cuts[49]:.1f} ms, p99 {cuts[98]:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--closes", type=int, default=300, help="sockets closed one at a time")
    parser.add_argument("--ticks", type=int, default=1, help="renewal ticks per idle measure")
    arguments = parser.parse_args()
    asyncio.run(run(arguments.sessions, arguments.closes, arguments.ticks))


if __name__ == "__main__":
    main()
