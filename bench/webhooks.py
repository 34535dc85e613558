"""Webhooks' deliveries: `python -m bench.webhooks [--changes N] [--rate R] [--seconds S]`.

On a private Redis 6.2 with 4 shards, one webhook, and a fast receiver on this machine (an
aiohttp process that answers 204 at once and reads nothing but the changes' count and times):

- Throughput: N changes (ONLINEs of new users, by touchMany) made while the receiver answers
  503 (the deliveries retrying every 50 ms), then delivered once it answers 204, by one
  `serve` process, then by two (sharing the webhook's 4 leases); changes per second from the
  first arrival to the last, and the service processes' CPU per 1,000 changes delivered.
- Latency: R changes a second for S seconds, the webhook enabled and with no debounce: from
  each change's `at` (the Redis server's clock) to its arrival at the receiver (the same
  machine's clock), p50 and p99.
- The rest of the service: touch requests a second (20 clients, each touch a change) and the
  service's CPU per touch, on one process, with no webhook and with ten, in alternate rounds.
- Fan-out: M WebSocket subscribers (`--subscribers`, 500) of one document following ten users,
  changes of one of them (touch and kick alternating, `--fanout-rate` 10 a second for
  `--fanout-seconds` 10), and the service's CPU
  from the first change until every event and every webhook's delivery has arrived, divided by
  the events delivered to the subscribers; with no webhook, with ten that ask for none of these
  changes, and with ten sent every one, in alternate rounds.

`python -m bench.webhooks --subscribers 500 --fanout-rate 10 --fanout-seconds 10` runs all of
it (a few minutes on two cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from bench.harness import (
    TOUCH,
    USERS,
    Service,
    Subscriber,
    all_arrived,
    change,
    checkout,
    cpu_ns,
    cpu_seconds,
    load,
    post,
    quiet,
    serve_ours,
    start_process,
    steady_phase,
    subscribe_all,
    wait_for,
)
from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import RedisServer, free_port, start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.client import AnyRedis

SHARDS = 4


def receive(port: int) -> None:
    """The fast receiver: counts the changes and keeps each one's delay after its `at`."""
    delays: list[float] = []
    count = 0
    failing = False

    async def hooks(request: web.Request) -> web.Response:
        nonlocal count
        now = time.time()
        if failing:
            return web.Response(status=503)
        payload = json.loads(await request.read())
        for item in payload["data"]["changes"]:
            count += 1
            delays.append(now - datetime.fromisoformat(item["at"]).timestamp())
        return web.Response(status=204)

    async def stats(_: web.Request) -> web.Response:
        return web.json_response({"count": count, "delays": delays, "at": time.time()})

    async def reset(request: web.Request) -> web.Response:
        nonlocal count, failing
        count = 0
        delays.clear()
        failing = request.query.get("failing") == "1"
        return web.Response(status=204)

    async def ok(_: web.Request) -> web.Response:
        nonlocal failing
        failing = False
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hooks", hooks)
    app.router.add_get("/stats", stats)
    app.router.add_post("/reset", reset)
    app.router.add_post("/ok", ok)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


async def stats(http: aiohttp.ClientSession, port: int) -> dict[str, Any]:
    async with http.get(f"http://127.0.0.1:{port}/stats") as answer:
        found: dict[str, Any] = await answer.json()
        return found


async def delivered_all(
    http: aiohttp.ClientSession, port: int, count: int, limit_s: float = 120
) -> tuple[float, float]:
    """Waits until the receiver has `count` changes: the moments of the first and the last."""
    deadline = time.monotonic() + limit_s
    first = None
    while time.monotonic() < deadline:
        found = await stats(http, port)
        got = int(found["count"])
        if got and first is None:
            first = time.monotonic()
        if got >= count:
            return first or time.monotonic(), time.monotonic()
        await asyncio.sleep(0.01)
    raise RuntimeError(f"only {got} of {count} changes arrived within {limit_s:g} s")


async def receiving(http: aiohttp.ClientSession, port: int) -> None:
    """Returns once the receiver answers."""
    for _ in range(200):
        try:
            await stats(http, port)
        except aiohttp.ClientError:
            await asyncio.sleep(0.05)
        else:
            return
    raise RuntimeError("the receiver did not start")


