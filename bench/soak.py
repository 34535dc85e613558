"""Soak run: `python -m bench.soak [--minutes N] [--rate R]` (default 10 minutes, 250 req/s).

A private Redis and one API process with a 5-second presence window, so that sessions expire
all along the run and the sweeper never rests. A fixed set of workers sends a steady, paced mix
of every operation over HTTP for 20,000 users, and a few WebSocket subscribers stay connected
and count their events. Every sample prints the API's and Redis's memory, the key count, users
online, and the interval's requests, latency and errors. At the end: a table and a verdict (no
errors; API and Redis memory flat). The exit status is 1 when the verdict fails.

SESSION_REVOKED is an expected answer (a kicked session touched again), counted as a refusal,
not an error. Errors: any HTTP status but 200, any other GraphQL error code, a failed request,
a page out of order, a kicked session accepted again too soon, a subscription ended by the
service, and any ERROR line in the API's log.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from redis.asyncio import Redis

from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import RedisServer, free_port, start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore

USERS = 20_000
# A user's friends are drawn from the next NEIGHBOURS ids, half of them at the start; adds and
# removes then pick from the same neighbours at the same rate, so the friend sets (most of
# Redis's memory here) keep their size instead of growing all along the run.
NEIGHBOURS = 20
SESSIONS_PER_USER = 3
WORKERS = 20
WINDOW_S = 5  # presence window and revocation time of the API under test
EXPECTED_CODES = frozenset({"SESSION_REVOKED"})
# Flat: after the warm-up, the mean of the last third of the samples is at most this much
# above the mean of the middle third (relative, or absolute, whichever is larger).
FLAT_RELATIVE = 0.05
FLAT_ABSOLUTE_BYTES = 2 * 1024 * 1024
MIB = 1024 * 1024

TOUCH = (
    "mutation($u: ID!, $s: ID, $at: DateTime) "
    "{ touch(userId: $u, sessionId: $s, at: $at) { online lastSeen } }"
)
TOUCH_MANY = "mutation($ids: [ID!]!) { touchMany(userIds: $ids) }"
KICK = "mutation($u: ID!, $s: ID) { kick(userId: $u, sessionId: $s) { kickedSessions online } }"
ADD_FRIENDS = "mutation($u: ID!, $f: [ID!]!) { addFriends(userId: $u, friendIds: $f) }"
REMOVE_FRIENDS = "mutation($u: ID!, $f: [ID!]!) { removeFriends(userId: $u, friendIds: $f) }"
PRESENCE = "query($u: ID!) { presence(userId: $u) { online lastSeen sessions { sessionId } } }"
ONLINE_FRIENDS = (
    "query($u: ID!) { onlineFriends(userId: $u, first: 20) "
    "{ totalCount nodes { userId lastSeen sessions { sessionId } } pageInfo { hasNextPage } } }"
)
ONLINE_USERS = (
    "query($after: String) { onlineUsers(first: 100, after: $after) "
    "{ totalCount nodes { userId lastSeen } pageInfo { hasNextPage endCursor } } }"
)
ACTIVE_IN_RANGE = (
    "query($from: DateTime!, $to: DateTime!) { activeInRange(from: $from, to: $to, first: 50) "
    "{ totalCount nodes { userId lastSeen online } } }"
)
WEEKLY_STATS = (
    "{ weeklyStats { days { date activeUsers } uniqueUsers activeEveryDay newOnEndDate } }"
)
ONLINE_COUNT = "{ onlineUsers(first: 0) { totalCount } }"
SUBSCRIBE = (
    "subscription($ids: [ID!], $friendsOf: ID) "
    "{ presenceChanged(userIds: $ids, friendsOf: $friendsOf) { userId kind online } }"
)

Json = dict[str, Any]


def user(i: int) -> str:
    return f"u{i % USERS}"


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds")


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


# --- the service under test -----------------------------------------------------------------


@dataclass
class Service:
    redis: RedisServer
    api: subprocess.Popen[bytes]
    url: str  # http://127.0.0.1:port/graphql
    log_path: Path


@asynccontextmanager
async def service(work_dir: Path) -> AsyncIterator[Service]:
    """A private Redis, seeded with friend sets, and one API process on it; both stopped at
    the end, whatever ends the run (Ctrl-C too)."""
    redis = start_redis_server()
    api: subprocess.Popen[bytes] | None = None
    try:
        await seed_friends(redis.url)
        port = free_port()
        env = {
            **os.environ,
            "REDIS_URL": redis.url,
            "PRESENCE_WINDOW_SECONDS": str(WINDOW_S),
            "PRESENCE_REVOKE_SECONDS": str(WINDOW_S),
        }
        log_path = work_dir / "api.log"
        with log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
            api = subprocess.Popen(  # noqa: ASYNC220 - started once, before any measurement
                # One process: its memory is what the verdict follows.
                [
                    sys.executable,
                    "-m",
                    "gql_presence",
                    "serve",
                    "--port",
                    str(port),
                    "--workers",
                    "1",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        await wait_ready(api, f"http://127.0.0.1:{port}/readyz")
        yield Service(redis, api, f"http://127.0.0.1:{port}/graphql", log_path)
    finally:
        if api is not None and api.poll() is None:
            api.send_signal(signal.SIGTERM)  # first, so that it never sees Redis go away
            try:
                api.wait(20)  # blocking is fine: nothing else runs any more
            except subprocess.TimeoutExpired:
                api.kill()
                api.wait()
        redis.stop()


async def seed_friends(redis_url: str) -> None:
    rng = random.Random(1)
    client = redis_client(redis_url)  # the service's own: it waits for a free connection
    try:
        store = PresenceStore(client, Settings())
        for start in range(0, USERS, 200):  # 200 calls in flight: seconds, not minutes
            await asyncio.gather(
                *(
                    store.add_friends(user(i), neighbours(rng, i, NEIGHBOURS // 2))
                    for i in range(start, start + 200)
                )
            )
    finally:
        await client.aclose()


def neighbours(rng: random.Random, i: int, count: int) -> list[str]:
    return [user(i + step) for step in rng.sample(range(1, NEIGHBOURS + 1), count)]


async def wait_ready(api: subprocess.Popen[bytes], url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(400):
            if api.poll() is not None:
                raise RuntimeError(f"the API exited at start-up with status {api.returncode}")
            try:
                async with session.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} was not ready within 20 s")


# --- the load -------------------------------------------------------------------------------


@dataclass
class Tally:
    requests: int = 0
    refusals: int = 0
    errors: int = 0
    events: int = 0  # received by the subscribers
    latencies_ms: list[float] = field(default_factory=list)

    def add(self, latency_ms: float, outcome: str) -> None:
        self.requests += 1
        self.latencies_ms.append(latency_ms)
        if outcome == "refused":
            self.refusals += 1
        elif outcome != "ok":
            self.errors += 1


class Load:
    """The mixed load's state: what was counted, recent kicks, the paging cursor."""

    def __init__(self, session: aiohttp.ClientSession, url: str, seed: int) -> None:
        self.session = session
        self.url = url
        self.rng = random.Random(seed)
        self.by_operation: dict[str, Tally] = {}
        self.interval = Tally()  # since the last sample
        self.error_kinds: Counter[str] = Counter()
        self.events: Counter[str] = Counter()  # by kind, over every subscriber
        self.drops = 0  # subscriptions ended by the service
        # Sessions kicked one by one, newest last: touched again, they must be refused.
        self.kicked: deque[tuple[float, str, str]] = deque(maxlen=50)
        self.cursor: str | None = None  # onlineUsers pages are followed across requests
        weighted: list[tuple[int, Callable[[], Awaitable[None]]]] = [
            (40, self.touch),
            (8, self.touch_backfill),
            (3, self.touch_kicked),
            (4, self.touch_many),
            (4, self.kick_session),
            (2, self.kick_all),
            (3, self.add_friends),
            (3, self.remove_friends),
            (12, self.presence),
            (10, self.online_friends),
            (6, self.online_users),
            (4, self.active_in_range),
            (1, self.weekly_stats),
        ]
        self.weights = [w for w, _ in weighted]
        self.operations = [op for _, op in weighted]

    def error(self, operation: str, kind: str) -> None:
        self.error_kinds[f"{operation}: {kind}"] += 1

    async def call(self, operation: str, query: str, variables: Json) -> Json | None:
        """Sends one request and counts it; returns `data` when it succeeded."""
        started = time.perf_counter()
        data, outcome = await self.send(query, variables)
        tally = self.by_operation.setdefault(operation, Tally())
        latency_ms = (time.perf_counter() - started) * 1000
        for counted in (tally, self.interval):
            counted.add(latency_ms, "refused" if outcome in EXPECTED_CODES else outcome)
        if outcome not in {"ok", *EXPECTED_CODES}:
            self.error(operation, outcome)
        return data if outcome == "ok" else None

    async def send(self, query: str, variables: Json) -> tuple[Json | None, str]:
        """The reply's data and its outcome: "ok", an error code, or what went wrong."""
        try:
            async with self.session.post(
                self.url, json={"query": query, "variables": variables}
            ) as response:
                if response.status != 200:
                    return None, f"HTTP {response.status}"
                body = await response.json()
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError) as error:
            return None, type(error).__name__
        errors = body.get("errors")
        if errors:
            return None, str(errors[0].get("extensions", {}).get("code", "no code"))
        data = body.get("data")
        return (data, "ok") if isinstance(data, dict) else (None, "no data")

    def any_user(self) -> str:
        return user(self.rng.randrange(USERS))

    def any_session(self) -> str:
        return f"s{self.rng.randrange(SESSIONS_PER_USER)}"

    async def touch(self) -> None:
        variables = {"u": self.any_user(), "s": self.any_session()}
        await self.call("touch", TOUCH, variables)

    async def touch_backfill(self) -> None:
        # Activity from a queue or a log: up to two hours back, inside the retention.
        at = datetime.now(UTC) - timedelta(seconds=self.rng.uniform(10, 7200))
        variables = {"u": self.any_user(), "s": self.any_session(), "at": iso(at)}
        await self.call("touch (at: past)", TOUCH, variables)

    async def touch_kicked(self) -> None:
        """Touches a session kicked less than 4 s ago: the revocation lasts WINDOW_S."""
        while self.kicked and time.monotonic() - self.kicked[0][0] > WINDOW_S - 1:
            self.kicked.popleft()
        if not self.kicked:
            await self.touch()
            return
        _, user_id, session_id = self.kicked.pop()
        data = await self.call("touch (kicked)", TOUCH, {"u": user_id, "s": session_id})
        if data is not None:
            self.error("touch (kicked)", "a kicked session was accepted within its revocation")

    async def touch_many(self) -> None:
        ids = [user(i) for i in self.rng.sample(range(USERS), 100)]
        await self.call("touchMany (100)", TOUCH_MANY, {"ids": ids})

    async def kick_session(self) -> None:
        user_id, session_id = self.any_user(), self.any_session()
        if await self.call("kick (session)", KICK, {"u": user_id, "s": session_id}):
            self.kicked.append((time.monotonic(), user_id, session_id))

    async def kick_all(self) -> None:
        await self.call("kick (all)", KICK, {"u": self.any_user()})

    async def add_friends(self) -> None:
        i = self.rng.randrange(USERS)
        variables = {"u": user(i), "f": neighbours(self.rng, i, 5)}
        await self.call("addFriends", ADD_FRIENDS, variables)

    async def remove_friends(self) -> None:
        i = self.rng.randrange(USERS)
        variables = {"u": user(i), "f": neighbours(self.rng, i, 5)}
        await self.call("removeFriends", REMOVE_FRIENDS, variables)

    async def presence(self) -> None:
        await self.call("presence", PRESENCE, {"u": self.any_user()})

    async def online_friends(self) -> None:
        await self.call("onlineFriends", ONLINE_FRIENDS, {"u": self.any_user()})

    async def online_users(self) -> None:
        data = await self.call("onlineUsers (paged)", ONLINE_USERS, {"after": self.cursor})
        if data is None:
            self.cursor = None
            return
        page = data["onlineUsers"]
        info = page["pageInfo"]
        self.cursor = info["endCursor"] if info["hasNextPage"] else None
        # The contract: every page is in order (lastSeen descending, then userId), even while
        # users come and go. Times are UTC strings of one format, so they compare as text.
        order = [(node["lastSeen"], node["userId"]) for node in page["nodes"]]
        if any(
            (a[0] < b[0]) or (a[0] == b[0] and a[1] >= b[1]) for a, b in itertools.pairwise(order)
        ):
            self.error("onlineUsers (paged)", "a page out of order or with a user twice")

    async def active_in_range(self) -> None:
        start = datetime.now(UTC) - timedelta(seconds=self.rng.uniform(60, 3600))
        variables = {"from": iso(start), "to": iso(start + timedelta(minutes=10))}
        await self.call("activeInRange", ACTIVE_IN_RANGE, variables)

    async def weekly_stats(self) -> None:
        await self.call("weeklyStats", WEEKLY_STATS, {})

    async def worker(self, number: int, rate: float, deadline: float) -> None:
        """Runs operations at rate/WORKERS per second, on a fixed schedule: a slow answer
        delays this worker's next request, but the schedule never bursts to catch up more
        than one second."""
        period = WORKERS / rate
        next_at = time.monotonic() + period * number / WORKERS
        while next_at < deadline:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            operation = self.rng.choices(self.operations, self.weights)[0]
            await operation()
            next_at = max(next_at + period, time.monotonic() - 1)


