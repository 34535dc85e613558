"""Connection-bound sessions benchmark: `python -m bench.sessions [--sessions N]`.

An API process (`gql-presence serve`, one worker unless `--workers`, the default 30 s
connection TTL unless `--ttl`) on a private Redis holds N `presenceSession` subscriptions
(default 10,000), one user each, over WebSockets of 20 subscriptions each (the most one socket
may carry), every socket read by a task of its own so that it answers the service's pings. A
second process on the same Redis, the observer, serves one socket following
`presenceChanged(all: true)`. It measures:
- how fast the sessions open (sessions/s from the first connect until all said they are live);
- Redis commands per second, and Redis CPU (INFO cpu), while the sessions are idle (INFO
  commandstats, counting the commands the scripts run, over a whole number of renewal ticks),
  beside the same with no session held, and the difference per session;
- the process's memory per session: its RSS (its workers' together) with the sessions minus
  before, over N;
- the time from a socket's close to the OFFLINE event of each of its users at the observer
  (p50, p99), closing sockets one at a time;
- with `--kill`: the time from `kill -9` of the process holding the sessions (with several
  workers, of one worker) to the OFFLINE of each of its users at the observer, which the
  sweep announces once their sessions expire (the dead process cannot).
With `--baseline REF` the same run measures a git commit of this checkout first, served from a
temporary export (as bench/realtime.py does), and prints both side by side.

`--memory` measures only process memory per idle session, in one run: at one session per
socket (N sockets) and at 20 per socket, per socket following one user's `presenceChanged`
(each socket its own user, every subscription in place once each has heard its user come
online, then idle), and per socket with nothing, for this checkout and, with `--baseline REF`, for a
git commit of it served from a temporary export; beside the floor, a bare aiohttp WebSocket
handler process holding N open sockets and nothing else.

`--heap` shows where the memory of an idle socket goes: the bare handler, this checkout's
service holding N sockets with no session, then with one session each, every process under
tracemalloc; Python's heap after the sockets minus before, per socket, by allocating line.
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
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from redis.asyncio import Redis

from bench.harness import BARE_SERVER, checkout
from gql_presence.running.redis_server import free_port, start_redis_server

PER_SOCKET = 20  # gql_presence.limits.MAX_SUBSCRIPTIONS_PER_SOCKET
TTL_S = 30  # the default PRESENCE_CONNECTION_TTL_SECONDS
RENEWALS_PER_TTL = 3  # gql_presence.realtime.held.RENEWALS_PER_TTL
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# The observer's follower of every user must hear every OFFLINE, however many come at once:
# with the default buffer (1,000 events) the service drops it when a kill's aftermath brings
# more than that before this process has read them.
OBSERVER = {"PRESENCE_SUBSCRIBER_BUFFER": "10000000"}
# Script calls that take longer than this are kept by SLOWLOG during a kill's aftermath, µs.
SLOW_SCRIPT_US = 1000
HOLD = 'subscription($user: ID!) { presenceSession(userId: $user, sessionId: "tab") { live } }'
EVERYONE = "subscription { presenceChanged(all: true) { userId kind } }"
FOLLOW = "subscription($user: ID!) { presenceChanged(userIds: [$user]) { userId kind } }"


@dataclass
class Tally:
    """What every socket of a run received, together."""

    live: int = 0  # presenceSession subscriptions that said they are live
    changes: int = 0  # presenceChanged events heard
    errors: list[Any] = field(default_factory=list)  # the errors of those that did not

    def all_live(self, count: int) -> bool:
        if self.errors:
            raise RuntimeError(f"{len(self.errors)} subscriptions failed: {self.errors[0]}")
        return self.live == count


@dataclass
class Socket:
    """One graphql-transport-ws connection and what it received."""

    ws: aiohttp.ClientWebSocketResponse
    tally: Tally
    users: list[str] = field(default_factory=list)
    live: int = 0  # of its presenceSession subscriptions, those that said they are live
    answered: asyncio.Event = field(default_factory=asyncio.Event)  # each said live or failed
    offline_at: dict[str, float] = field(default_factory=dict)  # presenceChanged: OFFLINE
    reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        async for message in self.ws:  # answers pings while it reads
            if message.type != aiohttp.WSMsgType.TEXT:
                return
            body = json.loads(message.data)
            if body["type"] == "error" or (
                body["type"] == "next" and body["payload"].get("errors")
            ):
                self.tally.errors.append(body["payload"])
                self.answered.set()
                continue
            if body["type"] != "next":
                continue
            data = body["payload"]["data"]
            if "presenceSession" in data:
                self.tally.live += 1
                self.live += 1
                if self.live == len(self.users):
                    self.answered.set()
                continue
            self.tally.changes += 1
            if data["presenceChanged"]["kind"] == "OFFLINE":
                self.offline_at[data["presenceChanged"]["userId"]] = time.perf_counter()

    @property
    def local_port(self) -> int:
        return int(self.ws.get_extra_info("sockname")[1])


async def connect(http: aiohttp.ClientSession, url: str, tally: Tally | None = None) -> Socket:
    ws = await http.ws_connect(url, protocols=["graphql-transport-ws"], max_msg_size=0)
    await ws.send_json({"type": "connection_init"})
    assert (await ws.receive_json(timeout=30))["type"] == "connection_ack"
    socket = Socket(ws, tally or Tally())
    socket.reader = asyncio.create_task(socket.read())
    return socket


async def subscribe(socket: Socket, operation_id: str, query: str, **variables: Any) -> None:
    payload = {"query": query, "variables": variables}
    await socket.ws.send_json({"id": operation_id, "type": "subscribe", "payload": payload})


def heard(watcher: Socket, users: list[str], every: bool = True) -> bool:
    """Whether the observer's follower heard the OFFLINE of every one of `users` (or of
    one of them); raises if the service ended its subscription."""
    if watcher.reader is not None and watcher.reader.done():
        raise RuntimeError(f"the observer's follower was ended: {watcher.ws.close_code}")
    test = all if every else any
    return test(u in watcher.offline_at for u in users)


async def until(condition: Any, within_s: float, what: str, every_s: float = 0.01) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {within_s} s")
        await asyncio.sleep(every_s)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid`, by pid."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return sorted(found)


def _tcp_sockets() -> list[tuple[int, int, str, int]]:
    """Every IPv4 TCP socket of this machine: local port, remote port, state, inode."""
    rows = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port = int(fields[1].split(":")[1], 16)
        remote_port = int(fields[2].split(":")[1], 16)
        rows.append((local_port, remote_port, fields[3], int(fields[9])))
    return rows


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def peer_ports(pid: int) -> set[int]:
    """The remote ports of the TCP connections process `pid` holds: which client sockets
    the kernel gave to that worker."""
    inodes = _socket_inodes(pid)
    return {remote for _, remote, _, inode in _tcp_sockets() if inode in inodes and remote}


def listeners(port: int) -> int:
    """How many sockets listen on `port` (one per worker: each binds with SO_REUSEPORT)."""
    return sum(1 for local, _, state, _ in _tcp_sockets() if local == port and state == "0A")


async def commands(redis: Redis) -> dict[str, int]:
    """Calls per command so far, without the INFO calls of this benchmark."""
    stats = await redis.info("commandstats")
    return {name: int(value["calls"]) for name, value in stats.items() if name != "cmdstat_info"}


async def scripts_so_far(redis: Redis) -> tuple[int, float]:
    """Script calls so far, and Redis's time in them (s)."""
    stats = await redis.info("commandstats")
    scripts = [v for name, v in stats.items() if name in {"cmdstat_evalsha", "cmdstat_eval"}]
    return sum(int(v["calls"]) for v in scripts), sum(int(v["usec"]) for v in scripts) / 1e6


