"""Real-time benchmark: `python -m bench.realtime [--subscribers N]`.

One API process (`gql-presence serve`) on a private Redis, N WebSocket subscribers (default
1,000) speaking graphql-transport-ws, all following the same ten users. It measures:
- throughput: a burst of presence changes, as fast as the API takes them, and how many
  events per second reach the subscribers until each has all of them;
- delay: changes at a steady, modest rate, and the time from sending each `kick`/`touch`
  to its event arriving, at every subscriber (p50, p99).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from gql_presence.redis_server import free_port, start_redis_server

USERS = [f"bench-{i}" for i in range(10)]
SUBSCRIBE = (
    "subscription($ids: [ID!]) { presenceChanged(userIds: $ids) "
    "{ userId kind at sessionId online } }"
)


class Subscriber:
    def __init__(self) -> None:
        self.received: list[tuple[float, str, str]] = []  # (arrival, user, kind)
        self.ws: aiohttp.ClientWebSocketResponse | None = None

    async def connect(self, session: aiohttp.ClientSession, url: str) -> None:
        self.ws = await session.ws_connect(url, protocols=["graphql-transport-ws"])
        await self.ws.send_json({"type": "connection_init"})
        assert (await self.ws.receive_json())["type"] == "connection_ack"
        payload = {"query": SUBSCRIBE, "variables": {"ids": USERS}}
        await self.ws.send_json({"id": "1", "type": "subscribe", "payload": payload})

    async def read(self) -> None:
        assert self.ws is not None
        async for message in self.ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            body = json.loads(message.data)
            if body["type"] == "next":
                event = body["payload"]["data"]["presenceChanged"]
                self.received.append((time.perf_counter(), event["userId"], event["kind"]))


def change(user: str, i: int) -> tuple[str, str]:
    """A user's i-th change, which makes exactly one event: online (even i), or kicked."""
    if i % 2 == 0:
        return "ONLINE", f'mutation {{ touch(userId: "{user}", sessionId: "s{i}") {{ online }} }}'
    return "KICKED", f'mutation {{ kick(userId: "{user}") {{ online }} }}'


async def post(http: aiohttp.ClientSession, url: str, query: str) -> None:
    async with http.post(url, json={"query": query}) as response:
        body = await response.json()
        assert "errors" not in body, body


async def all_arrived(subscribers: list[Subscriber], count: int, limit_s: float) -> float:
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        if all(len(s.received) >= count for s in subscribers):
            return time.perf_counter()
        await asyncio.sleep(0.01)
    got = sorted(len(s.received) for s in subscribers)
    raise RuntimeError(f"only {got[0]}..{got[-1]} of {count} events arrived in {limit_s} s")


@asynccontextmanager
async def service(buffer: int) -> AsyncIterator[str]:
    """A private Redis and one API process on it; yields the GraphQL URL."""
    server = start_redis_server()
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": server.url,
        "PRESENCE_REVOKE_SECONDS": "0",  # kicked sessions may come back at once
        "PRESENCE_SUBSCRIBER_BUFFER": str(buffer),
    }
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, before any measurement
        [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"127.0.0.1:{port}/graphql"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        server.stop()


async def burst_phase(
    session: aiohttp.ClientSession, url: str, subscribers: list[Subscriber], burst: int
) -> tuple[float, float]:
    """Changes/s the API took, and events/s delivered until every subscriber had them all."""
    per_user = burst // len(USERS) // 2 * 2  # each user ends offline

    async def publisher(user: str) -> None:  # one user's changes in order; users at once
        for i in range(per_user):
            await post(session, url, change(user, i)[1])

    started = time.perf_counter()
    await asyncio.gather(*(publisher(user) for user in USERS))
    sent = time.perf_counter()
    finished = await all_arrived(subscribers, per_user * len(USERS), 120)
    changes = per_user * len(USERS)
    return changes / (sent - started), changes * len(subscribers) / (finished - started)


async def steady_phase(
    session: aiohttp.ClientSession, url: str, subscribers: list[Subscriber], count: int, rate: float
) -> list[float]:
    """Delays in ms from each change's request to its event, at every subscriber, sorted."""
    for s in subscribers:
        s.received.clear()
    sent_at: dict[tuple[str, str], list[float]] = defaultdict(list)
    for i in range(count):
        kind, mutation = change(USERS[0], i)
        sent_at[(USERS[0], kind)].append(time.perf_counter())
        await post(session, url, mutation)
        await asyncio.sleep(1 / rate)
    await all_arrived(subscribers, count, 60)
    delays = []
    for s in subscribers:
        seen: dict[tuple[str, str], int] = defaultdict(int)
        for arrival, user, kind in s.received:
            delays.append((arrival - sent_at[(user, kind)][seen[(user, kind)]]) * 1000)
            seen[(user, kind)] += 1
    return sorted(delays)


async def run(subscriber_count: int, burst: int, steady_s: float, steady_rate: float) -> None:
    async with (
        service(max(1000, burst)) as address,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
    ):
        http_url, ws_url = f"http://{address}", f"ws://{address}"
        for _ in range(200):
            try:
                await post(session, http_url, "{ __typename }")
                break
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
        subscribers = [Subscriber() for _ in range(subscriber_count)]
        for start in range(0, subscriber_count, 100):
            batch = subscribers[start : start + 100]
            await asyncio.gather(*(s.connect(session, ws_url) for s in batch))
        readers = [asyncio.create_task(s.read()) for s in subscribers]
        await asyncio.sleep(1)  # every subscription registered
        accepted, delivered = await burst_phase(session, http_url, subscribers, burst)
        steady = int(steady_s * steady_rate) // 2 * 2
        delays = await steady_phase(session, http_url, subscribers, steady, steady_rate)
        for task in readers:
            task.cancel()

    rows = [
        (f"burst of {burst:,} changes: changes/s the API took", f"{accepted:,.0f}"),
        ("events delivered until every subscriber had all", f"{delivered:,.0f} events/s"),
        (
            f"steady {steady_rate:g} changes/s for {steady_s:g} s: request to event, p50",
            f"{delays[len(delays) // 2]:,.1f} ms",
        ),
        ("same, p99", f"{delays[int(len(delays) * 0.99)]:,.1f} ms"),
    ]
    cores = os.cpu_count()
    print(f"real-time: {subscriber_count:,} subscribers, one API process, {cores} cores\n")
    print("| what | figure |\n|---|---|")
    for what, figure in rows:
        print(f"| {what} | {figure} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.realtime", description=__doc__)
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--burst", type=int, default=200, help="changes in the throughput burst")
    parser.add_argument("--steady-seconds", type=float, default=10)
    parser.add_argument("--steady-rate", type=float, default=2, help="changes per second")
    options = parser.parse_args()
    asyncio.run(
        run(options.subscribers, options.burst, options.steady_seconds, options.steady_rate)
    )
