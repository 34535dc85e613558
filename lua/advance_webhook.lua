--[[
  advance_webhook: change a webhook's delivery state of one shard (where it has delivered up
  to, the batch being sent, ...), only while the caller holds the lease of that delivery: a
  process that lost it (it stood still, another took over) moves nothing.

  KEYS[1]  webhook    HASH    the webhook's fields (store/webhooks.py names them)
  KEYS[2]  lease      STRING  the token of the process holding the delivery's lease
  ARGV[1]  token      string: the caller's
  ARGV[2..]  fields   field, value, field, value, ...: "" as a value removes the field
  Returns  1, or 0 when the lease is not the caller's or the webhook is gone (nothing is
           written)
]]
local webhook_key, lease_key = KEYS[1], KEYS[2]
local token = ARGV[1]

if redis.call('GET', lease_key) ~= token then return 0 end
if redis.call('EXISTS', webhook_key) == 0 then return 0 end
-- A handful of fields at most (store/webhooks.py).
for i = 2, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', webhook_key, ARGV[i])
  else
    redis.call('HSET', webhook_key, ARGV[i], ARGV[i + 1])
  end
end
return 1
