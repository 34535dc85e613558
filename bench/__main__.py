"""Benchmarks: `python -m bench [--quick] [--only {single,cluster}]` prints a table of figures,
each beside its baseline measured in the same run, on one Redis and then on a Redis Cluster of
three masters. Every Redis is a private one started here and stopped after."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import aiohttp
from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterNode

from bench.harness import (
    EMPTY,
    OPERATIONS,
    SETTINGS,
    TOUCH,
    Deployment,
    Figures,
    Row,
    Store,
    figures,
    fmt,
    load,
    load_from_processes,
    measured,
    median_figures,
    one_redis,
    print_table,
    seed_http,
    serve_ours,
    start_bare,
    start_process,
    wait_for,
)
from gql_presence.running.redis_server import free_port
from gql_presence.store import PresenceStore
from gql_presence.store import presence as shard_module
from gql_presence.store.client import AnyRedis
from gql_presence.store.keys import Keys
from tests.redis_cluster import start_redis_cluster

# The textbook recipe for online friends: copy the whole online set,
# trim the stale part, intersect with the friends. Run as one script, like ours.
TEXTBOOK_ONLINE_FRIENDS = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000
redis.call('ZUNIONSTORE', KEYS[3], 1, KEYS[2])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. (now_ms - tonumber(ARGV[1])))
redis.call('ZINTERSTORE', KEYS[3], 2, KEYS[3], KEYS[1], 'WEIGHTS', 1, 0)
local page = redis.call('ZREVRANGE', KEYS[3], 0, 49, 'WITHSCORES')
redis.call('DEL', KEYS[3])
return page
"""
# Its keys share one hash tag: on a Redis Cluster they must live in one slot, so a deployment of
# the recipe keeps the online set and every friend set on one node.
TEXTBOOK_KEYS = ["{textbook}:friends:me", "{textbook}:online", "{textbook}:tmp"]


async def used_memory(redis: AnyRedis) -> int:
    """Bytes in use: on a cluster, the sum over its masters."""
    if isinstance(redis, RedisCluster):
        nodes = await redis.info("memory", target_nodes=RedisCluster.PRIMARIES)
        return sum(int(info["used_memory"]) for info in nodes.values())
    return int((await redis.info("memory"))["used_memory"])