# --- subscribers ----------------------------------------------------------------------------


async def subscriber(load: Load, url: str, variables: Json) -> None:
    """Stays subscribed, counting events; an end the service chose counts as an error, and
    the subscriber comes back, as a client would."""
    while True:
        reason = await subscribe_once(load, url, variables)
        load.drops += 1
        load.interval.errors += 1
        load.error("subscription", reason)
        await asyncio.sleep(1)


async def subscribe_once(load: Load, url: str, variables: Json) -> str:
    """Follows one subscription until the service ends it; returns why it ended."""
    try:
        async with load.session.ws_connect(url, protocols=["graphql-transport-ws"]) as ws:
            await ws.send_json({"type": "connection_init"})
            ack = await ws.receive_json(timeout=10)
            if ack.get("type") != "connection_ack":
                return f"no connection_ack: {ack}"
            payload = {"query": SUBSCRIBE, "variables": variables}
            await ws.send_json({"id": "1", "type": "subscribe", "payload": payload})
            async for message in ws:
                if message.type != aiohttp.WSMsgType.TEXT:
                    break
                body = json.loads(message.data)
                if body["type"] == "next":
                    load.events[body["payload"]["data"]["presenceChanged"]["kind"]] += 1
                    load.interval.events += 1
                elif body["type"] == "ping":
                    await ws.send_json({"type": "pong"})
                elif body["type"] in {"error", "complete"}:
                    return f"{body['type']}: {body.get('payload')}"
            return f"closed, code {ws.close_code}"
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        return f"{type(error).__name__}: {error}"


