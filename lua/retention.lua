--[[
  retention: one cohort, the users first active in a period, and how many of them were active
  in each of the periods after it, from the bitmaps of includes/activity.lua.

  KEYS[1]  cohort   bitmap, deleted before returning: the cohort's users
  KEYS[2]  scratch  bitmap, deleted before returning
  KEYS[3..]  bitmaps  the cohort's bitmaps (ARGV[2] of them), then the bitmaps of the periods
                    after it, in order. "periods": the users first active in the cohort's
                    period (a first-day, first-week or first-month bitmap). "hours": the
                    first-day bitmap of the hour's day, the hour's bitmap, then the bitmaps of
                    the day's earlier hours
  ARGV[1]  mode     "periods" (days, weeks, months) or "hours"
  ARGV[2]  cohort_keys  int: how many of KEYS[3..] make the cohort
  Returns  {size, retained_1, retained_2, ...}: the cohort's users, and how many of them are
           in each period's bitmap given after it
  Work     a BITOP per cohort key, and a BITOP and a BITCOUNT per period after it, over
           bitmaps of (highest user index / 8) bytes; at most 52 periods and 25 hours a call
]]
local cohort_key, scratch_key = KEYS[1], KEYS[2]
local hours = ARGV[1] == 'hours'
local cohort_keys = tonumber(ARGV[2])

if hours then
  -- First active that day, in this hour, and in none of the day's earlier hours.
  redis.call('BITOP', 'AND', cohort_key, KEYS[3], KEYS[4])
  if cohort_keys > 2 then
    redis.call('BITOP', 'OR', scratch_key, unpack(KEYS, 5, 2 + cohort_keys))
    redis.call('BITOP', 'AND', scratch_key, scratch_key, cohort_key)
    redis.call('BITOP', 'XOR', cohort_key, cohort_key, scratch_key)
  end
else
  redis.call('BITOP', 'OR', cohort_key, unpack(KEYS, 3, 2 + cohort_keys))
end
local reply = {redis.call('BITCOUNT', cohort_key)}
for i = 3 + cohort_keys, #KEYS do
  redis.call('BITOP', 'AND', scratch_key, cohort_key, KEYS[i])
  reply[#reply + 1] = redis.call('BITCOUNT', scratch_key)
end
redis.call('DEL', cohort_key, scratch_key)
return reply
