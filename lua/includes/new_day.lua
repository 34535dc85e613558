--- @include "first_lists"
-- The work of a user's first activity of a day (includes/activity.lua's mark_periods, which
-- makes these functions only then, through new_day_of): the bitmaps of the day's week and
-- month, and the users' first days. It reads HOUR_MS, DAY_MS, set_bits, chunks and
-- call_chunked from includes/activity.lua.

-- Days since 1970-01-01 of the date 'YYYY-MM-DD', and the date of a day number: Howard
-- Hinnant's days_from_civil and civil_from_days, for the proleptic Gregorian calendar.
local function day_number(label)
  local y, m = tonumber(string.sub(label, 1, 4)), tonumber(string.sub(label, 6, 7))
  local d = tonumber(string.sub(label, 9, 10))
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((m + 9) % 12) + 2) / 5) + d - 1
  return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
end

local function day_label(n)
  local z = n + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  return string.format('%04d-%02d-%02d', yoe + era * 400 + (m <= 2 and 1 or 0), m, d)
end

-- The labels of the week (its Monday) and month holding day number n.
local function week_and_month(n)
  local label = day_label(n)
  return day_label(n - (n + 3) % 7), string.sub(label, 1, 7) -- 1970-01-01 was a Thursday
end

-- The rest of p, worked out only when some bit in it is new: the day's number, `kept`: each
-- period's bitmap with the moment it expires, and `firsts`: the first-day, first-week and
-- first-month bitmaps likewise.
local function more_periods(p)
  if p.kept then return p end
  local shard, label = p.shard, string.sub(p.day, -10)
  local n = day_number(label)
  local weekday = (n + 3) % 7
  -- The week's Monday, and the month and its days left from the label itself: formatting
  -- dates is most of this function's time.
  local week, month = day_label(n - weekday), string.sub(label, 1, 7)
  local y, m = tonumber(string.sub(label, 1, 4)), tonumber(string.sub(label, 6, 7))
  local leap = y % 4 == 0 and y % 100 ~= 0 or y % 400 == 0
  local month_days = m == 2 and (leap and 29 or 28) or 30 + (m + math.floor(m / 8)) % 2
  local days_left = month_days - tonumber(string.sub(label, 9, 10))
  local week_end = p.day_end + (6 - weekday) * DAY_MS + shard.analytics_ms + HOUR_MS
  local month_end = p.day_end + days_left * DAY_MS + shard.analytics_ms + HOUR_MS
  p.number = n
  p.kept = {
    {p.hour, p.hour_end + shard.hourly_ms + HOUR_MS},
    {p.day, p.day_end + shard.retention_ms},
    {shard.week_prefix .. week, week_end},
    {shard.month_prefix .. month, month_end},
  }
  p.firsts = {
    {shard.first_day_prefix .. label, p.day_end + shard.retention_ms},
    {shard.first_week_prefix .. week, week_end},
    {shard.first_month_prefix .. month, month_end},
  }
  return p
end

-- A week's or month's bitmap takes many bits at once by ORing in the day's, a pass over its
-- bytes, when they are at least this many and one per this many of its bytes: setting a bit
-- by BITFIELD costs about as much as ORing a hundred bytes or more.
local WHOLE_DAY_BITS, BYTES_PER_BIT = 32, 64

-- Sets the bits `indexes` of `kept` (a bitmap and its expiry: a week's or month's, or their
-- first bitmaps'), all set in `day` (the day's bitmap, or its first bitmap). Every bit of the
-- day's is in its week's and month's (every writer sets them together; a user's first day
-- moved back clears all three), so ORing it in adds no other. BITOP clears the expiry: it is
-- set again.
local function add_bits(p, kept, indexes, day)
  if #indexes >= WHOLE_DAY_BITS and #indexes * BYTES_PER_BIT >= redis.call('STRLEN', day) then
    redis.call('BITOP', 'OR', kept[1], kept[1], day)
    redis.call('PEXPIREAT', kept[1], kept[2])
    return
  end
  set_bits(kept[1], indexes)
  if not p.expiring then redis.call('PEXPIREAT', kept[1], kept[2]) end