def subscriptions() -> list[Json]:
    """Three followers of 200 users each, and three of a user's friends."""
    followed = [{"ids": [user(i) for i in range(k * 5000, k * 5000 + 200)]} for k in range(3)]
    return [*followed, *({"friendsOf": user(k * 7001)} for k in range(3))]


# --- samples and the verdict ----------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    at_s: float
    api_rss: int
    redis_memory: int
    keys: int
    online: int
    requests: int
    p50_ms: float
    p99_ms: float
    refusals: int
    errors: int
    events: int

    def line(self, interval_s: float) -> str:
        rate = self.requests / interval_s if interval_s else 0.0
        return (
            f"{self.at_s:6.0f}s  api rss {self.api_rss / MIB:6.1f} MiB  "
            f"redis {self.redis_memory / MIB:6.1f} MiB  keys {self.keys:7,}  "
            f"online {self.online:6,}  requests {self.requests:6,} ({rate:4.0f}/s)  "
            f"p50 {self.p50_ms:5.1f} ms  p99 {self.p99_ms:6.1f} ms  "
            f"refused {self.refusals:4,}  errors {self.errors:3,}  events {self.events:6,}"
        )


def rss_bytes(pid: int) -> int:
    """Resident memory of a process, from Linux's /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


async def take_sample(load: Load, redis: Redis, service: Service, started: float) -> Sample:
    if service.api.poll() is not None:
        raise RuntimeError(f"the API exited during the run with status {service.api.returncode}")
    interval, load.interval = load.interval, Tally()
    memory = int((await redis.info("memory"))["used_memory"])
    keys = int(await redis.dbsize())
    data, outcome = await load.send(ONLINE_COUNT, {})
    online = int(data["onlineUsers"]["totalCount"]) if data else -1
    if data is None:
        interval.errors += 1
        load.error("sample", outcome)
    return Sample(
        at_s=time.monotonic() - started,
        api_rss=rss_bytes(service.api.pid),
        redis_memory=memory,
        keys=keys,
        online=online,
        requests=interval.requests,
        p50_ms=percentile(interval.latencies_ms, 0.5),
        p99_ms=percentile(interval.latencies_ms, 0.99),
        refusals=interval.refusals,
        errors=interval.errors,
        events=interval.events,
    )


def flat(
    samples: list[Sample], value: Callable[[Sample], int], warmup_s: float
) -> tuple[bool, str]:
    """Whether a figure stayed flat after the warm-up: the mean of the last third of the
    samples against the mean of the middle third."""
    kept = [value(s) for s in samples if s.at_s >= warmup_s]
    if len(kept) < 3:
        return False, "too few samples after the warm-up to judge"
    third = len(kept) // 3
    middle = statistics.mean(kept[third : 2 * third])
    last = statistics.mean(kept[-third:])
    allowed = max(middle * FLAT_RELATIVE, FLAT_ABSOLUTE_BYTES)
    growth = last - middle
    verdict = "flat" if growth <= allowed else "GROWING"
    text = (
        f"{verdict}: last third {last / MIB:.1f} MiB, middle third {middle / MIB:.1f} MiB "
        f"({growth / MIB:+.1f} MiB; allowed +{allowed / MIB:.1f} MiB)"
    )
    return growth <= allowed, text


def log_errors(log_path: Path) -> list[str]:
    """ERROR lines of the API's log (a stack trace follows each in the file)."""
    with log_path.open(errors="replace") as log:
        return [line.rstrip() for line in log if " ERROR " in line]


