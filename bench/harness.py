"""What the benchmarks share: their tables and figures; the processes they start (a service,
the bare aiohttp handler that is the floor of this stack, a trace collector) and the meters
read from them (CPU time and memory from Linux's /proc); private Redis servers; checkouts of
other commits; load over HTTP from one process or several; and raw WebSocket subscribers.

Every bench entry (`python -m bench`, `python -m bench.<name>`) imports what it needs from
here, and no entry imports another; what a child process runs by name (`serve_bare`,
`serve_collector`, the load of a pool's process) lives here too, so that the child imports
this module alone."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import io
import json
import multiprocessing
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from redis.asyncio import Redis

from gql_presence.cli import new_event_loop
from gql_presence.running.connection import client_for
from gql_presence.running.redis_server import free_port, start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import Presence, PresenceStore
from gql_presence.store.channels import Channels
from gql_presence.store.client import AnyRedis

# --- figures and tables -------------------------------------------------------------------

Row = tuple[str, str, str, str]
# Requests per second, p50 and p99 in ms, and the servers' CPU per request in µs.
Figures = tuple[float, float, float, float]


def fmt(value: float, unit: str = "") -> str:
    return f"{value:,.1f}{unit}" if value < 100 else f"{value:,.0f}{unit}"


def figures(result: Figures) -> str:
    return f"{fmt(result[0], ' req/s')}, p50 {fmt(result[1], ' ms')}, p99 {fmt(result[2], ' ms')}"


def median_figures(rounds: list[Figures]) -> Figures:
    rate, p50, p99, cpu = (statistics.median(column) for column in zip(*rounds, strict=True))
    return rate, p50, p99, cpu


def print_table(rows: list[Row]) -> None:
    header: Row = ("what", "ours", "baseline (same run)", "ratio")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |")


# --- processes and what they use ----------------------------------------------------------


def start_process(
    args: list[str], env: dict[str, str], cwd: str | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        args,
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def serve_ours(
    env: dict[str, str], port: int, workers: int, code: Path | None = None
) -> subprocess.Popen[bytes]:
    """`gql-presence serve` of this checkout, or of the files of another (`checkout`)."""
    if code is not None:
        path = os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")]))
        env = {**env, "PYTHONPATH": path}
    return subprocess.Popen(
        [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)],
        env={**os.environ, **env, "PRESENCE_WORKERS": str(workers)},
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def wait_for(url: str, within_s: float = 60) -> None:
    """Returns once the server at `url` answers. A service starts in a second or two, but
    several started at once on a busy machine have taken more than ten."""
    deadline = time.monotonic() + within_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.post(url, json={"query": TYPENAME, "variables": {"u": "x"}}):
                    return
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} did not start within {within_s:g} s")


def cpu_seconds(processes: list[subprocess.Popen[bytes]]) -> float:
    """The user and system CPU time the processes and their children (a service's workers)
    have used so far, from Linux's /proc."""

    def tree(pid: int) -> list[int]:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return [pid, *(p for child in children for p in tree(int(child)))]

    def used(pid: int) -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    ticks = sum(used(pid) for process in processes for pid in tree(process.pid))
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_ns(processes: list[subprocess.Popen[bytes]]) -> int:
    """The CPU time the processes' threads (and their children's) have run so far, in ns,
    from Linux's /proc/<pid>/task/*/schedstat: exact, where /proc/<pid>/stat counts whole
    10 ms clock ticks (a few ticks a round are noise of several percent)."""

    def tree(pid: int) -> list[int]:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return [pid, *(p for child in children for p in tree(int(child)))]

    def ran(pid: int) -> int:
        total = 0
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
                total += int((task / "schedstat").read_text().split()[0])
        return total

    return sum(ran(pid) for process in processes for pid in tree(process.pid))


def cpu_ms(run: Callable[[], Awaitable[object]], runs: int) -> Callable[[], Awaitable[float]]:
    async def measure() -> float:
        await run()  # warm: scripts loaded, caches filled
        times = []
        for _ in range(runs):
            started = time.process_time()
            await run()
            times.append((time.process_time() - started) * 1000)
        return statistics.median(times)

    return measure


TICKS_PER_S = os.sysconf("SC_CLK_TCK")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Service:
    url: str
    pid: int
    redis_url: str

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime

    def host_port(self) -> tuple[str, int]:
        host, port = self.url.split("/", 1)[0].split(":")
        return host, int(port)

    def rss_bytes(self) -> int:
        return int(Path(f"/proc/{self.pid}/statm").read_text().split()[1]) * PAGE_BYTES


@asynccontextmanager
async def service(code: Path | None, buffer: int) -> AsyncIterator[Service]:
    """A private Redis and one API process on it, of `code` (None: this checkout)."""
    server = start_redis_server()
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": server.url,
        "PRESENCE_WORKERS": "1",
        "PRESENCE_REVOKE_SECONDS": "0",  # kicked sessions may come back at once
        "PRESENCE_SUBSCRIBER_BUFFER": str(buffer),
    }
    if code is not None:  # before whatever path the caller gives (a profiler's hook, say)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code), env.get("PYTHONPATH")]))
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, before any measurement
        [sys.executable, "-m", "gql_presence", "serve", "--port", str(port)],
        env=env,
        cwd=code,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"127.0.0.1:{port}/graphql"
        async with aiohttp.ClientSession() as http:
            for _ in range(400):
                try:
                    await post(http, f"http://{url}", "{ __typename }")
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.05)
        yield Service(url, process.pid, server.url)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        server.stop()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """This process's garbage collector off while it times deliveries: a full collection of
    the 100,000 messages its clients receive in a steady phase stopped it reading for 90-230
    ms, counted as the service's delay. What it makes meanwhile holds no cycles."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


# --- Redis --------------------------------------------------------------------------------

SETTINGS = Settings()
Store = PresenceStore


@dataclass(frozen=True)
class Deployment:
    """What the figures are measured on: a client without reply timeout (the textbook recipe
    blocks Redis for seconds at a million users online), our store on it, and the environment
    that points a service process at the same Redis."""

    redis: AnyRedis
    store: Store
    shards: int
    env: dict[str, str]


@asynccontextmanager
async def one_redis() -> AsyncIterator[tuple[str, Deployment]]:
    server = start_redis_server()
    redis = Redis.from_url(server.url, decode_responses=True, socket_timeout=600)
    env = {"REDIS_URL": server.url, "REDIS_CLUSTER_NODES": "", "PRESENCE_SHARDS": "1"}
    try:
        yield "One Redis, one shard", Deployment(redis, PresenceStore(redis, SETTINGS), 1, env)
    finally:
        await redis.aclose()
        server.stop()


# --- checkouts ----------------------------------------------------------------------------


def export(rev: str, folder: str) -> None:
    """The files of commit `rev` of this repository, written into `folder`."""
    git = shutil.which("git") or "git"
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        [git, "-C", str(root), "archive", "--format=tar", rev], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")


@contextlib.contextmanager
def checkout(ref: str | None) -> Iterator[Path | None]:
    """The code of `ref` of this repository in a temporary folder (None: this checkout)."""
    if ref is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="gqlp-baseline-") as folder:
        export(ref, folder)
        yield Path(folder)


# The feed left out of this checkout's scripts, to measure what it costs them: includes/feed.lua
# replaced by functions that keep nothing, so that users' events are announced as by a script
# with no feed (events.lua: no version read or written, no entry made, encoded or appended, no
# trim) and a place's entry is neither appended nor trimmed; and what else the scripts do for
# the feed alone taken out ((file under lua/, text, its replacement), each text found once).
NO_FEED_INCLUDE = """-- The feed left out (bench/harness.py, without_feed): nothing is kept.
local FEED_KINDS = {ONLINE = true, OFFLINE = true, KICKED = true, STATUS = true,
  JOINED = true, UPDATED = true, LEFT = true}
