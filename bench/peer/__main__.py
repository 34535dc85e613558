"""touch against the stack a team would build instead, in one run: `python -m bench.peer
[--seconds S] [--rounds R] [--connections C] [--baseline REV]`.

Three servers on one private Redis, each one process pinned to the first core, loaded in turn
by wrk (`apt-get install wrk`) pinned to the second, with `touch` for 5,000 users at C
connections:
- ours, with the production checklist's settings (docs/operations.md): a backend token
  required, rate limits on (the shared bucket taken on every request), metrics and JSON logs;
- the peer (bench/peer/server.js): GraphQL Yoga, graphql-jit and ioredis on Node, calling
  the same lua/touch.lua with the same KEYS and ARGV (`npm ci` in bench/peer/ when its
  node_modules is missing);
- the bare aiohttp handler calling our store's touch: the floor of this stack;
- with --baseline, ours as commit REV has it ("then"), with the same settings.

Before measuring, one touch through each must leave the same keys with the same shapes in
Redis, and every answer wrk reads must be a touch's data (checked by its script). R rounds,
the servers taking turns in each, S seconds each; the median of each figure. CPU per request
is the server process's own (user + system, from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from redis.asyncio import Redis

from bench.harness import (
    PRODUCTION_ENV,
    PRODUCTION_TOKEN,
    TOUCH,
    Figures,
    Row,
    cpu_seconds,
    export,
    figures,
    fmt,
    median_figures,
    print_table,
    start_process,
    wait_for,
)
from gql_presence.running.redis_server import free_port, start_redis_server
from gql_presence.settings import Settings
from gql_presence.store.keys import Keys
from gql_presence.store.publishing import Publish
from gql_presence.store.scripts import Scripts, script_source
from gql_presence.store.shard import Shard
from gql_presence.store.validation import MAX_FUTURE_MS

PEER = Path(__file__).resolve().parent
SERVER_CORE, LOAD_CORE = "0", "1"
TOKEN = PRODUCTION_TOKEN
USERS = 5000
WRK = shutil.which("wrk") or "wrk"

# wrk's script: each request touches the next of USERS users in the default session, and each
# answer must be a touch's data (a refusal would be cheaper than the work compared).
WRK_SCRIPT = """
n, bad, threads = 0, 0, {}  -- globals: done() reads each thread's bad
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer %(token)s"
function setup(thread) table.insert(threads, thread) end
function request()
  n = n + 1
  local body = '{"query": %(query)s, "variables": {"u": "load-' .. (n %% %(users)d) .. '"}}'
  return wrk.format(nil, nil, nil, body)
end
function response(status, headers, body)
  if status ~= 200 or not body:find('"online"') or body:find('"errors"') then bad = bad + 1 end
end
function done(summary, latency, requests)
  local wrong = 0
  for _, thread in ipairs(threads) do wrong = wrong + thread:get("bad") end
  local e = summary.errors
  io.write(string.format('{"requests": %%d, "us": %%d, "p50_us": %%d, "p99_us": %%d, ' ..
    '"wrong": %%d, "connect": %%d, "read": %%d, "write": %%d, "timeout": %%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), wrong,
    e.connect, e.read, e.write, e.timeout))
end
"""


@dataclass
class Server:
    name: str
    url: str
    processes: list[subprocess.Popen[bytes]]


def on_core(core: str) -> list[str]:
    return [shutil.which("taskset") or "taskset", "-c", core]


def pinned(args: list[str]) -> list[str]:
    return [*on_core(SERVER_CORE), *args]


def ours_env(redis_url: str) -> dict[str, str]:
    """The production checklist's settings that apply on one machine without TLS or JWTs."""
    return {
        "REDIS_URL": redis_url,
        "PRESENCE_WORKERS": "1",
        **PRODUCTION_ENV,
        "PRESENCE_STATS_TIMEZONE": "UTC",  # the peer works out days in UTC
    }


def peer_config(redis_url: str, port: int, script: Path) -> dict[str, object]:
    """What the peer needs to pass touch.lua the KEYS and ARGV our store passes for a plain
    touch on a deployment of one shard (lua/touch.lua's header; store/shard.py's touch): the
    `shard` argument is our own shard's, packed by the store, so the two cannot drift."""
    settings = Settings.from_env({})
    client = Redis.from_url(redis_url)
    shard = Shard(client, settings, 0, Scripts.register(client))
    shard.publish_with(Publish.CLASSIC)
    return {
        "redisUrl": redis_url,
        "port": port,
        "script": str(script),
        "prefix": shard.keys.prefix,
        "shardOptions": base64.b64encode(shard.options).decode(),
        "maxFutureMs": MAX_FUTURE_MS,
    }