def report(load: Load, samples: list[Sample], seconds: float, service: Service) -> bool:
    """Prints the tables and the verdict; returns whether the run passed."""
    print("\nper operation:")
    print("| operation | requests | refused (expected) | errors | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    total = Tally()
    for name, tally in sorted(load.by_operation.items(), key=lambda kv: -kv[1].requests):
        total.requests += tally.requests
        total.refusals += tally.refusals
        total.latencies_ms += tally.latencies_ms
        print(
            f"| {name} | {tally.requests:,} | {tally.refusals:,} | {tally.errors:,} "
            f"| {percentile(tally.latencies_ms, 0.5):.1f} "
            f"| {percentile(tally.latencies_ms, 0.99):.1f} |"
        )
    logged = log_errors(service.log_path)
    errors = sum(load.error_kinds.values()) + len(logged)
    online = [s.online for s in samples[1:]] or [0]
    print(
        f"\n{total.requests:,} requests in {seconds:.0f} s ({total.requests / seconds:.0f}/s), "
        f"p50 {percentile(total.latencies_ms, 0.5):.1f} ms, "
        f"p99 {percentile(total.latencies_ms, 0.99):.1f} ms; "
        f"{total.refusals:,} expected refusals (SESSION_REVOKED); users online "
        f"{min(online):,} to {max(online):,}; events received {dict(load.events)}, "
        f"subscriptions dropped {load.drops}"
    )
    for kind, count in load.error_kinds.most_common(10):
        print(f"  error x{count}: {kind}")
    for line in logged[:5]:
        print(f"  API log: {line}")
    warmup_s = min(120.0, seconds / 5)
    rss_ok, rss_text = flat(samples, lambda s: s.api_rss, warmup_s)
    redis_ok, redis_text = flat(samples, lambda s: s.redis_memory, warmup_s)
    print(
        f"\nverdict (memory flat: after a warm-up of {warmup_s:.0f} s, the mean of the last "
        f"third of the samples at most {FLAT_RELATIVE:.0%} or "
        f"{FLAT_ABSOLUTE_BYTES // MIB} MiB above the mean of the middle third):"
    )
    print(f"  errors: {errors} ({'none' if errors == 0 else 'FAIL'})")
    print(f"  API RSS: {rss_text}")
    print(f"  Redis used_memory: {redis_text}")
    passed = errors == 0 and rss_ok and redis_ok
    print(f"  {'PASS' if passed else 'FAIL'}; the API's log is {service.log_path}")
    return passed


# --- the run --------------------------------------------------------------------------------


async def run(minutes: float, rate: float) -> bool:
    seconds = minutes * 60
    every_s = max(5.0, min(20.0, seconds / 30))  # 20 s on a long run, at least ~12 samples
    work_dir = Path(tempfile.mkdtemp(prefix="gqlp-soak-"))
    async with service(work_dir) as svc:
        redis = Redis.from_url(svc.redis.url, decode_responses=True)
        connector = aiohttp.TCPConnector(limit=WORKERS + 10)
        async with aiohttp.ClientSession(connector=connector) as session:
            load = Load(session, svc.url, seed=2)
            print(
                f"soak: {minutes:g} min at {rate:g} req/s from {WORKERS} workers, {USERS:,} users, "
                f"window and revocation {WINDOW_S} s, {len(subscriptions())} subscribers, "
                f"a sample every {every_s:g} s; {os.cpu_count()} cores",
                flush=True,
            )
            started = time.monotonic()
            samples = [await take_sample(load, redis, svc, started)]
            print(samples[0].line(0), flush=True)
            watchers = [asyncio.create_task(subscriber(load, svc.url, v)) for v in subscriptions()]
            deadline = started + seconds
            workers = [asyncio.create_task(load.worker(n, rate, deadline)) for n in range(WORKERS)]
            try:
                while time.monotonic() < deadline:
                    await asyncio.sleep(min(every_s, deadline - time.monotonic()))
                    samples.append(await take_sample(load, redis, svc, started))
                    span = samples[-1].at_s - samples[-2].at_s
                    print(samples[-1].line(span), flush=True)
                await asyncio.gather(*workers)
            finally:
                for task in [*workers, *watchers]:
                    task.cancel()
                await asyncio.gather(*workers, *watchers, return_exceptions=True)
                await redis.aclose()
    return report(load, samples, seconds, svc)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10, help="length of the run")
    parser.add_argument("--rate", type=float, default=250, help="requests per second, total")
    options = parser.parse_args()
    try:
        sys.exit(0 if asyncio.run(run(options.minutes, options.rate)) else 1)
    except KeyboardInterrupt:
        print("soak: interrupted; Redis and the API were stopped", file=sys.stderr)
        sys.exit(130)
