--[[
  peaks: the hourly peaks online of some days (written by record_peak).

  KEYS[1..]  peaks  HASH per day: hour start (ms) -> "count at_ms"
  Returns  per key in turn, its field count then its fields and values: {n, hour, "count at",
           ...}
  Work     at most 25 fields per key; the store sends at most 100 keys a call
]]
local reply = {}
for _, key in ipairs(KEYS) do
  local fields = redis.call('HGETALL', key)
  reply[#reply + 1] = #fields / 2
  for _, value in ipairs(fields) do reply[#reply + 1] = value end
end
return reply
