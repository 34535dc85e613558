"""What statuses cost: `python -m bench.statuses [--online N] [--friends F]`.

Two private Redis servers are filled alike with N users online (default 1,000,000) through
their default session; on one of them 1% of those users chose INVISIBLE, on the other none did.
Then, each figure beside its baseline from the same run:

1. Lists: Redis's own time per call (INFO commandstats, median of ROUNDS, the two servers'
   calls interleaved) of `onlineFriends(first: 50)` of a user with F friends (default 1,000)
   and `onlineUsers(first: 50)` in both orders (LAST_SEEN, ONLINE_SINCE), for an end-user
   reader (to whom invisible users are offline: the lists filter them) and for a backend (who
   sees everyone). The target: 1% invisible within 1.2x none. Each ratio is the median of the
   rounds' ratios of two calls made one after the other; the end user's calls are also set
   against the backend's on the same server: what the filtering itself costs.
2. `presences` of 1,000 users (each with a session on a device; a third BUSY, half with a
   custom status, a third showing lastSeen to friends only, 1% invisible): Redis time per
   call, and the server's CPU per request (this process's CPU time with the service running
   in it, as `bench.harness.cpu_ms` measures it) for a backend and for an end user whose friends
   they are, beside a bare aiohttp handler calling the same store for a backend and the store
   call alone.
3. `setStatus` against `touch` of the same online users, rounds in turn: calls per second from
   CONCURRENCY tasks of this process through the store and Redis time per call (INFO
   commandstats), then requests per second and the service's CPU per request over HTTP
   through one service process (`python -m bench`'s measurement). Each round of `setStatus`
   changes every user it sets (BUSY and AWAY in turn), so each call announces a STATUS event;
   `touch` of a user online already announces nothing.
4. Memory of the new state, on a third, small Redis (MEMORY_USERS users; INFO used_memory
   deltas, and MEMORY USAGE of the keys), and of the sorted sets at N online.

The presence window is an hour (the default ten minutes would let the users go offline
during a run at a million).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import json
import os
import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

import aiohttp
import jwt
from aiohttp import web
from redis.asyncio import Redis

from bench.harness import (
    TOUCH,
    Figures,
    Operation,
    Row,
    cpu_ms,
    figures,
    fmt,
    iso,
    load,
    measured,
    median_figures,
    print_table,
    serve_ours,
    wait_for,
)
from gql_presence.app import create_app
from gql_presence.http.app_keys import STORE
from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import RedisServer, free_port, start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import ChosenStatus, Keys, Presence, PresenceStore, Visibility

ROUNDS = 100
PAGE = 50
WINDOW_MS = 3_600_000
SETTINGS = dataclasses.replace(Settings(), window_ms=WINDOW_MS)
# touchMany calls of 10,000 users in flight per server while filling: enough to keep each
# Redis busy, without taking both cores from the other work on the machine.
FILL_CALLS = 2
FILL_BATCH = 10_000
# 1% of the online users chose INVISIBLE: u<i> with i % 100 == 37 (u<7k>, the friends, too).
INVISIBLE_EVERY, INVISIBLE_AT = 100, 37
SET_CONCURRENCY = 100
PRESENCE_IDS = tuple(f"p{i}" for i in range(1000))
CPU_ROUNDS, CPU_RUNS = 5, 5
CONCURRENCY = 50
RATE_ROUNDS, RATE_SECONDS = 5, 3.0
HTTP_ROUNDS, HTTP_SECONDS = 5, 4.0
# Online users that setStatus and touch take in turn: more than one round reaches, so that
# every setStatus of a round changes its user's status.
RATE_USERS = 100_000
MEMORY_USERS = 10_000
PREFIX = Keys.of_shard(0).prefix  # one shard: every key is this shard's
TOKEN = "b" * 40
JWT_SECRET, ISSUER, AUDIENCE = "s" * 40, "bench", "gql-presence"
PRESENCES = (
    "query($ids: [ID!]!) { presences(userIds: $ids) { userId online status lastSeen onlineSince"
    " customStatus { text emoji expiresAt } sessions { sessionId device idle lastSeen startedAt }"
    " } }"
)


def user(i: int) -> str:
    return f"u{i}"


def invisible(i: int) -> bool:
    return i % INVISIBLE_EVERY == INVISIBLE_AT


async def gathered(calls: Iterator[Awaitable[object]], at_once: int) -> None:
    """Runs the calls with at most `at_once` in flight."""
    semaphore = asyncio.Semaphore(at_once)

    async def one(call: Awaitable[object]) -> None:
        async with semaphore:
            await call

    await asyncio.gather(*(one(call) for call in calls))


async def fill(store: PresenceStore, online: int) -> None:
    await gathered(
        (
            store.touch_many([user(i) for i in range(start, min(start + FILL_BATCH, online))])
            for start in range(0, online, FILL_BATCH)
        ),
        FILL_CALLS,
    )


async def used_memory(client: Redis) -> int:
    return int((await client.info("memory"))["used_memory"])


async def memory_usage(client: Redis, key: str) -> int:
    return int(await client.memory_usage(key, samples=0) or 0)


async def script_time_us(client: Redis, call: Callable[[], Awaitable[object]]) -> float:
    """Redis's own time for the script calls that `call` makes, µs, from INFO commandstats
    (its slow log at 0 would log every command the scripts run too, and cost them that
    time: an end user's onlineFriends runs one per online friend)."""
    await client.config_resetstat()
    await call()
    stats = (await client.info("commandstats")).get("cmdstat_evalsha", {"usec": 0})
    return float(stats["usec"])


@dataclasses.dataclass(frozen=True)
class Side:
    """One of the two filled servers."""

    name: str
    client: Redis
    store: PresenceStore


# --- 1. lists --------------------------------------------------------------------------------


ListCall = Callable[[PresenceStore], Awaitable[object]]


async def bench_lists(hidden: Side, plain: Side, friends: int) -> list[Row]:
    calls: dict[str, ListCall] = {
        f"onlineFriends(first: {PAGE}), {friends:,} friends": lambda s: s.online_friends(
            "me", PAGE, reader="me"
        ),
        f"onlineUsers(first: {PAGE}), LAST_SEEN": lambda s: s.online_users(PAGE, reader="someone"),
        f"onlineUsers(first: {PAGE}), ONLINE_SINCE": lambda s: s.online_users(
            PAGE, reader="someone", by_online_since=True
        ),
    }
    backend: dict[str, ListCall] = {
        f"onlineFriends(first: {PAGE}), {friends:,} friends": lambda s: s.online_friends(
            "me", PAGE
        ),
        f"onlineUsers(first: {PAGE}), LAST_SEEN": lambda s: s.online_users(PAGE),
        f"onlineUsers(first: {PAGE}), ONLINE_SINCE": lambda s: s.online_users(
            PAGE, by_online_since=True
        ),
    }
    sides = (hidden, plain)
    for side in sides:
        for call in (*calls.values(), *backend.values()):
            await call(side.store)  # warm: the cursor secret made, caches filled
    times: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for turn in range(ROUNDS):  # interleaved, and in either order by turns
        for name in calls:
            for reader, table in (("end user", calls), ("backend", backend)):
                for side in sides if turn % 2 == 0 else sides[::-1]:
                    read = functools.partial(table[name], side.store)
                    times[name, reader, side.name].append(await script_time_us(side.client, read))

    def row(what: str, ours: tuple[str, list[float]], base: tuple[str, list[float]]) -> Row:
        # The ratio of each round's two calls, made one after the other, then their median:
        # a burst of other work on the machine falls on both of a pair.
        ratio = statistics.median(a / b for a, b in zip(ours[1], base[1], strict=True))
        return (
            what,
            f"{ours[0]}: {fmt(statistics.median(ours[1]), ' µs')}",
            f"{base[0]}: {fmt(statistics.median(base[1]), ' µs')}",
            f"{ratio:.2f}x",
        )

    rows: list[Row] = [
        row(
            f"{name}, {reader}",
            (hidden.name, times[name, reader, hidden.name]),
            (plain.name, times[name, reader, plain.name]),
        )
        for reader in ("end user", "backend")
        for name in calls
    ]
    rows += [
        row(
            f"{name}, {side.name}: end user against backend",
            ("end user", times[name, "end user", side.name]),
            ("backend", times[name, "backend", side.name]),
        )
        for name in calls
        for side in sides
    ]
    return rows


# --- 2. presences of 1,000 ids ---------------------------------------------------------------


async def seed_presences(store: PresenceStore) -> None:
    async def one(i: int, user_id: str) -> None:
        await store.touch(user_id, "phone", device="ios")
        if i % 3 == 0:
            await store.set_status(user_id, ChosenStatus.BUSY)
        if i % 2 == 0:
            await store.set_custom_status(user_id, "In a meeting", "\U0001f4c5")
        if i % 3 == 1:
            await store.set_last_seen_visibility(user_id, Visibility.FRIENDS)
        if invisible(i):
            await store.set_status(user_id, ChosenStatus.INVISIBLE)

    await gathered((one(i, u) for i, u in enumerate(PRESENCE_IDS)), SET_CONCURRENCY)
    await store.add_friends("reader", PRESENCE_IDS, mutual=True)


def presence_json(p: Presence) -> dict[str, object]:
    """A presence as the PRESENCES document asks for it."""
    custom = p.custom and {
        "text": p.custom.text,
        "emoji": p.custom.emoji,
        "expiresAt": iso(p.custom.expires_at),
    }
    sessions = [
        {
            "sessionId": s.session_id,
            "device": s.device,
            "idle": s.idle,
            "lastSeen": iso(s.last_seen),
            "startedAt": iso(s.started_at or s.last_seen),
        }
        for s in p.sessions
    ]
    return {
        "userId": p.user_id,
        "online": p.online,
        "status": p.status.value,
        "lastSeen": iso(p.last_seen),
        "onlineSince": iso(p.online_since),
        "customStatus": custom,
        "sessions": sessions,
    }


async def bare_presences(request: web.Request) -> web.Response:
    """The floor: decode the body, call the same store (as a backend), answer the same JSON."""
    ids = json.loads(await request.read())["variables"]["ids"]
    found = await request.app[STORE].presence_many(ids)
    return web.json_response({"data": {"presences": [presence_json(p) for p in found]}})


async def bench_presences(hidden: Side, server: RedisServer) -> list[Row]:
    store, client = hidden.store, hidden.client
    await seed_presences(store)
    ids = list(PRESENCE_IDS)
    redis_us: dict[str, list[float]] = defaultdict(list)
    for _ in range(ROUNDS):
        for name, reader in (("backend", None), ("end user", "reader")):
            read = functools.partial(store.presence_many, ids, reader)
            redis_us[name].append(await script_time_us(client, read))

    settings = dataclasses.replace(
        SETTINGS,
        redis_url=server.url,
        backend_tokens=(("bench", TOKEN),),
        jwt_secret=JWT_SECRET,
        jwt_issuer=ISSUER,
        jwt_audience=AUDIENCE,
    )
    app = create_app(settings)
    app.router.add_post("/bare", bare_presences)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    url = f"http://127.0.0.1:{port}"
    claims = {"sub": "reader", "iss": ISSUER, "aud": AUDIENCE}
    end_user = jwt.encode({**claims, "exp": time.time() + 3600}, JWT_SECRET, algorithm="HS256")
    body = json.dumps({"query": PRESENCES, "variables": {"ids": ids}}).encode()
    cpu: dict[str, list[float]] = defaultdict(list)
    try:
        async with aiohttp.ClientSession() as session:

            async def post(path: str, token: str) -> bytes:
                headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
                async with session.post(url + path, data=body, headers=headers) as response:
                    return await response.read()

            ours = json.loads(await post("/graphql", TOKEN))
            if ours != json.loads(await post("/bare", TOKEN)):
                raise RuntimeError("the bare handler answers presences differently")
            if "errors" in json.loads(await post("/graphql", end_user)):
                raise RuntimeError("the end user's presences failed")
            cases: dict[str, Callable[[], Awaitable[object]]] = {
                "HTTP+GraphQL, backend": functools.partial(post, "/graphql", TOKEN),
                "HTTP+GraphQL, end user": functools.partial(post, "/graphql", end_user),
                "bare aiohttp handler, backend": functools.partial(post, "/bare", TOKEN),
                "store call alone, backend": functools.partial(app[STORE].presence_many, ids),
                "store call alone, end user": functools.partial(
                    app[STORE].presence_many, ids, "reader"
                ),
            }
            for _ in range(CPU_ROUNDS):  # the cases in turn, the median of each
                for name, call in cases.items():
                    cpu[name].append(await cpu_ms(call, CPU_RUNS)())
    finally:
        await runner.cleanup()
    ms = {name: statistics.median(taken) for name, taken in cpu.items()}
    bare = ms["bare aiohttp handler, backend"]
    rows: list[Row] = [
        (
            f"presences of 1,000 ids, Redis time per call, {name}",
            fmt(statistics.median(redis_us[name]), " µs"),
            "",
            "",
        )
        for name in ("backend", "end user")
    ]
    rows += [
        (
            f"presences of 1,000 ids, server CPU per request, {name}",
            fmt(ms[name], " ms"),
            f"bare aiohttp handler, backend: {fmt(bare, ' ms')}",
            f"{ms[name] / bare:.2f}x",
        )
        for name in ("HTTP+GraphQL, backend", "HTTP+GraphQL, end user")
    ]
    rows += [
        (f"presences of 1,000 ids, CPU of the {name}", fmt(ms[name], " ms"), "", "")
        for name in ("store call alone, backend", "store call alone, end user")
    ]
    return rows


# --- 3. setStatus against touch --------------------------------------------------------------


async def store_rate(
    side: Side, call: Callable[[str], Awaitable[object]], users: Sequence[str]
) -> tuple[float, float]:
    """Calls per second from CONCURRENCY tasks for RATE_SECONDS, each call for the next user,
    and Redis's time per script call meanwhile, µs."""
    await side.client.config_resetstat()
    queue = iter(users)
    done = 0
    deadline = time.perf_counter() + RATE_SECONDS

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < deadline:
            await call(next(queue))
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    elapsed = time.perf_counter() - started
    stats = (await side.client.info("commandstats"))["cmdstat_evalsha"]
    return done / elapsed, int(stats["usec"]) / int(stats["calls"])


async def set_status_of(store: PresenceStore, chosen: ChosenStatus, user_id: str) -> None:
    await store.set_status(user_id, chosen)


def set_status_document(chosen: ChosenStatus) -> str:
    # The same selection as `python -m bench`'s touch, so that the answers cost alike.
    return f"mutation($u: ID!) {{ setStatus(userId: $u, status: {chosen.value}) {{ online }} }}"


async def bench_set_status(side: Side, server: RedisServer, online: int) -> list[Row]:
    visible = [user(i) for i in range(min(online, RATE_USERS * 2)) if not invisible(i)]
    users = tuple(visible[:RATE_USERS])
    chosen = iter([ChosenStatus.BUSY, ChosenStatus.AWAY] * (RATE_ROUNDS + HTTP_ROUNDS + 2))
    store = side.store
    taken: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for _ in range(RATE_ROUNDS):
        set_status = functools.partial(set_status_of, store, next(chosen))
        taken["setStatus"].append(await store_rate(side, set_status, users))
        taken["touch"].append(await store_rate(side, store.touch, users))
    rate = {name: statistics.median(r for r, _ in runs) for name, runs in taken.items()}
    redis_us = {name: statistics.median(us for _, us in runs) for name, runs in taken.items()}
    rows: list[Row] = [
        (
            f"setStatus through the store, {CONCURRENCY} tasks of one process (each a change)",
            fmt(rate["setStatus"], " calls/s"),
            f"touch, online already: {fmt(rate['touch'], ' calls/s')}",
            f"{rate['setStatus'] / rate['touch']:.2f}x",
        ),
        (
            "setStatus, Redis time per call",
            fmt(redis_us["setStatus"], " µs"),
            f"touch: {fmt(redis_us['touch'], ' µs')}",
            f"{redis_us['setStatus'] / redis_us['touch']:.2f}x",
        ),
    ]

    port = free_port()
    env = {
        "REDIS_URL": server.url,
        "REDIS_CLUSTER_NODES": "",
        "PRESENCE_SHARDS": "1",
        "PRESENCE_WINDOW_SECONDS": str(WINDOW_MS // 1000),
        "PRESENCE_LOG_LEVEL": "warning",
    }
    service = [serve_ours(env, port, 1)]
    url = f"http://127.0.0.1:{port}/graphql"
    touch = Operation("touch", TOUCH, "", users)
    http: dict[str, list[Figures]] = defaultdict(list)
    try:
        await wait_for(url)
        await load(url, TOUCH, 1, CONCURRENCY, users=users)  # warm-up
        for _ in range(HTTP_ROUNDS):
            status = next(chosen)
            mutation = Operation("setStatus", set_status_document(status), "", users)
            http["setStatus"].append(
                await measured(service, url, mutation, HTTP_SECONDS, CONCURRENCY)
            )
            http["touch"].append(await measured(service, url, touch, HTTP_SECONDS, CONCURRENCY))
    finally:
        for process in service:
            process.terminate()
            process.wait(20)
    ours, base = median_figures(http["setStatus"]), median_figures(http["touch"])
    rows += [
        (
            f"setStatus over HTTP+GraphQL, 1 process, {CONCURRENCY} connections",
            figures(ours),
            f"touch: {figures(base)}",
            f"{ours[0] / base[0]:.2f}x the rate",
        ),
        (
            "",
            f"{fmt(ours[3], ' µs')} server CPU per request",
            f"touch: {fmt(base[3], ' µs')}",
            f"{ours[3] / base[3]:.2f}x the CPU",
        ),
    ]
    return rows


# --- 4. memory -------------------------------------------------------------------------------


async def median_usage(client: Redis, keys: Sequence[str]) -> float:
    return statistics.median([await memory_usage(client, key) for key in keys])


async def bench_memory_small() -> list[Row]:
    """MEMORY USAGE of each kind of key, and INFO used_memory deltas over MEMORY_USERS users
    where a change adds fields to a key the user has already (a key more per user would also
    be charged its share of the keyspace's table, which grows by doublings)."""
    server = start_redis_server()
    client = redis_client(server.url)
    try:
        store = PresenceStore(client, SETTINGS)
        await store.load_scripts()
        n = MEMORY_USERS
        ids = [f"m{i}" for i in range(n)]
        sample = ids[:: max(1, n // 100)]

        async def each(call: Callable[[str], Awaitable[object]], users: Sequence[str]) -> float:
            """Bytes per user that `call` for each of `users` adds."""
            before = await used_memory(client)
            await gathered((call(u) for u in users), SET_CONCURRENCY)
            return (await used_memory(client) - before) / len(users)

        for start in range(0, n, FILL_BATCH):
            await store.touch_many(ids[start : start + FILL_BATCH])
        unchosen = sum([1 async for _ in client.scan_iter(PREFIX + "st:*", count=1000)])

        await gathered((store.set_status(u, ChosenStatus.BUSY) for u in ids), SET_CONCURRENCY)
        st_chosen = await median_usage(client, [PREFIX + "st:" + u for u in sample])
        custom = await each(lambda u: store.set_custom_status(u, "In a meeting", "\U0001f4c5"), ids)
        st_custom = await median_usage(client, [PREFIX + "st:" + u for u in sample])
        ends = datetime.now(UTC) + timedelta(days=1)
        ending = await each(
            lambda u: store.set_custom_status(u, "In a meeting", "\U0001f4c5", ends), ids
        )
        stexp_entry = await memory_usage(client, PREFIX + "stexp") / n

        hidden_ids = [f"h{i}" for i in range(n)]
        for start in range(0, n, FILL_BATCH):
            await store.touch_many(hidden_ids[start : start + FILL_BATCH])
        await gathered(
            (store.set_status(u, ChosenStatus.INVISIBLE) for u in hidden_ids), SET_CONCURRENCY
        )
        st_invisible = await median_usage(client, [PREFIX + "st:" + u for u in hidden_ids[:100]])
        hidden_entry = await memory_usage(client, PREFIX + "hidden") / n
        invisible_entry = await memory_usage(client, PREFIX + "invisible") / n

        session_ids = [f"s{i}" for i in range(n)]
        await gathered((store.touch(u, "phone") for u in session_ids), SET_CONCURRENCY)
        session_sample = session_ids[:: max(1, n // 100)]
        sx_bare = await median_usage(client, [PREFIX + "sx:" + u for u in session_sample])
        device = await each(lambda u: store.touch(u, "phone", device="ios"), session_ids)
        sx = await median_usage(client, [PREFIX + "sx:" + u for u in session_sample])
        sess = await median_usage(client, [PREFIX + "sess:" + u for u in session_sample])
    finally:
        await client.aclose()
        server.stop()
    return [
        (
            f"st: keys of {n:,} online users who chose nothing",
            f"{unchosen:,}",
            "",
            "",
        ),
        (
            "a chosen status (BUSY): the user's st: hash (MEMORY USAGE)",
            fmt(st_chosen, " B"),
            "",
            "",
        ),
        (
            "a custom status (12 characters and an emoji, no end), added per user (INFO)",
            fmt(custom, " B"),
            f"the st: hash with chosen, text and emoji: {fmt(st_custom, ' B')}",
            "",
        ),
        (
            "the same custom status with an end (expires field, stexp entry), added (INFO)",
            fmt(ending, " B"),
            f"stexp ZSET per entry: {fmt(stexp_entry, ' B')}",
            "",
        ),
        (
            "INVISIBLE chosen by an online user: st: hash (chosen, hidden_seen)",
            fmt(st_invisible, " B"),
            f"hidden ZSET per entry {fmt(hidden_entry, ' B')}; "
            f"invisible SET per entry {fmt(invisible_entry, ' B')}",
            "",
        ),
        (
            "a session of its own with a device: its user's sx: hash (MEMORY USAGE)",
            fmt(sx, " B"),
            f"without the device {fmt(sx_bare, ' B')}; the sess: ZSET {fmt(sess, ' B')}",
            "",
        ),
        (
            "  the device `ios` given to that session, added per user (INFO)",
            fmt(device, " B"),
            "",
            "",
        ),
    ]


async def bench_memory_large(hidden: Side, plain: Side, online: int, filled: int) -> list[Row]:
    since = await memory_usage(plain.client, PREFIX + "since") / online
    invisibles = sum(1 for i in range(online) if invisible(i))
    hidden_set = await memory_usage(hidden.client, PREFIX + "hidden") / invisibles
    invisible_set = await memory_usage(hidden.client, PREFIX + "invisible") / invisibles
    per_user = filled / online
    return [
        (
            f"memory per online user, all keys ({online:,} online through their default "
            "session, none invisible; INFO)",
            fmt(per_user, " B"),
            f"of which statuses': their since ZSET entry {fmt(since, ' B')}",
            f"{since / per_user:.0%} of it",
        ),
        (
            f"hidden ZSET per invisible online user ({invisibles:,} of {online:,})",
            fmt(hidden_set, " B"),
            f"invisible SET per entry: {fmt(invisible_set, ' B')}",
            "",
        ),
    ]


# --- the run ---------------------------------------------------------------------------------


async def side_of(name: str, server: RedisServer) -> Side:
    client = redis_client(server.url)
    store = PresenceStore(client, SETTINGS)
    await store.load_scripts()
    return Side(name, client, store)


async def run(online: int, friends: int) -> None:
    load_before = os.getloadavg()
    started = time.perf_counter()
    memory_rows = await bench_memory_small()
    # Without persistence, as the other benchmarks' servers: an append-only file would take
    # the cores' time while filling.
    servers = [start_redis_server(), start_redis_server()]
    hidden, plain = [
        await side_of(name, server)
        for name, server in zip(("1% invisible", "none invisible"), servers, strict=True)
    ]
    try:
        version = (await hidden.client.info("server"))["redis_version"]
        print(f"filling two Redis servers with {online:,} online users each ...", flush=True)
        before = await used_memory(plain.client)
        fill_started = time.perf_counter()
        await asyncio.gather(fill(hidden.store, online), fill(plain.store, online))
        filled = await used_memory(plain.client) - before
        fill_s = time.perf_counter() - fill_started
        await gathered(
            (
                hidden.store.set_status(user(i), ChosenStatus.INVISIBLE)
                for i in range(online)
                if invisible(i)
            ),
            SET_CONCURRENCY,
        )
        friend_ids = [user(7 * k) for k in range(friends) if 7 * k < online]
        for side in (hidden, plain):
            await side.store.add_friends("me", friend_ids, mutual=False)
        expected = online - sum(1 for i in range(online) if invisible(i))
        seen = await hidden.store.online_users(1, reader="someone")
        if seen.total_count != expected:
            raise RuntimeError(f"{seen.total_count} online to an end user, not {expected}")
        print(f"filled in {fill_s:.0f} s; measuring ...", flush=True)
        memory_rows += await bench_memory_large(hidden, plain, online, filled)
        list_rows = await bench_lists(hidden, plain, len(friend_ids))
        presence_rows = await bench_presences(hidden, servers[0])
        rate_rows = await bench_set_status(hidden, servers[0], online)
    finally:
        for side in (hidden, plain):
            await side.client.aclose()
        for server in servers:
            server.stop()
    load_after = os.getloadavg()
    print(
        f"\ngql-presence status benchmarks, {datetime.now(UTC):%Y-%m-%d}, Redis {version}, "
        f"Python {platform.python_version()}, {os.cpu_count()} cores; load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after; "
        f"{time.perf_counter() - started:.0f} s in all\n"
    )
    for title, rows in (
        (f"Lists at {online:,} online: Redis time per call, median of {ROUNDS}", list_rows),
        ("presences", presence_rows),
        ("setStatus against touch", rate_rows),
        ("Memory", memory_rows),
    ):
        print(f"{title}\n")
        print_table(rows)
        print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.statuses", description=__doc__)
    parser.add_argument("--online", type=int, default=1_000_000, help="users online")
    parser.add_argument("--friends", type=int, default=1000, help="onlineFriends' friends")
    args = parser.parse_args()
    asyncio.run(run(args.online, args.friends))


if __name__ == "__main__":
    main()
