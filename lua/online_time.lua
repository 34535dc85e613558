--[[
  online_time: how long each of some users was online on each of some consecutive days.

  KEYS[1]  user_index  HASH  user_id -> bit index (includes/activity.lua)
  KEYS[2]  since       ZSET  member=user_id  score=-(when their online period began, ms)
  KEYS[3]  online      ZSET  member=user_id  score=newest live session's expiry, ms, or a held
                             score (includes/live.lua)
  KEYS[4]  leases      ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads:
                  online_time_prefix (each day's keys of includes/online_time.lua are named
                  from it, the day and the users' indexes, in the hash tag of KEYS)
  ARGV[2]  first_day  int: the first day's number (days since 1970-01-01 in the stats zone)
  ARGV[3]  day_count  int: how many days, 1 to 92
  ARGV[4..]  user_ids  string
  Returns  {from_ms, to_ms, ..., at, units, ...}: for each user in order, their current period
           (from onlineSince to now, or to the moment an expired presence not swept yet ended;
           from_ms -1 for none), which the days do not hold yet; then for each day and user
           with time that day, at = day offset * 65536 + the user's place (from 1) and their
           2-second units
  Work     a day at a time: a day folded, a GET of its marker and bitmap, of its directory if
           someone asked has time that day, one BITFIELD of their counters, and an EXISTS of
           its late additions (an HMGET if any); a day open, a GET of each block of 4,096
           indexes holding someone asked; the ranks counted in Lua from at most 32 bytes each
]]
--- @include "clock"
--- @include "live"
--- @include "online_time"
--- @include "options"
local shard = shard_options(ARGV[1])
local index_key, since_key, online_key = KEYS[1], KEYS[2], KEYS[3]
local leases = lease_book(KEYS[4])
local first_day, day_count = tonumber(ARGV[2]), tonumber(ARGV[3])
local user_ids = {unpack(ARGV, 4)}
local prefix = shard.online_time_prefix
local sbyte, floor = string.byte, math.floor

local now = now_ms()
local n = #user_ids
local indexes = n > 0 and redis.call('HMGET', index_key, unpack(user_ids)) or {}
local sinces = n > 0 and redis.call('ZMSCORE', since_key, unpack(user_ids)) or {}
local expiries = n > 0 and redis.call('ZMSCORE', online_key, unpack(user_ids)) or {}
local reply = {}
-- The users with a bit index: their place among user_ids, and where their bit lies.
local asked, index_of, block_of, byte_of, bit_of = {}, {}, {}, {}, {}
for i = 1, n do
  local since = sinces[i]
  local expiry = since and tonumber(expiries[i])
  local from, to = -1, -1
  if expiry then
    from, to = -tonumber(since), now
    local slot = held_slot(expiry)
    if slot == nil then
      to = math.min(expiry, now)
    elseif slot > 0 and not slot_live(leases, slot, now) then
      to = math.min(lapse_of(leases, slot) or now, now)
    end
  end
  reply[#reply + 1], reply[#reply + 2] = from, to
  local index = tonumber(indexes[i])
  if index then
    asked[#asked + 1] = i
    index_of[i], block_of[i] = index, floor(index / BLOCK_USERS)
    byte_of[i], bit_of[i] = floor(index / 8) + 1, index % 8
  end
end

local POP = {}
for v = 0, 255 do
  local c, x = 0, v
  while x > 0 do c, x = c + x % 2, floor(x / 2) end
  POP[v] = c
end
-- HEAD[byte * 8 + k]: the bits set in the byte before bit k (0: the first), or -1 when bit k
-- is clear: whether an index has time that day, and the start of its rank, from one lookup.
local HEAD = {}
for v = 0, 255 do
  for k = 0, 7 do
    local head = floor(v / 2 ^ (7 - k))
    HEAD[v * 8 + k] = head % 2 == 1 and POP[(head - 1) / 2] or -1
  end
end

-- units[at]: the 2-second units of the user at place i on day offset d (at = d * 65536 + i).
local units, order = {}, {}
local function add(at, value)
  value = tonumber(value)
  if value and value > 0 then
    if not units[at] then order[#order + 1] = at end
    units[at] = (units[at] or 0) + value
  end
end

-- The dense counters of an open day (or of the blocks a fold has not reached), a GET a block.
local function read_dense(day, d, from_block)
  local blocks = {}
  for _, i in ipairs(asked) do
    local block = block_of[i]
    if block >= from_block then
      local counters = blocks[block]
      if counters == nil then
        counters = redis.call('GET', prefix .. 'd' .. day .. ':' .. block) or false
        blocks[block] = counters
      end
      if counters then
        local at = 2 * (index_of[i] % BLOCK_USERS)
        local hi, lo = sbyte(counters, at + 1, at + 2)
        if hi then add(d * 65536 + i, hi * 256 + lo) end
      end
    end
  end
end

-- A folded day: each rank from the directory and the bitmap, one BITFIELD of the counters.
local function read_folded(day, d, folded)
  local bits = redis.call('GET', prefix .. 'b' .. day) or ''
  local dir
  local args, online, n_online, a = {}, {}, 0, 0
  for j = 1, #asked do
    local i = asked[j]
    local at = byte_of[i]
    local head = HEAD[(sbyte(bits, at) or 0) * 8 + bit_of[i]]
    if head >= 0 and block_of[i] < folded then
      dir = dir or redis.call('GET', prefix .. 'r' .. day)
      local e = floor(index_of[i] / DIRECTORY_USERS)
      local b1, b2, b3, b4 = sbyte(dir, 4 * e + 1, 4 * e + 4)
      local rank = ((b1 * 256 + b2) * 256 + b3) * 256 + b4 + head
      for p = e * DIRECTORY_USERS / 8 + 1, at - 1 do rank = rank + POP[sbyte(bits, p)] end
      n_online, a = n_online + 1, a + 3
      online[n_online], args[a - 2], args[a - 1], args[a] = i, 'GET', 'u16', '#' .. rank
    end
  end
  if n_online > 0 then
    local got = redis.call('BITFIELD', prefix .. 'c' .. day, unpack(args))
    for j, i in ipairs(online) do add(d * 65536 + i, got[j]) end
  end
end

if #asked > 0 then
  for d = 0, day_count - 1 do
    local day = first_day + d
    local blocks = tonumber(redis.call('GET', prefix .. 'm' .. day))
    if blocks then
      local folded = floor(redis.call('STRLEN', prefix .. 'r' .. day) / (4 * BLOCK_USERS / DIRECTORY_USERS))
      if folded > 0 then read_folded(day, d, folded) end
      if folded < blocks then read_dense(day, d, folded) end
      local late = prefix .. 'l' .. day
      if redis.call('EXISTS', late) == 1 then
        local fields = {}
        for j, i in ipairs(asked) do fields[j] = index_of[i] end
        local got = redis.call('HMGET', late, unpack(fields))
        for j, i in ipairs(asked) do add(d * 65536 + i, got[j]) end
      end
    else
      read_dense(day, d, 0)
    end
  end
end
for _, at in ipairs(order) do
  reply[#reply + 1], reply[#reply + 2] = at, units[at]
end
return reply