def start_peer(config: dict[str, object]) -> subprocess.Popen[bytes]:
    if not (PEER / "node_modules").exists():
        npm = shutil.which("npm") or "npm"
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=PEER, check=True)
    node = shutil.which("node") or "node"
    server = [node, str(PEER / "server.js")]
    return start_process(pinned(server), {"PEER_CONFIG": json.dumps(config)})


# --- the same work: what one touch leaves in Redis -----------------------------------------


async def footprint(redis: Redis, user: str) -> dict[str, str]:
    """Every key in Redis (emptied before the touch of `user`), with the user's id in its name
    replaced, and the shape of the user's part in it (the rate limiter's buckets and the
    sweep's scan cursor left out: not touch's work)."""
    keys = Keys()
    index = await redis.hget(keys.user_index, user)
    # Scores as offsets from the touch's time, which differs between servers: the window
    # after it (online), nothing (lastseen, since).
    activity_ms = -(await redis.zscore(keys.last_seen, user) or 0)
    found: dict[str, str] = {}
    for key in sorted(str(k) for k in await redis.keys("*")):
        if key.startswith(keys.rate_bucket("")) or key == keys.index_scan:
            continue
        kind, expires = str(await redis.type(key)), await redis.pttl(key) > 0
        name = key.replace(user, "<user>")
        shape: str | None
        if user in key:
            shape = await members(redis, key, kind)
        elif kind == "zset":
            score = await redis.zscore(key, user)
            if score is None:
                shape = None
            else:
                offset = score - activity_ms if score >= 0 else score + activity_ms
                shape = f"score {'-' if score < 0 else ''}(touched + {offset:g} ms)"
        elif kind == "hash":
            shape = "field" if await redis.hexists(key, user) else None
        elif kind == "string" and (key.startswith(keys.day("")) or not await is_text(redis, key)):
            # The activity bitmaps (days, weeks, months, hours, first days): the user's bit.
            shape = None if index is None else f"bit {await redis.getbit(key, int(index))}"
        elif kind == "string":
            shape = f"value {await redis.get(key)!s}"
        else:
            shape = "present"
        if shape is not None:
            found[name] = f"{kind}: {shape}, expiring {expires}"
    return found


async def is_text(redis: Redis, key: str) -> bool:
    """Whether a string key's value is UTF-8 (a bitmap's is not)."""
    try:
        await redis.get(key)
    except UnicodeDecodeError:
        return False
    return True


async def members(redis: Redis, key: str, kind: str) -> str:
    if kind == "zset":
        return f"members {await redis.zrange(key, 0, -1)}"
    if kind == "hash":
        return f"fields {sorted(await redis.hkeys(key))}"
    if kind == "set":
        return f"members {sorted(await redis.smembers(key))}"
    return "present"


async def same_work(redis_url: str, servers: list[Server]) -> None:
    """One touch through each server, of a user of its own, each on an emptied Redis; raises
    unless each left the same keys with the same shapes."""
    prints: dict[str, dict[str, str]] = {}
    async with (
        Redis.from_url(redis_url, decode_responses=True) as redis,
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
    ):
        for server in servers:
            user = f"same-work-{server.name}"
            await redis.flushall()
            body = {"query": TOUCH, "variables": {"u": user}}
            async with http.post(server.url, json=body) as response:
                answer = await response.json()
            if answer != {"data": {"touch": {"online": True}}}:
                raise RuntimeError(f"{server.name} answered a touch with {answer}")
            prints[server.name] = await footprint(redis, user)
    first, *others = servers
    for other in others:
        if prints[other.name] != prints[first.name]:
            raise RuntimeError(
                f"one touch left different keys through {first.name} and {other.name}:\n"
                f"{json.dumps(prints[first.name], indent=1)}\n"
                f"{json.dumps(prints[other.name], indent=1)}"
            )
    same = prints[first.name]
    print(f"One touch left the same {len(same)} keys through each server:")
    for name, shape in same.items():
        print(f"  {name}  {shape}")


# --- load ---------------------------------------------------------------------------------


