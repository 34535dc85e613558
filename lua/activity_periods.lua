--[[
  activity_periods: exact active, returning and new users of consecutive periods of one
  granularity, from the bitmaps of includes/activity.lua.

  KEYS[1]  scratch  bitmap, deleted before returning
  KEYS[2]  seen     bitmap, deleted before returning: in "hours", the first-timers of the
                    day active in its hours counted so far
  KEYS[3]  before   bitmap of the period before the first (read only if ARGV[2] is 1)
  KEYS[4..]  bitmaps  "periods": the n periods' bitmaps, oldest first, then as many of the
                    users first active in each (first-day, first-week or first-month).
                    "hours": the first-day bitmap of the day, then its hours', oldest first
  ARGV[1]  mode            "periods" (days, weeks, months) or "hours" (every hour of one day)
  ARGV[2]  before_counted  0|1: 0 when the period before is outside what is kept (empty)
  Returns  {active_before, then per period: active, returning, new}: active in it, in it and
           the one before, and first active in it (for an hour: first active that day, and
           not in the day's earlier hours)
  Work     per period a few BITOP/BITCOUNT over bitmaps of (highest user index / 8) bytes;
           the store sends at most a day's hours or 200 periods per call
]]
local scratch_key, seen_key, before_key = KEYS[1], KEYS[2], KEYS[3]
local hours = ARGV[1] == 'hours'
local counted_before = ARGV[2] == '1'

local function count_and(a, b)
  redis.call('BITOP', 'AND', scratch_key, a, b)
  return redis.call('BITCOUNT', scratch_key)
end

local reply = {counted_before and redis.call('BITCOUNT', before_key) or 0}
local previous = counted_before and before_key or nil
if hours then
  local first_key, seen = KEYS[4], 0
  redis.call('DEL', seen_key)
  for i = 5, #KEYS do
    local hour_key = KEYS[i]
    reply[#reply + 1] = redis.call('BITCOUNT', hour_key)
    reply[#reply + 1] = previous and count_and(hour_key, previous) or 0
    -- First-timers of the day active in this hour, less those active in an earlier one.
    redis.call('BITOP', 'AND', scratch_key, hour_key, first_key)
    redis.call('BITOP', 'OR', seen_key, seen_key, scratch_key)
    local now_seen = redis.call('BITCOUNT', seen_key)
    reply[#reply + 1] = now_seen - seen
    seen, previous = now_seen, hour_key
  end
else
  local n = (#KEYS - 3) / 2
  for i = 1, n do
    local key = KEYS[3 + i]
    reply[#reply + 1] = redis.call('BITCOUNT', key)
    reply[#reply + 1] = previous and count_and(key, previous) or 0
    reply[#reply + 1] = redis.call('BITCOUNT', KEYS[3 + n + i])
    previous = key
  end
end
redis.call('DEL', scratch_key, seen_key)
return reply
