--[[
  delete_webhook: remove a webhook and its attempts.

  KEYS[1]  webhooks   ZSET  member=webhook id  score=when it was made, ms
  KEYS[2]  webhook    HASH  the webhook's fields
  KEYS[3]  attempts   LIST  its recent attempts
  ARGV[1]  webhook_id string
  Returns  1, or 0 when there was no such webhook
]]
local webhooks_key, webhook_key, attempts_key = KEYS[1], KEYS[2], KEYS[3]
local webhook_id = ARGV[1]

redis.call('DEL', webhook_key, attempts_key)
return redis.call('ZREM', webhooks_key, webhook_id)
