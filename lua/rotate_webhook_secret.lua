--[[
  rotate_webhook_secret: give a webhook a new signing secret; the one it had keeps signing
  beside it for a while (a secret older than that one stops at once).

  KEYS[1]  webhook      HASH  fields secret, previous_secret, previous_until_ms
  KEYS[2]  changes      STRING int: changes made to the webhooks (includes/webhook_changes.lua)
  ARGV[1]  secret       string: the new secret
  ARGV[2]  keep_ms      int: how long the secret it had keeps signing, ms
  Returns  1, or 0 when there is no such webhook (nothing is written)
]]
--- @include "clock"
--- @include "webhook_changes"
local webhook_key, changes_key = KEYS[1], KEYS[2]
local secret, keep_ms = ARGV[1], tonumber(ARGV[2])

local current = redis.call('HGET', webhook_key, 'secret')
if not current then return 0 end
redis.call('HSET', webhook_key, 'secret', secret, 'previous_secret', current,
  'previous_until_ms', now_ms() + keep_ms)
count_webhook_change(changes_key)
return 1
