--[[
  online_time: how long each of some users was online on each of some consecutive days.

  KEYS[1]     user_index  HASH    user_id -> bit index (includes/activity.lua)
  KEYS[2]     since       ZSET    member=user_id  score=-(when their online period began, ms)
  KEYS[3]     online      ZSET    member=user_id  score=newest live session's expiry, ms, or a
                                  held score (includes/live.lua)
  KEYS[4]     leases      ZSET    member=slot  score=the moment the lease lapses, ms
  KEYS[5..]   days        STRING  ot:<day> of each day asked for, oldest first: a u16 per user
                                  index, 2-second units (includes/online_time.lua)
  ARGV[1]  shard  packed once per shard by the store (Shard.options, includes/options.lua): the
                  deployment's options and the shard's names that this script reads: zone
  ARGV[2]  first_day  int: the first day's number (days since 1970-01-01 in the stats zone)
  ARGV[3..]  user_ids  string
  Returns  {ms, ...}: for each user in order, for each day in order, the ms they were online
           that day: what ended periods left in the day's counter, and the part of their
           current period (from onlineSince to now, or to the moment an expired presence not
           swept yet ended) that lies in the day, counted in the same 2-second units
  Work     one BITFIELD GET per day with one GET per user, and a few reads per user
]]
--- @include "clock"
--- @include "live"
--- @include "online_time"
--- @include "options"
local shard = shard_options(ARGV[1])
local index_key, since_key, online_key = KEYS[1], KEYS[2], KEYS[3]
local leases = lease_book(KEYS[4])
local first_day = tonumber(ARGV[2])
local day_count = #KEYS - 4
local user_count = #ARGV - 2

local now = now_ms()
local zone = zone_of(shard.zone)
local user_ids = {unpack(ARGV, 3)}
local indexes = user_count > 0 and redis.call('HMGET', index_key, unpack(user_ids)) or {}

-- The users with an index, each read by one GET of the day's BITFIELD.
local gets, indexed = {}, {}
for i = 1, user_count do
  if indexes[i] then
    gets[#gets + 1], gets[#gets + 2], gets[#gets + 3] = 'GET', 'u16', '#' .. indexes[i]
    indexed[#indexed + 1] = i
  end
end

local reply = {}
for i = 1, user_count * day_count do reply[i] = 0 end
if #gets > 0 then
  for d = 1, day_count do
    local units = redis.call('BITFIELD', KEYS[4 + d], unpack(gets))
    for j, i in ipairs(indexed) do
      reply[(i - 1) * day_count + d] = units[j] * UNIT_MS
    end
  end
end

-- The current period of each user online (or whose expiry the sweep has not seen yet).
local starts = {}
for d = 0, day_count do starts[d + 1] = day_start(zone, first_day + d) end
for i = 1, user_count do
  local since = redis.call('ZSCORE', since_key, user_ids[i])
  local expiry = since and tonumber(redis.call('ZSCORE', online_key, user_ids[i]))
  if expiry then
    local from, to = -tonumber(since), now
    local slot = held_slot(expiry)
    if slot == nil then
      to = math.min(expiry, now)
    elseif slot > 0 and not slot_live(leases, slot, now) then
      to = math.min(lapse_of(leases, slot) or now, now)
    end
    for d = 1, day_count do
      local a, b = math.max(from, starts[d]), math.min(to, starts[d + 1])
      if a < b then
        local at = (i - 1) * day_count + d
        reply[at] = reply[at] + (math.floor(b / UNIT_MS) - math.floor(a / UNIT_MS)) * UNIT_MS
      end
    end
  end
end
return reply