async def timed(call: Callable[[], Awaitable[object]], repeat: int) -> list[float]:
    """Milliseconds each of `repeat` sequential calls took."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    return times


async def fill_online(store: Store, count: int) -> None:
    for start in range(0, count, 10_000):
        await store.touch_many([f"u{i}" for i in range(start, min(start + 10_000, count))])


# --- memory ---------------------------------------------------------------------------------


async def bench_memory(target: Deployment, users: int) -> list[Row]:
    redis = target.redis
    await redis.flushall()
    before = await used_memory(redis)
    await fill_online(target.store, users)
    per_online = (await used_memory(redis) - before) / users
    # Each shard has its own day bitmap and id -> bit index mapping: the sum over the shards.
    bitmap = sum([int(await redis.memory_usage(k) or 0) async for k in redis.scan_iter("*:day:*")])
    index = 0
    for shard in range(target.shards):
        index += int(await redis.memory_usage(Keys.of_shard(shard).user_index, samples=0) or 0)
    ids = [f"u{i}" for i in range(users)]
    for start in range(0, users, 10_000):
        chunk = ids[start : start + 10_000]
        await redis.sadd("bench:set-per-day", *chunk)
        await redis.zadd(
            "bench:zset-per-day", {u: 1_763_700_000_000 + i for i, u in enumerate(chunk)}
        )
    as_set = int(await redis.memory_usage("bench:set-per-day", samples=0) or 0)
    as_zset = int(await redis.memory_usage("bench:zset-per-day", samples=0) or 0)
    await redis.flushall()
    return [
        (f"memory per online user ({users:,} online, all keys)", fmt(per_online, " B"), "", ""),
        (
            "stats memory per daily active user, per day",
            fmt(bitmap / users, " B"),
            f"set per day {fmt(as_set / users, ' B')}; sorted set {fmt(as_zset / users, ' B')}",
            f"{as_set / bitmap:,.0f}x smaller than a set",
        ),
        ("id -> bit index mapping, once per user (not per day)", fmt(index / users, " B"), "", ""),
    ]


# --- onlineFriends against the textbook recipe ----------------------------------------------


async def bench_online_friends(target: Deployment, sizes: list[int], friends: int) -> list[Row]:
    redis, store = target.redis, target.store
    await redis.flushall()
    textbook = redis.register_script(TEXTBOOK_ONLINE_FRIENDS)
    # The textbook keeps one sorted set scored by last activity; build it beside ours.
    friend_ids = [f"u{i * 7}" for i in range(friends)]
    await store.add_friends("me", friend_ids, mutual=False)
    await redis.sadd(TEXTBOOK_KEYS[0], *friend_ids)
    rows: list[Row] = []
    loaded = 0
    first_ours = 0.0
    for size in sizes:
        for start in range(loaded, size, 10_000):
            chunk = [f"u{i}" for i in range(start, min(start + 10_000, size))]
            await store.touch_many(chunk)
            now_ms = int(time.time() * 1000)
            await redis.zadd(TEXTBOOK_KEYS[1], dict.fromkeys(chunk, now_ms))
        loaded = size
        repeat = 200 if size <= 100_000 else 50
        ours = statistics.median(await timed(lambda: store.online_friends("me", first=50), repeat))
        base = statistics.median(
            await timed(
                lambda: textbook(keys=TEXTBOOK_KEYS, args=[600_000]), 3 if size > 100_000 else 10
            )
        )
        first_ours = first_ours or ours
        rows.append(
            (
                f"onlineFriends, {friends:,} friends, {size:,} online (median)",
                fmt(ours, " ms"),
                f"textbook {fmt(base, ' ms')}",
                f"{base / ours:,.0f}x faster; {ours / first_ours:.2f}x ours at {sizes[0]:,}",
            )
        )
    await redis.flushall()
    return rows


# --- touchMany and weeklyStats --------------------------------------------------------------


@contextmanager
def touch_many_batches_of(size: int) -> Iterator[None]:
    saved = shard_module.TOUCH_MANY_BATCH
    shard_module.TOUCH_MANY_BATCH = size
    try:
        yield
    finally:
        shard_module.TOUCH_MANY_BATCH = saved


async def bench_touch_many(target: Deployment, calls: int) -> list[Row]:
    """Ours (script calls of TOUCH_MANY_BATCH users, sent at once) against one script call
    for all 1,000 users, which can hold Redis for long with long ids: in turn, three rounds."""
    redis, store = target.redis, target.store
    await redis.flushall()
    rates: dict[tuple[int, str], list[float]] = defaultdict(list)
    for turn in range(3):
        for size in (shard_module.TOUCH_MANY_BATCH, 1000):
            batches = [[f"m{size}-{turn}-{c}-{i}" for i in range(1000)] for c in range(calls // 3)]
            for state in ("new", "online already"):
                with touch_many_batches_of(size):
                    start = time.perf_counter()
                    for batch in batches:
                        await store.touch_many(batch)
                rates[size, state].append(len(batches) * 1000 / (time.perf_counter() - start))
    await redis.flushall()
    rows: list[Row] = []
    for state in ("new", "online already"):
        ours, whole = (
            statistics.median(rates[size, state]) for size in (shard_module.TOUCH_MANY_BATCH, 1000)
        )
        rows.append(
            (
                f"touchMany of 1,000 users per call, {state} "
                f"({1000 // shard_module.TOUCH_MANY_BATCH} script calls, sent at once)",
                fmt(ours, " users/s"),
                f"one script call of 1,000: {fmt(whole, ' users/s')}",
                f"{ours / whole:.2f}x",
            )
        )
    return rows


async def bench_weekly_stats(target: Deployment, users: int) -> list[Row]:
    redis, store = target.redis, target.store
    await redis.flushall()
    await fill_online(store, users)
    times = await timed(store.weekly_stats, 50)
    stats = await store.weekly_stats()
    assert stats.days[-1].active_users == users
    await redis.flushall()
    return [
        (
            f"weeklyStats, {users:,} daily active users (median)",
            fmt(statistics.median(times), " ms"),
            "",
            "",
        )
    ]


# --- touch, presence and onlineFriends over HTTP --------------------------------------------


def without_cursors(answer: Any) -> Any:
    """The answer with every endCursor left out: a cursor is sealed with a nonce of its own,
    so two cursors of the same page never have the same text."""
    if isinstance(answer, dict):
        return {k: without_cursors(v) for k, v in answer.items() if k != "endCursor"}
    if isinstance(answer, list):
        return [without_cursors(item) for item in answer]
    return answer


async def check_same_answers(ours_url: str, bare_url: str) -> None:
    """The bare handler answers each read as the service does."""
    async with aiohttp.ClientSession() as session:
        for operation in OPERATIONS[1:]:
            payload = {"query": operation.query, "variables": {"u": operation.users[0]}}
            async with session.post(ours_url, json=payload) as response:
                ours = without_cursors(await response.json())
            async with session.post(bare_url + operation.path, json=payload) as response:
                if without_cursors(await response.json()) != ours:
                    raise RuntimeError(f"the bare handler answers {operation.name} differently")


HTTP_ROUNDS = 3


def against_bare(name: str, ours: Figures, bare: Figures) -> list[Row]:
    return [
        (
            name,
            figures(ours),
            f"bare aiohttp + same store call {figures(bare)}",
            f"{ours[0] / bare[0]:.2f}x the bare handler's req/s",
        ),
        (
            "",
            f"{fmt(ours[3], ' µs')} server CPU per request",
            f"bare handler {fmt(bare[3], ' µs')}",
            f"{ours[3] / bare[3]:.2f}x the bare handler's CPU",
        ),
    ]


async def bench_http(target: Deployment, seconds: float, concurrency: int) -> list[Row]:
    env = target.env
    await seed_http(target)
    ours_port, bare_port, many_port, bare_many_port = (free_port() for _ in range(4))
    traced_port, collector_port = free_port(), free_port()
    unplanned_port = free_port()
    workers = os.cpu_count() or 1
    clients = min(workers, 2)
    ours = [serve_ours(env, ours_port, 1)]
    many = [serve_ours(env, many_port, workers)]
    bare = start_bare(env, bare_port, 1)
    bare_many = start_bare(env, bare_many_port, workers)
    collector = start_process(
        [
            sys.executable,
            "-c",
            f"from bench.harness import serve_collector; serve_collector({collector_port})",
        ],
        {"PYTHONPATH": os.getcwd()},
    )
    # Every request traced (the default sampler) and exported to the local receiver.
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}"}
    traced = [serve_ours({**env, **endpoint}, traced_port, 1)]
    # Every request through Strawberry's view and graphql-core's executor, as before plans.
    unplanned = [serve_ours({**env, "PRESENCE_PLANNED_EXECUTION": "false"}, unplanned_port, 1)]
    unplanned_url = f"http://127.0.0.1:{unplanned_port}/graphql"
    every = [*ours, *many, *bare, *bare_many, *traced, *unplanned, collector]
    try:
        ours_url, many_url, traced_url = (
            f"http://127.0.0.1:{port}/graphql" for port in (ours_port, many_port, traced_port)
        )
        bare_url, bare_many_url = (
            f"http://127.0.0.1:{bare_port}",
            f"http://127.0.0.1:{bare_many_port}",
        )
        for url in (
            ours_url,
            many_url,
            traced_url,
            unplanned_url,
            bare_url + "/touch",
            bare_many_url + "/touch",
        ):
            await wait_for(url)
        await check_same_answers(ours_url, bare_url)
        for operation in OPERATIONS:  # warm-up
            await load(ours_url, operation.query, 1, concurrency, users=operation.users)
        await load(traced_url, TOUCH, 1, concurrency)
        await load_from_processes(many_url, TOUCH, 1, concurrency, clients)
        await load(unplanned_url, TOUCH, 1, concurrency)
        # Rounds taken in turn, so that a burst of other work on the machine falls on each
        # alike; the median of each.
        rounds: dict[str, list[Figures]] = defaultdict(list)
        for _ in range(HTTP_ROUNDS):
            rounds["empty"].append(await measured(ours, ours_url, EMPTY, seconds, concurrency))
            for op in OPERATIONS:
                rounds[op.name].append(await measured(ours, ours_url, op, seconds, concurrency))
                rounds[f"bare {op.name}"].append(
                    await measured(bare, bare_url + op.path, op, seconds, concurrency)
                )
            rounds["traced"].append(
                await measured(traced, traced_url, OPERATIONS[0], seconds, concurrency)
            )
            rounds["unplanned"].append(
                await measured(unplanned, unplanned_url, OPERATIONS[0], seconds, concurrency)
            )
        # All workers against as many bare processes, each loaded from `clients` processes.
        for _ in range(HTTP_ROUNDS):
            for op in OPERATIONS:
                rounds[f"many {op.name}"].append(
                    await measured(many, many_url, op, seconds, concurrency, clients=clients)
                )
                rounds[f"bare many {op.name}"].append(
                    await measured(
                        bare_many,
                        bare_many_url + op.path,
                        op,
                        seconds,
                        concurrency,
                        clients=clients,
                    )
                )
    finally:
        for process in every:
            process.send_signal(signal.SIGTERM)
        for process in every:
            process.wait(20)

    median = {name: median_figures(taken) for name, taken in rounds.items()}
    touch, empty, with_traces = median["touch"], median["empty"], median["traced"]
    without_plans = median["unplanned"]
    rows: list[Row] = []
    for op in OPERATIONS:
        name = f"{op.name} over HTTP+GraphQL, 1 process, {concurrency} connections"
        rows += against_bare(name, median[op.name], median[f"bare {op.name}"])
    rows += [
        (
            f"{EMPTY.name}, 1 process",
            f"{figures(empty)}; {fmt(empty[3], ' µs')} CPU per request",
            f"touch (above): {fmt(touch[3], ' µs')} CPU per request",
            f"touch at {touch[0] / empty[0]:.2f}x the empty query's req/s",
        ),
        (
            "touch with tracing on (every request sampled, exported to a local receiver)",
            f"{figures(with_traces)}; {fmt(with_traces[3], ' µs')} CPU per request",
            f"tracing off (above): {fmt(touch[3], ' µs')} CPU per request",
            f"{with_traces[0] / touch[0]:.2f}x the rate; "
            f"+{fmt(with_traces[3] - touch[3], ' µs')} CPU per request",
        ),
        (
            "touch with planned execution off (every request through graphql-core's executor)",
            f"{figures(without_plans)}; {fmt(without_plans[3], ' µs')} CPU per request",
            f"planned (the rows above): {fmt(touch[3], ' µs')} CPU per request",
            f"planned: {touch[0] / without_plans[0]:.2f}x the rate; "
            f"{without_plans[3] / touch[3]:.2f}x less CPU per request",
        ),
    ]
    for op in OPERATIONS:
        name = (
            f"{op.name}, {workers} workers against {workers} bare processes, "
            f"{concurrency} connections from {clients} client processes"
        )
        rows += against_bare(name, median[f"many {op.name}"], median[f"bare many {op.name}"])
    return rows


# Master i serves the slots from the i-th start on: the hash tags {0}, {1}, {2} of the three
# shards (slots 13907, 9842, 5649) each land on a master of their own. (The even split
# 0/5461/10923 would put shards 1 and 2 on one master and none on the first.)
CLUSTER_SLOT_STARTS = (0, 7000, 11000)


def node_of(redis: RedisCluster, key: str) -> str:
    node = redis.get_node_from_key(key)
    assert node is not None, key  # the client knows every slot's node once initialized
    return node.name


@asynccontextmanager
async def three_masters() -> AsyncIterator[tuple[str, Deployment]]:
    cluster = start_redis_cluster(CLUSTER_SLOT_STARTS)
    startup = [ClusterNode(host, port) for host, port in cluster.nodes]
    redis = RedisCluster(startup_nodes=startup, decode_responses=True, socket_timeout=600)
    settings = replace(SETTINGS, redis_cluster_nodes=cluster.nodes, shards=3)
    nodes = ",".join(f"{host}:{port}" for host, port in cluster.nodes)
    env = {"REDIS_URL": "", "REDIS_CLUSTER_NODES": nodes, "PRESENCE_SHARDS": "3"}
    try:
        await redis.initialize()
        # Redis's default node timeout instead of the tests' 2 s: the textbook recipe blocks its
        # node for seconds at a million users online, and with 2 s the other masters mark that
        # node as failing and the whole cluster refuses commands until it is cleared.
        await redis.config_set("cluster-node-timeout", 15_000, target_nodes=RedisCluster.PRIMARIES)
        place = {f"shard {i}": Keys.of_shard(i).online for i in range(3)}
        place["textbook recipe"] = TEXTBOOK_KEYS[1]
        where = {name: node_of(redis, key) for name, key in place.items()}
        if len({where[f"shard {i}"] for i in range(3)}) < 3:
            raise RuntimeError(f"the shards do not each have a master of their own: {where}")
        title = "Redis Cluster of 3 masters, 3 shards: " + "; ".join(
            f"{name} (slot {redis.keyslot(place[name])}) on {node}" for name, node in where.items()
        )
        yield title, Deployment(redis, PresenceStore(redis, settings), 3, env)
    finally:
        await redis.aclose()
        cluster.stop()


DEPLOYMENTS: dict[str, Callable[[], AbstractAsyncContextManager[tuple[str, Deployment]]]] = {
    "single": one_redis,
    "cluster": three_masters,
}


async def run(target: Deployment, quick: bool) -> tuple[str, list[Row]]:
    """The Redis version and the rows of the table, measured on `target`."""
    redis = target.redis
    version = (await redis.info("server"))["redis_version"]
    rows: list[Row] = []
    rows += await bench_memory(target, 100_000)
    rows += await bench_online_friends(
        target, [10_000, 100_000] if quick else [10_000, 100_000, 1_000_000], 1000
    )
    rows += await bench_touch_many(target, 50 if quick else 300)
    rows += await bench_weekly_stats(target, 100_000 if quick else 1_000_000)
    await redis.flushall()
    rows += await bench_http(target, 1 if quick else 4, 50)
    return version, rows


async def main(quick: bool, only: str | None) -> None:
    for kind, deployment in DEPLOYMENTS.items():
        if only not in (None, kind):
            continue
        async with deployment() as (title, target):
            version, rows = await run(target, quick)
        print(
            f"gql-presence benchmarks, {datetime.now(UTC):%Y-%m-%d}, Redis {version}, "
            f"Python {platform.python_version()}, {os.cpu_count()} cores\n{title}\n"
        )
        print_table(rows)
        print(flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes and shorter runs")
    parser.add_argument(
        "--only", choices=list(DEPLOYMENTS), help="one of the deployments (default: both)"
    )
    arguments = parser.parse_args()
    asyncio.run(main(arguments.quick, arguments.only))
