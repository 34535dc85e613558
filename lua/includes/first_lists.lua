--- @include "cohorts"
-- The users first active on a day (includes/activity.lua's first-day bitmap) once the day has
-- ended: compact_bitmaps.lua turns the bitmap into a list, a hash whose field `runs` holds
-- their indexes packed as an hour's cohort is (cohorts.lua). A day's new users mostly took
-- fresh indexes one after another, so its list is a few bytes where its bitmap takes a bit
-- per index ever handed out. A backfill can still move a user's first day to any day kept: a
-- write into a list turns it back into its bitmap first (first_bitmap_again), so writes only
-- ever meet bitmaps; readers take either form.

-- The runs of a first-day list (unpack_runs), or nil where the key is a bitmap or missing.
local function first_runs(key)
  if redis.call('TYPE', key).ok ~= 'hash' then return nil end
  return unpack_runs(redis.call('HGET', key, 'runs'))
end

-- How many users a first-day key holds, in either form.
local function first_count(key)
  local runs = first_runs(key)
  if not runs then return redis.call('BITCOUNT', key) end
  local count = 0
  for r = 2, #runs, 2 do count = count + runs[r] end
  return count
end

-- Makes `into` the bitmap of the runs: whole bytes by one SETRANGE a run, the bits at its
-- ends one by one.
local function write_runs(into, runs)
  redis.call('DEL', into)
  for r = 1, #runs, 2 do
    local first, after = runs[r], runs[r] + runs[r + 1]
    local whole_from, whole_to = math.ceil(first / 8), math.floor(after / 8) - 1
    if whole_to >= whole_from then
      for index = first, whole_from * 8 - 1 do redis.call('SETBIT', into, index, 1) end
      redis.call('SETRANGE', into, whole_from, string.rep('\255', whole_to - whole_from + 1))
      for index = (whole_to + 1) * 8, after - 1 do redis.call('SETBIT', into, index, 1) end
    else
      for index = first, after - 1 do redis.call('SETBIT', into, index, 1) end
    end
  end
end

-- The bitmap of a first-day key: the key itself, or `into` made the bitmap of its list.
local function first_bitmap(key, into)
  local runs = first_runs(key)
  if not runs then return key end
  write_runs(into, runs)
  return into
end

-- Turns a first-day list back into its bitmap, with its expiry, before a write into it.
local function first_bitmap_again(key)
  local runs = first_runs(key)
  if not runs then return end
  local ttl = redis.call('PTTL', key)
  write_runs(key, runs)
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end