local function feed_of(shard) return nil end
local function feed_append(feed, field, entry, cap) return '' end
local function feed_trim(feed, now) end
local function version_of(shard, user_id, now) return 0 end
local function versions_of(feed, user_ids, now) return {} end
local function keep_versions(feed, versions, changed, now) end
local function sweep_versions(feed, now, count) end
local function forget_version(feed, user_id) end
"""
NO_FEED_EDITS = [
    # A place's entry, encoded for the feed alone.
    (
        "includes/places.lua",
        "feed_append(place.feed, 'p', cjson.encode({unpack(events, i, i + 7)}), i == last)",
        "''",
    ),
]


# Only the feed's entries left out: versions are read, counted and kept as with the feed.
NO_ENTRIES_EDITS = [
    (
        "includes/feed.lua",
        "redis.call('XADD', feed.key, 'MAXLEN', '~', feed.max_changes, '*', field, entry)",
        "''",
    ),
    ("includes/feed.lua", "redis.call('XADD', feed.key, '*', field, entry)", "''"),
]


def without_feed(folder: Path, entries_only: bool = False) -> None:
    """Writes into `folder` this checkout's package and its lua/ with the feed left out
    (NO_FEED_INCLUDE, NO_FEED_EDITS), or with `entries_only` its entries alone
    (NO_ENTRIES_EDITS), for run_in."""
    root = Path(__file__).resolve().parent.parent
    shutil.copytree(
        root / "gql_presence", folder / "gql_presence", ignore=shutil.ignore_patterns("__pycache__")
    )
    lua = folder / "lua"
    shutil.copytree(root / "lua", lua)
    edits = NO_ENTRIES_EDITS if entries_only else NO_FEED_EDITS
    if not entries_only:
        (lua / "includes" / "feed.lua").write_text(NO_FEED_INCLUDE, encoding="utf-8")
    for name, text, replacement in edits:
        source = (lua / name).read_text(encoding="utf-8")
        if source.count(text) != 1:
            raise RuntimeError(f"lua/{name} no longer holds what the feed's removal replaces")
        (lua / name).write_text(source.replace(text, replacement), encoding="utf-8")


# --- versions measured side by side, each in a process of its own ------------------------


def run_in(folder: str, script: str, args: Sequence[str]) -> str:
    """What `python script args...` prints, run in `folder` with only that folder on the path
    for gql_presence: a bench file measuring the version there (`script` is the bench file by
    its path, so that it is the same file for every version)."""
    return subprocess.run(
        [sys.executable, script, *args],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": folder},
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def side_by_side(
    script: str,
    args: Sequence[str],
    baselines: Sequence[str],
    rounds: int,
    made: Sequence[tuple[str, Callable[[Path], None]]] = (),
) -> dict[str, list[list[str]]]:
    """Each version's figures by its name ("this checkout", then each of `made`, then each
    baseline commit), a row of them a round: the words `script` printed, run with `args` by
    run_in in this checkout, in a folder each of `made` writes (its name, and what writes
    it, such as without_feed), and in an export of each baseline, round after round, each
    version in turn (the order reversed every other round), so that other work on the
    machine falls on all alike."""
    versions = [("this checkout", os.getcwd())]
    figures: dict[str, list[list[str]]] = {}
    with tempfile.TemporaryDirectory() as root:
        for i, (name, write) in enumerate(made):
            write(Path(root) / f"made{i}")
            versions.append((name, f"{root}/made{i}"))
        for rev in baselines:
            export(rev, f"{root}/{rev}")
            versions.append((rev, f"{root}/{rev}"))
        for round_ in range(rounds):
            # Each version first as often as last.
            for name, folder in versions if round_ % 2 == 0 else versions[::-1]:
                figures.setdefault(name, []).append(run_in(folder, script, args).split())
    return figures


def median_cells(rows: list[list[str]], fmt: str = "{:g}", minimum: bool = False) -> list[str]:
    """Each column's median of the rows (side_by_side's), as `fmt` writes it, followed by its
    minimum in parentheses when `minimum`; "-" for a column with no number."""
    cells = []
    for column in zip(*rows, strict=True):
        numbers = [float(x) for x in column if x != "-"]
        if not numbers:
            cells.append("-")
            continue
        cell = fmt.format(statistics.median(numbers))
        cells.append(f"{cell} ({fmt.format(min(numbers))})" if minimum else cell)
    return cells


# --- the production settings ------------------------------------------------------------

# The backend token of a service run with PRODUCTION_ENV, sent as PRODUCTION_HEADERS.
PRODUCTION_TOKEN = secrets.token_hex(16)
# The production checklist's settings that apply on one machine without TLS or JWTs
# (docs/operations.md): a backend's credentials, rate limits, metrics, JSON logs.
PRODUCTION_ENV = {
    "PRESENCE_BACKEND_TOKENS": f"bench:{PRODUCTION_TOKEN}",
    # High enough never to refuse here: the bucket is still taken on every request.
    "PRESENCE_BACKEND_RATE_LIMIT": "1000000",
    "PRESENCE_USER_RATE_LIMIT": "5",
    "PRESENCE_GRAPHIQL": "false",
    "PRESENCE_INTROSPECTION": "false",
    "PRESENCE_LOG_FORMAT": "json",
}
PRODUCTION_HEADERS = {"Authorization": f"Bearer {PRODUCTION_TOKEN}"}


# --- HTTP operations, and the bare handler doing the same store calls ---------------------

TOUCH = "mutation($u: ID!) { touch(userId: $u) { online } }"
PRESENCE = (
    "query($u: ID!) { presence(userId: $u) "
    "{ userId online lastSeen sessions { sessionId lastSeen } } }"
)


ONLINE_FRIENDS = (
    "query($u: ID!) { onlineFriends(userId: $u, first: 20) "
    "{ totalCount nodes { userId online lastSeen } pageInfo { hasNextPage endCursor } } }"
)


PRESENCES = (
    "query($u: [ID!]!) { presences(userIds: $u) "
    "{ userId online lastSeen sessions { sessionId lastSeen } } }"
)


PLACE_MEMBERS = (
    "query($u: ID!) { placeMembers(placeId: $u, first: 50) { totalCount users "
    "nodes { userId sessionId joinedAt state } pageInfo { hasNextPage endCursor } } }"
)


TYPENAME = "{ __typename }"
# presence reads users seen in two sessions each; onlineFriends, users who have the same 200
# friends, 180 of them online.
PRESENCE_USERS = tuple(f"p{i}" for i in range(1000))


# presences of 20 reads them 20 at a time.
PRESENCE_GROUPS = tuple(PRESENCE_USERS[i : i + 20] for i in range(0, len(PRESENCE_USERS), 20))
# placeMembers reads the first 50 of a place's 100 sessions, each with a state.
PLACES = tuple(f"place{i}" for i in range(10))
PLACE_SESSIONS = 100
# The places' sessions are held under a lease that outlives any run without renewals.
PLACE_LEASE_TTL_MS = 24 * 3600 * 1000


FRIENDLY_USERS = tuple(f"f{i}" for i in range(10))
FRIENDS = tuple(f"friend{i}" for i in range(200))
FRIENDS_ONLINE = 180


@dataclass(frozen=True)
class Operation:
    """A request measured through the service and through the bare handler at `path`, for
    the users given (by default, ids of each client's own)."""

    name: str
    query: str
    path: str
    # Each request's `$u`: a user's id, a list of ids or a place's id.
    users: tuple[object, ...] = ()


OPERATIONS = (
    Operation("touch", TOUCH, "/touch"),
    Operation("presence with sessions", PRESENCE, "/presence", PRESENCE_USERS),
    Operation(
        "onlineFriends(first: 20) of 200 friends", ONLINE_FRIENDS, "/online-friends", FRIENDLY_USERS
    ),
    Operation("presences of 20 with sessions", PRESENCES, "/presences", PRESENCE_GROUPS),
    Operation("placeMembers(first: 50) of 100", PLACE_MEMBERS, "/place-members", PLACES),
)


EMPTY = Operation("`{ __typename }`", TYPENAME, "")


async def seed_http(deployment: Deployment) -> None:
    store = deployment.store
    for user in PRESENCE_USERS:
        for session in ("phone", "laptop"):
            await store.touch(user, session)
    await store.touch_many(FRIENDS[:FRIENDS_ONLINE])
    for user in FRIENDLY_USERS:
        await store.add_friends(user, FRIENDS, mutual=False)
    held = replace(SETTINGS, connection_ttl_ms=PLACE_LEASE_TTL_MS)
    holder = PresenceStore(deployment.redis, held)
    for place in PLACES:
        for i in range(PLACE_SESSIONS):
            await holder.open_place_session(place, f"m{i}", "tab", {"x": i, "y": 2 * i})


def iso(moment: datetime | None) -> str | None:
    """As the schema's DateTime writes it."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def bare_app(settings: Settings) -> web.Application:
    """The baseline: aiohttp calling the same store methods through redis-py and answering
    the same JSON, no GraphQL, with the store and client the service builds from the same
    settings."""
    store = PresenceStore(client_for(settings), settings)

    async def user_of(request: web.Request) -> str:
        return str((await request.json())["variables"]["u"])

    async def touch(request: web.Request) -> web.Response:
        presence = await store.touch(await user_of(request))
        return web.json_response({"data": {"touch": {"online": presence.online}}})

    async def presence(request: web.Request) -> web.Response:
        found = await store.presence(await user_of(request))
        sessions = [
            {"sessionId": s.session_id, "lastSeen": iso(s.last_seen)} for s in found.sessions
        ]
        user = {"userId": found.user_id, "online": found.online, "lastSeen": iso(found.last_seen)}
        return web.json_response({"data": {"presence": {**user, "sessions": sessions}}})

    def presence_json(found: Presence) -> dict[str, Any]:
        sessions = [
            {"sessionId": s.session_id, "lastSeen": iso(s.last_seen)} for s in found.sessions
        ]
        user = {"userId": found.user_id, "online": found.online, "lastSeen": iso(found.last_seen)}
        return {**user, "sessions": sessions}

    async def presences(request: web.Request) -> web.Response:
        ids = [str(u) for u in (await request.json())["variables"]["u"]]
        found = await store.presence_many(ids)
        return web.json_response({"data": {"presences": [presence_json(p) for p in found]}})

    async def place_members(request: web.Request) -> web.Response:
        page = await store.place_members(await user_of(request), first=50)
        nodes = [
            {
                "userId": m.user_id,
                "sessionId": m.session_id,
                "joinedAt": iso(m.joined_at),
                "state": None if m.state is None else json.loads(m.state),
            }
            for m in page.nodes
        ]
        info = {"hasNextPage": page.has_next_page, "endCursor": page.end_cursor}
        members = {
            "totalCount": page.total_count,
            "users": page.users,
            "nodes": nodes,
            "pageInfo": info,
        }
        return web.json_response({"data": {"placeMembers": members}})

    async def online_friends(request: web.Request) -> web.Response:
        page = await store.online_friends(await user_of(request), first=20)
        nodes = [
            {"userId": u.user_id, "online": u.online, "lastSeen": iso(u.last_seen)}
            for u in page.nodes
        ]
        info = {"hasNextPage": page.has_next_page, "endCursor": page.end_cursor}
        friends = {"totalCount": page.total_count, "nodes": nodes, "pageInfo": info}
        return web.json_response({"data": {"onlineFriends": friends}})

    async def load_scripts(app: web.Application) -> None:
        # As the service does at start-up: a cluster client also learns its nodes then, so
        # that the first requests, many at once, do not each try to.
        await store.load_scripts()

    app = web.Application()
    app.on_startup.append(load_scripts)
    app.router.add_post("/touch", touch)
    app.router.add_post("/presence", presence)
    app.router.add_post("/online-friends", online_friends)
    app.router.add_post("/presences", presences)
    app.router.add_post("/place-members", place_members)
    return app


def serve_bare(port: int, reuse_port: bool = False) -> None:
    """On the event loop the service runs on with the same settings (uvloop by default)."""
    settings = Settings.from_env()
    loop = new_event_loop(settings.event_loop)
    web.run_app(
        bare_app(settings),
        host="127.0.0.1",
        port=port,
        reuse_port=reuse_port or None,
        print=None,
        loop=loop,
    )


def start_bare(env: dict[str, str], port: int, processes: int) -> list[subprocess.Popen[bytes]]:
    """`processes` bare servers on one port (SO_REUSEPORT when more than one)."""
    code = f"from bench.harness import serve_bare; serve_bare({port}, {processes > 1})"
    return [
        start_process([sys.executable, "-c", code], {**env, "PYTHONPATH": os.getcwd()})
        for _ in range(processes)
    ]


def serve_collector(port: int) -> None:
    """An OTLP/HTTP receiver that takes every span and keeps none: what tracing costs the
    service, with the collector's own work out of the picture."""

    async def traces(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(content_type="application/x-protobuf")

    app = web.Application(client_max_size=64 * 1024**2)
    app.router.add_post("/v1/traces", traces)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


async def measured(
    servers: list[subprocess.Popen[bytes]],
    url: str,
    operation: Operation,
    seconds: float,
    concurrency: int,
    *,
    clients: int = 1,
    headers: Mapping[str, str] | None = None,
) -> Figures:
    """Load from `clients` processes (1: this one); the CPU is that of every server process."""
    before = cpu_seconds(servers)
    query, users = operation.query, operation.users
    if clients == 1:
        rate, p50, p99 = await load(url, query, seconds, concurrency, users=users, headers=headers)
    else:
        rate, p50, p99 = await load_from_processes(
            url, query, seconds, concurrency, clients, users=users, headers=headers
        )
    return rate, p50, p99, (cpu_seconds(servers) - before) / (rate * seconds) * 1e6


# --- WebSocket subscribers ----------------------------------------------------------------

USERS = [f"bench-{i}" for i in range(10)]
SUBSCRIBE = (
    "subscription($ids: [ID!]) { presenceChanged(userIds: $ids) "
    "{ userId kind at sessionId online } }"
)


TEXT, PING, PONG = 0x1, 0x9, 0xA  # WebSocket opcodes


class Subscriber(asyncio.Protocol):
    """One graphql-transport-ws client on a raw connection: it records each message's arrival
    time and bytes, and leaves JSON for later, so that the 1,000 clients in this process take
    as little of the shared cores as they can while the service is measured."""

    def __init__(self) -> None:
        self.received: list[tuple[float, bytes]] = []  # (arrival, message)
        self.errors: list[bytes] = []  # error messages: a subscribe the service refused
        self.first = asyncio.Event()
        self._buffer = b""
        self._upgraded = False
        self.disconnected = False
        self._handshake: asyncio.Future[None] | None = None
        self._transport: asyncio.Transport | None = None

    async def connect(
        self, host: str, port: int, subscriptions: int, own_user: str | None = None
    ) -> None:
        loop = asyncio.get_running_loop()
        self._handshake = loop.create_future()
        await loop.create_connection(lambda: self, host, port)
        assert self._transport is not None
        key = base64.b64encode(os.urandom(16)).decode()
        self._transport.write(
            f"GET /graphql HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: graphql-transport-ws\r\n\r\n".encode()
            + client_frame({"type": "connection_init"})
        )
        await self._handshake
        ids = USERS if own_user is None else [*USERS, own_user]
        payload = {"query": SUBSCRIBE, "variables": {"ids": ids}}
        self._transport.write(
            b"".join(
                client_frame({"id": str(i), "type": "subscribe", "payload": payload})
                for i in range(subscriptions)
            )
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        buffer = self._buffer + data
        if not self._upgraded:  # the HTTP response's headers come first
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                self._buffer = buffer
                return
            buffer = buffer[end + 4 :]
            self._upgraded = True
        while len(buffer) >= 2:
            size, start = buffer[1] & 0x7F, 2
            if size == 126:
                size, start = int.from_bytes(buffer[2:4], "big"), 4
            elif size == 127:
                size, start = int.from_bytes(buffer[2:10], "big"), 10
            if len(buffer) < start + size:
                break
            opcode, message = buffer[0] & 0x0F, buffer[start : start + size]
            buffer = buffer[start + size :]
            if opcode == PING and self._transport is not None:  # the service's heartbeat
                self._transport.write(client_frame(message, PONG))
            elif b'"connection_ack"' in message and self._handshake is not None:
                self._handshake.set_result(None)
            elif b'"next"' in message:
                self.received.append((now, message))
                self.first.set()
            elif b'"error"' in message:
                self.errors.append(message)
        self._buffer = buffer

    def connection_lost(self, exc: Exception | None) -> None:
        self.disconnected = True

    def events(self) -> list[tuple[float, str, str]]:
        """(arrival, user, kind) of each event received."""
        found = []
        for arrival, message in self.received:
            event = json.loads(message)["payload"]["data"]["presenceChanged"]
            found.append((arrival, event["userId"], event["kind"]))
        return found

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def client_frame(message: dict[str, object] | bytes, opcode: int = TEXT) -> bytes:
    """A frame as a client sends it (JSON text by default): masked, here with a zero mask,
    which leaves the bytes as they are."""
    data = message if isinstance(message, bytes) else json.dumps(message).encode()
    size = len(data)
    if size < 126:
        header = bytes([0x80 | opcode, 0x80 | size])
    elif size < 1 << 16:
        header = bytes([0x80 | opcode, 0x80 | 126]) + size.to_bytes(2, "big")
    else:
        header = bytes([0x80 | opcode, 0x80 | 127]) + size.to_bytes(8, "big")
    return header + bytes(4) + data


def change(user: str, i: int) -> tuple[str, str]:
    """A user's i-th change, which makes exactly one event: online (even i), or kicked."""
    if i % 2 == 0:
        return "ONLINE", f'mutation {{ touch(userId: "{user}", sessionId: "s{i}") {{ online }} }}'
    return "KICKED", f'mutation {{ kick(userId: "{user}") {{ online }} }}'


async def post(http: aiohttp.ClientSession, url: str, query: str) -> None:
    async with http.post(url, json={"query": query}) as response:
        body = await response.json()
        assert "errors" not in body, body


async def all_arrived(subscribers: list[Subscriber], count: int, limit_s: float) -> None:
    """Waits until every subscriber has `count` events or was disconnected by the service
    (a process that cannot keep up drops its subscribers), for at most limit_s."""
    deadline = time.perf_counter() + limit_s
    while time.perf_counter() < deadline:
        if all(len(s.received) >= count or s.disconnected for s in subscribers):
            return
        await asyncio.sleep(0.005)


async def publish(redis: Redis, count: int, first: int) -> None:
    """`count` events as the scripts announce them, each in a message of its own: on the
    channel of its user (the service's one shard) and on that of every user, one of which a
    process subscribes to (a commit before the users' channels, the second). In the format of
    the feed (thirteen fields: the user's version and the event's entry in the feed), which a
    commit before it does not read."""
    channel, shard = Channels().events, Channels.of_shard(0)
    at_ms = int(time.time() * 1000)
    for i in range(first, first + count):
        user = USERS[i % len(USERS)]
        online = i % 2 == 0
        kind = "ONLINE" if online else "OFFLINE"
        # As lua/includes/events.lua writes it for a user with no status of their own.
        message = json.dumps(
            [
                kind,
                user,
                at_ms,
                "",
                int(online),
                kind,
                False,
                kind,
                "EVERYONE",
                0,
                at_ms,
                i + 1,
                f"{at_ms}-{i}",
            ]
        )
        async with redis.pipeline(transaction=False) as both:
            both.publish(shard.user_events(user), message)
            both.publish(channel, message)
            await both.execute()


async def subscribe_all(
    svc: Service, sockets: int, per_socket: int, own_variables: bool = False
) -> list[Subscriber]:
    """`sockets` subscribers of the same document following the same users; with
    `own_variables`, each also follows a user of its own (as each user following their own
    friends does), so that no two subscribe with the same variables."""
    subscribers = [Subscriber() for _ in range(sockets)]
    host, port = svc.host_port()
    for start in range(0, sockets, 50):
        batch = subscribers[start : start + 50]
        await asyncio.gather(
            *(
                s.connect(host, port, per_socket, f"own-{start + i}" if own_variables else None)
                for i, s in enumerate(batch)
            )
        )
    return subscribers


async def quiet(clients: list[Subscriber]) -> None:
    """Waits until no event has arrived for a second."""
    while True:
        before = sum(len(s.received) for s in clients)
        await asyncio.sleep(1)
        if sum(len(s.received) for s in clients) == before:
            return


async def first_events(redis: Redis, clients: list[Subscriber], limit_s: float = 60) -> None:
    """Publishes events until every client has had one: each is subscribed then. Raises if
    some have not within limit_s, or were refused or disconnected, rather than wait forever."""
    deadline = time.perf_counter() + limit_s
    while not all(s.first.is_set() or s.errors or s.disconnected for s in clients):
        if time.perf_counter() > deadline:
            break
        await publish(redis, 1, 0)
        await asyncio.sleep(0.05)
    unheard = [s for s in clients if not s.first.is_set()]
    if unheard:
        said = next((s.errors[0] for s in unheard if s.errors), b"nothing")
        raise RuntimeError(
            f"{len(unheard)} of {len(clients)} subscribers had no event: "
            f"{sum(s.disconnected for s in unheard)} disconnected; the service said {said[:300]!r}"
        )


async def steady_phase(
    session: aiohttp.ClientSession, url: str, subscribers: list[Subscriber], count: int, rate: float
) -> list[float]:
    """Delays in ms from each change's request to its event, at every subscriber, sorted
    (those of subscribers the service disconnected left out)."""
    for s in subscribers:
        s.received.clear()
    sent_at: dict[tuple[str, str], list[float]] = defaultdict(list)
    with collector_paused():
        started = time.perf_counter()
        for i in range(count):
            # On schedule, whatever the time each request took.
            await asyncio.sleep(max(0.0, started + i / rate - time.perf_counter()))
            kind, mutation = change(USERS[0], i)
            sent_at[(USERS[0], kind)].append(time.perf_counter())
            await post(session, url, mutation)
        await all_arrived(subscribers, count, 120)
    delays = []
    for s in subscribers:
        seen: dict[tuple[str, str], int] = defaultdict(int)
        for arrival, user, kind in s.events():
            if user == USERS[0]:  # the burst's events, should any still arrive, are others'
                delays.append((arrival - sent_at[(user, kind)][seen[(user, kind)]]) * 1000)
                seen[(user, kind)] += 1
    return sorted(delays)


# The floor of this stack for a connect and subscribe: an aiohttp WebSocket handler that
# answers connection_init and reads the subscribe message, and nothing else.
BARE_SERVER = """
import json, sys
from aiohttp import web

async def graphql(request):
    socket = web.WebSocketResponse(protocols=["graphql-transport-ws"])
    await socket.prepare(request)
    async for message in socket:
        if json.loads(message.data)["type"] == "connection_init":
            await socket.send_str(json.dumps({"type": "connection_ack"}))
    return socket

app = web.Application()
app.router.add_get("/graphql", graphql)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


# --- load over HTTP ------------------------------------------------------------------------


async def load(
    url: str,
    query: str,
    seconds: float,
    concurrency: int,
    *,
    users: Sequence[object] = (),
    headers: Mapping[str, str] | None = None,
) -> tuple[float, float, float]:
    """Requests per second, p50 and p99 in ms, from `concurrency` clients for `seconds`, each
    request sent with `headers`. Each request's `$u` is the next of `users`, or by default an
    id of the client's own."""
    elapsed, latencies = await _load(url, query, seconds, concurrency, users=users, headers=headers)
    return _figures(elapsed, latencies)


def _figures(elapsed: float, latencies: list[float]) -> tuple[float, float, float]:
    latencies.sort()
    return (
        len(latencies) / elapsed,
        latencies[len(latencies) // 2],
        latencies[int(len(latencies) * 0.99)],
    )


def _load_in_process(
    url: str,
    query: str,
    seconds: float,
    concurrency: int,
    *,
    users: Sequence[object],
    headers: Mapping[str, str] | None,
    tag: int,
) -> tuple[float, list[float]]:
    return asyncio.run(
        _load(url, query, seconds, concurrency, users=users, headers=headers, tag=tag)
    )


async def load_from_processes(
    url: str,
    query: str,
    seconds: float,
    concurrency: int,
    processes: int,
    *,
    users: Sequence[object] = (),
    headers: Mapping[str, str] | None = None,
) -> tuple[float, float, float]:
    """As `load`, with the clients spread over `processes` processes, so that one Python
    process of clients does not limit servers that use every core."""
    share = concurrency // processes
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        loop = asyncio.get_running_loop()
        done = await asyncio.gather(
            *(
                loop.run_in_executor(
                    pool,
                    partial(
                        _load_in_process,
                        url,
                        query,
                        seconds,
                        share,
                        users=users,
                        headers=headers,
                        tag=i,
                    ),
                )
                for i in range(processes)
            )
        )
    return _figures(max(e for e, _ in done), [x for _, latencies in done for x in latencies])


async def _load(
    url: str,
    query: str,
    seconds: float,
    concurrency: int,
    *,
    users: Sequence[object],
    headers: Mapping[str, str] | None = None,
    tag: int = 0,
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

        async def client(worker: int) -> None:
            n = 0
            while time.perf_counter() < deadline:
                n += 1
                user = users[(n * concurrency + worker + tag) % len(users)] if users else None
                payload = {
                    "query": query,
                    "variables": {"u": user or f"w{tag}-{worker}-{n % 5000}"},
                }
                start = time.perf_counter()
                async with session.post(url, json=payload) as response:
                    body = await response.json()
                    assert "errors" not in body, body
                latencies.append((time.perf_counter() - start) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(client(w) for w in range(concurrency)))
        elapsed = time.perf_counter() - started
    return elapsed, latencies
