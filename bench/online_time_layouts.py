"""Layouts for closed days of online time, prototyped side by side on one private Redis 6.2:
what each keeps per active user and day, what reading 1,000 users over 92 days costs in
Redis time, and what making the compact layout costs.
`python -m bench.online_time_layouts [--indexes N] [--rounds R]`.

The same counters (2-second units, u16) in three layouts, every read checked against them:
- dense: what lua/includes/online_time.lua keeps, a u16 per index and day for blocks of 1,024
  indexes and spans of 32 days, a user's days side by side; read as lua/online_time.lua
  reads it (a GETRANGE per user and span, the bytes sent as hex);
- compact by day: for each day a bitmap of the indexes online that day, their counters in
  index order, and a directory of u32 counts of the bits before every 256th index (or every
  4,096th), so that an index's counter is at rank dir + the bits set between;
  - read per user and day: GETBIT, then for one online a GETRANGE of the directory, a
    BITCOUNT of the bytes since its entry (directory every 4,096), a GETRANGE of the last byte
    and one of the counter: five commands per user online that day;
  - read per day: one GET of the day's bitmap, the directory read only on a day with someone
    asked online, the ranks counted in Lua from a byte table (directory every 256), and one
    BITFIELD of the counters of those online; the reply only those: (day, user) and units.
Then the fold of a closed day from dense counters (a u16 per index, blocks of 4,096 indexes)
into the compact layout, a few blocks a call, and a period's end that adds to a folded day for
an index not online that day yet (its counter inserted at its rank), each checked against the
compact layout made here.
Indexes are active on a day with a rate of their own, on average 15% (6.6 indexes per daily
active user, as at the default retention), each on-line day's time a random count of units.
"""

from __future__ import annotations

import argparse
import random
import statistics
import struct
from typing import Any

import redis

from gql_presence.running.redis_server import start_redis_server

DAYS = 92
ASKED = 1000
SPAN_DAYS, BLOCK_USERS = 32, 1024
# Directory entries: every 256 indexes for the read per day (its popcount in Lua reads at most
# 32 bytes), every 4,096 for the read per user and day (its BITCOUNT does the counting).
DIR_FINE, DIR_COARSE = 256, 4096
# The fold: dense counters of a day in blocks of 4,096 indexes, 4 blocks a call, 3 days.
FOLD_BLOCK, FOLD_CALL_BLOCKS, FOLDED = 4096, 4, 3

DENSE_READ = """
local first_day, day_count = 0, tonumber(ARGV[1])
local last_day = first_day + day_count - 1
local HEX = {}
for byte = 0, 255 do HEX[string.char(byte)] = string.format('%02x', byte) end
local reply = {}
for k = 2, #ARGV do
  local index = tonumber(ARGV[k])
  local block, at = math.floor(index / 1024), (index % 1024) * 32
  local parts = {}
  for span = math.floor(first_day / 32), math.floor(last_day / 32) do
    local from = math.max(first_day, span * 32) - span * 32
    local to = math.min(last_day, span * 32 + 31) - span * 32
    local key = 'ot:' .. span .. ':' .. block
    local got = redis.call('GETRANGE', key, 2 * (at + from), 2 * (at + to) + 1)
    parts[#parts + 1] = got .. string.rep('\\0', 2 * (to - from + 1) - #got)
  end
  reply[#reply + 1] = (string.gsub(table.concat(parts), '.', HEX))
end
return reply
"""

# Per user and day; the reply a hex string per day (the users' u16 in order).
COMPACT_PER_USER_DAY = """
local day_count = tonumber(ARGV[1])
local POP = {}
for v = 0, 255 do
  local c, x = 0, v
  while x > 0 do c, x = c + x % 2, math.floor(x / 2) end
  POP[v] = c
end
local reply = {}
for d = 0, day_count - 1 do
  local bits, counters, dir = 'cb:' .. d, 'cc:' .. d, 'cr4096:' .. d
  local out = {}
  for k = 2, #ARGV do
    local index = tonumber(ARGV[k])
    local units = 0
    if redis.call('GETBIT', bits, index) == 1 then
      local block = math.floor(index / 4096)
      local entry = redis.call('GETRANGE', dir, 4 * block, 4 * block + 3)
      local b1, b2, b3, b4 = string.byte(entry, 1, 4)
      local rank = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
      local byte, start = math.floor(index / 8), block * 512
      if byte > start then rank = rank + redis.call('BITCOUNT', bits, start, byte - 1) end
      local last = string.byte(redis.call('GETRANGE', bits, byte, byte))
      rank = rank + POP[math.floor(last / 2 ^ (8 - index % 8))]
      local hi, lo = string.byte(redis.call('GETRANGE', counters, 2 * rank, 2 * rank + 1), 1, 2)
      units = hi * 256 + lo
    end
    out[#out + 1] = string.format('%04x', units)
  end
  reply[#reply + 1] = table.concat(out)
end
return reply
"""

