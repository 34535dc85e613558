--[[
  compact_bitmaps: rewrites bitmaps of periods that have ended to their exact size, and turns
  the bitmap of a day's first-timers into a list (includes/first_lists.lua). A bitmap grown by
  BITFIELD as user indexes rise is a string Redis reallocated with room to spare (doubling
  below 1 MB); BITOP writes a new string of the bitmap's own length.

  KEYS[1..]  bitmaps  the bitmaps of an hour, day, week or month that has ended
                      (includes/activity.lua); a missing one is skipped
  ARGV[1]  lists      int: how many of the last KEYS are first-day bitmaps (0 or 1), each
                      turned into a list where its runs of set bits are at most 16 and one per
                      64 of its bytes (where they are more, it is rewritten as the others are)
  Returns  how many were rewritten
  Work     one BITOP over (highest user index / 8) bytes per key, the store sends at most
           seven keys a call; for a first-day bitmap, at most a BITPOS and 16 GETBITs per run
]]
--- @include "first_lists"
local lists = tonumber(ARGV[1])

-- The runs of set bits of the bitmap at `key` ({first index, length, ...}), or nil once they
-- are more than `most`.
local function runs_of(key, most)
  local size = redis.call('STRLEN', key) * 8
  -- The first index from `from` on whose bit is `value` (past the end, every bit is 0; a 1
  -- found nowhere: nil): bit by bit to a byte's start, then by BITPOS.
  local function next_bit(value, from)
    while from % 8 ~= 0 and from < size do
      if redis.call('GETBIT', key, from) == value then return from end
      from = from + 1
    end
    if from >= size then return value == 0 and from or nil end
    local at = redis.call('BITPOS', key, value, from / 8)
    if at >= 0 then return at end
    return value == 0 and size or nil
  end
  local runs, from = {}, 0
  while true do
    local first = next_bit(1, from)
    if not first then return runs end
    if #runs >= 2 * most then return nil end
    from = next_bit(0, first + 1)
    runs[#runs + 1], runs[#runs + 2] = first, from - first
  end
end

-- Turns the first-day bitmap into a list, keeping its expiry (`ttl_ms`); false, changing
-- nothing, where its runs are too many (or none).
local function into_list(key, ttl_ms)
  local runs = runs_of(key, 16 + math.floor(redis.call('STRLEN', key) / 64))
  if not runs or #runs == 0 then return false end
  redis.call('DEL', key)
  redis.call('HSET', key, 'runs', pack_runs(runs))
  redis.call('PEXPIRE', key, ttl_ms)
  return true
end

local rewritten = 0
for i, key in ipairs(KEYS) do
  -- BITOP drops the expiry: it is read first and set again (a key without one is left alone,
  -- as is a list).
  local ttl = redis.call('PTTL', key)
  if ttl > 0 and redis.call('TYPE', key).ok == 'string' then
    if i <= #KEYS - lists or not into_list(key, ttl) then
      redis.call('BITOP', 'OR', key, key)
      redis.call('PEXPIRE', key, ttl)
    end
    rewritten = rewritten + 1
  end
end
return rewritten