async def latencies(
    store: PresenceStore, http: aiohttp.ClientSession, port: int, rate: int, seconds: float
) -> list[float]:
    """Each change's delay from its `at` to its arrival, at `rate` changes a second."""
    await http.post(f"http://127.0.0.1:{port}/reset")
    batch = max(1, rate // 20)
    made = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        await store.touch_many([f"l-{made + i}" for i in range(batch)])
        made += batch
        await asyncio.sleep(max(0, started + made / rate - time.monotonic()))
    await delivered_all(http, port, made)
    found = await stats(http, port)
    return sorted(float(d) for d in found["delays"])


async def cost(versions: list[Version], hooks: str) -> list[tuple[str, float, float]]:
    """Touch requests a second and the service's CPU per touch, with no webhook and with ten,
    in alternate rounds (each touch of a new id is a change for every webhook), for each
    version in turn within each round."""
    rounds: dict[tuple[str, int], list[tuple[float, float]]] = {
        (v.name, count): [] for v in versions for count in (0, 10)
    }
    for _ in range(2):
        for version in versions:
            for count in (0, 10):
                await configure(version.store, hooks, count)
                await asyncio.sleep(1.5)  # the deliveries take their leases
                before = cpu_seconds(version.services)
                url = f"http://127.0.0.1:{version.ports[0]}/graphql"
                per_s, _, _ = await load(url, TOUCH, 5, 20)
                used = cpu_seconds(version.services) - before
                rounds[(version.name, count)].append((per_s, used / (per_s * 5) * 1e6))
        for version in versions:
            await configure(version.store, hooks, 0)
    return [
        (
            f"{name}: {count} webhooks",
            statistics.median(f[0] for f in figures),
            statistics.median(f[1] for f in figures),
        )
        for (name, count), figures in rounds.items()
    ]


async def configure(
    store: PresenceStore, hooks: str, count: int, kinds: list[str] | None = None
) -> None:
    """Exactly `count` webhooks, each sending every change of `kinds` (None: the default
    ones) to `hooks` at once."""
    for webhook in await store.webhooks.webhooks():
        await store.webhooks.delete(webhook.id)
    for _ in range(count):
        await store.webhooks.create(hooks, kinds, None, 0)


# The fan-out's configurations: webhooks, and the kinds they ask for. The second's webhooks
# ask for place joins, which a touch or kick never makes: they read every change and send
# none, which is what ten webhooks cost when not one change is theirs.
FANOUT_WEBHOOKS: list[tuple[str, int, list[str] | None]] = [
    ("no webhook", 0, None),
    ("10 webhooks, none for these changes (JOINED only)", 10, ["JOINED"]),
    ("10 webhooks, each sent every change", 10, None),
]


async def fanout_clients(
    version: Version, receiver_port: int, subscribers: int
) -> list[Subscriber]:
    """`subscribers` WebSocket subscribers of the version's service, each of whom has heard a
    first event."""
    url = f"http://127.0.0.1:{version.ports[0]}/graphql"
    hooks = f"http://127.0.0.1:{receiver_port}/hooks"
    svc = Service(f"127.0.0.1:{version.ports[0]}/graphql", version.services[0].pid, "")
    await configure(version.store, hooks, 0)
    clients = await subscribe_all(svc, subscribers, 1)
    # Changes until every client has had an event (each is subscribed then), an even number of
    # them: the user offline again, so that the steady phase's first touch is a change.
    made = 0
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as http:
        while not all(s.first.is_set() for s in clients) or made % 2:
            if time.monotonic() > deadline or any(s.disconnected or s.errors for s in clients):
                raise RuntimeError("the subscribers did not all hear a first event")
            await post(http, url, change(USERS[0], made)[1])
            made += 1
            await asyncio.sleep(0.05)
    await quiet(clients)
    return clients


@dataclass(frozen=True)
class FanoutRound:
    """One round of one configuration: the service's CPU per event delivered (µs) and a
    second of changes (ms: over the phase and what follows it until the last arrival, divided
    by the phase's seconds, the same for every configuration), and the changes the receiver
    had per change."""

    per_delivery_us: float
    per_s_ms: float
    received: float


async def fanout(
    versions: list[Version], receiver_port: int, options: argparse.Namespace
) -> dict[str, list[FanoutRound]]:
    """The service's CPU per event delivered to `options.subscribers` WebSocket subscribers,
    changes made at a steady rate, with no webhook and with ten, in alternate rounds
    (`options.rounds`), each version in turn within each round: each round's figures, by
    "version: configuration"."""
    hooks = f"http://127.0.0.1:{receiver_port}/hooks"
    rounds: dict[str, list[FanoutRound]] = {
        f"{v.name}: {name}": [] for v in versions for name, _, _ in FANOUT_WEBHOOKS
    }
    clients = [await fanout_clients(v, receiver_port, options.subscribers) for v in versions]
    changes = int(options.fanout_seconds * options.fanout_rate) // 2 * 2
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        for _ in range(options.rounds):
            for version, its_clients in zip(versions, clients, strict=True):
                url = f"http://127.0.0.1:{version.ports[0]}/graphql"
                service = version.services[0]
                for name, count, kinds in FANOUT_WEBHOOKS:
                    await configure(version.store, hooks, count, kinds)
                    await asyncio.sleep(1.5)  # the deliveries take their leases
                    await http.post(f"http://127.0.0.1:{receiver_port}/reset")
                    before = cpu_ns([service])
                    await steady_phase(http, url, its_clients, changes, options.fanout_rate)
                    if count and kinds is None:
                        await delivered_all(http, receiver_port, changes * count)
                    else:  # as long a wait as the webhooks' last deliveries take
                        await asyncio.sleep(0.3)
                    used_ns = cpu_ns([service]) - before
                    delivered = sum(len(s.received) for s in its_clients)
                    received = int((await stats(http, receiver_port))["count"])
                    rounds[f"{version.name}: {name}"].append(
                        FanoutRound(
                            used_ns / max(1, delivered) / 1e3,
                            used_ns / 1e6 / (changes / options.fanout_rate),
                            received / changes,
                        )
                    )
                await configure(version.store, hooks, 0)
    dropped = 0
    for its_clients in clients:
        await all_arrived(its_clients, changes, 5)
        dropped += sum(s.disconnected for s in its_clients)
        for client in its_clients:
            client.close()
    if dropped:
        raise RuntimeError(f"the services disconnected {dropped} subscribers")
    return rounds


@dataclass
class Version:
    """The code measured (None: this checkout) on a Redis of its own, its `serve` processes,
    and a store of this checkout on that Redis to make the changes and webhooks."""

    name: str
    code: Path | None
    server: RedisServer
    redis: AnyRedis
    store: PresenceStore
    services: list[subprocess.Popen[bytes]] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)