COMPACT_PER_DAY = """
local day_count = tonumber(ARGV[1])
local sbyte, floor = string.byte, math.floor
local POP = {}
for v = 0, 255 do
  local c, x = 0, v
  while x > 0 do c, x = c + x % 2, floor(x / 2) end
  POP[v] = c
end
-- HEAD[byte * 8 + k]: the bits set in the byte before bit k (0: the first), or -1 when bit k
-- is clear: an index's presence and the start of its rank from one lookup.
local HEAD = {}
for v = 0, 255 do for k = 0, 7 do
  local head = floor(v / 2 ^ (7 - k))
  HEAD[v * 8 + k] = head % 2 == 1 and POP[(head - 1) / 2] or -1
end end
local n = #ARGV - 1
local at, bit, entry = {}, {}, {}
for i = 1, n do
  local index = tonumber(ARGV[i + 1])
  at[i], bit[i], entry[i] = floor(index / 8) + 1, index % 8, floor(index / 256)
end
local reply = {}
for d = 0, day_count - 1 do
  local bits = redis.call('GET', 'cb:' .. d) or ''
  local dir
  local args, online, a = {}, {}, 0
  for i = 1, n do
    local head = HEAD[(sbyte(bits, at[i]) or 0) * 8 + bit[i]]
    if head >= 0 then
      dir = dir or redis.call('GET', 'cr256:' .. d)
      local e = entry[i]
      local b1, b2, b3, b4 = sbyte(dir, 4 * e + 1, 4 * e + 4)
      local rank = ((b1 * 256 + b2) * 256 + b3) * 256 + b4 + head
      for p = 32 * e + 1, at[i] - 1 do rank = rank + POP[sbyte(bits, p)] end
      online[#online + 1] = i
      args[a + 1], args[a + 2], args[a + 3] = 'GET', 'u16', '#' .. rank
      a = a + 3
    end
  end
  if a > 0 then
    local units = redis.call('BITFIELD', 'cc:' .. d, unpack(args))
    for j = 1, #online do
      reply[#reply + 1], reply[#reply + 2] = d * 65536 + online[j], units[j]
    end
  end
end
return reply
"""


# The fold of a closed day: its dense counters (od:<day>:<block>, a u16 per index for blocks
# of 4,096 indexes) into the compact layout (fb:, fc:, fr:<day>), `count` blocks a call.
FOLD = """
local day, first, count, indexes = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local sbyte, char, floor = string.byte, string.char, math.floor
local bits_key, counters_key, dir_key = 'fb:' .. day, 'fc:' .. day, 'fr:' .. day
local total = floor(redis.call('STRLEN', counters_key) / 2)
for block = first, first + count - 1 do
  local n = math.min(4096, indexes - block * 4096)
  if n <= 0 then break end
  local dense = redis.call('GET', 'od:' .. day .. ':' .. block) or ''
  local bytes, units, dir, byte = {}, {}, {}, 0
  for i = 0, n - 1 do
    if i % 256 == 0 then
      dir[#dir + 1] = char(floor(total / 16777216), floor(total / 65536) % 256,
        floor(total / 256) % 256, total % 256)
    end
    local hi, lo = sbyte(dense, 2 * i + 1, 2 * i + 2)
    byte = byte * 2
    if hi and hi + lo > 0 then
      byte, total = byte + 1, total + 1
      units[#units + 1] = char(hi, lo)
    end
    if i % 8 == 7 then bytes[#bytes + 1], byte = char(byte), 0 end
  end
  if n % 8 > 0 then bytes[#bytes + 1] = char(byte * 2 ^ (8 - n % 8)) end
  redis.call('SETRANGE', bits_key, block * 512, table.concat(bytes))
  redis.call('APPEND', counters_key, table.concat(units))
  redis.call('APPEND', dir_key, table.concat(dir))
  redis.call('DEL', 'od:' .. day .. ':' .. block)
end
return total
"""