end

-- Clears a bit of a bitmap, if it is still kept (a key made by SETBIT would never expire).
local function clear_bit(key, index)
  if redis.call('EXISTS', key) == 1 then redis.call('SETBIT', key, index, 0) end
end

-- Clears a bit of a first-day bitmap, or of a list, turned back into its bitmap.
local function clear_first_day(key, index)
  first_bitmap_again(key)
  clear_bit(key, index)
end

-- Records the users whose bit indexes are given as first active on p's day (and in its week
-- and month), where they were never active before it (or only later: a backfilled time moves
-- their first day back, out of the bitmaps of the day, week and month it was in). An index
-- in `assigned` was handed out in this call: its first day is none, with no need to read it.
local function mark_first_day(shard, p, indexes, assigned)
  local newcomers, known = {}, {}
  for _, index in ipairs(indexes) do
    if assigned[index] then newcomers[#newcomers + 1] = index else known[#known + 1] = index end
  end
  for first, last in chunks(#known) do
    local args, n = {}, 0
    for i = first, last do
      args[n + 1], args[n + 2], args[n + 3] = 'GET', 'u16', '#' .. known[i]
      n = n + 3
    end
    local days = redis.call('BITFIELD', shard.first_days, unpack(args, 1, n))
    for i = first, last do
      local day = days[i - first + 1]
      if day == 0 or day > p.number then
        newcomers[#newcomers + 1] = known[i]
        if day > 0 then
          local week, month = week_and_month(day)
          clear_first_day(shard.first_day_prefix .. day_label(day), known[i])
          clear_bit(shard.first_week_prefix .. week, known[i])
          clear_bit(shard.first_month_prefix .. month, known[i])
        end
      end
    end
  end
  if #newcomers == 0 then return end
  local number = string.format('%d', p.number)
  if #newcomers == 1 then
    -- A call's one user (a touch, a session's open or close): no arguments' table to build.
    redis.call('BITFIELD', shard.first_days, 'SET', 'u16', '#' .. newcomers[1], number)
  else
    call_chunked('BITFIELD', shard.first_days, nil, #newcomers, function(args, k, i)
      args[k + 1], args[k + 2], args[k + 3], args[k + 4] = 'SET', 'u16', '#' .. newcomers[i], number
      return k + 4
    end)
  end
  local first_day = p.firsts[1]
  -- A backfill into a day that has ended may meet its list.
  first_bitmap_again(first_day[1])
  set_bits(first_day[1], newcomers)
  if not p.expiring then redis.call('PEXPIREAT', first_day[1], first_day[2]) end
  add_bits(p, p.firsts[2], newcomers, first_day[1])
  add_bits(p, p.firsts[3], newcomers, first_day[1])
end

-- Whether every bitmap of p's week and month and of its first day, week and month exists
-- already: each was given its expiry by the write that made it (every write that makes one
-- sets it, and only BITOP, which clears it, sets it again), so it needs no other.
local function all_expiring(p)
  local keys = {p.kept[3][1], p.kept[4][1]}
  for _, first in ipairs(p.firsts) do keys[#keys + 1] = first[1] end
  return redis.call('EXISTS', unpack(keys)) == #keys
end

-- The rest of mark_periods for the users (`fresh`: their bit indexes) whose bit in p's day
-- was not set before.
local function mark_new_day(shard, p, fresh, assigned)
  more_periods(p)
  redis.call('PEXPIREAT', p.day, string.format('%d', p.kept[2][2]))
  p.expiring = all_expiring(p)
  add_bits(p, p.kept[3], fresh, p.day)
  add_bits(p, p.kept[4], fresh, p.day)
  mark_first_day(shard, p, fresh, assigned)
end