async def redis_cpu_s(redis: Redis) -> float:
    cpu = await redis.info("cpu")
    return float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"])


@dataclass(frozen=True)
class Idle:
    """Redis's load over an idle window."""

    commands_per_s: float  # commands those scripts run included
    scripts_per_s: float
    cpu_per_s: float  # Redis CPU seconds per second


async def idle(redis: Redis, seconds: float) -> Idle:
    before, cpu_before = await commands(redis), await redis_cpu_s(redis)
    await asyncio.sleep(seconds)
    after, cpu_after = await commands(redis), await redis_cpu_s(redis)
    total = sum(after.values()) - sum(before.values())
    scripts = sum(
        after[name] - before.get(name, 0) for name in after if name.startswith("cmdstat_evalsha")
    )
    return Idle(total / seconds, scripts / seconds, (cpu_after - cpu_before) / seconds)


@dataclass
class Served:
    """A `gql-presence serve` process and where it listens."""

    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/graphql"

    def workers(self) -> list[int]:
        """The pids of the processes that hold sockets: its workers, or itself alone."""
        return children(self.process.pid) or [self.process.pid]

    def rss_bytes(self) -> int:
        return sum(rss_bytes(pid) for pid in self.workers())

    def cpu_s(self) -> float:
        return sum(cpu_s(pid) for pid in self.workers())


