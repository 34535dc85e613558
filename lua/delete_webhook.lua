--[[
  delete_webhook: remove a webhook and its attempts.

  KEYS[1]  webhooks   ZSET  member=webhook id  score=when it was made, ms
  KEYS[2]  webhook    HASH  the webhook's fields
  KEYS[3]  attempts   LIST  its recent attempts
  KEYS[4]  changes    STRING int: changes made to the webhooks (includes/webhook_changes.lua)
  ARGV[1]  webhook_id string
  Returns  1, or 0 when there was no such webhook
]]
--- @include "webhook_changes"
local webhooks_key, webhook_key, attempts_key, changes_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local webhook_id = ARGV[1]

redis.call('DEL', webhook_key, attempts_key)
local removed = redis.call('ZREM', webhooks_key, webhook_id)
if removed == 1 then count_webhook_change(changes_key) end
return removed
