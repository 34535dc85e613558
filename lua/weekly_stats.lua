--[[
  weekly_stats: exact daily, unique, every-day and new active users over seven days.

  KEYS[1..7]  days     bitmaps of the seven days, oldest first: bit i = user with index i active
  KEYS[8]     scratch  bitmap, deleted before returning
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: retention_ms (a
                  name ending in ':' is followed by a user id, in the hash tag of KEYS)
  ARGV[2..9]  boundaries     int ms: the start of each of the seven days, then the end of the last
  Returns  {active_1, ..., active_7, unique, active_every_day, new_on_last_day}
  Work     a few BITOP/BITCOUNT over bitmaps of (highest user index / 8) bytes
]]
--- @include "clock"
--- @include "options"
local shard = shard_options(ARGV[1])
local scratch_key = KEYS[8]
local retention_ms = tonumber(shard.retention_ms)

local now = now_ms()
local counted, kept = {}, {}
for i = 1, 7 do
  local day_start, day_end = tonumber(ARGV[1 + i]), tonumber(ARGV[2 + i])
  counted[i] = day_start <= now and day_end > now - retention_ms
  if counted[i] then kept[#kept + 1] = KEYS[i] end
end

local function count_of(...)
  redis.call('BITOP', ...)
  return redis.call('BITCOUNT', scratch_key)
end

local reply = {}
for i = 1, 7 do
  reply[i] = counted[i] and redis.call('BITCOUNT', KEYS[i]) or 0
end
reply[8] = #kept > 0 and count_of('OR', scratch_key, unpack(kept)) or 0
reply[9] = #kept == 7 and count_of('AND', scratch_key, unpack(kept)) or 0
if not counted[7] then
  reply[10] = 0
elseif not counted[6] then
  reply[10] = reply[7]
else
  -- Active on the last day and not the one before: |last OR before| - |before|.
  reply[10] = count_of('OR', scratch_key, KEYS[6], KEYS[7]) - reply[6]
end
redis.call('DEL', scratch_key)
return reply
