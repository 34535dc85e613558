--[[
  online_periods: the online periods that ended in some hours and UTC days: how many, their
  lengths summed, and how many fell in each log bucket (includes/online_time.lua).

  KEYS[1..]  periods  HASH  op:<hour> or op:d<day> of each hour and day asked for (none
                            overlapping another): n, ms, and bucket -> count
  Returns  {count, length_ms_summed, bucket_0, ..., bucket_260}: summed over the keys
  Work     one HGETALL per key, each of at most 263 fields
]]
--- @include "online_time"
local reply = {0, 0}
for b = 0, LAST_BUCKET do reply[b + 3] = 0 end
for _, key in ipairs(KEYS) do
  local fields = redis.call('HGETALL', key)
  for i = 1, #fields, 2 do
    local field, value = fields[i], tonumber(fields[i + 1])
    if field == 'n' then
      reply[1] = reply[1] + value
    elseif field == 'ms' then
      reply[2] = reply[2] + value
    else
      reply[tonumber(field) + 3] = reply[tonumber(field) + 3] + value
    end
  end
end
return reply
