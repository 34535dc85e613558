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

`--memory` measures only process memory per idle session, in one run: at one session per
socket (N sockets) and at 20 per socket, for this checkout and, with `--baseline REF`, for a
git commit of it served from a temporary export (as bench/realtime.py does); beside the floor,
a bare aiohttp WebSocket handler process holding N open sockets and nothing else.
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

from bench.realtime import BARE_SERVER, checkout
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
async def service(code: Path | None = None) -> AsyncIterator[tuple[str, int, Redis]]:
    """A private Redis and one API process on it, of `code` (None: this checkout): the
    WebSocket URL, its pid, a client."""
    server = start_redis_server()
    port = free_port()
    env = {**os.environ, "REDIS_URL": server.url, "PRESENCE_WORKERS": "1"}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, before any measurement
        [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)],
        env=env,
        cwd=code,
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


async def first_socket(http: aiohttp.ClientSession, url: str) -> Socket:
    """A socket to a process that is starting: it listens within a few seconds."""
    for _ in range(150):
        try:
            return await connect(http, url)
        except aiohttp.ClientError:
            await asyncio.sleep(0.2)
    raise RuntimeError("the service did not start")


async def held_memory(code: Path | None, count: int, per_socket: int) -> float:
    """Bytes of the service's memory per idle session, `per_socket` sessions a socket; with
    `per_socket` 0, per socket that holds no session (connection_init answered)."""
    async with (
        service(code) as (url, pid, _),
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
    ):
        # One session opened and ended first: what the first of each kind costs once (its
        # document parsed, its caches) is not counted per session.
        warm = await first_socket(http, url)
        await subscribe(warm, "warm", HOLD, user="warm-up")
        await until(lambda: warm.live == 1, 30, "the warm-up session live")
        await warm.ws.close()
        await asyncio.sleep(1)
        rss_before = rss_bytes(pid)
        sockets: list[Socket] = []
        for first in range(0, count, per_socket or 1):
            socket = await connect(http, url)
            socket.users = [f"user-{i}" for i in range(first, min(first + per_socket, count))]
            for user in socket.users:
                await subscribe(socket, user, HOLD, user=user)
            sockets.append(socket)
        held = count if per_socket else 0
        await until(lambda: sum(s.live for s in sockets) == held, 300, "every session live")
        await asyncio.sleep(2)  # the openings' garbage collected
        rss_after = rss_bytes(pid)
        for socket in sockets:
            await socket.ws.close()
    return (rss_after - rss_before) / count


async def bare_memory(count: int) -> float:
    """Bytes of memory per open socket of a bare aiohttp WebSocket handler process, which
    answers connection_init and holds the socket, nothing else: the floor of this stack."""
    port = free_port()
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, before any measurement
        [sys.executable, "-c", BARE_SERVER, str(port)]
    )
    url = f"ws://127.0.0.1:{port}/graphql"
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            warm = await first_socket(http, url)
            await warm.ws.close()
            await asyncio.sleep(1)
            rss_before = rss_bytes(process.pid)
            sockets = [await connect(http, url) for _ in range(count)]
            await asyncio.sleep(2)
            rss_after = rss_bytes(process.pid)
            for socket in sockets:
                await socket.ws.close()
    finally:
        process.kill()  # nothing of it to keep
        process.wait(10)
    return (rss_after - rss_before) / count


async def memory(count: int, baseline: str | None) -> None:
    """Memory per idle session, before and after, beside the bare handler's per socket."""
    targets: list[tuple[str, str | None]] = [("this checkout", None)]
    if baseline:
        targets.insert(0, (baseline, baseline))
    figures: dict[str, tuple[float, float, float]] = {}
    for name, ref in targets:
        with checkout(ref) as code:
            print(f"{name}: {count:,} sockets, no session...", flush=True)
            no_session = await held_memory(code, count, 0)
            print(f"{name}: {count:,} sessions, one per socket...", flush=True)
            one = await held_memory(code, count, 1)
            print(f"{name}: {count:,} sessions, {PER_SOCKET} per socket...", flush=True)
            many = await held_memory(code, count, PER_SOCKET)
            figures[name] = (one, many, no_session)
    print(f"bare aiohttp handler: {count:,} open sockets...", flush=True)
    floor = await bare_memory(count)
    load = os.getloadavg()
    print(
        f"\nidle presenceSessions of distinct users, one API process, {os.cpu_count()} cores, "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )
    print("| what | " + " | ".join(figures) + " |")
    print("|---" * (len(figures) + 1) + "|")
    kib = 1024
    print(
        f"| memory per idle socket holding one session ({count:,} sockets) | "
        + " | ".join(
            f"{one / kib:,.1f} KiB = {one / floor:.2f}x the floor" for one, _, _ in figures.values()
        )
        + " |"
    )
    print(
        f"| memory per session, {PER_SOCKET} per socket ({count // PER_SOCKET:,} sockets) | "
        + " | ".join(f"{many / kib:,.1f} KiB" for _, many, _ in figures.values())
        + " |"
    )
    print(
        f"| memory per idle socket holding no session ({count:,} sockets) | "
        + " | ".join(
            f"{none / kib:,.1f} KiB = {none / floor:.2f}x the floor"
            for _, _, none in figures.values()
        )
        + " |"
    )
    print(
        f"\nThe floor, a bare aiohttp WebSocket handler holding {count:,} open sockets (each "
        f"answered connection_init, nothing else): {floor / kib:,.1f} KiB per socket."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--closes", type=int, default=300, help="sockets closed one at a time")
    parser.add_argument("--ticks", type=int, default=1, help="renewal ticks per idle measure")
    parser.add_argument(
        "--memory", action="store_true", help="memory per session only, beside the floor"
    )
    parser.add_argument("--baseline", default=None, help="with --memory: a git commit to measure")
    arguments = parser.parse_args()
    if arguments.memory:
        asyncio.run(memory(arguments.sessions, arguments.baseline))
    else:
        asyncio.run(run(arguments.sessions, arguments.closes, arguments.ticks))


if __name__ == "__main__":
    main()
