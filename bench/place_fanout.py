"""Place fan-out: `python -m bench.place_fanout [--subscribers N] [--baseline REF]`.

One API process (`gql-presence serve`) on a private Redis, N WebSocket subscribers (default
1,000) of one document, first of `presenceChanged` following ten users, then, in the same
process, of `placeChanged` of one place. For each, in one run: the service's CPU per delivered
event, over a burst of events published straight into the channel (so that no HTTP request is
counted), from /proc/<pid>/stat. Then a steady phase at 10,000 deliveries a second: a member
of the place moved by `setPlaceState` requests, 10,000/N a second, and the time from each
request to its UPDATED at every subscriber (p50, p99), beside the same for presenceChanged
(bench.realtime's touches and kicks) in the same run. The target: the place's CPU per
delivery within 1.5x presenceChanged's, and p99 under 100 ms. With --baseline, the same for a
git commit of this repository first (extracted and run from a temporary folder), in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from redis.asyncio import Redis

from bench.harness import (
    SETTINGS,
    Service,
    Subscriber,
    all_arrived,
    checkout,
    client_frame,
    collector_paused,
    first_events,
    post,
    publish,
    quiet,
    service,
    steady_phase,
    subscribe_all,
)
from gql_presence.store import PresenceStore
from gql_presence.store.channels import Channels
from gql_presence.store.wire import PlaceKind, PublishedPlaceEvent

PLACE = "bench-place"
WATCH = (
    "subscription($p: ID!) { placeChanged(placeId: $p) { placeId kind userId sessionId at state } }"
)
# A move of the member: its state, a literal object (the harness's post sends no variables).
MOVE = (
    'mutation { setPlaceState(placeId: "' + PLACE + '", userId: "mover", sessionId: "tab", '
    "state: {i: %d}) { sessionId } }"
)
HOLD = (
    'subscription { placeSession(placeId: "' + PLACE + '", userId: "mover", sessionId: "tab") '
    "{ live } }"
)


class PlaceSubscriber(Subscriber):
    """A client on a raw connection, as the harness's Subscriber, that subscribes to what it
    is told."""

    def subscribe(self, operation_id: str, query: str, variables: dict[str, str]) -> None:
        assert self._transport is not None
        payload = {"query": query, "variables": variables}
        self._transport.write(
            client_frame({"id": operation_id, "type": "subscribe", "payload": payload})
        )


async def publish_place(redis: Redis, count: int) -> None:
    """`count` UPDATED events of the place as its scripts announce them, a message each: in
    the store's own wire format (PublishedPlaceEvent), so that a field added to it fails
    here rather than leave every event undecoded and undelivered; numbered after the place's
    present sequence and version, so that every subscriber takes them as later than its read."""
    channel = Channels.of_shard(0).place_events(PLACE)
    page = await PresenceStore(redis, SETTINGS).place_members(PLACE, first=1)
    at_ms = int(time.time() * 1000)
    for i in range(1, count + 1):
        event = PublishedPlaceEvent(
            kind=PlaceKind.UPDATED,
            place_id=PLACE,
            user_id="mover",
            session_id="tab",
            at_ms=at_ms,
            state=json.dumps({"x": i % 800, "y": i % 600}, separators=(",", ":")),
            sequence=page.sequence + i,
            version=page.version + i,
            feed_id=f"{at_ms}-{i}",
        )
        await redis.publish(channel, json.dumps(list(event)))


async def cpu_per_delivery(
    svc: Service,
    clients: list[Subscriber],
    burst: int,
    send: Callable[[int], Awaitable[None]],
) -> float:
    """The service's CPU per event delivered, over a burst of events that `send` publishes."""
    for s in clients:
        s.received.clear()
    before = svc.cpu_s()
    await send(burst)
    await all_arrived(clients, burst, 300)
    delivered = sum(len(s.received) for s in clients)
    if not delivered:
        raise RuntimeError("no event of the burst was delivered: is it in the service's format?")
    return (svc.cpu_s() - before) / delivered * 1e6


