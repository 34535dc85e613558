--[[
  carry_online_time: carries a few days of one key of online time in the layout of earlier
  versions into each day's keys (includes/online_time.lua), and deletes the key once all its
  days are carried. How many days are carried is kept in the key itself, a byte appended per
  day, in the same call that carries them: a day is carried once, whoever calls, however often.

  The earlier layout: ot:<span>:<block>, a STRING of a u16 (2-second units) per user and day
  for the OLD_SPAN_DAYS days of span <span> (days since 1970-01-01 in the stats zone, over
  OLD_SPAN_DAYS) and the OLD_BLOCK_USERS bit indexes of block <block> (index over
  OLD_BLOCK_USERS), a user's days next to each other: index i's day d at u16 position
  (i % OLD_BLOCK_USERS) * OLD_SPAN_DAYS + d % OLD_SPAN_DAYS. Made whole at its first write.

  KEYS[1]  old  STRING  ot:<span>:<block> of the earlier layout
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua):
                  online_time_prefix (each day's keys are named from it, in the hash tag of
                  KEYS), analytics_ms, zone
  ARGV[2]  span   int: <span> of the key's name
  ARGV[3]  block  int: <block> of the key's name
  ARGV[4]  days   int: at most this many days of the span carried this call, a day with time
                  whose fold has begun counting as this many (an HINCRBY a counter)
  Returns  {carried, left}: the days this call carried (with time or not) and those left; 0
           and 0 once the key is gone. Days no longer kept (ended more than analytics_ms
           ago) add nothing: they read 0 as they did.
  Work     a GET of the key's 64 KB; per day, its 1,024 counters gathered in Lua into one
           2 KB run, which lands in the day's block of 4,096 indexes by one SETRANGE (with a
           GETRANGE, and the sum in Lua, where that block holds time already) or, for a day
           whose fold has begun, an HINCRBY per counter; the DEL of the key with its last day
]]
--- @include "clock"
--- @include "online_time"
--- @include "options"
local shard = shard_options(ARGV[1])
local old_key = KEYS[1]
local span, block, per_call = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local OLD_SPAN_DAYS, OLD_BLOCK_USERS = 32, 1024
local OLD_SIZE = 2 * OLD_SPAN_DAYS * OLD_BLOCK_USERS
local sbyte, ssub, char, floor = string.byte, string.sub, string.char, math.floor

local value = redis.call('GET', old_key)
if not value then return {0, 0} end
local first = #value - OLD_SIZE

local NONE = string.rep('\0', 2 * OLD_BLOCK_USERS)
local zone, now = zone_of(shard.zone), now_ms()
local keep_ms = tonumber(shard.analytics_ms)
-- An old block lies within one new block: BLOCK_USERS is a multiple of OLD_BLOCK_USERS.
local new_block = floor(block * OLD_BLOCK_USERS / BLOCK_USERS)
local offset = 2 * (block * OLD_BLOCK_USERS % BLOCK_USERS)
local d, budget = first, per_call
while d < OLD_SPAN_DAYS and budget > 0 do
  local day = span * OLD_SPAN_DAYS + d
  local expire_ms = day_start(zone, day + 1) + keep_ms
  local run = {}
  for i = 0, OLD_BLOCK_USERS - 1 do
    local at = 2 * (OLD_SPAN_DAYS * i + d)
    run[i + 1] = ssub(value, at + 1, at + 2)
  end
  run = table.concat(run)
  if run ~= NONE and expire_ms > now then
    local key, late = day_target(shard.online_time_prefix, day, new_block, expire_ms)
    if late then
      for i = 0, OLD_BLOCK_USERS - 1 do
        local hi, lo = sbyte(run, 2 * i + 1, 2 * i + 2)
        if hi + lo > 0 then redis.call('HINCRBY', key, block * OLD_BLOCK_USERS + i, hi * 256 + lo) end
      end
      redis.call('PEXPIREAT', key, expire_ms)
      budget = budget - per_call + 1
    else
      local had = redis.call('GETRANGE', key, offset, offset + #NONE - 1)
      if had ~= NONE then
        -- Time the block holds already (a period that ended since the upgrade): summed, and
        -- held at the u16's top as the write path's BITFIELD OVERFLOW SAT does.
        local sums = {}
        for i = 0, OLD_BLOCK_USERS - 1 do
          local a, b = sbyte(run, 2 * i + 1, 2 * i + 2)
          local c, e = sbyte(had, 2 * i + 1, 2 * i + 2)
          local sum = math.min(65535, (a + c) * 256 + b + e)
          sums[i + 1] = char(floor(sum / 256), sum % 256)
        end
        run = table.concat(sums)
      end
      redis.call('SETRANGE', key, offset, run)
    end
  end
  d, budget = d + 1, budget - 1
end
if d == OLD_SPAN_DAYS then
  redis.call('DEL', old_key)
else
  redis.call('APPEND', old_key, string.rep('\0', d - first))
end
return {d - first, OLD_SPAN_DAYS - d}
