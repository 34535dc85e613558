--[[
  advance_webhook: change a webhook's delivery state of one shard (where it has delivered up
  to, the batch being sent, ...), only while the caller holds the lease of that delivery: a
  process that lost it (it stood still, another took over) moves nothing. An acknowledged
  attempt may be recorded in the same call (as lua/record_webhook_attempt.lua records one),
  whoever holds the lease: it was made.

  KEYS[1]  webhook          HASH    the webhook's fields (store/webhooks.py names them)
  KEYS[2]  lease            STRING  the token of the process holding the delivery's lease
  KEYS[3]  attempts         LIST    "<at ms> <attempt>" each, newest first
  ARGV[1]  token            string: the caller's
  ARGV[2]  attempt          string: an acknowledged attempt as JSON, without its time; "": none
  ARGV[3]  max_attempts     int: how many attempts are kept
  ARGV[4]  delivered_up_to  string: the acknowledged batch's end cursor; "": none
  ARGV[5]  checked          string: names of fields separated by spaces, which must hold what
                            `expected` says for any field to be written; "": none
  ARGV[6]  expected         string: the checked fields' values, each as "<bytes>:<value>"
                            ("0:" for a field absent), one after the other
  ARGV[7..]  fields         field, value, field, value, ...: "" as a value removes the field
  Returns  1, or 0 when the lease is not the caller's or the webhook is gone, or -1 when the
           checked fields hold other values (no field is written but for 1)
]]
--- @include "clock"
local webhook_key, lease_key, attempts_key = KEYS[1], KEYS[2], KEYS[3]
local token, attempt, max_attempts = ARGV[1], ARGV[2], tonumber(ARGV[3])
local delivered_up_to, checked, expected = ARGV[4], ARGV[5], ARGV[6]

if redis.call('EXISTS', webhook_key) == 0 then return 0 end
if attempt ~= '' then
  redis.call('LPUSH', attempts_key, now_ms() .. ' ' .. attempt)
  redis.call('LTRIM', attempts_key, 0, max_attempts - 1)
  redis.call('HDEL', webhook_key, 'failing_since_ms')
  if delivered_up_to ~= '' then
    redis.call('HSET', webhook_key, 'delivered_up_to', delivered_up_to)
  end
end
if redis.call('GET', lease_key) ~= token then return 0 end
if checked ~= '' then
  -- A dozen fields at most (store/webhooks.py): the settings and one shard's progress.
  local names = {}
  for name in checked:gmatch('%S+') do names[#names + 1] = name end
  local found = redis.call('HMGET', webhook_key, unpack(names))
  for i = 1, #names do
    local value = found[i] or ''
    found[i] = #value .. ':' .. value
  end
  if table.concat(found) ~= expected then return -1 end
end
-- A handful of fields at most (store/webhooks.py).
for i = 7, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', webhook_key, ARGV[i])
  else
    redis.call('HSET', webhook_key, ARGV[i], ARGV[i + 1])
  end
end
return 1