# A period's end that adds to a day folded already, for an index not online that day yet:
# its bit set, its counter inserted at its rank, the directory's later entries incremented.
INSERT = """
local day, index, units = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local floor = math.floor
local bits_key, counters_key, dir_key = 'fb:' .. day, 'fc:' .. day, 'fr:' .. day
local entry = floor(index / 256)
local e = redis.call('GETRANGE', dir_key, 4 * entry, 4 * entry + 3)
local b1, b2, b3, b4 = string.byte(e, 1, 4)
local rank = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
local start, byte = entry * 32, floor(index / 8)
if byte > start then rank = rank + redis.call('BITCOUNT', bits_key, start, byte - 1) end
local last = string.byte(redis.call('GETRANGE', bits_key, byte, byte))
local head = floor(last / 2 ^ (8 - index % 8))
while head > 0 do rank, head = rank + head % 2, floor(head / 2) end
redis.call('SETBIT', bits_key, index, 1)
local tail = redis.call('GETRANGE', counters_key, 2 * rank, -1)
redis.call('SETRANGE', counters_key, 2 * rank, string.char(floor(units / 256), units % 256) .. tail)
local entries = floor(redis.call('STRLEN', dir_key) / 4)
-- In BITFIELDs of at most 1,000 entries: unpack takes at most 8,000 values.
for from = entry + 1, entries - 1, 1000 do
  local args = {}
  for later = from, math.min(entries - 1, from + 999) do
    args[#args + 1], args[#args + 2], args[#args + 3] = 'INCRBY', 'u32', '#' .. later
    args[#args + 1] = 1
  end
  redis.call('BITFIELD', dir_key, unpack(args))
end
return rank
"""


def make_days(indexes: int, rng: random.Random) -> list[dict[int, int]]:
    """Each day's units by index: every index active with a rate of its own, 15% on average."""
    rates = [min(1.0, rng.expovariate(1 / 0.15)) for _ in range(indexes)]
    return [
        {i: rng.randint(1, 43_199) for i in range(indexes) if rng.random() < rates[i]}
        for _ in range(DAYS)
    ]