@asynccontextmanager
async def serve(
    code: Path | None,
    redis_url: str,
    workers: int = 1,
    ttl_s: int | None = None,
    settings: dict[str, str] | None = None,
) -> AsyncIterator[Served]:
    """An API process of `code` (None: this checkout) on the Redis at `redis_url`, with
    `settings` besides in its environment."""
    port = free_port()
    env = {**os.environ, "REDIS_URL": redis_url, "PRESENCE_WORKERS": str(workers)}
    env.update(settings or {})
    if ttl_s is not None:
        env["PRESENCE_CONNECTION_TTL_SECONDS"] = str(ttl_s)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, before any measurement
        [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)],
        env=env,
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    served = Served(process, port)
    try:
        await until(lambda: listeners(port) == workers, 60, "every worker listening", 0.2)
        yield served
    finally:
        process.send_signal(signal.SIGTERM)  # nothing, once it has been killed
        process.wait(60)


@asynccontextmanager
async def service(code: Path | None = None) -> AsyncIterator[tuple[str, int, Redis]]:
    """A private Redis and one API process on it, of `code` (None: this checkout): the
    WebSocket URL, its pid, a client."""
    server = start_redis_server()
    redis = Redis.from_url(server.url)
    try:
        async with serve(code, server.url) as served:
            yield served.url, served.process.pid, redis
    finally:
        await redis.aclose()
        server.stop()


@dataclass
class Options:
    count: int
    closes: int
    ticks: int
    workers: int
    ttl_s: int | None
    kill: bool
    openers: int

    @property
    def renew_every_s(self) -> float:
        return (self.ttl_s or TTL_S) / RENEWALS_PER_TTL


@dataclass(frozen=True)
class Drain:
    """From the kill (with several workers: from the other workers' last OFFLINE, or the
    first of the killed one's, whichever comes first) to the last OFFLINE of the killed
    process's users."""

    scripts: int  # script calls
    script_s: float  # Redis's time in them
    longest_s: float  # the longest of them (SLOWLOG; 0 if none took SLOW_SCRIPT_US)
    observer_s: float  # the observer's CPU


@dataclass
class Figures:
    sockets: int = 0
    opened_s: float = 0.0
    opening_cpu_s: tuple[float, float, float] = (0.0, 0.0, 0.0)  # client, service, Redis
    base: Idle = Idle(0, 0, 0)
    held: Idle = Idle(0, 0, 0)
    rss_before: int = 0
    rss_after: int = 0
    close_ms: list[float] = field(default_factory=list)
    killed: int = 0  # sessions of the killed process
    killed_s: list[float] = field(default_factory=list)  # kill -> OFFLINE of each of them
    drain: Drain = Drain(0, 0, 0, 0)
    others_s: list[float] = field(default_factory=list)  # kill -> OFFLINE of the other workers'


