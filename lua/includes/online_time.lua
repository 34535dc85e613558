-- Online time and online periods, kept as a user's online period ends (an OFFLINE, or a KICKED
-- that leaves them offline) and read by lua/online_time.lua and lua/online_periods.lua. Given
-- the names of its keys, which store/keys.py makes (in the hash tag of the script's KEYS) from
-- online_time_prefix and a day (<day>: days since 1970-01-01 in the stats time zone):
--   ot:d<day>:<block>  STRING  the 2-second units users were online on an open day: a u16
--                      (BITFIELD u16 #i) per bit index i of block <block> (index over
--                      BLOCK_USERS). Made whole at its first write, so that Redis allocates it
--                      once, at its size. Folded into the compact layout below, then deleted,
--                      by lua/fold_online_time.lua once the day after it has ended.
--   ot:m<day>  STRING  present once the day's fold has begun: how many blocks it folds. From
--                      then on a period's end adds to the day in ot:l<day>, except in a block
--                      whose dense counters the fold has not reached yet.
--   ot:b<day>  STRING  the folded day's bitmap: bit i set for index i with time that day
--   ot:c<day>  STRING  their units in index order, a u16 each: index i's at its rank, the
--                      count of bits set before bit i
--   ot:r<day>  STRING  the rank directory: a u32 per DIRECTORY_USERS indexes, the bits set
--                      before its first, so that a rank is counted from at most 32 bytes
--   ot:l<day>  HASH    index -> units added after the fold began (a period still open then)
--   All of a day's keys are kept analytics_ms after the day ends.
--   op:<hour>  HASH    for each hour (<hour>: hours since the epoch), the online periods that
--                      ended in it: n (how many), ms (their lengths summed, ms) and, per log
--                      bucket b (bucket_of), how many. Kept analytics_ms after the hour ends.
--   op:d<day>  HASH    the same for each UTC day (<day>: days since the epoch), so that a long
--                      range is read a day at a time, and only its ends an hour at a time.
-- A period's time on a day is counted as the 2-second ticks of the clock it holds, so that the
-- parts of a period cut at midnight add up to the whole, and a day's total is never more than
-- one unit from the exact sum of its periods' parts.

local DAY_MS, HOUR_MS, UNIT_MS = 86400000, 3600000, 2000
local BLOCK_USERS, DIRECTORY_USERS = 4096, 256
-- How far back forget_online_time clears: past the days the sweeper folds (FOLD_DAYS in
-- gql_presence/store/online_time.py).
local FORGET_DAYS = 10
-- Bucket b holds lengths in (RATIO^(b-1), RATIO^b] ms (bucket 0: up to 1 ms); the last holds
-- everything longer. Each bucket's geometric middle is within 4.9% of every length in it.
local RATIO, LAST_BUCKET = 1.1, 260
local LOG_RATIO = math.log(RATIO)

-- The stats time zone from its packed form (gql_presence/store/days.py, packed_zone): the UTC
-- offset (min) before the first change, then each change as "instant (s) offset (min)", spaces
-- between. Its changes are read from the text only as far as offset_at needs them
-- (read_changes): the text spans years around today, a call asks about its last days, and
-- reading all of it (eleven changes for a zone with DST) took about 12 µs a call.
local function zone_of(packed)
  local first, after = string.match(packed, '^(%-?%d+)()')
  return {first = tonumber(first) * 60000, packed = packed, unread = after, at = {}, offset = {}}
end

-- Reads the zone's changes up to the first after t_ms, or to the last.
local function read_changes(zone, t_ms)
  local at, offset = zone.at, zone.offset
  while zone.unread and (#at == 0 or at[#at] <= t_ms) do
    local instant, minutes, after = string.match(zone.packed, '^ (%-?%d+) (%-?%d+)()', zone.unread)
    zone.unread = after
    if not instant then break end
    at[#at + 1] = tonumber(instant) * 1000
    offset[#offset + 1] = tonumber(minutes) * 60000
  end
end

local function offset_at(zone, t_ms)
  read_changes(zone, t_ms)
  local offset = zone.first
  for i = 1, #zone.at do
    if t_ms < zone.at[i] then break end
    offset = zone.offset[i]
  end
  return offset
end

-- The day (days since 1970-01-01 in the zone) holding t_ms.
local function day_number(zone, t_ms)
  return math.floor((t_ms + offset_at(zone, t_ms)) / DAY_MS)
end

-- When day `day` begins (ms): its local midnight, or for a day whose midnight is skipped, the
-- first moment after it.
local function day_start(zone, day)
  local midnight = day * DAY_MS
  local guess = midnight - offset_at(zone, midnight)
  local start = midnight - offset_at(zone, guess)
  if day_number(zone, start) ~= day then return guess end
  return start
end

local function bucket_of(length_ms)
  if length_ms <= 1 then return 0 end
  return math.min(LAST_BUCKET, math.ceil(math.log(length_ms) / LOG_RATIO - 1e-9))
end

-- Where time added to day `day` in block `block` of indexes goes: the block's dense counters
-- (made now, whole and with the day's expiry, if need be) while the day's fold has not reached
-- it (the fold deletes them); else, once the fold has begun, the day's late additions, which
-- the caller expires at expire_ms once it has added to them. Returns the key and whether it is
-- the late additions.
local function day_target(prefix, day, block, expire_ms)
  local key = string.format('%sd%d:%d', prefix, day, block)
  if redis.call('EXISTS', key) == 1 then return key, false end
  if redis.call('EXISTS', prefix .. 'm' .. day) == 1 then return prefix .. 'l' .. day, true end
  redis.call('SET', key, string.rep('\0', 2 * BLOCK_USERS))
  redis.call('PEXPIREAT', key, expire_ms)
  return key, false
end

-- Adds a period's length (ms) and its bucket, both strings, to an op: hash (its hour's or its
-- day's), which expires at expire_ms.
local function add_length(key, expire_ms, length, bucket)
  -- Its expiry is its period's: set once, by the write that makes it (n is then 1).
  local first = redis.call('HINCRBY', key, 'n', '1') == 1
  redis.call('HINCRBY', key, 'ms', length)
  redis.call('HINCRBY', key, bucket, '1')
  if first then redis.call('PEXPIREAT', key, string.format('%d', expire_ms)) end
end

-- Records an online period of the user (their bit index, or nil for none) from start_ms to
-- end_ms: its time on each day it touched (no further back than the days kept), and its length
-- in the buckets of the hour and of the UTC day it ended in. `names` are the shard's (includes/options.lua):
-- online_time_prefix, period_lengths_prefix, analytics_ms, zone.
local function record_period(names, zone, index, start_ms, end_ms)
  if end_ms < start_ms then return end
  local keep_ms = tonumber(names.analytics_ms)
  if index then
    local from = math.max(start_ms, end_ms - keep_ms - DAY_MS)
    local day = day_number(zone, from)
    while from < end_ms do
      local next_start = day_start(zone, day + 1)
      local to = math.min(end_ms, next_start)
      local units = math.floor(to / UNIT_MS) - math.floor(from / UNIT_MS)
      if units > 0 then
        local expire_ms = next_start + keep_ms
        local key, late = day_target(names.online_time_prefix, day, math.floor(index / BLOCK_USERS), expire_ms)
        if late then
          redis.call('HINCRBY', key, index, units)
          redis.call('PEXPIREAT', key, expire_ms)
        else
          redis.call('BITFIELD', key, 'OVERFLOW', 'SAT', 'INCRBY', 'u16', string.format('#%d', index % BLOCK_USERS),
            string.format('%d', units))
        end
      end
      from, day = to, day + 1
    end
  end
  -- Numbers written out as strings by string.format, here and above: Redis formats a number
  -- argument by snprintf('%.17g'), and Lua a number it joins to a string by '%.14g', both slower.
  local length = string.format('%d', end_ms - start_ms)
  local bucket = string.format('%d', bucket_of(end_ms - start_ms))
  local hour, utc_day = math.floor(end_ms / HOUR_MS), math.floor(end_ms / DAY_MS)
  add_length(string.format('%s%d', names.period_lengths_prefix, hour), (hour + 1) * HOUR_MS + keep_ms, length, bucket)
  add_length(string.format('%sd%d', names.period_lengths_prefix, utc_day), (utc_day + 1) * DAY_MS + keep_ms, length,
    bucket)
end

-- Clears the counters of a bit index that is to be handed out again (its user forgotten) in the
-- days still open or folded lately, so that its next user does not inherit them. Older folded
-- days are not cleared: the index is handed out again only once they have expired (sweep.lua's
-- cooling).
local function forget_online_time(names, index, now)
  local block, at = math.floor(index / BLOCK_USERS), 2 * (index % BLOCK_USERS)
  -- Day numbers of any zone lie within a day of UTC's.
  local today = math.floor(now / DAY_MS)
  for day = today - FORGET_DAYS, today + 1 do
    local key = names.online_time_prefix .. 'd' .. day .. ':' .. block
    if redis.call('EXISTS', key) == 1 then redis.call('SETRANGE', key, at, '\0\0') end
    redis.call('HDEL', names.online_time_prefix .. 'l' .. day, index)
  end
end

-- Ends the online periods that `events` (as includes/events.lua lays them out, `size` values
-- each) end: an OFFLINE, or a KICKED with online 0, of a user whose period's start `starts`
-- holds (user_id -> ms: what went_offline, includes/status.lua, took from onlineSince). Each
-- start is used once. `read_index(index_key, user_id)` gives a user's bit index (its caller's
-- is includes/connections.lua's index_of, which reads it once a call).
local function end_periods(names, starts, events, size, read_index)
  local zone
  for i = 1, #events, size do
    local kind, user_id = events[i], events[i + 1]
    local start_ms = starts[user_id]
    if start_ms and (kind == 'OFFLINE' or (kind == 'KICKED' and events[i + 4] == 0)) then
      starts[user_id] = nil
      zone = zone or zone_of(names.zone)
      local index = tonumber(read_index(names.user_index, user_id))
      record_period(names, zone, index, start_ms, tonumber(events[i + 2]))
    end
  end
end
