--[[
  create_webhook: add a webhook to the deployment, unless it has as many as it may.

  KEYS[1]  webhooks       ZSET  member=webhook id  score=when it was made, ms
  KEYS[2]  webhook        HASH  the new webhook's fields (store/webhooks.py names them)
  KEYS[3]  changes        STRING int: changes made to the webhooks (includes/webhook_changes.lua)
  ARGV[1]  webhook_id     string: a new random id
  ARGV[2]  max_webhooks   int: how many webhooks a deployment may have
  ARGV[3..]  fields       field, value, field, value, ...: the webhook's fields, checked
  Returns  when it was made, ms (the server's clock)
  Errors   "WEBHOOKS_FULL"  (mirrored by the store's error mapping): nothing is written
]]
--- @include "clock"
--- @include "webhook_changes"
local webhooks_key, webhook_key, changes_key = KEYS[1], KEYS[2], KEYS[3]
local webhook_id, max_webhooks = ARGV[1], tonumber(ARGV[2])

-- Counted here, in the same script that adds, so that creations at once never pass the cap.
if redis.call('ZCARD', webhooks_key) >= max_webhooks then
  return redis.error_reply('WEBHOOKS_FULL')
end
local created_ms = now_ms()
-- The fields are a handful (store/webhooks.py), so one HSET of them all.
local fields = {'created_ms', created_ms}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', webhook_key, unpack(fields))
redis.call('ZADD', webhooks_key, created_ms, webhook_id)
count_webhook_change(changes_key)
return created_ms