async def open_sessions(
    http: aiohttp.ClientSession, url: str, options: Options, tally: Tally
) -> list[Socket]:
    """N sessions over sockets of 20, opened by `options.openers` openers at once, each
    opening a socket's sessions once the sessions of its last one are live: at most
    `openers` x 20 openings under way. (Sent all at once, many more wait in the service
    than it opens within the hub's 10 s wait for Redis's confirmation of their users'
    channels, and are refused.)"""
    firsts = iter(range(0, options.count, PER_SOCKET))
    sockets: list[Socket] = []

    async def opener() -> None:
        for first in firsts:
            socket = await connect(http, url, tally)
            socket.users = [
                f"user-{i}" for i in range(first, min(first + PER_SOCKET, options.count))
            ]
            for user in socket.users:
                await subscribe(socket, user, HOLD, user=user)
            sockets.append(socket)
            await socket.answered.wait()
            tally.all_live(tally.live)  # raises at the first refusal

    await asyncio.gather(*(opener() for _ in range(options.openers)))
    return sockets


async def measure(code: Path | None, options: Options) -> Figures:
    """One run against the code of `code` (None: this checkout), on a Redis of its own."""
    figures = Figures()
    server = start_redis_server()
    redis = Redis.from_url(server.url)
    try:
        async with (
            serve(code, server.url, options.workers, options.ttl_s) as holder,
            serve(code, server.url, 1, options.ttl_s, OBSERVER) as observer,
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0)  # a socket per 20 sessions, all at once
            ) as http,
        ):
            watcher = await connect(http, observer.url)
            await subscribe(watcher, "all", EVERYONE)
            await asyncio.sleep(1)
            window_s = options.ticks * options.renew_every_s
            print(f"  idle, no session: {window_s:.1f} s...", flush=True)
            figures.base = await idle(redis, window_s)
            figures.rss_before = holder.rss_bytes()

            tally = Tally()
            cpu_before = (time.process_time(), holder.cpu_s(), await redis_cpu_s(redis))
            started = time.perf_counter()
            sockets = await open_sessions(http, holder.url, options, tally)
            await until(lambda: tally.all_live(options.count), 600, "every session live", 0.05)
            figures.opened_s = time.perf_counter() - started
            cpu_after = (time.process_time(), holder.cpu_s(), await redis_cpu_s(redis))
            figures.opening_cpu_s = (
                cpu_after[0] - cpu_before[0],
                cpu_after[1] - cpu_before[1],
                cpu_after[2] - cpu_before[2],
            )
            figures.sockets = len(sockets)
            print(
                f"  {options.count:,} sessions live in {figures.opened_s:.1f} s; "
                f"idle, {window_s:.1f} s...",
                flush=True,
            )
            await asyncio.sleep(2)  # the openings' garbage collected, the renewals begun
            figures.held = await idle(redis, window_s)
            figures.rss_after = holder.rss_bytes()

            for socket in sockets[: options.closes]:
                closed_at = time.perf_counter()
                await socket.ws.close()
                await until(
                    lambda s=socket: heard(watcher, s.users),
                    30,
                    "OFFLINE of a closed socket's users",
                )
                figures.close_ms += [
                    (watcher.offline_at[u] - closed_at) * 1000 for u in socket.users
                ]
            if options.kill:
                held = sockets[options.closes :]
                await kill(
                    holder,
                    observer,
                    redis,
                    held=held,
                    watcher=watcher,
                    options=options,
                    figures=figures,
                )
            for socket in sockets:
                await socket.ws.close()
    finally:
        await redis.aclose()
        server.stop()
    return figures