def wrk(url: str, seconds: float, connections: int, script: Path) -> tuple[float, float, float]:
    """Requests per second, p50 and p99 in ms, from wrk pinned to the load's core."""
    # A timeout well past any p99 seen, so that every slow answer is counted in the latencies.
    options = ["-t1", f"-c{connections}", f"-d{seconds:g}s", "--timeout", "10s", "-s", str(script)]
    done = subprocess.run(
        [*on_core(LOAD_CORE), WRK, *options, url],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed on {url}: {done.stderr.strip()}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    failed = {k: result[k] for k in ("wrong", "connect", "read", "write", "timeout") if result[k]}
    if failed:
        raise RuntimeError(f"{url}: answers wrong or missing ({failed}) in {result}")
    rate = result["requests"] / (result["us"] / 1e6)
    return rate, result["p50_us"] / 1000, result["p99_us"] / 1000


def write_scripts(folder: Path) -> tuple[Path, Path]:
    """touch.lua as our store loads it (includes written in), for the peer; wrk's script."""
    script, load_script = folder / "touch.lua", folder / "load.lua"
    script.write_text(script_source("touch"), encoding="utf-8")
    values = {"token": TOKEN, "query": json.dumps(TOUCH), "users": USERS}
    load_script.write_text(WRK_SCRIPT % values, encoding="utf-8")
    return script, load_script


def measured(server: Server, seconds: float, connections: int, script: Path) -> Figures:
    before = cpu_seconds(server.processes)
    rate, p50, p99 = wrk(server.url, seconds, connections, script)
    used = cpu_seconds(server.processes) - before
    return rate, p50, p99, used / (rate * seconds) * 1e6


def compared(name: str, ours: Figures, other: Figures) -> Row:
    return (
        name,
        f"{figures(ours)}; {fmt(ours[3], ' µs')} CPU per request",
        f"{figures(other)}; {fmt(other[3], ' µs')} CPU per request",
        f"{ours[0] / other[0]:.2f}x the req/s, {ours[2] / other[2]:.2f}x the p99, "
        f"{ours[3] / other[3]:.2f}x the CPU",
    )


async def main(seconds: float, rounds: int, connections: int, baseline: str | None) -> None:
    if baseline is None:
        await measure(seconds, rounds, connections, None)
        return
    with tempfile.TemporaryDirectory(prefix="gqlp-then-") as then_folder:
        export(baseline, then_folder)
        await measure(seconds, rounds, connections, then_folder)


async def measure(seconds: float, rounds: int, connections: int, then: str | None) -> None:
    if not Path(WRK).is_absolute():
        sys.exit("python -m bench.peer needs wrk: apt-get install wrk")
    redis = start_redis_server()
    ours_port, peer_port, bare_port = free_port(), free_port(), free_port()
    env = ours_env(redis.url)
    with tempfile.TemporaryDirectory(prefix="gqlp-peer-") as folder:
        script, load_script = write_scripts(Path(folder))
        command = [sys.executable, "-m", "gql_presence", "serve", "--port", str(ours_port)]
        code = f"from bench.harness import serve_bare; serve_bare({bare_port})"
        servers = [
            Server("ours", f"http://127.0.0.1:{ours_port}/graphql", []),
            Server("peer", f"http://127.0.0.1:{peer_port}/graphql", []),
            Server("bare", f"http://127.0.0.1:{bare_port}/touch", []),
        ]
        starts: dict[str, Callable[[], subprocess.Popen[bytes]]] = {
            "ours": lambda: start_process(pinned(command), env),
            "peer": lambda: start_peer(peer_config(redis.url, peer_port, script)),
            "bare": lambda: start_process(
                pinned([sys.executable, "-c", code]), {**env, "PYTHONPATH": os.getcwd()}
            ),
        }
        if then is not None:
            then_port = free_port()
            then_command = [*command[:-1], str(then_port)]
            then_env = {**env, "PYTHONPATH": then}
            servers.append(Server("then", f"http://127.0.0.1:{then_port}/graphql", []))
            starts["then"] = lambda: start_process(pinned(then_command), then_env, cwd=then)
        try:
            for server in servers:
                server.processes.append(starts[server.name]())
            for server in servers:
                await wait_for(server.url)
            await same_work(redis.url, servers)
            for server in servers:  # warm: scripts loaded, JIT compiled, buckets made
                wrk(server.url, 3, connections, load_script)
            taken: dict[str, list[Figures]] = defaultdict(list)
            for _ in range(rounds):
                for server in servers:
                    taken[server.name].append(measured(server, seconds, connections, load_script))
        finally:
            for server in servers:
                for process in server.processes:
                    process.send_signal(signal.SIGTERM)
                    process.wait(20)
            redis.stop()
    median = {name: median_figures(figures_) for name, figures_ in taken.items()}
    what = f"touch, 1 process on 1 core, {connections} connections from wrk on the other"
    print_table(
        [
            compared(f"{what}: ours against the peer", median["ours"], median["peer"]),
            compared(f"{what}: ours against the bare handler", median["ours"], median["bare"]),
            *(
                [
                    compared(f"{what}: then against the peer", median["then"], median["peer"]),
                    compared(f"{what}: ours against then", median["ours"], median["then"]),
                ]
                if then is not None
                else []
            ),
        ]
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.peer", description=__doc__)
    parser.add_argument("--seconds", type=float, default=10, help="each server's run (10)")
    parser.add_argument("--rounds", type=int, default=3, help="turns of the three servers (3)")
    parser.add_argument("--connections", type=int, default=50, help="wrk's connections (50)")
    parser.add_argument("--baseline", help="also serve ours as this commit has it")
    arguments = parser.parse_args()
    asyncio.run(
        main(arguments.seconds, arguments.rounds, arguments.connections, arguments.baseline)
    )