def write_dense(r: redis.Redis, indexes: int, days: list[dict[int, int]]) -> None:
    blocks = (indexes + BLOCK_USERS - 1) // BLOCK_USERS
    for span in range((DAYS + SPAN_DAYS - 1) // SPAN_DAYS):
        for block in range(blocks):
            counters = bytearray(2 * BLOCK_USERS * SPAN_DAYS)
            for day in range(span * SPAN_DAYS, min(DAYS, (span + 1) * SPAN_DAYS)):
                for i in range(block * BLOCK_USERS, min(indexes, (block + 1) * BLOCK_USERS)):
                    units = days[day].get(i)
                    if units:
                        at = 2 * ((i % BLOCK_USERS) * SPAN_DAYS + day % SPAN_DAYS)
                        counters[at : at + 2] = struct.pack(">H", units)
            r.set(f"ot:{span}:{block}", bytes(counters))


def compact_of(indexes: int, units: dict[int, int]) -> tuple[bytes, bytes, bytes, bytes]:
    """A day in the compact layout: its bitmap, counters, and directories every 256 and
    4,096 indexes."""
    bits = bytearray((indexes + 7) // 8)
    counters, fine, coarse, count = [], [], [], 0
    for i in range(indexes):
        if i % DIR_FINE == 0:
            fine.append(count)
        if i % DIR_COARSE == 0:
            coarse.append(count)
        if i in units:
            bits[i // 8] |= 0x80 >> (i % 8)
            counters.append(units[i])
            count += 1
    return (
        bytes(bits),
        struct.pack(f">{len(counters)}H", *counters),
        struct.pack(f">{len(fine)}I", *fine),
        struct.pack(f">{len(coarse)}I", *coarse),
    )


def write_compact(r: redis.Redis, indexes: int, days: list[dict[int, int]]) -> None:
    for day, units in enumerate(days):
        bits, counters, fine, coarse = compact_of(indexes, units)
        r.set(f"cb:{day}", bits)
        r.set(f"cc:{day}", counters)
        r.set(f"cr256:{day}", fine)
        r.set(f"cr4096:{day}", coarse)


def fold_and_insert(r: redis.Redis, indexes: int, days: list[dict[int, int]], rounds: int) -> None:
    """Folds FOLDED days from dense counters, checks each against the compact layout, and
    inserts a late counter into the first, `rounds` times, each checked."""
    blocks = (indexes + FOLD_BLOCK - 1) // FOLD_BLOCK
    fold, insert = r.register_script(FOLD), r.register_script(INSERT)
    per_day, per_call = [], []
    for day in range(FOLDED):
        for block in range(blocks):
            dense = bytearray(2 * FOLD_BLOCK)
            for i in range(block * FOLD_BLOCK, min(indexes, (block + 1) * FOLD_BLOCK)):
                if i in days[day]:
                    at = 2 * (i % FOLD_BLOCK)
                    dense[at : at + 2] = struct.pack(">H", days[day][i])
            r.set(f"od:{day}:{block}", bytes(dense))
        r.config_resetstat()
        for first in range(0, blocks, FOLD_CALL_BLOCKS):
            fold(args=[day, first, FOLD_CALL_BLOCKS, indexes])
            stats: dict[str, Any] = r.info("commandstats")
            per_call.append(
                sum(v["usec"] for k, v in stats.items() if k.startswith("cmdstat_eval"))
            )
            r.config_resetstat()
        per_day.append(sum(per_call[-((blocks + FOLD_CALL_BLOCKS - 1) // FOLD_CALL_BLOCKS) :]))
        bits, counters, fine, _ = compact_of(indexes, days[day])
        if (r.get(f"fb:{day}"), r.get(f"fc:{day}"), r.get(f"fr:{day}")) != (bits, counters, fine):
            raise SystemExit(f"day {day}: the fold differs from the compact layout")
    rng = random.Random(2)
    absent = [i for i in range(indexes) if i not in days[0]]
    inserts = []
    for index in rng.sample(absent, rounds):
        days[0][index] = rng.randint(1, 43_199)
        r.config_resetstat()
        insert(args=[0, index, days[0][index]])
        stats = r.info("commandstats")
        inserts.append(sum(v["usec"] for k, v in stats.items() if k.startswith("cmdstat_eval")))
        bits, counters, fine, _ = compact_of(indexes, days[0])
        if (r.get("fb:0"), r.get("fc:0"), r.get("fr:0")) != (bits, counters, fine):
            raise SystemExit("a late counter's insertion differs from the compact layout")
    print(
        f"fold of a day: {statistics.median(per_day) / 1000:.1f} ms of Redis time, at most "
        f"{max(per_call) / 1000:.1f} ms a call of {FOLD_CALL_BLOCKS * FOLD_BLOCK:,} indexes; "
        f"a late counter inserted: {statistics.median(inserts):.0f} µs (median of {rounds})"
    )


def kept(r: redis.Redis, pattern: str) -> int:
    return sum(int(r.memory_usage(k, samples=0) or 0) for k in r.scan_iter(pattern, count=1000))


def redis_ms(r: redis.Redis, call: Any, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        r.config_resetstat()
        call()
        stats: dict[str, Any] = r.info("commandstats")
        times.append(sum(v["usec"] for k, v in stats.items() if k.startswith("cmdstat_eval")))
    return float(statistics.median(times)) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--indexes", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(1)
    days = make_days(args.indexes, rng)
    active = sum(len(d) for d in days)
    asked = rng.sample(range(args.indexes), ASKED)
    # What every read must answer: each day's units of the users asked, a hex u16 each.
    by_day = ["".join(f"{d.get(i, 0):04x}" for i in asked) for d in days]
    by_user = ["".join(f"{d.get(i, 0):04x}" for d in days) for i in asked]
    server = start_redis_server()
    try:
        r = redis.Redis.from_url(server.url, decode_responses=True)
        write_dense(r, args.indexes, days)
        write_compact(r, args.indexes, days)
        reads = [
            ("dense", r.register_script(DENSE_READ), by_user),
            ("compact, read per user and day", r.register_script(COMPACT_PER_USER_DAY), by_day),
            ("compact, read per day", r.register_script(COMPACT_PER_DAY), by_day),
        ]
        print(
            f"{args.indexes:,} indexes, {active / DAYS:,.0f} active a day on average, "
            f"{ASKED:,} users x {DAYS} days read, median of {args.rounds}"
        )
        print("| layout | bytes per active user-day | read (ms of Redis time) |")
        print("|---|---|---|")
        sizes = {
            "dense": kept(r, "ot:*") / active,
            "compact": (kept(r, "cb:*") + kept(r, "cc:*") + kept(r, "cr256:*")) / active,
        }
        for name, script, expected in reads:
            got = script(args=[DAYS, *asked])
            if name.endswith("per day"):
                # Its reply names only the users online: (day * 65536 + place in asked, units).
                grid = [["0000"] * ASKED for _ in range(DAYS)]
                for at, u in zip(got[::2], got[1::2], strict=True):
                    grid[at // 65536][at % 65536 - 1] = f"{u:04x}"
                got = ["".join(g) for g in grid]
            if got != expected:
                raise SystemExit(f"{name}: a read differs from the counters written")
            ms = redis_ms(r, lambda s=script: s(args=[DAYS, *asked]), args.rounds)
            print(f"| {name} | {sizes[name.split(',')[0]]:.2f} | {ms:.1f} |")
        parts = {p: kept(r, f"{p}:*") / active for p in ("cb", "cc", "cr256", "cr4096")}
        print(
            "compact parts: bitmaps {cb:.2f}, counters {cc:.2f}, directory every 256 "
            "{cr256:.3f}, every 4,096 {cr4096:.3f} bytes per active user-day".format(**parts)
        )
        r.close()
        fold_and_insert(redis.Redis.from_url(server.url), args.indexes, days, args.rounds)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