async def kill(
    holder: Served,
    observer: Served,
    redis: Redis,
    *,
    held: list[Socket],
    watcher: Socket,
    options: Options,
    figures: Figures,
) -> None:
    """Kills the first worker of `holder` outright; the time to the OFFLINE of each of its
    sessions' users at the observer, and of the other workers' (which their parent stops);
    what the sweep's ending of the killed process's sessions cost Redis and the observer."""
    victim = holder.workers()[0]
    ports = peer_ports(victim)
    victims = [u for s in held if s.local_port in ports for u in s.users]
    others = [u for s in held if s.local_port not in ports for u in s.users]
    figures.killed = len(victims)
    watcher.offline_at.clear()
    ttl_s = options.ttl_s or TTL_S
    print(f"  kill -9 of pid {victim}, holding {len(victims):,} sessions...", flush=True)
    killed_at = time.perf_counter()
    os.kill(victim, signal.SIGKILL)
    if others:
        # The other workers' closes, which their parent's stop makes, are not the sweep's.
        await until(
            lambda: heard(watcher, others) or heard(watcher, victims, every=False),
            ttl_s + 60,
            "OFFLINE of the other workers' users",
            0.05,
        )
    await redis.config_set("slowlog-log-slower-than", SLOW_SCRIPT_US)
    await redis.slowlog_reset()
    calls, script_s = await scripts_so_far(redis)
    observer_s = observer.cpu_s()
    await until(
        lambda: heard(watcher, victims),
        ttl_s + 60,
        "OFFLINE of the killed process's users",
        0.1,
    )
    calls_after, script_s_after = await scripts_so_far(redis)
    slow = [int(entry["duration"]) for entry in await redis.slowlog_get(1000)]
    figures.drain = Drain(
        calls_after - calls,
        script_s_after - script_s,
        max(slow, default=0) / 1e6,
        observer.cpu_s() - observer_s,
    )
    figures.killed_s = sorted(watcher.offline_at[u] - killed_at for u in victims)
    if others:
        await until(
            lambda: heard(watcher, others),
            ttl_s + 60,
            "OFFLINE of the other workers' users",
            0.1,
        )
        figures.others_s = sorted(watcher.offline_at[u] - killed_at for u in others)


def _quantile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def rows(options: Options, figures: Figures) -> list[tuple[str, str]]:
    """The table's rows of one run: what, figure."""
    n = options.count
    client_s, service_s, redis_s = figures.opening_cpu_s
    base, held = figures.base, figures.held
    extra_commands = held.commands_per_s - base.commands_per_s
    extra_cpu = held.cpu_per_s - base.cpu_per_s
    result = [
        (
            f"opening {n:,} sessions ({figures.sockets:,} sockets, {options.openers} at once)",
            f"{figures.opened_s:.1f} s = {n / figures.opened_s:,.0f} sessions/s",
        ),
        (
            "CPU per session opened: client / service / Redis",
            f"{client_s / n * 1e6:,.0f} / {service_s / n * 1e6:,.0f} / {redis_s / n * 1e6:,.0f} µs",
        ),
        (
            "Redis commands/s, idle, no session (script calls/s)",
            f"{base.commands_per_s:,.1f} ({base.scripts_per_s:.2f})",
        ),
        (
            f"Redis commands/s, idle, {n:,} held (script calls/s)",
            f"{held.commands_per_s:,.1f} ({held.scripts_per_s:.2f})",
        ),
        ("Redis commands/s per held session", f"{extra_commands / n:.4f}"),
        (
            "Redis CPU, idle: no session / held",
            f"{base.cpu_per_s * 1000:.1f} / {held.cpu_per_s * 1000:.1f} ms/s",
        ),
        ("Redis CPU per held session", f"{extra_cpu / n * 1e6:.3f} µs/s"),
        (
            "process memory per session (RSS)",
            f"{figures.rss_before / 2**20:.0f} -> {figures.rss_after / 2**20:.0f} MiB: "
            f"{(figures.rss_after - figures.rss_before) / n / 1024:.1f} KiB",
        ),
        (
            f"socket close -> OFFLINE at the observer, p50 / p99 ({len(figures.close_ms):,} "
            f"sessions, {options.closes} closes)",
            f"{_quantile(figures.close_ms, 50):.1f} / {_quantile(figures.close_ms, 99):.1f} ms",
        ),
    ]
    if figures.killed_s:
        k = figures.killed_s
        result.append(
            (
                f"kill -9 -> OFFLINE at the observer of the killed process's "
                f"{figures.killed:,} sessions: first / p50 / p99 / last",
                f"{k[0]:.1f} / {_quantile(k, 50):.1f} / {_quantile(k, 99):.1f} / {k[-1]:.1f} s",
            )
        )
    if figures.killed:
        drain = figures.drain
        result.append(
            (
                "ending them: Redis time in scripts per session; the longest script call; "
                "observer CPU per session",
                f"{drain.script_s / figures.killed * 1e6:.1f} µs; "
                f"{drain.longest_s * 1000:.1f} ms; "
                f"{drain.observer_s / figures.killed * 1e6:.0f} µs",
            )
        )
    if figures.others_s:
        o = figures.others_s
        result.append(
            (
                f"same, the other workers' {len(o):,} sessions (their parent stops them): "
                "first / p50 / last",
                f"{o[0]:.1f} / {_quantile(o, 50):.1f} / {o[-1]:.1f} s",
            )
        )
    return result


