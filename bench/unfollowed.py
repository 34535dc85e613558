"""Events nobody follows: `python -m bench.unfollowed [--baseline REV | --cluster] [--touches N]`.

Two API processes (`gql-presence serve`, one worker each) on one private Redis: A serves
`touch` mutations, each bringing a new user online (one ONLINE event each), and B holds one
WebSocket subscriber following ten quiet users, none of whom changes. For this checkout and,
with --baseline, a commit of it (served from a `git archive`), one after the other in one run:
- B's CPU per event it did not want: its CPU time over the touches, less what it spends idle
  over as long (its PINGs), over the touches;
- A's CPU and Redis's per touch (each less its idle CPU likewise), and Redis's per user of
  `touchMany` (1,000 new users a call);
- that B still serves its subscriber: a touch of one of the ten reaches it after the touches
  (1) or not (0), and its socket is still open after the touchMany calls (1) or not (0).
CPU times are read from /proc/<pid>/task/*/schedstat (nanoseconds), so that a few ms count.

With --cluster, A and B run on a Redis Cluster of three Valkey 9 masters with three shards
(one on each), once with classic PUBLISH and once with sharded SPUBLISH (the deployment's
record, lua/choose_publish.lua, set before they start), one after the other in one run; Redis's
CPU is then all three masters', and the cluster bus messages that carried published messages
are counted (CLUSTER INFO) per touch.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from redis import Redis as SyncRedis

from bench.harness import USERS, Subscriber, checkout
from gql_presence.running.redis_server import free_port, start_redis_server
from gql_presence.store import Keys
from tests.conftest import valkey_binary
from tests.redis_cluster import bus_publishes, start_redis_cluster

QUIET = USERS  # those the harness's Subscriber follows
CONCURRENCY = 20
TOUCH_MANY = 1000


def cpu_s(pid: int) -> float:
    """The process's CPU time so far, every thread's, in seconds."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def serve(code: Path | None, redis: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **redis,
        "PRESENCE_WORKERS": "1",
        # The WebSocket heartbeat every 200 s, not 10: its pings are not part of B's figures
        # (and a commit before 97bf9b9 sometimes failed to read a pong, closing the socket).
        "PRESENCE_CONNECTION_TTL_SECONDS": "600",
    }
    if code is not None:
        env["PYTHONPATH"] = str(code)
    return subprocess.Popen(
        [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)],
        env=env,
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


TOUCH = "mutation($id: ID!) { touch(userId: $id) { online } }"


async def post(http: aiohttp.ClientSession, url: str, query: str, **variables: object) -> None:
    async with http.post(url, json={"query": query, "variables": variables}) as response:
        body = await response.json()
        if response.status != 200 or "errors" in body:
            raise RuntimeError(f"{url}: {response.status} {body}")


async def wait_for(http: aiohttp.ClientSession, url: str) -> None:
    for _ in range(400):
        try:
            await post(http, url, "{ __typename }")
        except aiohttp.ClientError:
            await asyncio.sleep(0.05)
        else:
            return
    raise RuntimeError(f"{url} did not start")


@dataclass(frozen=True)
class Deployed:
    redis_pids: tuple[int, ...]  # one Redis's, or every master's
    a_pid: int
    b_pid: int
    a_url: str
    b_url: str
    cluster_nodes: tuple[tuple[str, int], ...] = ()


@asynccontextmanager
async def processes_on(
    code: Path | None, redis: dict[str, str]
) -> AsyncIterator[tuple[subprocess.Popen[bytes], subprocess.Popen[bytes], str, str]]:
    """A and B on the Redis that `redis` (their environment) names, and their addresses."""
    ports = (free_port(), free_port())
    processes = [serve(code, redis, port) for port in ports]
    try:
        urls = [f"http://127.0.0.1:{port}/graphql" for port in ports]
        async with aiohttp.ClientSession() as http:
            for url in urls:
                await wait_for(http, url)
        yield processes[0], processes[1], urls[0], urls[1]
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(30)


