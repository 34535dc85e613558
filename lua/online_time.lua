--[[
  online_time: how long each of some users was online on each of some consecutive days.

  KEYS[1]  user_index  HASH  user_id -> bit index (includes/activity.lua)
  KEYS[2]  since       ZSET  member=user_id  score=-(when their online period began, ms)
  KEYS[3]  online      ZSET  member=user_id  score=newest live session's expiry, ms, or a held
                             score (includes/live.lua)
  KEYS[4]  leases      ZSET  member=slot  score=the moment the lease lapses, ms
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads:
                  online_time_prefix (the keys ot:<span>:<block> of includes/online_time.lua
                  are named from it and the users' indexes, in the hash tag of KEYS)
  ARGV[2]  first_day  int: the first day's number (days since 1970-01-01 in the stats zone)
  ARGV[3]  day_count  int: how many days, 1 to 92
  ARGV[4..]  user_ids  string
  Returns  {units, from_ms, to_ms, ...}: for each user in order, their days' counters in hex
           (a u16 big-endian per day, 2-second units, day_count of them; "" when all are 0),
           and their current period (from onlineSince to now, or to the moment an
           expired presence not swept yet ended; from_ms -1 for none), which the counters do
           not hold yet
  Work     one GETRANGE per user for each span of SPAN_DAYS days the days touch, and three
           reads of all the users
]]
--- @include "clock"
--- @include "live"
--- @include "online_time"
--- @include "options"
local shard = shard_options(ARGV[1])
local index_key, since_key, online_key = KEYS[1], KEYS[2], KEYS[3]
local leases = lease_book(KEYS[4])
local first_day, day_count = tonumber(ARGV[2]), tonumber(ARGV[3])
local last_day = first_day + day_count - 1
local user_ids = {unpack(ARGV, 4)}

local now = now_ms()
local indexes = #user_ids > 0 and redis.call('HMGET', index_key, unpack(user_ids)) or {}
local zeros = string.rep('\0', 2 * day_count)
-- Hex, for a reply that is text: the service's Redis clients decode every reply as UTF-8.
local HEX = {}
for byte = 0, 255 do HEX[string.char(byte)] = string.format('%02x', byte) end

-- A user's counters over the days: one GETRANGE per span, zeros where nothing was kept.
local function units_of(index)
  local block, at = math.floor(index / BLOCK_USERS), (index % BLOCK_USERS) * SPAN_DAYS
  local parts = {}
  for span = math.floor(first_day / SPAN_DAYS), math.floor(last_day / SPAN_DAYS) do
    local from = math.max(first_day, span * SPAN_DAYS) - span * SPAN_DAYS
    local to = math.min(last_day, span * SPAN_DAYS + SPAN_DAYS - 1) - span * SPAN_DAYS
    local key = shard.online_time_prefix .. span .. ':' .. block
    local got = redis.call('GETRANGE', key, 2 * (at + from), 2 * (at + to) + 1)
    parts[#parts + 1] = got .. string.rep('\0', 2 * (to - from + 1) - #got)
  end
  local units = table.concat(parts)
  if units == zeros then return '' end
  return (string.gsub(units, '.', HEX))
end

local sinces = #user_ids > 0 and redis.call('ZMSCORE', since_key, unpack(user_ids)) or {}
local expiries = #user_ids > 0 and redis.call('ZMSCORE', online_key, unpack(user_ids)) or {}
local reply = {}
for i in ipairs(user_ids) do
  local index = tonumber(indexes[i])
  reply[#reply + 1] = index and units_of(index) or ''
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
end
return reply