async def run(options: Options, baseline: str | None) -> None:
    targets: list[tuple[str, str | None]] = [("this checkout", None)]
    if baseline:
        targets.insert(0, (baseline, baseline))
    tables: dict[str, list[tuple[str, str]]] = {}
    for name, ref in targets:
        with checkout(ref) as code:
            print(f"{name}:", flush=True)
            tables[name] = rows(options, await measure(code, options))
    load = os.getloadavg()
    ttl_s = options.ttl_s or TTL_S
    print(
        f"\n{options.count:,} idle presenceSessions of distinct users, {options.workers} "
        f"worker(s), TTL {ttl_s} s (a renewal tick every {options.renew_every_s:.1f} s, idle "
        f"windows of {options.ticks} tick(s)), {os.cpu_count()} cores, load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n"
    )
    print("| what | " + " | ".join(tables) + " |")
    print("|---" * (len(tables) + 1) + "|")
    for i, (what, _) in enumerate(next(iter(tables.values()))):
        cells = [table[i][1] if i < len(table) else "" for table in tables.values()]
        print(f"| {what} | " + " | ".join(cells) + " |")


async def first_socket(http: aiohttp.ClientSession, url: str) -> Socket:
    """A socket to a process that is starting: it listens within a few seconds."""
    for _ in range(150):
        try:
            return await connect(http, url)
        except aiohttp.ClientError:
            await asyncio.sleep(0.2)
    raise RuntimeError("the service did not start")


async def held_memory(
    code: Path | None, count: int, per_socket: int, follow: bool = False
) -> float:
    """Bytes of the service's memory per idle session, `per_socket` sessions a socket; with
    `per_socket` 0, per socket that holds no session (connection_init answered), or with
    `follow`, one that follows one user's changes."""
    async with (
        service(code) as (url, pid, _),
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http,
    ):
        # One session opened and ended first: what the first of each kind costs once (its
        # document parsed, its caches) is not counted per session.
        warm = await first_socket(http, url)
        await subscribe(warm, "warm", HOLD, user="warm-up")
        await until(lambda: warm.tally.live == 1, 30, "the warm-up session live")
        await warm.ws.close()
        await asyncio.sleep(1)
        rss_before = rss_bytes(pid)
        sockets: list[Socket] = []
        tally = Tally()
        for first in range(0, count, per_socket or 1):
            socket = await connect(http, url, tally)
            socket.users = [f"user-{i}" for i in range(first, min(first + per_socket, count))]
            for user in socket.users:
                await subscribe(socket, user, HOLD, user=user)
            if follow:
                await subscribe(socket, "follow", FOLLOW, user=f"followed-{first}")
            sockets.append(socket)
        held = count if per_socket else 0
        await until(lambda: tally.all_live(held), 300, "every session live")
        if follow:
            await until(lambda: followers(url) >= count, 300, "every subscription in place", 0.5)
            await touched(http, url, [f"followed-{i}" for i in range(count)])
            await until(lambda: tally.changes == count, 300, "every follower told")
        await asyncio.sleep(2)  # the openings' garbage collected
        rss_after = rss_bytes(pid)
        for socket in sockets:
            await socket.ws.close()
    return (rss_after - rss_before) / count


def followers(ws_url: str) -> int:
    """The subscriptions the process at `ws_url` counts in `/metrics`."""
    metrics_url = ws_url.replace("ws://", "http://").replace("/graphql", "/metrics")
    with urllib.request.urlopen(metrics_url, timeout=10) as response:  # noqa: S310 - our own
        text = response.read().decode()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("gqlp_websocket_subscribers")
    )


