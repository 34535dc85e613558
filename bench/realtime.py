"""Real-time benchmark: `python -m bench.realtime [--subscribers N] [--baseline REF]`.

One API process (`gql-presence serve`) on a private Redis, N WebSocket subscribers (default
1,000) speaking graphql-transport-ws, all subscribed to the same document following the same
ten users (with `--own-variables`, each also follows a user of its own, as users following
their own friends do: the same document, no two subscriptions with the same variables). It
measures, for this checkout and, with --baseline, for a git commit of it
(extracted into a temporary folder and run from there), one after the other in one run:
- connects and subscribes per second: N clients connect, send connection_init, subscribe,
  and receive their first event (events are published until each has one), by the wall
  clock and by the service's CPU time (without that of those events' deliveries);
- process memory per idle subscription: the service's RSS before the subscribers and after,
  over N (one subscription per socket), and in a second process over N/20 sockets of 20;
- the service's CPU per delivered event: a burst of events published straight into the
  events channels (so that no HTTP request is counted), the process's CPU time from
  /proc/<pid>/stat over the burst, divided by the deliveries;
- delay: changes (`touch`/`kick` mutations) at a steady rate, and the time from sending each
  to its event arriving, at every subscriber (p50, p99); and the service's CPU over those
  changes per delivery, as measured from outside (one change at a time, its mutation's cost
  included), beside a floor: the bare handler writing one prebuilt frame to each of N sockets
  per event; then the same number of events published straight into Redis at the same rate
  (the fan-out without the mutations: the steady phase's CPU less this is the changes' own),
  and the process idle for as long (its timers and heartbeats).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
from redis.asyncio import Redis

from bench.harness import (
    BARE_SERVER,
    Service,
    Subscriber,
    all_arrived,
    checkout,
    collector_paused,
    first_events,
    publish,
    quiet,
    service,
    steady_phase,
    subscribe_all,
)
from gql_presence.running.redis_server import free_port

PER_SOCKET_MANY = 20  # the most subscriptions a socket may carry


async def measure(
    code: Path | None, subscribers: int, burst: int, steady_s: float, own_variables: bool
) -> dict[str, float]:
    figures: dict[str, float] = {}
    connector = aiohttp.TCPConnector(limit=0)
    async with (
        service(code, max(1000, burst)) as svc,
        aiohttp.ClientSession(connector=connector) as session,
        Redis.from_url(svc.redis_url) as redis,
    ):
        http_url = f"http://{svc.url}"
        await asyncio.sleep(1)
        rss_before = svc.rss_bytes()
        cpu_before = svc.cpu_s()
        started = time.perf_counter()
        clients = await subscribe_all(svc, subscribers, 1, own_variables)
        await first_events(redis, clients)
        figures["connects"] = subscribers / (time.perf_counter() - started)
        await quiet(clients)  # a slow service may still be delivering the first events
        connect_cpu_s = svc.cpu_s() - cpu_before
        first_deliveries = sum(len(s.received) for s in clients)
        figures["rss_one"] = (svc.rss_bytes() - rss_before) / subscribers

        for s in clients:
            s.received.clear()
        cpu_before = svc.cpu_s()
        await publish(redis, burst, 1)
        await all_arrived(clients, burst, 300)
        delivered = sum(len(s.received) for s in clients)
        figures["cpu_us"] = (svc.cpu_s() - cpu_before) / delivered * 1e6
        # The CPU of connecting, without that of the events that told the clients apart.
        connect_cpu_s -= first_deliveries * figures["cpu_us"] / 1e6
        figures["connect_cpu_us"] = connect_cpu_s / subscribers * 1e6
        figures["connects_cpu"] = subscribers / connect_cpu_s

        rate = 10_000 / subscribers  # changes/s for 10,000 deliveries/s
        changes = int(steady_s * rate) // 2 * 2
        cpu_before = svc.cpu_s()
        delays = await steady_phase(session, http_url, clients, changes, rate)
        # Measured from outside: each change's mutation, its script and its event's fan-out.
        figures["steady_cpu_us"] = (svc.cpu_s() - cpu_before) / max(1, len(delays)) * 1e6
        figures["p50"] = delays[len(delays) // 2] if delays else float("nan")
        figures["p99"] = delays[int(len(delays) * 0.99)] if delays else float("nan")
        # The same fan-out without the mutations, and the process idle over as long: what a
        # change costs of its own is the steady phase's CPU less the first, and the share of
        # the timers and heartbeats is the second's.
        cpu_before = svc.cpu_s()
        delivered = await steady_published(redis, clients, changes, rate)
        figures["published_cpu_us"] = (svc.cpu_s() - cpu_before) / max(1, delivered) * 1e6
        figures["change_cpu_ms"] = (
            (figures["steady_cpu_us"] - figures["published_cpu_us"]) * subscribers / 1000
        )
        cpu_before = svc.cpu_s()
        await asyncio.sleep(changes / rate)
        figures["idle_cpu_us"] = (svc.cpu_s() - cpu_before) / (changes * subscribers) * 1e6
        figures["dropped"] = sum(s.disconnected for s in clients)
        for client in clients:
            client.close()

    async with (
        service(code, 1000) as svc,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
        Redis.from_url(svc.redis_url) as redis,
    ):
        await asyncio.sleep(1)
        rss_before = svc.rss_bytes()
        sockets = max(1, subscribers // PER_SOCKET_MANY)
        clients = await subscribe_all(svc, sockets, PER_SOCKET_MANY)
        await first_events(redis, clients)
        await asyncio.sleep(1)
        figures["rss_many"] = (svc.rss_bytes() - rss_before) / (sockets * PER_SOCKET_MANY)
        for client in clients:
            client.close()
    return figures


ROWS = [
    (
        "connects",
        "connects and subscribes per second (connect, init, subscribe, first event), wall clock",
        "{:,.0f}/s",
    ),
    ("connect_cpu_us", "service CPU per connect and subscribe", "{:,.0f} µs"),
    ("connects_cpu", "connects and subscribes per second of the service's CPU", "{:,.0f}/s"),
    ("rss_one", "process memory per idle subscription, one per socket", "{:,.1f} KiB"),
    ("rss_many", f"same, {PER_SOCKET_MANY} per socket", "{:,.1f} KiB"),
    ("cpu_us", "service CPU per delivered event (burst published into Redis)", "{:,.1f} µs"),
    (
        "steady_cpu_us",
        "service CPU per delivery, changes one at a time (touch and kick alternating, 10/s, "
        "each mutation's own cost included)",
        "{:,.1f} µs",
    ),
    (
        "published_cpu_us",
        "same, events published into Redis one at a time at the same rate (no mutation)",
        "{:,.1f} µs",
    ),
    ("change_cpu_ms", "a change's own CPU in the steady phase (the two above apart)", "{:,.2f} ms"),
    ("idle_cpu_us", "the idle process over as long, per steady delivery", "{:,.1f} µs"),
    ("p50", "steady 10,000 deliveries/s: change (request) to event, p50", "{:,.1f} ms"),
    ("p99", "same, p99", "{:,.1f} ms"),
    ("dropped", "subscribers the service disconnected (could not keep up)", "{:,.0f}"),
]


async def steady_published(
    redis: Redis, subscribers: list[Subscriber], count: int, rate: float
) -> int:
    """The steady phase's fan-out with no request: `count` events published straight into
    Redis one at a time at `rate`, each delivered to every subscriber. Returns deliveries."""
    for s in subscribers:
        s.received.clear()
    with collector_paused():
        started = time.perf_counter()
        for i in range(count):
            await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
            await publish(redis, 1, i)
        await all_arrived(subscribers, count, 120)
    return sum(len(s.received) for s in subscribers)


# The floor of this stack for a fan-out: BARE_SERVER (bench.harness), which also writes one
# prebuilt frame (header and `next` message) straight to every socket's transport for each
# POST to /fanout, one write per socket per event, and nothing else.
BARE_FANOUT = BARE_SERVER.replace(
    "app = web.Application()",
    """sockets = []
