--[[
  carry_online_time: carries one key of online time in the layout of earlier versions into
  each day's keys (includes/online_time.lua), then deletes it, so that what it held is counted
  once: a second call finds it gone.

  The earlier layout: ot:<span>:<block>, a STRING of a u16 (2-second units) per user and day
  for the OLD_SPAN_DAYS days of span <span> (days since 1970-01-01 in the stats zone, over
  OLD_SPAN_DAYS) and the OLD_BLOCK_USERS bit indexes of block <block> (index over
  OLD_BLOCK_USERS), a user's days next to each other: index i's day d at u16 position
  (i % OLD_BLOCK_USERS) * OLD_SPAN_DAYS + d % OLD_SPAN_DAYS.

  KEYS[1]  old  STRING  ot:<span>:<block> of the earlier layout
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua):
                  online_time_prefix (each day's keys are named from it, in the hash tag of
                  KEYS), analytics_ms, zone
  ARGV[2]  span   int: <span> of the key's name
  ARGV[3]  block  int: <block> of the key's name
  Returns  {counters, days}: the nonzero counters carried, and the days they were added to;
           days no longer kept (ended more than analytics_ms ago) are left out, as they read 0
  Work     a GET of the key's 64 KB and a pass over its 32,768 counters in Lua (a user with no
           time in the span skipped whole), then per day with time, an EXISTS or two and one
           BITFIELD (or, for a day whose fold has begun, an HINCRBY a counter); a DEL
]]
--- @include "clock"
--- @include "online_time"
--- @include "options"
local shard = shard_options(ARGV[1])
local old_key = KEYS[1]
local span, block = tonumber(ARGV[2]), tonumber(ARGV[3])
local OLD_SPAN_DAYS, OLD_BLOCK_USERS = 32, 1024
local sbyte, ssub = string.byte, string.sub

local value = redis.call('GET', old_key)
if not value then return {0, 0} end

local NONE = string.rep('\0', 2 * OLD_SPAN_DAYS)
local indexes, units = {}, {}
for i = 0, OLD_BLOCK_USERS - 1 do
  local at = 2 * OLD_SPAN_DAYS * i
  if ssub(value, at + 1, at + 2 * OLD_SPAN_DAYS) ~= NONE then
    for d = 0, OLD_SPAN_DAYS - 1 do
      local hi, lo = sbyte(value, at + 2 * d + 1, at + 2 * d + 2)
      if lo and hi + lo > 0 then
        indexes[d] = indexes[d] or {}
        units[d] = units[d] or {}
        table.insert(indexes[d], block * OLD_BLOCK_USERS + i)
        table.insert(units[d], hi * 256 + lo)
      end
    end
  end
end

local zone, now = zone_of(shard.zone), now_ms()
local keep_ms = tonumber(shard.analytics_ms)
local counters, days = 0, 0
for d = 0, OLD_SPAN_DAYS - 1 do
  if indexes[d] then
    local day = span * OLD_SPAN_DAYS + d
    local expire_ms = day_start(zone, day + 1) + keep_ms
    if expire_ms > now then
      -- An old block lies within one new block (BLOCK_USERS is a multiple of OLD_BLOCK_USERS).
      add_units(shard.online_time_prefix, day, indexes[d], units[d], expire_ms)
      counters, days = counters + #indexes[d], days + 1
    end
  end
end
redis.call('DEL', old_key)
return {counters, days}