async def measure(code: Path | None, n: int, burst: int, steady_s: float) -> dict[str, float]:
    """The figures of one service, of `code` (None: this checkout)."""
    figures: dict[str, float] = {}
    async with (
        service(code, max(1000, burst)) as svc,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
        Redis.from_url(svc.redis_url) as redis,
    ):
        url = f"http://{svc.url}"
        await asyncio.sleep(1)
        presence = await subscribe_all(svc, n, 1)
        await first_events(redis, presence)
        await quiet(presence)
        figures["presence_us"] = await cpu_per_delivery(
            svc, presence, burst, lambda count: publish(redis, count, 1)
        )
        rate = 10_000 / n
        presence_delays = await steady_phase(
            http, url, presence, int(steady_s * rate) // 2 * 2, rate
        )
        for client in presence:
            client.close()

        # The mover holds its session in the place on a socket of its own.
        mover = PlaceSubscriber()
        host, port = svc.host_port()
        await mover.connect(host, port, 0)
        mover.subscribe("h", HOLD, {})
        await asyncio.wait_for(mover.first.wait(), 10)
        places: list[Subscriber] = [PlaceSubscriber() for _ in range(n)]
        for start in range(0, n, 50):
            batch = places[start : start + 50]
            await asyncio.gather(*(s.connect(host, port, 0) for s in batch))
            for s in batch:
                assert isinstance(s, PlaceSubscriber)
                s.subscribe("p", WATCH, {"p": PLACE})
        await all_arrived(places, 1, 60)  # the mover's JOINED: every subscription has started
        figures["place_us"] = await cpu_per_delivery(
            svc, places, burst, lambda count: publish_place(redis, count)
        )

        count = int(steady_s * rate)
        for s in places:
            s.received.clear()
        sent = []
        with collector_paused():
            started = time.perf_counter()
            for i in range(count):
                await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
                sent.append(time.perf_counter())
                await post(http, url, MOVE % i)
            await all_arrived(places, count, 120)
        delays = sorted(
            (arrival - sent[i]) * 1000
            for s in places
            for i, (arrival, _) in enumerate(s.received[:count])
        )
        figures["dropped"] = sum(s.disconnected for s in places)
        for client in [*places, mover]:
            client.close()
    figures["presence_p50"], figures["presence_p99"] = percentiles(presence_delays)
    figures["place_p50"], figures["place_p99"] = percentiles(delays)
    return figures


ROWS = [
    ("presence_us", "service CPU per delivered event, presenceChanged (burst)", "{:,.1f} µs"),
    ("place_us", "service CPU per delivered event, placeChanged (burst)", "{:,.1f} µs"),
    ("presence_p50", "steady 10,000 deliveries/s, touch or kick to its event: p50", "{:,.1f} ms"),
    ("presence_p99", "same, p99", "{:,.1f} ms"),
    ("place_p50", "steady 10,000 deliveries/s, setPlaceState to UPDATED: p50", "{:,.1f} ms"),
    ("place_p99", "same, p99", "{:,.1f} ms"),
    ("dropped", "subscribers the service disconnected", "{:,.0f}"),
]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument("--burst", type=int, default=25)
    parser.add_argument("--steady-s", type=float, default=10)
    parser.add_argument("--baseline", default=None, help="a git commit to measure first, e.g. main")
    args = parser.parse_args()
    targets: list[tuple[str, str | None]] = [("this checkout", None)]
    if args.baseline:
        targets.insert(0, (args.baseline, args.baseline))
    results: dict[str, dict[str, float]] = {}
    for name, ref in targets:
        with checkout(ref) as code:
            results[name] = await measure(code, args.subscribers, args.burst, args.steady_s)
    load = os.getloadavg()
    print(
        f"\n{args.subscribers:,} subscribers of one document, one process, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )
    names = list(results)
    print("| what | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for key, what, shape in ROWS:
        print(f"| {what} | " + " | ".join(shape.format(results[n][key]) for n in names) + " |")
    for name in names:
        figures = results[name]
        print(
            f"{name}: placeChanged ÷ presenceChanged, CPU per delivery "
            f"{figures['place_us'] / figures['presence_us']:.2f}x, p99 "
            f"{figures['place_p99'] / figures['presence_p99']:.2f}x"
        )


def percentiles(delays: list[float]) -> tuple[float, float]:
    if not delays:
        return float("nan"), float("nan")
    return delays[len(delays) // 2], delays[int(len(delays) * 0.99)]


if __name__ == "__main__":
    asyncio.run(main())