# A `next` message of 150 bytes, about the size of the service's in this scenario, and a
# header that declares its length (a client refuses a frame whose length is not its payload's).
MESSAGE = b'{"id":"0","type":"next","payload":{"data":{"presenceChanged":{"userId":"bench-0"}}}'
MESSAGE += b" " * (149 - len(MESSAGE)) + b"}"
FRAME = bytes([0x81, 126]) + len(MESSAGE).to_bytes(2, "big") + MESSAGE

async def connected(request):
    socket = web.WebSocketResponse(protocols=["graphql-transport-ws"])
    await socket.prepare(request)
    sockets.append(request.transport)
    async for message in socket:
        if json.loads(message.data)["type"] == "connection_init":
            await socket.send_str(json.dumps({"type": "connection_ack"}))
    return socket

async def fanout(request):
    for transport in sockets:
        transport.write(FRAME)
    return web.Response(text="{}", content_type="application/json")

app = web.Application()
app.router.add_post("/fanout", fanout)
graphql = connected""",
)


async def bare_fanout_cpu_us(subscribers: int, steady_s: float) -> float:
    """The bare fan-out's CPU per delivery: `subscribers` sockets, events one at a time at
    the steady phase's rate, each a POST and one write per socket."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", BARE_FANOUT, str(port)])  # noqa: ASYNC220
    try:
        bare = Service(f"127.0.0.1:{port}/graphql", process.pid, "")
        url = f"http://127.0.0.1:{port}/fanout"
        async with aiohttp.ClientSession() as session:
            for _ in range(400):  # until it listens
                try:
                    async with session.post(url) as response:
                        await response.read()
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
            clients = await subscribe_all(bare, subscribers, 1)
            await asyncio.sleep(1)
            rate = 10_000 / subscribers
            count = int(steady_s * rate) // 2 * 2
            for s in clients:
                s.received.clear()
            cpu_before = bare.cpu_s()
            with collector_paused():
                started = time.perf_counter()
                for i in range(count):
                    await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
                    async with session.post(url) as response:
                        await response.read()
                await all_arrived(clients, count, 120)
            used_s = bare.cpu_s() - cpu_before
            delivered = sum(len(s.received) for s in clients)
            for client in clients:
                client.close()
        return used_s / max(1, delivered) * 1e6
    finally:
        process.kill()  # nothing of it to keep
        process.wait(10)


