--[[
  compact_bitmaps: rewrites bitmaps of periods that have ended to their exact size. A bitmap
  grown by BITFIELD as user indexes rise is a string Redis reallocated with room to spare
  (doubling below 1 MB); BITOP writes a new string of the bitmap's own length.

  KEYS[1..]  bitmaps  the bitmaps of an hour, day, week or month that has ended
                      (includes/activity.lua); a missing one is skipped
  Returns  how many were rewritten
  Work     one BITOP over (highest user index / 8) bytes per key; the store sends at most
           seven keys a call
]]
local rewritten = 0
for _, key in ipairs(KEYS) do
  -- BITOP drops the expiry: it is read first and set again (a key without one is left alone).
  local ttl = redis.call('PTTL', key)
  if ttl > 0 then
    redis.call('BITOP', 'OR', key, key)
    redis.call('PEXPIRE', key, ttl)
    rewritten = rewritten + 1
  end
end
return rewritten
