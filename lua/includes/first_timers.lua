-- The day's first-timers active in its hours before one (fold_hour.lua and retention.lua
-- leave them out of the hour's cohort), into `into`, kept to those of `within`: those of the
-- day's folded hours are in `seen_key` (fold_hour.lua's seen; or, for a day folded before
-- seen was kept, in their frozen bitmaps), those of the others in their live bitmaps. The
-- earlier hours are `starts` (their fields in `record_key`), with their pairs (live bitmap,
-- frozen bitmap) in KEYS from `first_pair` on. Returns false, writing nothing, when none of
-- those bitmaps exists.
local function earlier_first_timers(into, within, seen_key, record_key, first_pair, starts)
  -- Only keys that exist: BITOP takes its fast path only while every source has bytes left.
  local sources = {}
  local function add(key)
    if redis.call('EXISTS', key) == 1 then sources[#sources + 1] = key end
  end
  add(seen_key)
  if #starts > 0 then
    local folded = redis.call('HMGET', record_key, unpack(starts))
    for i = 1, #starts do add(KEYS[first_pair + 2 * (i - 1) + (folded[i] and 1 or 0)]) end
  end
  if #sources == 0 then return false end
  redis.call('BITOP', 'OR', into, unpack(sources))
  redis.call('BITOP', 'AND', into, into, within)
  return true
end