async def bare_connect_cpu_us(connections: int) -> float:
    """The bare handler's CPU per connect, connection_init, ack and subscribe message."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", BARE_SERVER, str(port)])  # noqa: ASYNC220
    try:
        bare = Service(f"127.0.0.1:{port}/graphql", process.pid, "")
        for _ in range(400):  # until it listens
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        cpu_before = bare.cpu_s()
        clients = await subscribe_all(bare, connections, 1)
        await asyncio.sleep(1)  # the subscribe messages read
        used_s = bare.cpu_s() - cpu_before
        for client in clients:
            client.close()
        return used_s / connections * 1e6
    finally:
        process.kill()  # nothing of it to keep
        process.wait(10)


async def run(options: argparse.Namespace) -> None:
    targets: list[tuple[str, str | None]] = [("this checkout", None)]
    if options.baseline:
        targets.insert(0, (options.baseline, options.baseline))
    results: dict[str, dict[str, float]] = {}
    for name, ref in targets:
        with checkout(ref) as code:
            results[name] = await measure(
                code,
                options.subscribers,
                options.burst,
                options.steady_seconds,
                options.own_variables,
            )
    bare_us = await bare_connect_cpu_us(options.subscribers)
    fanout_us = await bare_fanout_cpu_us(options.subscribers, options.steady_seconds)
    load = os.getloadavg()
    print(
        f"real-time: {options.subscribers:,} subscribers of one document, one API process, "
        f"{os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )
    names = list(results)
    print(
        "| what | "
        + " | ".join(names)
        + (f" | {names[0]} ÷ {names[1]} |" if len(names) == 2 else " |")
    )
    print("|---" * (len(names) + 1 + (len(names) == 2)) + "|")
    for key, what, shape in ROWS:
        cells = [shape.format(results[n][key] / (1024 if "rss" in key else 1)) for n in names]
        ratio = " - |" if len(names) == 2 else ""
        if len(names) == 2 and results[names[1]][key]:
            ratio = f" {results[names[0]][key] / results[names[1]][key]:,.2f} |"
        print(f"| {what} | " + " | ".join(cells) + " |" + ratio)
    print(
        f"\nThe floor, a bare aiohttp WebSocket handler (connect, connection_init, ack, the "
        f"subscribe message read): {bare_us:,.0f} µs of its CPU each, "
        f"{1e6 / bare_us:,.0f}/s.\nThe floor of a fan-out, the same handler writing one "
        f"prebuilt frame to each socket's transport per POST, at the steady phase's rate: "
        f"{fanout_us:,.1f} µs of its CPU per delivery."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.realtime", description=__doc__)
    parser.add_argument("--subscribers", type=int, default=1000)
    # Small enough that the baseline's burst (150 µs a delivery) stays within the 5 s a
    # heartbeat's pong may take: longer, and the service drops subscribers it cannot answer.
    parser.add_argument("--burst", type=int, default=25, help="events in the CPU burst")
    parser.add_argument("--steady-seconds", type=float, default=10)
    parser.add_argument("--baseline", default=None, help="a git commit to measure first, e.g. main")
    parser.add_argument(
        "--own-variables",
        action="store_true",
        help="each subscriber also follows a user of its own: no two share their variables",
    )
    asyncio.run(run(parser.parse_args()))