async def start_service(version: Version, env: dict[str, str]) -> None:
    """One more `serve` process of the version, on its Redis (env's REDIS_URL)."""
    port = free_port()
    version.services.append(serve_ours(env, port, 1, version.code))
    version.ports.append(port)
    await wait_for(f"http://127.0.0.1:{port}/graphql")


async def throughput(
    version: Version,
    env: dict[str, str],
    http: aiohttp.ClientSession,
    receiver_port: int,
    changes: int,
) -> list[tuple[str, float, float]]:
    """Changes delivered per second and CPU per change by one process, then by two."""
    rows = []
    env = {**env, "REDIS_URL": version.server.url}
    await version.store.webhooks.create(f"http://127.0.0.1:{receiver_port}/hooks", None, None, 0)
    for processes in (1, 2):
        await http.post(f"http://127.0.0.1:{receiver_port}/reset?failing=1")
        while len(version.services) < processes:
            await start_service(version, env)
        await asyncio.sleep(1.5)  # the processes' ticks share the leases out
        users = [f"p{processes}-{i}" for i in range(changes)]
        for i in range(0, changes, 10_000):
            await version.store.touch_many(users[i : i + 10_000])
        cpu_before = cpu_seconds(version.services)
        await http.post(f"http://127.0.0.1:{receiver_port}/ok")
        first, last = await delivered_all(http, receiver_port, changes)
        cpu = cpu_seconds(version.services) - cpu_before
        rows.append(
            (
                f"{version.name}: {processes} process{'es' if processes > 1 else ''}",
                changes / max(last - first, 1e-9),
                cpu / changes * 1e6,
            )
        )
    return rows


async def run(options: argparse.Namespace) -> None:
    changes, rate, seconds = options.changes, options.rate, options.seconds
    receiver_port = free_port()
    receiver = start_process(
        [sys.executable, "-m", "bench.webhooks", "--receive", str(receiver_port)], {}
    )
    env = {
        "REDIS_CLUSTER_NODES": "",
        "PRESENCE_SHARDS": str(SHARDS),
        "PRESENCE_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
        # The receiver refuses while the changes are made: each delivery then starts at once.
        "PRESENCE_WEBHOOK_RETRY_SECONDS": "0.05",
        "PRESENCE_LOG_LEVEL": "warning",
        "PRESENCE_REVOKE_SECONDS": "0",  # a user kicked in the fan-out may come back at once
    }
    if options.batch_wait is not None:
        env["PRESENCE_WEBHOOK_BATCH_WAIT_SECONDS"] = str(options.batch_wait)
    versions: list[Version] = []
    rows = []
    costs: list[tuple[str, float, float]] = []
    delays: dict[str, list[float]] = {}
    with checkout(options.baseline) as code:
        try:
            named: list[tuple[str, Path | None]] = [("after", None)]
            if options.baseline:
                named.insert(0, ("before", code))
            for name, its_code in named:
                server = start_redis_server()
                redis = redis_client(server.url)
                store = PresenceStore(redis, Settings(redis_url=server.url, shards=SHARDS))
                versions.append(Version(name, its_code, server, redis, store))
                await store.load_scripts()
                await store.make_cursor_secret()
            async with aiohttp.ClientSession() as http:
                await receiving(http, receiver_port)
                for version in versions:
                    if options.fanout_only:
                        await start_service(version, {**env, "REDIS_URL": version.server.url})
                        continue
                    rows += await throughput(version, env, http, receiver_port, changes)
                    delays[version.name] = await latencies(
                        version.store, http, receiver_port, rate, seconds
                    )
                    version.services[1].terminate()
                    version.services[1].wait(timeout=30)
                    del version.services[1:], version.ports[1:]
                    await configure(version.store, "", 0)
                if not options.fanout_only:
                    costs = await cost(versions, f"http://127.0.0.1:{receiver_port}/hooks")
                fanouts = await fanout(versions, receiver_port, options)
        finally:
            for version in versions:
                for service in version.services:
                    service.terminate()
                    service.wait(timeout=30)
                await version.redis.aclose()
                version.server.stop()
            receiver.terminate()
            receiver.wait(timeout=10)
    if not options.fanout_only:
        report(changes, rows=rows, costs=costs, rate=rate, seconds=seconds, delays=delays)
    report_fanout(options, fanouts)


