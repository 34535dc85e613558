--[[
  update_webhook: change fields of a webhook that exists.

  KEYS[1]  webhook    HASH  the webhook's fields (store/webhooks.py names them)
  KEYS[2]  changes    STRING int: changes made to the webhooks (includes/webhook_changes.lua)
  ARGV[1..]  fields   field, value, field, value, ...: "" as a value removes the field
  Returns  1, or 0 when there is no such webhook (nothing is written)
]]
--- @include "webhook_changes"
local webhook_key, changes_key = KEYS[1], KEYS[2]

if redis.call('EXISTS', webhook_key) == 0 then return 0 end
-- A handful of fields at most (store/webhooks.py).
for i = 1, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', webhook_key, ARGV[i])
  else
    redis.call('HSET', webhook_key, ARGV[i], ARGV[i + 1])
  end
end
count_webhook_change(changes_key)
return 1