async def touched(http: aiohttp.ClientSession, ws_url: str, users: list[str]) -> None:
    """Each of `users` made active, through the HTTP API of the process at `ws_url`."""
    query = "mutation($users: [ID!]!) { touchMany(userIds: $users) }"
    for start in range(0, len(users), 10_000):
        variables = {"users": users[start : start + 10_000]}
        async with http.post(
            ws_url.replace("ws://", "http://"), json={"query": query, "variables": variables}
        ) as response:
            body = await response.json()
            if body.get("errors"):
                raise RuntimeError(f"touchMany failed: {body['errors']}")


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
    figures: dict[str, tuple[float, float, float, float]] = {}
    for name, ref in targets:
        with checkout(ref) as code:
            print(f"{name}: {count:,} sockets, no session...", flush=True)
            no_session = await held_memory(code, count, 0)
            print(f"{name}: {count:,} sessions, one per socket...", flush=True)
            one = await held_memory(code, count, 1)
            print(f"{name}: {count:,} sessions, {PER_SOCKET} per socket...", flush=True)
            many = await held_memory(code, count, PER_SOCKET)
            print(f"{name}: {count:,} sockets, one presenceChanged each...", flush=True)
            follows = await held_memory(code, count, 0, follow=True)
            figures[name] = (one, many, no_session, follows)
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
            f"{one / kib:,.1f} KiB = {one / floor:.2f}x the floor"
            for one, _, _, _ in figures.values()
        )
        + " |"
    )
    print(
        f"| memory per session, {PER_SOCKET} per socket ({count // PER_SOCKET:,} sockets) | "
        + " | ".join(f"{many / kib:,.1f} KiB" for _, many, _, _ in figures.values())
        + " |"
    )
    print(
        f"| memory per idle socket holding no session ({count:,} sockets) | "
        + " | ".join(
            f"{none / kib:,.1f} KiB = {none / floor:.2f}x the floor"
            for _, _, none, _ in figures.values()
        )
        + " |"
    )
    print(
        f"| memory per idle socket following one user's presenceChanged ({count:,} sockets) | "
        + " | ".join(
            f"{follows / kib:,.1f} KiB = {follows / floor:.2f}x the floor"
            for _, _, _, follows in figures.values()
        )
        + " |"
    )
    print(
        f"\nThe floor, a bare aiohttp WebSocket handler holding {count:,} open sockets (each "
        f"answered connection_init, nothing else): {floor / kib:,.1f} KiB per socket."
    )


# The service (or, with argv[2] "bare", the bare handler) with tracemalloc on: SIGUSR1 writes
# a snapshot of Python's heap to argv[3] + a number.
HEAP_SERVER = """
import gc, os, signal, sys, tracemalloc
tracemalloc.start(1)
from aiohttp import web
port, kind, prefix = int(sys.argv[1]), sys.argv[2], sys.argv[3]
taken = 0
def dump(*_):
    global taken
    gc.collect()
    taken += 1
    tracemalloc.take_snapshot().dump(prefix + str(taken))
signal.signal(signal.SIGUSR1, dump)
if kind == "bare":
    exec(BARE.replace("web.run_app", "run = web.run_app").split("run = ")[0])
    loop = None
else:
    from gql_presence.app import create_app
    from gql_presence.cli import new_event_loop
    from gql_presence.settings import Settings
    settings = Settings.from_env()
    app = create_app(settings)
    loop = new_event_loop(settings.event_loop)
web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, loop=loop)
"""