def report_fanout(options: argparse.Namespace, fanouts: dict[str, list[FanoutRound]]) -> None:
    """Medians over the rounds; the webhooks' own CPU a second is each round's against the
    same round's with no webhook (the rounds alternate, so that both saw the same load)."""
    load = os.getloadavg()
    print(
        f"\nFan-out: {options.subscribers:,} subscribers of one document, "
        f"{options.fanout_rate:g} changes/s for {options.fanout_seconds:g} s, one process, "
        f"CPU from schedstat (medians of {options.rounds}; load average {load[0]:.2f} "
        f"{load[1]:.2f} {load[2]:.2f})"
    )
    print(
        "| version: webhooks | service CPU per delivery (µs) | against no webhook "
        "| service CPU a second (ms) | the webhooks' own (ms a second) "
        "| changes the receiver had per change |"
    )
    print("|---|---|---|---|---|---|")
    for name, figures in fanouts.items():
        none = fanouts[name.split(": ")[0] + ": " + FANOUT_WEBHOOKS[0][0]]
        pairs = list(zip(figures, none, strict=True))
        against = statistics.median(f.per_delivery_us / n.per_delivery_us for f, n in pairs)
        own_ms = statistics.median(f.per_s_ms - n.per_s_ms for f, n in pairs)
        print(
            f"| {name} | {statistics.median(f.per_delivery_us for f in figures):,.1f} "
            f"| {against:.3f} | {statistics.median(f.per_s_ms for f in figures):,.1f} "
            f"| {own_ms:,.2f} | {statistics.median(f.received for f in figures):,.1f} |"
        )
        print(
            "<!-- each round against no webhook: "
            + " ".join(f"{f.per_delivery_us / n.per_delivery_us:.3f}" for f, n in pairs)
            + " -->"
        )


def report(
    changes: int,
    *,
    rows: list[tuple[str, float, float]],
    costs: list[tuple[str, float, float]],
    rate: int,
    seconds: float,
    delays: dict[str, list[float]],
) -> None:
    print(f"Throughput: {changes:,} changes waiting, delivered to one receiver")
    print("| version: processes | changes delivered per second | CPU per 1,000 changes (ms) |")
    print("|---|---|---|")
    for name, per_s, cpu_us in rows:
        print(f"| {name} | {per_s:,.0f} | {cpu_us:,.0f} |")
    print("\nThe rest of the service: touch over HTTP, 20 clients, one process")
    print("| version: webhooks | touch requests per second | service CPU per touch (µs) |")
    print("|---|---|---|")
    for name, per_s, cpu_us in costs:
        print(f"| {name} | {per_s:,.0f} | {cpu_us:,.0f} |")
    for name, its_delays in delays.items():
        quantiles = statistics.quantiles(its_delays, n=100)
        print(
            f"\n{name}: latency at {rate:,} changes/s for {seconds:g} s ({len(its_delays):,} "
            f"changes, two processes): p50 {quantiles[49] * 1000:,.0f} ms, "
            f"p99 {quantiles[98] * 1000:,.0f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--changes", type=int, default=50_000)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--subscribers", type=int, default=500)
    parser.add_argument("--fanout-rate", type=float, default=10, help="changes a second")
    parser.add_argument("--fanout-seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2, help="the fan-out's alternate rounds")
    parser.add_argument(
        "--fanout-only",
        action="store_true",
        help="the fan-out alone (no throughput, latency, touch)",
    )
    parser.add_argument(
        "--baseline", help="a commit measured too, round by round beside this checkout"
    )
    parser.add_argument(
        "--batch-wait", type=float, help="PRESENCE_WEBHOOK_BATCH_WAIT_SECONDS of the services"
    )
    parser.add_argument("--receive", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receive:
        receive(args.receive)
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
