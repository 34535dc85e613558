--[[
  retention: one cohort, the users first active in a period, and how many of them were active
  in each of the periods after it, from the bitmaps of includes/activity.lua, or for an hour
  folded already from its counts and its cohort's list (fold_hour.lua).

  KEYS[1]  cohort   bitmap, deleted before returning: the cohort's users
  KEYS[2]  scratch  bitmap, deleted before returning
  KEYS[3..]  keys   the cohort's keys (ARGV[2] of them), then those of the periods after it,
                    in order. "periods": the users first active in the cohort's period (a
                    first-day bitmap or list, or a first-week or first-month bitmap), then a
                    bitmap per period. "hours": the record of the folded hours of the hour's
                    day, the first-day bitmap or list of the day, the day's first-timers
                    active in its folded hours (fold_hour.lua's seen), the hour's cohort as a
                    list (fold_hour.lua's list), then pairs (live bitmap, frozen bitmap) of
                    the hour and of the day's earlier hours; then such a pair per hour after
                    it (a frozen bitmap, where it exists, is read instead of the live one: the
                    hour as it was folded; an earlier hour folded is read from its frozen
                    bitmap alone, where one is kept)
  ARGV[1]  mode     "periods" (days, weeks, months) or "hours"
  ARGV[2]  cohort_keys  int: how many of KEYS[3..] make the cohort (1 in "periods")
  ARGV[3]  start    "hours": the hour's start (ms), its field in the record; "" otherwise
  ARGV[4..]  starts  "hours": the day's earlier hours' starts (ms), their fields in the record
  Returns  {size, retained_1, retained_2, ...}: the cohort's users, and how many of them are
           in each period given after it
  Work     a BITOP per cohort key (for a first-day list a SETRANGE per run and a SETBIT
           per index at a run's ends), and a BITOP and a BITCOUNT per period after it, over
           bitmaps of (highest user index / 8) bytes; for a folded hour one HGET, and a bit
           read per user of its cohort for each hour after it its row has no column of yet
           (those not folded yet, mostly the last two); at most 52 periods and 25 hours a call
]]
--- @include "first_timers"
--- @include "first_lists"
local cohort_key, scratch_key = KEYS[1], KEYS[2]
local hours = ARGV[1] == 'hours'
local cohort_keys = tonumber(ARGV[2])

local later, step = {}, hours and 2 or 1
for i = 3 + cohort_keys, #KEYS, step do later[#later + 1] = i end

-- A pair's bitmap: as the hour was folded, if it was.
local function bitmap(i)
  if not hours then return KEYS[i] end
  if redis.call('EXISTS', KEYS[i + 1]) == 1 then return KEYS[i + 1] end
  return KEYS[i]
end

if hours then
  local row = redis.call('HGET', KEYS[3], ARGV[3])
  if row then
    -- A folded hour: its row, and for an open row the later hours it has no column of yet,
    -- counted from its cohort's list.
    local counts, open = read_row(row)
    local users = open and unpack_runs(redis.call('GET', KEYS[6]))
    local reply = {counts[3]}
    for k = 1, #later do
      reply[k + 1] = counts[3 + k] or (open and count_set(bitmap(later[k]), users)) or 0
    end
    return reply
  end
end

if hours then
  -- First active that day, in this hour, and in none of the day's earlier hours.
  redis.call('BITOP', 'AND', cohort_key, first_bitmap(KEYS[4], cohort_key), bitmap(7))
  if earlier_first_timers(scratch_key, cohort_key, KEYS[5], KEYS[3], 9, {unpack(ARGV, 4)}) then
    redis.call('BITOP', 'XOR', cohort_key, cohort_key, scratch_key)
  end
else
  -- A first-day list is made the cohort's bitmap; a bitmap is copied.
  local first = first_bitmap(KEYS[3], cohort_key)
  if first ~= cohort_key then redis.call('BITOP', 'OR', cohort_key, first) end
end
local reply = {redis.call('BITCOUNT', cohort_key)}
for _, i in ipairs(later) do
  redis.call('BITOP', 'AND', scratch_key, cohort_key, bitmap(i))
  reply[#reply + 1] = redis.call('BITCOUNT', scratch_key)
end
redis.call('DEL', cohort_key, scratch_key)
return reply