async def heap(count: int) -> None:
    """Python's heap per idle socket, by the line that allocated it (tracemalloc snapshots
    before and after `count` sockets, diffed): the bare handler, this checkout's socket holding
    nothing, and holding one session."""
    import tempfile  # noqa: PLC0415 - only here
    import tracemalloc  # noqa: PLC0415 - only here

    server = start_redis_server()
    try:
        # per_socket -1: one presenceChanged of one user a socket, in place of sessions.
        for kind, per_socket in (("bare", 0), ("service", 0), ("service", 1), ("service", -1)):
            port = free_port()
            with tempfile.TemporaryDirectory() as folder:
                prefix = f"{folder}/snapshot-"
                process = subprocess.Popen(  # noqa: ASYNC220 - started once, before measuring
                    [
                        sys.executable,
                        "-c",
                        f"BARE = {BARE_SERVER!r}\n" + HEAP_SERVER,
                        str(port),
                        kind,
                        prefix,
                    ],
                    env={**os.environ, "REDIS_URL": server.url},
                    stdout=subprocess.DEVNULL,
                )
                try:
                    await _heap_sockets(process.pid, port, count, per_socket)
                finally:
                    process.kill()
                    process.wait(10)
                before = tracemalloc.Snapshot.load(prefix + "1")
                after = tracemalloc.Snapshot.load(prefix + "2")
            stats = after.compare_to(before, "lineno")
            total = sum(stat.size_diff for stat in stats) / count
            what = (
                "bare handler"
                if kind == "bare"
                else "service, one presenceChanged"
                if per_socket < 0
                else f"service, {per_socket} session(s)"
            )
            print(f"\n{what}: {total:,.0f} bytes of heap per socket; the largest lines:")
            for stat in stats[:25]:
                frame = stat.traceback[0]
                where = frame.filename.split("site-packages/")[-1].split("gql_presence/")[-1]
                print(f"  {stat.size_diff / count:7,.0f} B  {where}:{frame.lineno}")
    finally:
        server.stop()


async def _heap_sockets(pid: int, port: int, count: int, per_socket: int) -> None:
    url = f"ws://127.0.0.1:{port}/graphql"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        warm = await first_socket(http, url)
        await subscribe(warm, "warm", HOLD, user="warm-up")
        await asyncio.sleep(1)
        await warm.ws.close()
        await asyncio.sleep(1)
        os.kill(pid, signal.SIGUSR1)
        await asyncio.sleep(3)
        sockets, tally = [], Tally()
        for i in range(count):
            socket = await connect(http, url, tally)
            if per_socket > 0:
                socket.users = [f"user-{i}"]
                await subscribe(socket, socket.users[0], HOLD, user=socket.users[0])
            elif per_socket < 0:
                await subscribe(socket, "follow", FOLLOW, user=f"followed-{i}")
            sockets.append(socket)
        await until(lambda: tally.all_live(max(count * per_socket, 0)), 60, "every session live")
        if per_socket < 0:
            await until(lambda: followers(url) >= count, 300, "every subscription in place", 0.5)
            await touched(http, url, [f"followed-{i}" for i in range(count)])
            await until(lambda: tally.changes == count, 300, "every follower told")
        await asyncio.sleep(2)
        os.kill(pid, signal.SIGUSR1)
        await asyncio.sleep(3 + count / 200)
        for socket in sockets:
            await socket.ws.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--closes", type=int, default=300, help="sockets closed one at a time")
    parser.add_argument("--ticks", type=int, default=1, help="renewal ticks per idle measure")
    parser.add_argument(
        "--memory", action="store_true", help="memory per session only, beside the floor"
    )
    parser.add_argument("--baseline", default=None, help="a git commit to measure first")
    parser.add_argument("--workers", type=int, default=1, help="worker processes holding them")
    parser.add_argument(
        "--ttl", type=int, default=None, help="PRESENCE_CONNECTION_TTL_SECONDS (default 30)"
    )
    parser.add_argument(
        "--kill", action="store_true", help="then kill -9 the (first) worker holding them"
    )
    parser.add_argument("--openers", type=int, default=4, help="sockets opened at once")
    parser.add_argument(
        "--heap",
        action="store_true",
        help="heap per idle socket by allocating line (tracemalloc), beside the bare handler",
    )
    arguments = parser.parse_args()
    if arguments.heap:
        asyncio.run(heap(arguments.sessions))
    elif arguments.memory:
        asyncio.run(memory(arguments.sessions, arguments.baseline))
    else:
        options = Options(
            count=arguments.sessions,
            closes=arguments.closes,
            ticks=arguments.ticks,
            workers=arguments.workers,
            ttl_s=arguments.ttl,
            kill=arguments.kill,
            openers=arguments.openers,
        )
        asyncio.run(run(options, arguments.baseline))


if __name__ == "__main__":
    main()