@asynccontextmanager
async def deployment(code: Path | None) -> AsyncIterator[Deployed]:
    """A and B on one private Redis."""
    server = start_redis_server()
    try:
        async with processes_on(code, {"REDIS_URL": server.url}) as (a, b, a_url, b_url):
            yield Deployed((server.process.pid,), a.pid, b.pid, a_url, b_url)
    finally:
        server.stop()


@asynccontextmanager
async def cluster_deployment(publish: str) -> AsyncIterator[Deployed]:
    """A and B (this checkout) on a cluster of three Valkey masters, one shard on each (the
    slots of {2}, {1} and {0}: 5649, 9842, 13907), publishing with `publish`."""
    cluster = start_redis_cluster((0, 7000, 11000), binary=valkey_binary())
    try:
        host, port = cluster.nodes[2]  # shard 0's master keeps the deployment's record
        with SyncRedis(host=host, port=port) as shard_0:
            shard_0.set(Keys().publish, publish)
        env = {
            "REDIS_CLUSTER_NODES": ",".join(f"{h}:{p}" for h, p in cluster.nodes),
            "PRESENCE_SHARDS": "3",
        }
        async with processes_on(None, env) as (a, b, a_url, b_url):
            pids = tuple(server.process.pid for server in cluster.servers)
            yield Deployed(pids, a.pid, b.pid, a_url, b_url, cluster.nodes)
    finally:
        cluster.stop()


async def heard(subscriber: Subscriber, user: str, within_s: float) -> bool:
    """Whether an event of `user` reaches the subscriber within the time."""
    deadline = time.perf_counter() + within_s
    while time.perf_counter() < deadline:
        if any(f'"userId":"{user}"'.encode() in message for _, message in subscriber.received):
            return True
        await asyncio.sleep(0.02)
    return False


async def touches(http: aiohttp.ClientSession, url: str, users: list[str]) -> None:
    queue = iter(users)

    async def worker() -> None:
        for user in queue:
            await post(http, url, TOUCH, id=user)

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


