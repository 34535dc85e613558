--[[
  activity_periods: exact active, returning and new users of consecutive periods of one
  granularity, from the bitmaps of includes/activity.lua, and for hours folded already from
  their counts (fold_hour.lua).

  KEYS[1]  scratch  bitmap, deleted before returning
  KEYS[2]  seen     bitmap, deleted before returning: in "hours", the first-timers of the
                    day active in its hours counted so far
  KEYS[3]  before   bitmap of the period before the first (read only if ARGV[2] is 1)
  KEYS[4..]  bitmaps  "periods": the n periods' bitmaps, oldest first, then as many of the
                    users first active in each (first-day, first-week or first-month; a
                    first-day one a bitmap or a list, includes/first_lists.lua).
                    "hours": the record of the day's folded hours, the record of the hour
                    before's day, the first-day bitmap or list of the day, the day's
                    first-timers active in its folded hours (fold_hour.lua's seen), the frozen
                    bitmap of the hour before, then the day's hours' bitmaps, oldest first, then their
                    frozen bitmaps (a folded hour is read from its frozen bitmap, the hour as
                    it was folded, where one is kept; the hour before from its frozen bitmap
                    where it exists, else its live one)
  ARGV[1]  mode            "periods" (days, weeks, months) or "hours" (every hour of one day)
  ARGV[2]  before_counted  0|1: 0 when the period before is outside what is kept (empty)
  ARGV[3..]  starts        "hours" only: the hour before's start, then each hour's (ms): their
                           fields in the records
  Returns  {active_before, then per period: active, returning, new}: active in it, in it and
           the one before, and first active in it (for an hour: first active that day, and
           not in the day's earlier hours)
  Work     per period a few BITOP/BITCOUNT over bitmaps of (highest user index / 8) bytes
           (none for a day whose hours are all folded; with a first-day list, a BITCOUNT
           per run and a bit tested at its ends per hour); the store sends at most a day's
           hours or 200 periods per call
]]
--- @include "first_lists"
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
  local record_key, before_record_key, first_key, folded_seen = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
  local n = (#KEYS - 8) / 2
  -- A frozen bitmap, where it exists, is the hour as folded.
  local function bitmap(live, frozen)
    if redis.call('EXISTS', frozen) == 1 then return frozen end
    return live
  end
  local folded = redis.call('HMGET', record_key, unpack(ARGV, 4, 3 + n))
  local all_folded = true
  for i = 1, n do all_folded = all_folded and folded[i] ~= false end
  if counted_before then
    local row = redis.call('HGET', before_record_key, ARGV[3])
    if row then reply[1] = tonumber(string.match(row, '^%d+')) end
    if not all_folded then previous = bitmap(before_key, KEYS[8]) end
  end
  -- The first-timers of the folded hours: seen, or their frozen bitmaps where the day was
  -- folded before seen was kept (a folded hour's live bitmap holds late writes only).
  redis.call('DEL', seen_key)
  if not all_folded then redis.call('BITOP', 'OR', seen_key, folded_seen) end
  local seen = redis.call('BITCOUNT', seen_key)
  -- With the day's first-timers as a list, seen takes each hour's users whole, and its
  -- first-timers are counted from the list (folded_seen holds first-timers alone).
  local first_list = not all_folded and first_runs(first_key)
  for i = 1, n do
    local hour_key = not all_folded and (folded[i] and KEYS[8 + n + i] or KEYS[8 + i])
    if folded[i] then
      local active, returning, new = string.match(folded[i], '^(%d+) (%d+) (%d+)')
      if i == 1 and not counted_before then returning = 0 end
      reply[#reply + 1] = tonumber(active)
      reply[#reply + 1] = tonumber(returning)
      reply[#reply + 1] = tonumber(new)
    end
    -- The day's later hours not folded yet are counted from the bitmaps, as folds count.
    if not all_folded then
      if not folded[i] then
        reply[#reply + 1] = redis.call('BITCOUNT', hour_key)
        reply[#reply + 1] = previous and count_and(hour_key, previous) or 0
      end
      -- First-timers of the day active in this hour, less those active in an earlier one
      -- (a folded hour whose frozen bitmap is gone is in seen already).
      if first_list then
        redis.call('BITOP', 'OR', seen_key, seen_key, hour_key)
      elseif not folded[i] or redis.call('EXISTS', hour_key) == 1 then
        redis.call('BITOP', 'AND', scratch_key, hour_key, first_key)
        redis.call('BITOP', 'OR', seen_key, seen_key, scratch_key)
      end
      local now_seen = first_list and count_set(seen_key, first_list)
        or redis.call('BITCOUNT', seen_key)
      if not folded[i] then reply[#reply + 1] = now_seen - seen end
      seen = now_seen
    end
    previous = hour_key
  end
else
  local n = (#KEYS - 3) / 2
  for i = 1, n do
    local key = KEYS[3 + i]
    reply[#reply + 1] = redis.call('BITCOUNT', key)
    reply[#reply + 1] = previous and count_and(key, previous) or 0
    reply[#reply + 1] = first_count(KEYS[3 + n + i])
    previous = key
  end
end
redis.call('DEL', scratch_key, seen_key)
return reply