async def measure(
    deployed: AbstractAsyncContextManager[Deployed], count: int, tag: str
) -> dict[str, float]:
    figures: dict[str, float] = {}
    async with (
        deployed as running,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
    ):
        a_pid, b_pid, a_url, b_url = running.a_pid, running.b_pid, running.a_url, running.b_url
        # the harness's Subscriber: it answers the service's heartbeat as its frames arrive.
        subscriber = Subscriber()
        host, port = b_url.split("/")[2].split(":")
        await subscriber.connect(host, int(port), 1)
        await asyncio.sleep(0.5)  # answered: a subscription gives no other sign
        await post(http, a_url, TOUCH, id=QUIET[0])
        assert await heard(subscriber, QUIET[0], 10), "B's subscriber did not subscribe"
        # Warm-up, then B idle for as long as the touches will take, about.
        await touches(http, a_url, [f"{tag}-warm-{i}" for i in range(500)])
        await asyncio.sleep(1)
        pids = (*running.redis_pids, a_pid, b_pid)
        started, cpu = time.perf_counter(), {pid: cpu_s(pid) for pid in pids}
        await asyncio.sleep(3)
        elapsed = time.perf_counter() - started
        idle_per_s = {pid: (cpu_s(pid) - before) / elapsed for pid, before in cpu.items()}

        started, cpu = time.perf_counter(), {pid: cpu_s(pid) for pid in pids}
        bus_before = bus_publishes(running.cluster_nodes)
        await touches(http, a_url, [f"{tag}-busy-{i}" for i in range(count)])
        await asyncio.sleep(0.5)  # B reads what is still on its way
        elapsed = time.perf_counter() - started
        # What each spent on the touches: its CPU less what it spends idle over as long (below
        # zero when that is within the noise of its idle CPU).
        used = {
            pid: (cpu_s(pid) - before - idle_per_s[pid] * elapsed) / count * 1e6
            for pid, before in cpu.items()
        }
        figures["unfollowed_us"] = used[b_pid]
        figures["b_idle_ms_per_s"] = idle_per_s[b_pid] * 1e3
        figures["touch_a_us"] = used[a_pid]
        figures["touch_redis_us"] = sum(used[pid] for pid in running.redis_pids)
        bus_after = bus_publishes(running.cluster_nodes)
        figures["bus_per_touch"] = sum(bus_after.values()) - sum(bus_before.values())
        figures["bus_per_touch"] /= count
        figures["touches_per_s"] = count / (elapsed - 0.5)

        await post(http, a_url, TOUCH, id=QUIET[1])
        # 0: B's figures are not of a process serving a subscriber (its socket was closed).
        figures["b_heard"] = float(await heard(subscriber, QUIET[1], 5))

        calls = max(2, count // TOUCH_MANY)
        before = sum(map(cpu_s, running.redis_pids))
        for call in range(calls):
            ids = [f"{tag}-many-{call}-{i}" for i in range(TOUCH_MANY)]
            await post(http, a_url, "mutation($ids: [ID!]!) { touchMany(userIds: $ids) }", ids=ids)
        after = sum(map(cpu_s, running.redis_pids))
        figures["touch_many_redis_us"] = (after - before) / (calls * TOUCH_MANY) * 1e6
        await asyncio.sleep(0.5)
        figures["b_socket_open"] = float(not subscriber.disconnected)
        subscriber.close()
    return figures


ROWS = [
    ("unfollowed_us", "B: CPU per event none of its subscribers follows", "{:,.2f} µs"),
    ("b_idle_ms_per_s", "B: CPU while idle (PINGs), per second", "{:,.2f} ms"),
    ("touch_a_us", "A: CPU per touch (HTTP, GraphQL, the script call)", "{:,.1f} µs"),
    ("touch_redis_us", "Redis: CPU per touch (every master's, on a cluster)", "{:,.1f} µs"),
    ("bus_per_touch", "cluster bus messages of published messages, per touch", "{:,.2f}"),
    ("touches_per_s", f"touches per second, {CONCURRENCY} connections to A", "{:,.0f}/s"),
    (
        "touch_many_redis_us",
        f"Redis: CPU per user of touchMany ({TOUCH_MANY:,} new users a call)",
        "{:,.2f} µs",
    ),
    ("b_heard", "B's subscriber heard its user's touch after the touches (1: yes)", "{:.0f}"),
    ("b_socket_open", "B's subscriber's socket open after the touchMany calls (1: yes)", "{:.0f}"),
]


async def run(options: argparse.Namespace) -> None:
    results: dict[str, dict[str, float]] = {}
    if options.cluster:
        for n, publish in enumerate(("PUBLISH", "SPUBLISH")):
            name = f"cluster, {publish}"
            results[name] = await measure(cluster_deployment(publish), options.touches, f"c{n}")
        where = "a cluster of three Valkey 9 masters, three shards"
    else:
        targets: list[tuple[str, str | None]] = [("this checkout", None)]
        if options.baseline:
            targets.insert(0, (options.baseline, options.baseline))
        for n, (name, ref) in enumerate(targets):
            with checkout(ref) as code:
                results[name] = await measure(deployment(code), options.touches, f"t{n}")
        where = "one Redis"
    load = os.getloadavg()
    print(
        f"unfollowed events: {options.touches:,} touches through A, B following "
        f"{len(QUIET)} quiet users, on {where}; {os.cpu_count()} cores, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )
    names = list(results)
    two = len(names) == 2
    print("| what | " + " | ".join(names) + (f" | {names[1]} ÷ {names[0]} |" if two else " |"))
    print("|---" * (len(names) + 1 + two) + "|")
    for key, what, shape in ROWS:
        cells = [shape.format(results[n][key]) for n in names]
        ratio = ""
        if two:
            ratio = (
                f" {results[names[1]][key] / results[names[0]][key]:,.2f} |"
                if results[names[0]][key]
                else " - |"
            )
        print(f"| {what} | " + " | ".join(cells) + " |" + ratio)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.unfollowed", description=__doc__)
    parser.add_argument("--touches", type=int, default=5000)
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--baseline", default=None, help="a git commit to measure first, e.g. main")
    choice.add_argument(
        "--cluster",
        action="store_true",
        help="on a Valkey cluster: classic PUBLISH beside sharded SPUBLISH, this checkout",
    )
    asyncio.run(run(parser.parse_args()))
